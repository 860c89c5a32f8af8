"""Real AI2-THOR floor plans as ALFWorld ships them, and harnevo's synthetic furnishing of them.

The alfworld wheel carries, for each of its 120 scenes (kitchens 1-30, living rooms 201-230, bedrooms
301-330, bathrooms 401-430), the object types present (`FloorPlanN-objects.json`), the receptacles with
the pose from which the agent reaches them (`FloorPlanN-openable.json`) and the reachable floor grid
(`FloorPlanN-layout.npy`). ALFWorld's own games were written from the live simulator; here the scene is
furnished without it: receptacles come from the layout files (plus the fixed appliances the layout
files leave out, such as stove burners), objects are placed only in receptacles that
`alfworld.gen.constants.VAL_RECEPTACLE_OBJECTS` allows, and every position is synthetic.
Also here: which tasks a scene can host (`task_candidates`, `feasible_families`), and the held-out
scene split built on that (`split_scenes`).

Pure Python: nothing here imports textworld; the wheel's data comes through harnevo.envs.alfworld.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from harnevo.envs.alfworld import alfworld_constants, alfworld_dir
from harnevo.envs.families import FAMILIES
from harnevo.errors import HarnevoError

ROOM_TYPES = ("Kitchen", "LivingRoom", "Bedroom", "Bathroom")
ROOM_RANGES = {"Kitchen": range(1, 31), "LivingRoom": range(201, 231), "Bedroom": range(301, 331),
               "Bathroom": range(401, 431)}
# The scenes of ALFWorld's valid_unseen split (one per room type): the default held-out scenes.
ALFWORLD_UNSEEN_SCENES = (10, 219, 308, 424)

GRID = 0.25  # AI2-THOR agent step: location names are grid coordinates


def _constants():
    return alfworld_constants()  # alfworld.gen.constants, a pure data module of the alfworld wheel


def layouts_dir() -> Path:
    return alfworld_dir() / "gen" / "layouts"


def room_of(scene: int) -> str:
    for room, rng in ROOM_RANGES.items():
        if scene in rng:
            return room
    raise HarnevoError(f"scene {scene} is not an ALFWorld floor plan (kitchens 1-30, living rooms 201-230, "
                       f"bedrooms 301-330, bathrooms 401-430)")


@lru_cache(maxsize=1)
def all_scenes() -> tuple[int, ...]:
    """Every scene whose three layout files ship with the alfworld wheel, sorted."""
    d = layouts_dir()
    out = []
    for p in d.glob("FloorPlan*-openable.json"):
        m = re.fullmatch(r"FloorPlan(\d+)-openable\.json", p.name)
        if not m:
            continue
        n = int(m.group(1))
        if (d / f"FloorPlan{n}-objects.json").is_file() and (d / f"FloorPlan{n}-layout.npy").is_file():
            out.append(n)
    return tuple(sorted(out))


def scenes_of_room(room: str, scenes: list[int] | tuple[int, ...] | None = None) -> list[int]:
    pool = all_scenes() if scenes is None else scenes
    return sorted(s for s in pool if s in ROOM_RANGES[room])


@dataclass(frozen=True)
class Layout:
    """What the wheel says about one scene."""

    scene: int
    room: str
    object_types: tuple[str, ...]                                 # sorted
    receptacles: tuple[tuple[str, tuple[float, float, int, int]], ...]  # (THOR id, agent pose x, z, rot, horizon)
    points: tuple[tuple[float, float], ...]                       # reachable (x, z), sorted

    @property
    def receptacle_types(self) -> set[str]:
        """Receptacle types the furnished scene will have (layout file + appliances it leaves out)."""
        return {thor_type(rid) for rid, _ in self.receptacles} | set(missing_receptacle_types(self))


@lru_cache(maxsize=None)
def load_layout(scene: int) -> Layout:
    import numpy as np

    d = layouts_dir()
    try:
        types = json.loads((d / f"FloorPlan{scene}-objects.json").read_text())
        openable = json.loads((d / f"FloorPlan{scene}-openable.json").read_text())
        pts = np.load(d / f"FloorPlan{scene}-layout.npy")
    except FileNotFoundError as e:
        raise HarnevoError(f"scene {scene} has no layout in the alfworld wheel ({e.filename})") from None
    points = sorted({(round(float(x) / GRID) * GRID, round(float(z) / GRID) * GRID) for x, z in pts.tolist()})
    recs = tuple(sorted((rid, (float(v[0]), float(v[1]), int(v[2]), int(v[3]))) for rid, v in openable.items()))
    return Layout(scene=scene, room=room_of(scene), object_types=tuple(sorted(set(types))), receptacles=recs,
                  points=tuple(points))


def thor_type(thor_id: str) -> str:
    """'Cabinet|-00.48|+02.05|+00.39' -> 'Cabinet'; 'Sink|-01.11|+00.93|+00.34|SinkBasin' -> 'SinkBasin'."""
    parts = thor_id.split("|")
    return parts[4] if len(parts) > 4 else parts[0]


def static_receptacle_types() -> set[str]:
    c = _constants()
    return set(c.RECEPTACLES) - set(c.MOVABLE_RECEPTACLES)


# Receptacle types that ALFWorld's layout files leave out although the scene has them (the official
# games list them): how many to add and how they sit. count: (low, high) inclusive.
_EXTRA_RECEPTACLES: dict[str, dict] = {
    "StoveBurner": {"count": (4, 4), "y": 0.92, "horizon": (45, 60)},
    "CoffeeMachine": {"count": (1, 1), "y": 0.90, "horizon": (30,)},
    "Toaster": {"count": (1, 1), "y": 0.90, "horizon": (45,)},
    "GarbageCan": {"count": (1, 1), "y": 0.00, "horizon": (60,)},
    "HandTowelHolder": {"count": (1, 2), "y": 1.60, "horizon": (0, -30)},
    "TowelHolder": {"count": (1, 2), "y": 1.10, "horizon": (0, 15)},
    "ToiletPaperHanger": {"count": (1, 1), "y": 0.80, "horizon": (30, 45)},
    "Toilet": {"count": (1, 1), "y": 0.00, "horizon": (15,)},
    "LaundryHamper": {"count": (1, 1), "y": 0.00, "horizon": (60,)},
    "SinkBasin": {"count": (1, 1), "y": 0.90, "horizon": (30, 45)},
    "BathtubBasin": {"count": (1, 1), "y": 0.30, "horizon": (45, 60)},
    "Ottoman": {"count": (1, 1), "y": 0.00, "horizon": (30,)},
    "Safe": {"count": (1, 1), "y": 0.00, "horizon": (60,)},
}
_DEFAULT_EXTRA = {"count": (1, 2), "y": 0.50, "horizon": (30, 0)}
# Openable-class receptacles the layout files did not precompute an opening pose for: ALFWorld's
# games keep them as plain surfaces (not `openable`), and add about one for five listed ones.
_EXTRA_SURFACE_SHARE = {"Cabinet": 0.2, "Drawer": 0.15}

# Fixtures: never picked up, never inside a receptacle (except the desk lamp), counted like the
# official games do: (low, high) instances.
_FIXTURE_COUNTS = {"Chair": (1, 3), "Window": (1, 2), "Painting": (1, 2), "Blinds": (1, 2)}
# Where a desk lamp stands (ALFWorld's look_at_obj_in_light games need it inside a receptacle).
LAMP_HOSTS = ("Desk", "Dresser", "SideTable", "Shelf")
# Pickupable types ALFWorld leaves out of every receptacle list: they lie on the floor.
_FLOOR_PICKUPABLE = {"Boots", "ScrubBrush", "TeddyBear", "PaperTowelRoll"}
# Typical heights of fixtures (cosmetic: only the names carry them).
_HEIGHTS = {"Window": 1.5, "LightSwitch": 1.35, "Painting": 1.7, "Blinds": 1.8, "Mirror": 1.4, "Chair": 0.0,
            "StoveKnob": 1.09, "Faucet": 0.93, "Curtains": 1.8, "Poster": 1.6}


def missing_receptacle_types(layout: Layout) -> list[str]:
    """Receptacle types present in the scene's object list that its layout file has no instance of."""
    have = {thor_type(rid) for rid, _ in layout.receptacles}
    static = static_receptacle_types()
    return sorted(t for t in layout.object_types if t in static and t not in have)


def pickupable_types() -> set[str]:
    c = _constants()
    out: set[str] = set()
    for objs in c.VAL_RECEPTACLE_OBJECTS.values():
        out |= {o for o in objs if not o.endswith("Sliced")}
    return (out | _FLOOR_PICKUPABLE) - static_receptacle_types()


def hosts_for(obj_type: str, receptacle_types: set[str] | list[str]) -> list[str]:
    """Receptacle types (of those given) that ALFWorld's constants let `obj_type` be placed in, sorted."""
    c = _constants()
    if obj_type == "DeskLamp":
        return sorted(t for t in receptacle_types if t in LAMP_HOSTS)
    return sorted(t for t in receptacle_types if obj_type in c.VAL_RECEPTACLE_OBJECTS.get(t, ()))


# --------------------------------------------------------------------------------------------------
# Furnished scenes


@dataclass
class Receptacle:
    id: str                 # THOR-style id, e.g. 'Cabinet|-00.48|+02.05|+00.39'
    type: str
    loc: str                # 'loc|x|z|rot|horizon'
    openable: bool
    pos: tuple[float, float, float]


@dataclass
class Obj:
    id: str
    type: str
    loc: str | None                     # None for declared-only objects (no PDDL type)
    receptacle: str | None = None       # id of the receptacle it is in
    pos: tuple[float, float, float] = (0.0, 0.0, 0.0)
    typed: bool = True                  # False: the PDDL has no type for it (Faucet, ShowerHead, ...)


@dataclass
class Scene:
    layout: Layout
    receptacles: list[Receptacle] = field(default_factory=list)
    objects: list[Obj] = field(default_factory=list)
    agent_loc: str = ""
    agent_pose: tuple[float, float, int, int] = (0.0, 0.0, 0, 30)

    def receptacle(self, rid: str) -> Receptacle:
        for r in self.receptacles:
            if r.id == rid:
                return r
        raise KeyError(rid)

    @property
    def receptacle_types(self) -> set[str]:
        return {r.type for r in self.receptacles}

    def locations(self) -> list[str]:
        locs = {r.loc for r in self.receptacles} | {o.loc for o in self.objects if o.loc} | {self.agent_loc}
        return sorted(locs)


def fmt_coord(v: float) -> str:
    s = f"{v:+06.2f}"
    return "+00.00" if s == "-00.00" else s


def thor_id(kind: str, pos: tuple[float, float, float], suffix: str = "") -> str:
    base = f"{kind}|{fmt_coord(pos[0])}|{fmt_coord(pos[1])}|{fmt_coord(pos[2])}"
    return f"{base}|{suffix}" if suffix else base


def loc_name(x: float, z: float, rot: int, horizon: int) -> str:
    return f"loc|{int(round(x / GRID))}|{int(round(z / GRID))}|{int(rot) % 4}|{int(horizon)}"


def _pos_from_id(rid: str) -> tuple[float, float, float]:
    p = rid.split("|")
    return (float(p[1]), float(p[2]), float(p[3]))


_FACING = {0: (0.0, 1.0), 1: (1.0, 0.0), 2: (0.0, -1.0), 3: (-1.0, 0.0)}


def _unique(ids: set[str], make) -> str:
    for _ in range(100):
        rid = make()
        if rid not in ids:
            ids.add(rid)
            return rid
    raise RuntimeError("could not draw a unique object id")


def _spot(layout: Layout, rng: random.Random, y: float, reach: tuple[float, float] = (0.5, 1.0)):
    """A reachable point, a facing, and a position in front of it at height y."""
    x, z = rng.choice(layout.points)
    rot = rng.randrange(4)
    dx, dz = _FACING[rot]
    d = rng.uniform(*reach)
    pos = (x + dx * d + rng.uniform(-0.2, 0.2), y + rng.uniform(-0.05, 0.05), z + dz * d + rng.uniform(-0.2, 0.2))
    return (x, z, rot), pos


def furnish_receptacles(layout: Layout, rng: random.Random) -> list[Receptacle]:
    """The scene's receptacles: those of the layout file (with their precomputed poses; the openable
    classes among them are `openable`), plus the appliances and fixtures the layout file leaves out,
    plus a few unlisted cabinets and drawers (plain surfaces, as in ALFWorld's games)."""
    c = _constants()
    ids: set[str] = set()
    out: list[Receptacle] = []
    for rid, (x, z, rot, hor) in layout.receptacles:
        rtype = thor_type(rid)
        ids.add(rid)
        out.append(Receptacle(id=rid, type=rtype, loc=loc_name(x, z, rot // 90, hor),
                              openable=rtype in c.OPENABLE_CLASS_SET, pos=_pos_from_id(rid)))
    for rtype in missing_receptacle_types(layout):
        spec = _EXTRA_RECEPTACLES.get(rtype, _DEFAULT_EXTRA)
        n = rng.randint(*spec["count"])
        if rtype == "StoveBurner":
            (x, z, rot), pos = _spot(layout, rng, spec["y"], (0.6, 0.8))
            dx, dz = _FACING[rot]
            for i in range(n):  # a 2x2 block; the front pair and the back pair share a pose each
                row, col = divmod(i, 2)
                p = (pos[0] + dx * 0.3 * row + dz * 0.3 * col, pos[1], pos[2] + dz * 0.3 * row + dx * 0.3 * col)
                rid = _unique(ids, lambda p=p: thor_id(rtype, (p[0] + rng.uniform(-0.01, 0.01), p[1],
                                                               p[2] + rng.uniform(-0.01, 0.01))))
                out.append(Receptacle(id=rid, type=rtype, loc=loc_name(x, z, rot, spec["horizon"][row % 2]),
                                      openable=False, pos=_pos_from_id(rid)))
            continue
        for _ in range(n):
            (x, z, rot), pos = _spot(layout, rng, spec["y"])
            if rtype == "SinkBasin":
                rid = _unique(ids, lambda: thor_id("Sink", pos, "SinkBasin"))
            elif rtype == "BathtubBasin":
                rid = _unique(ids, lambda: thor_id("Bathtub", pos, "BathtubBasin"))
            else:
                rid = _unique(ids, lambda: thor_id(rtype, (pos[0] + rng.uniform(-0.01, 0.01), pos[1], pos[2])))
            # no precomputed opening pose: ALFWorld's games keep such receptacles as plain surfaces
            out.append(Receptacle(id=rid, type=rtype, loc=loc_name(x, z, rot, rng.choice(spec["horizon"])),
                                  openable=False, pos=_pos_from_id(rid)))
    for rtype, share in sorted(_EXTRA_SURFACE_SHARE.items()):
        listed = [r for r in out if r.type == rtype]
        if not listed:
            continue
        extra = sum(1 for _ in listed if rng.random() < share)
        for _ in range(extra):
            near = rng.choice(listed)
            x0, y0, z0 = near.pos
            rid = _unique(ids, lambda: thor_id(rtype, (x0 + rng.uniform(-0.5, 0.5), y0 + rng.choice((0.0, -0.3, 0.3)),
                                                       z0 + rng.uniform(-0.5, 0.5))))
            out.append(Receptacle(id=rid, type=rtype, loc=near.loc if rng.random() < 0.5 else
                                  _near_loc(near.loc, rng), openable=False, pos=_pos_from_id(rid)))
    return sorted(out, key=lambda r: r.id)


def _near_loc(loc: str, rng: random.Random) -> str:
    _, x, z, rot, hor = loc.split("|")
    return f"loc|{int(x) + rng.choice((-1, 0, 1))}|{int(z) + rng.choice((-1, 0, 1))}|{rot}|{hor}"


def furnish_objects(scene: Scene, rng: random.Random, *, counts: dict[str, int] | None = None,
                    forbidden: dict[str, set[str]] | None = None) -> None:
    """Place the scene's objects. `counts` fixes the number of instances of some types (the task's
    target); `forbidden` maps an object type to receptacle types it must not start in (the task's
    destination and appliance). Pickupable objects go only into receptacles that ALFWorld's constants
    allow for their type (a type with no such receptacle in the scene lies on the floor)."""
    c = _constants()
    layout = scene.layout
    counts = counts or {}
    forbidden = forbidden or {}
    static = static_receptacle_types()
    pickable = pickupable_types()
    rtypes = scene.receptacle_types
    by_type: dict[str, list[Receptacle]] = {}
    for r in scene.receptacles:
        by_type.setdefault(r.type, []).append(r)
    ids = {r.id for r in scene.receptacles}
    objects: list[Obj] = []

    def own_place(otype: str):
        (x, z, rot), pos = _spot(layout, rng, _HEIGHTS.get(otype, rng.uniform(0.0, 1.5)))
        hor = rng.choice((0, 15, 30, 45, 60, -30))
        return loc_name(x, z, rot, hor), pos

    n_burners = len(by_type.get("StoveBurner", []))
    n_sinks = len(by_type.get("SinkBasin", []))
    n_tubs = len(by_type.get("BathtubBasin", []))
    for otype in layout.object_types:
        if otype in static:
            continue
        typed = otype in c.OBJECTS
        if otype in counts:
            n = counts[otype]
        elif otype == "StoveKnob":
            n = n_burners or 4
        elif otype == "Sink":
            n = max(1, n_sinks)
        elif otype == "Bathtub":
            n = max(1, n_tubs)
        elif otype in pickable:
            n = rng.randint(1, 3)
        else:
            n = rng.randint(*_FIXTURE_COUNTS.get(otype, (1, 1)))
        if otype in pickable or otype == "DeskLamp":
            hosts = [t for t in hosts_for(otype, rtypes) if t not in forbidden.get(otype, set())]
        else:
            hosts = []
        if otype == "StoveKnob" and n_burners:
            knob_loc, knob_pos = own_place(otype)
        basins = by_type.get({"Sink": "SinkBasin", "Bathtub": "BathtubBasin"}.get(otype, ""), [])
        if basins and typed:  # the sink (bathtub) object stands where its basin is, as in THOR
            for basin in basins:
                oid = basin.id.rsplit("|", 1)[0]
                if oid not in ids:
                    ids.add(oid)
                    objects.append(Obj(id=oid, type=otype, loc=basin.loc, pos=basin.pos))
            continue
        for _ in range(n):
            if not typed:
                pos = _spot(layout, rng, 1.0)[1]
                oid = _unique(ids, lambda: thor_id(otype, pos))
                objects.append(Obj(id=oid, type=otype, loc=None, pos=pos, typed=False))
                continue
            if hosts:
                host = rng.choice(by_type[rng.choice(hosts)])
                x0, y0, z0 = host.pos
                oid = _unique(ids, lambda: thor_id(otype, (x0 + rng.uniform(-0.4, 0.4), y0 + rng.uniform(0.0, 0.3),
                                                            z0 + rng.uniform(-0.4, 0.4))))
                objects.append(Obj(id=oid, type=otype, loc=host.loc, receptacle=host.id, pos=_pos_from_id(oid)))
            elif otype == "StoveKnob" and n_burners:
                oid = _unique(ids, lambda: thor_id(otype, (knob_pos[0] + rng.uniform(-0.3, 0.3), knob_pos[1],
                                                            knob_pos[2] + rng.uniform(-0.3, 0.3))))
                objects.append(Obj(id=oid, type=otype, loc=knob_loc, pos=_pos_from_id(oid)))
            else:
                loc, pos = own_place(otype)
                oid = _unique(ids, lambda: thor_id(otype, pos))
                objects.append(Obj(id=oid, type=otype, loc=loc, pos=_pos_from_id(oid)))
    scene.objects = sorted(objects, key=lambda o: o.id)


def place_agent(scene: Scene, rng: random.Random) -> None:
    taken = {r.loc for r in scene.receptacles}
    for _ in range(100):
        x, z = rng.choice(scene.layout.points)
        rot = rng.randrange(4)
        loc = loc_name(x, z, rot, 30)
        if loc not in taken:
            break
    scene.agent_loc = loc
    scene.agent_pose = (x, z, rot * 90, 30)


# --------------------------------------------------------------------------------------------------
# Tasks a scene can host

# Room types per family, weighted as in ALFWorld's released games (train + valid splits), within the
# room types ALFWorld allows for each task (alfworld.gen.constants.GOALS_VALID).
FAMILY_ROOM_WEIGHTS: dict[str, dict[str, float]] = {
    "pick": {"Kitchen": 0.18, "LivingRoom": 0.26, "Bedroom": 0.24, "Bathroom": 0.32},
    "look": {"LivingRoom": 0.10, "Bedroom": 0.90},
    "clean": {"Kitchen": 0.70, "Bathroom": 0.30},
    "heat": {"Kitchen": 1.0},
    "cool": {"Kitchen": 1.0},
    "pick2": {"Kitchen": 0.08, "LivingRoom": 0.31, "Bedroom": 0.28, "Bathroom": 0.33},
}
APPLIANCE = {"clean": "SinkBasin", "heat": "Microwave", "cool": "Fridge"}
ACTION_CLASS = {"clean": "Cleanable", "heat": "Heatable", "cool": "Coolable"}
VERB = {"clean": "clean", "heat": "heat", "cool": "cool"}
# Pickupable types that ALFWorld's games never ask for.
NOT_TARGETS = {"BaseballBat", "BasketBall", "Boots", "HandTowel", "PaperTowel", "PaperTowelRoll", "Plunger",
               "ScrubBrush", "TeddyBear", "TennisRacket", "ToiletPaperRoll", "Towel", "WateringCan"}
LOOK_TOGGLE = "DeskLamp"


def task_candidates(layout: Layout, family: str) -> list[tuple[str, str]]:
    """(object type, destination type or lamp) pairs a game of `family` can use in this scene: the
    object must fit some receptacle of the scene other than the destination and the appliance (so it
    can start visible somewhere), and fit the destination."""
    c = _constants()
    rtypes = layout.receptacle_types
    pick = pickupable_types()
    objs = [t for t in layout.object_types if t in pick and t in c.OBJECTS and t not in NOT_TARGETS]
    out: list[tuple[str, str]] = []
    if family == "look":
        if LOOK_TOGGLE not in layout.object_types or not hosts_for(LOOK_TOGGLE, rtypes):
            return []
        return [(o, LOOK_TOGGLE) for o in objs if hosts_for(o, rtypes)]
    appliance = APPLIANCE.get(family)
    if appliance:
        if appliance not in rtypes:
            return []
        objs = [o for o in objs if o in c.VAL_ACTION_OBJECTS[ACTION_CLASS[family]]]
    for o in objs:
        hosts = hosts_for(o, rtypes)
        for parent in hosts:
            if parent == appliance:
                continue
            if [h for h in hosts if h not in (parent, appliance)]:
                out.append((o, parent))
    return out


@lru_cache(maxsize=None)
def candidates(scene: int, family: str) -> tuple[tuple[str, str], ...]:
    return tuple(task_candidates(load_layout(scene), family))


def family_scenes(family: str, scenes: list[int] | tuple[int, ...]) -> dict[str, list[int]]:
    """Room type -> the given scenes of that room type where `family` has a task (rooms of weight 0
    left out)."""
    out: dict[str, list[int]] = {}
    for room, w in FAMILY_ROOM_WEIGHTS[family].items():
        if w <= 0:
            continue
        ok = [s for s in scenes_of_room(room, scenes) if candidates(s, family)]
        if ok:
            out[room] = ok
    return out


def feasible_families(scenes: list[int] | tuple[int, ...]) -> list[str]:
    return [f for f in FAMILIES if family_scenes(f, scenes)]


# --------------------------------------------------------------------------------------------------
# Held-out scenes


def split_scenes(seed: int | None = None, *, per_room: int = 1,
                 scenes: list[int] | None = None) -> tuple[list[int], list[int]]:
    """(train scenes, unseen scenes): `per_room` scenes of each room type are held out, mirroring
    ALFWorld's valid_unseen, whose games use scenes its train split never uses. With seed None the
    held-out scenes are ALFWorld's own unseen ones (10, 219, 308, 424); with a seed they are drawn
    (sorted scene lists, `random.Random(seed)`), redrawn until both sides can host every task family."""
    pool = sorted(scenes) if scenes is not None else list(all_scenes())
    all_fams = set(feasible_families(pool))
    if seed is None and per_room == 1 and set(ALFWORLD_UNSEEN_SCENES) <= set(pool):
        unseen = sorted(ALFWORLD_UNSEEN_SCENES)
        return [s for s in pool if s not in unseen], unseen
    rng = random.Random(0 if seed is None else seed)
    for _ in range(200):
        unseen: list[int] = []
        for room in ROOM_TYPES:
            room_scenes = scenes_of_room(room, pool)
            if len(room_scenes) > per_room:
                unseen.extend(rng.sample(room_scenes, per_room))
        unseen.sort()
        train = [s for s in pool if s not in unseen]
        if set(feasible_families(train)) == all_fams and set(feasible_families(unseen)) == all_fams:
            return train, unseen
    raise HarnevoError("could not hold out scenes so that both splits can host every task family; "
                       "pass more scenes or a smaller per_room")
