"""The contract between the harness and the simulated agents.

1. The sim reads exactly the panels `Workspace` renders: a real Workspace is fed real engine
   observations (recorded from ALFWorld), commits and notes; real turn messages are rendered with the
   seed harnesses' templates by the real Renderer; the sim's reader (`read_messages` -> View) must
   recover every line of the Belief, Progress and Experience panels, nothing dropped, nothing invented.
   A change of the panel format that the sim cannot read fails here.
2. The sim answers from the text alone: while it decides it opens no file, imports nothing (no engine),
   spawns no process and opens no socket (audit hooks, in a fresh interpreter), and its source imports
   neither the harness, the engine nor the runtime.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harnevo.harness.experience import ExperienceBank
from harnevo.harness.render import Renderer
from harnevo.harness.spec import META_ACTIONS, Harness, MemoryPolicy, load_harness
from harnevo.harness.task import parse_task_goal, split_first_observation
from harnevo.harness.workspace import Workspace
from harnevo.models.sim import BeliefRead, ExperienceRead, ProgressRead, View, read_messages

SIM_DIR = Path(__file__).resolve().parents[1] / "harnevo" / "models" / "sim"
REPLIES = Path(__file__).resolve().parent / "data" / "sim_replies.json.xz"

# Real engine output: valid_seen pick_cool_then_place_in_recep-Apple-None-CounterTop-14 (a first
# observation and the steps a sim/bounded agent took, typos and failures included) ...
COOL_FIRST = (
    "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around you, you see "
    "a cabinet 8, a cabinet 7, a cabinet 6, a cabinet 5, a cabinet 4, a cabinet 3, a cabinet 2, a cabinet 1, a "
    "coffeemachine 1, a countertop 2, a countertop 1, a fridge 1, a garbagecan 1, a microwave 1, a sinkbasin 1, "
    "a stoveburner 4, a stoveburner 3, a stoveburner 2, a stoveburner 1, and a toaster 1.\n\n"
    "Your task is to: cool some apple and put it in countertop.")
COOL_STEPS = [
    ("go to garbagecan 1", "You arrive at garbagecan 1. On the garbagecan 1, you see a soapbottle 2."),
    ("go to toaster 1", "You arrive at toaster 1. On the toaster 1, you see nothing."),
    ("go to coffeemachine 1", "You arrive at coffeemachine 1. On the coffeemachine 1, you see nothing."),
    ("go to microwave 1", "You arrive at microwave 1. The microwave 1 is closed."),
    ("open microwave 1", "You open the microwave 1. The microwave 1 is open. In it, you see a apple 1."),
    ("take apple 1 from microwave 32", "Nothing happens."),
    ("inventory", "You are not carrying anything."),
    ("take apple 1 from microwave 1", "You pick up the apple 1 from the microwave 1."),
    ("go to fridge 1", "You arrive at fridge 1. The fridge 1 is closed."),
    ("cool apple 1 with fridge 1", "You cool the apple 1 using the fridge 1."),
    ("go to countertop 2", "You arrive at countertop 2. On the countertop 2, you see a bread 1, a cup 1, a "
     "dishsponge 2, a dishsponge 1, a knife 2, a lettuce 1, a mug 1, a peppershaker 3, a peppershaker 1, a "
     "spoon 2, and a spoon 1."),
    ("go to cabinet 3", "You arrive at cabinet 3. The cabinet 3 is closed."),
    ("go to countertop 2", "You arrive at countertop 2. On the countertop 2, you see a bread 1, a cup 1, a "
     "dishsponge 2, a dishsponge 1, a knife 2, a lettuce 1, a mug 1, a peppershaker 3, a peppershaker 1, a "
     "spoon 2, and a spoon 1."),
    ("move apple 1 to countertop 2", "You move the apple 1 to the countertop 2."),
]
# ... and valid_seen look_at_obj_in_light-AlarmClock-None-DeskLamp-323 (a lamp turned on: a state).
LOOK_FIRST = (
    "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around you, you see "
    "a bed 2, a bed 1, a desk 1, a drawer 11, a drawer 10, a drawer 9, a drawer 8, a drawer 7, a drawer 6, a "
    "drawer 5, a drawer 4, a drawer 3, a drawer 2, a drawer 1, a dresser 1, a garbagecan 1, a safe 1, a "
    "sidetable 2, and a sidetable 1.\n\nYour task is to: look at alarmclock under the desklamp.")
LOOK_STEPS = [
    ("go to sidetable 1", "You arrive at sidetable 1. On the sidetable 1, you see a alarmclock 3, a cd 3, a "
     "cellphone 2, and a pen 3."),
    ("take alarmclock 3 from sidetable 1", "You pick up the alarmclock 3 from the sidetable 1."),
    ("go to drawer 2", "You arrive at drawer 2. The drawer 2 is closed."),
    ("open drawer 2", "You open the drawer 2. The drawer 2 is open. In it, you see nothing."),
    ("go to garbagecan 1", "You arrive at garbagecan 1. On the garbagecan 1, you see a pencil 2."),
    ("go to dresser 1", "You arrive at dresser 1. On the dresser 1, you see a alarmclock 1, a keychain 1, and a "
     "pencil 1."),
    ("go to safe 1", "You arrive at safe 1. The safe 1 is closed."),
    ("open safe 1", "You open the safe 1. The safe 1 is open. In it, you see a keychain 1."),
    ("go to desk 1", "You arrive at desk 1. On the desk 1, you see a alarmclock 2, a book 1, a bowl 1, a cd 2, a "
     "desklamp 1, a mug 2, a mug 1, a pen 2, and a pen 1."),
    ("inventory", "You are carrying: a alarmclock 3."),
    ("use desklamp 1", "You turn on the desklamp 1."),
]
LESSONS = ["apple was found at a microwave", "look in the microwave for an apple before the fridge",
           "a desklamp is usually on a desk", "alarmclock was found at a sidetable"]
# meta-actions (name, argument) made before the env step of the same index
META_PLAN = {0: ("recall", ""), 3: ("track", ""), 5: ("track", "apple"), 8: ("commit", "took apple 1"),
             9: ("note", "the apple was in the microwave"), 10: ("commit", ""), 11: ("recall", "fridge"),
             12: ("track", "countertop")}


def template_sources(h: Harness) -> dict[str, str]:
    sources = getattr(h, "template_sources", None)  # block-form harnesses assemble their templates
    return sources() if callable(sources) else dict(h.templates)


def _bank() -> ExperienceBank:
    bank = ExperienceBank(None, size=20)
    for lesson in LESSONS:
        bank.add(lesson)
    return bank


def play(h: Harness, first: str, steps: list[tuple[str, str]], *, metas: dict | None = None):
    """Render every turn of a scripted episode as the evaluator does (the documented context of
    harnevo/harness/render.py) and yield (workspace, messages, what the turn was). Meta-actions go
    through `Workspace.meta`; in modes that do not offer them they change the workspace between turns."""
    renderer = Renderer(template_sources(h))
    room, task = split_first_observation(first)
    ws = Workspace.start(h.memory, parse_task_goal(task), room, _bank() if h.memory.experience else None)
    observation, last_action = room, ""
    history: list[dict[str, str]] = []
    admissible = ["look", "inventory"] + [f"go to {r}" for r in ws.belief.receptacles]
    inline = h.mode == "inline"
    n = 0

    def render(what: str):
        window = h.memory.history_window
        ctx = {"task": task, "room": room, "observation": observation, "last_action": last_action,
               "admissible": admissible, "history": history[:-1][-window:] if window else [],
               "step": n + 1, "max_steps": h.budget.max_steps, "steps_left": h.budget.max_steps - n,
               "mode": h.mode, "meta_actions": list(META_ACTIONS) if inline else [], "guard_note": "",
               **ws.panels(h.mode)}
        return ws, renderer.messages(ctx), what

    yield render("start")
    for i, (action, obs) in enumerate(steps):
        if metas and i in metas:
            name, arg = metas[i]
            result = ws.meta(name, arg)
            if inline:
                n += 1
                observation, last_action = result, f"{name} {arg}".strip()
                history.append({"action": last_action, "observation": result})
                yield render(last_action)
        n += 1
        ws.observe(obs)
        observation, last_action = obs, action
        history.append({"action": action, "observation": obs})
        yield render(action)


# --------------------------------------------------------------------------------------------------------
# What the sim reads is what the workspace wrote
# --------------------------------------------------------------------------------------------------------
def check_belief(bel: BeliefRead, ws: Workspace, *, query: str | None = None) -> None:
    b = ws.belief
    assert bel.unread() == [], bel.unread()
    assert bel.location == b.location
    assert bel.holding == b.holding
    assert sorted(bel.open) == sorted(b.opened)
    assert bel.not_visited == b.not_visited()
    assert bel.states == {o: [s] for o, s in b.states.items()}
    relevant = [x for x in (ws.goal.obj, ws.goal.target) if x] if ws.memory.belief_scope == "task" else None
    want: dict[str, list[str] | None] = {}
    others: dict[str, int] = {}
    for rec, items in b.contents.items():
        if items is not None and relevant is not None:
            shown = [i for i in items if i.rsplit(" ", 1)[0] in relevant]
            if items and not shown:
                others[rec] = len(items)
            items = shown
        want[rec] = items
    if query:  # a `track <query>` shows the seen lines that mention it (all of them when none does)
        lines = [ln for ln in ws.belief_panel().splitlines() if re.match(r"- [a-z]+ \d+: ", ln)]
        keep = {ln[2:].split(":")[0] for ln in ([ln for ln in lines if query in ln] or lines)}
        want = {r: v for r, v in want.items() if r in keep}
        others = {r: c for r, c in others.items() if r in keep}
        assert 0 < len(want) < len(b.contents), "the query should select some receptacles"
    assert bel.seen == want and list(bel.seen) == list(want)
    assert bel.others == others
    kinds = [ln.kind for ln in bel.lines]
    assert "unread" not in kinds and kinds.count("location") == kinds.count("holding") == 1


def check_progress(prog: ProgressRead, ws: Workspace) -> None:
    assert prog.unread() == [], prog.unread()
    assert prog.subgoals == [(s.text, s.done) for s in ws.subgoals]


def check_experience(exp: ExperienceRead, ws: Workspace) -> None:
    assert exp.unread() == [], exp.unread()
    assert exp.lessons == [lesson.text for lesson in ws.recalled]


def check_world_agrees(view: View, ws: Workspace) -> None:
    """The panel is not only parsed: the world the sim plans on holds what the Belief says."""
    b, w = ws.belief, view.world
    last_place = {o: rec for rec, items in b.contents.items() for o in items or []}
    for o, rec in last_place.items():  # the engine may name an object in two places; the later line wins
        assert w.where.get(o) == rec, (o, rec, w.where.get(o))
    for rec, items in b.contents.items():
        if items is None:
            assert w.closed.get(rec) is True, rec
    assert w.holding == (b.holding[0] if b.holding else None)
    for r in b.opened:
        assert w.closed.get(r) is False, r
    for o, s in b.states.items():
        assert s in w.states.get(o, set()), (o, s)


@pytest.mark.parametrize("first,steps", [(COOL_FIRST, COOL_STEPS), (LOOK_FIRST, LOOK_STEPS)], ids=["cool", "look"])
@pytest.mark.parametrize("scope", ["all", "task"])
def test_always_on_panels_are_read_line_by_line(first, steps, scope):
    h = load_harness("bpe_always_on").evolve(memory={"belief_scope": scope})
    turns, progress_states, closed_seen = 0, set(), False
    for ws, messages, _ in play(h, first, steps, metas={4: ("commit", "opened microwave 1"), 6: ("note", "x")}):
        view = read_messages(messages)
        kinds = [type(p) for p in view.panels]
        assert kinds.count(BeliefRead) == kinds.count(ProgressRead) == kinds.count(ExperienceRead) == 1, kinds
        check_belief(view.last_panel(BeliefRead), ws)
        check_progress(view.last_panel(ProgressRead), ws)
        check_experience(view.last_panel(ExperienceRead), ws)
        if scope == "all":
            check_world_agrees(view, ws)
        assert view.has_belief and view.has_experience
        turns += 1
        progress_states.add(tuple(s.done for s in ws.subgoals))
        closed_seen = closed_seen or None in ws.belief.contents.values()
    assert turns == len(steps) + 1
    # the episode filled the panels: a closed receptacle, states, lessons, subgoals done one by one
    assert closed_seen and ws.belief.states and ws.recalled and ws.belief.opened
    assert len(progress_states) >= 4 and any(all(d) for d in progress_states) is (first == LOOK_FIRST)


@pytest.mark.parametrize("scope", ["all", "task"])
def test_inline_meta_action_results_are_read_line_by_line(scope):
    h = load_harness("bpe_inline").evolve(memory={"belief_scope": scope})
    seen = {"track": 0, "commit": 0, "recall": 0}
    for ws, messages, what in play(h, COOL_FIRST, COOL_STEPS, metas=META_PLAN):
        view = read_messages(messages)
        assert {"track", "commit", "recall", "note"} <= view.offered
        for p in view.panels:  # meta-action results still in the history window, and the latest
            assert p.unread() == [], p.unread()
        name, _, arg = what.partition(" ")
        if name == "track":
            check_belief(view.last_panel(BeliefRead), ws, query=arg or None)
            if scope == "all" and not arg:
                check_world_agrees(view, ws)
        elif name == "commit":
            check_progress(view.last_panel(ProgressRead), ws)
        elif name == "recall":
            check_experience(view.last_panel(ExperienceRead), ws)
        else:
            continue
        seen[name] += 1
    assert seen == {"track": 3, "commit": 2, "recall": 2}


def _one_panel(first=COOL_FIRST, steps=COOL_STEPS) -> tuple[Workspace, str, str, str]:
    h = load_harness("bpe_always_on")
    *_, (ws, _messages, _) = play(h, first, steps)
    return ws, ws.belief_panel(), ws.progress_panel(), ws.experience_panel()


@pytest.mark.parametrize("change", [
    ("holding: ", "carrying: "),  # a key renamed
    ("seen:\n", "seen:\n- sinkbasin 1 -> soapbar 1\n"),  # another line layout
    ("not visited:", "visited: countertop 2\nnot visited:"),  # a new key
    ("- countertop 2: ", "- countertop 2: 4x "),  # a count in the contents
    ("apple 1 is cool", "apple 1 is chilled"),  # a state word it does not know
])
def test_a_belief_format_it_cannot_read_is_caught(change):
    ws, belief, _, _ = _one_panel()
    assert change[0] in belief
    changed = BeliefRead.parse(belief.replace(change[0], change[1], 1))
    assert changed.unread(), change
    check_belief(BeliefRead.parse(belief), ws)  # and the real one reads clean


def test_a_progress_or_experience_format_it_cannot_read_is_caught():
    ws, _, progress, experience = _one_panel()
    assert ProgressRead.parse(progress.replace("[done]", "(done)", 1)).unread()
    assert ProgressRead.parse(progress + "\nnext: find countertop").unread()
    numbered = "\n".join(f"{i}. {ln[2:]}" for i, ln in enumerate(experience.splitlines(), 1))
    with pytest.raises(AssertionError):
        check_experience(ExperienceRead.parse(numbered), ws)
    check_progress(ProgressRead.parse(progress), ws)
    check_experience(ExperienceRead.parse(experience), ws)


def test_placeholders_are_not_facts():
    """An empty panel says so in words; the sim takes those for no receptacle, subgoal or lesson."""
    ws = Workspace.start(MemoryPolicy(belief=True, experience=True), parse_task_goal("put a apple in fridge."),
                         "", ExperienceBank(None, size=5))
    prog = ProgressRead.parse(ws.progress_panel())
    assert ws.progress_panel() == "- (no subgoals yet)" and prog.subgoals == [] and prog.unread() == []
    exp = ExperienceRead.parse(ws.experience_panel())
    assert exp.lessons == [] and exp.unread() == [] and ws.recalled == []
    bel = BeliefRead.parse(ws.belief_panel())
    assert bel.seen == {} and bel.unread() == [] and bel.location is None and bel.holding == []


# --------------------------------------------------------------------------------------------------------
# It answers from the text alone
# --------------------------------------------------------------------------------------------------------
FORBIDDEN_IMPORTS = ("harnevo.harness", "harnevo.envs", "harnevo.runtime", "harnevo.cli", "textworld", "alfworld",
                     "litellm", "subprocess", "socket", "os", "pathlib", "io", "shutil", "tempfile", "sqlite3")


def test_sim_source_imports_nothing_of_the_harness_engine_or_files():
    files = sorted(SIM_DIR.glob("*.py"))
    assert {f.name for f in files} >= {"__init__.py", "reading.py", "world.py", "planner.py", "agents.py"}
    for f in files:
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                assert not any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN_IMPORTS), (f.name, name)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in ("open", "eval", "exec", "__import__", "compile"), (f.name, node.func.id)


_AUDIT_SCRIPT = r"""
import asyncio, json, lzma, sys
from pathlib import Path

records = json.loads(lzma.decompress(Path(sys.argv[1]).read_bytes()))["records"][::7]
fresh = json.loads(Path(sys.argv[2]).read_text())
from harnevo.models.sim import make_sim

models = [make_sim(s) for s in ("sim/bounded", "sim/bounded?lapse=0.6&forget_per_1k=2&knowledge=0",
                                "sim/latency?ms=1", "sim/random?seed=2")]
loop = asyncio.new_event_loop()
WATCH = {"open", "import", "exec", "compile", "os.system", "os.listdir", "os.scandir", "glob.glob", "os.remove",
         "os.rename", "os.mkdir", "os.fork", "os.forkpty", "ctypes.dlopen", "_thread.start_new_thread",
         "urllib.Request", "sqlite3.connect"}
PREFIXES = ("subprocess.", "os.exec", "os.spawn", "os.posix_spawn", "socket.", "shutil.", "http.", "ftplib.")
armed, events = False, []

def hook(event, args):
    if armed and (event in WATCH or event.startswith(PREFIXES)):
        events.append([event, repr(args)[:160]])

sys.addaudithook(hook)
before = set(sys.modules)
replies = 0
armed = True
for messages in [r["messages"] for r in records] + fresh:
    for m in models:
        m.decide(messages)
        replies += bool(loop.run_until_complete(m.complete(messages)).text)
armed = False
new = sorted(set(sys.modules) - before)
engine = sorted(m for m in sys.modules if m.split(".")[0] in ("textworld", "alfworld"))
print(json.dumps({"events": events, "new_modules": new, "engine": engine, "replies": replies}))
"""


def test_answering_opens_no_file_imports_no_engine_spawns_nothing(tmp_path):
    """Audit hooks cannot be removed, so this runs in a fresh interpreter: every audited event while the
    sim answers 90 real messages (recorded episodes and messages rendered here by the seed templates)
    with four sim settings is collected and must be none of: open, import, exec/compile, process or
    thread creation, socket or HTTP use, file system changes."""
    fresh = []
    for seed, (first, steps) in (("bpe_always_on", (COOL_FIRST, COOL_STEPS)), ("bpe_inline", (LOOK_FIRST, LOOK_STEPS)),
                                 ("react", (COOL_FIRST, COOL_STEPS))):
        fresh += [m for _, m, _ in play(load_harness(seed), first, steps, metas=META_PLAN)]
    (tmp_path / "fresh.json").write_text(json.dumps(fresh))
    r = subprocess.run([sys.executable, "-c", _AUDIT_SCRIPT, str(REPLIES), str(tmp_path / "fresh.json")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["replies"] == 4 * (len(range(0, 628, 7)) + len(fresh)) and len(fresh) > 40
    assert out["events"] == [], out["events"][:10]
    assert out["new_modules"] == [] and out["engine"] == [], out


def test_the_audit_hook_sees_what_it_is_meant_to_catch(tmp_path):
    """The same watch, armed around code that does open a file and import a module, reports both (so an
    empty report above means the sim did neither)."""
    probe = _AUDIT_SCRIPT.replace("        m.decide(messages)\n",
                                  "        m.decide(messages); open(sys.argv[1], 'rb').close(); import csv\n")
    assert probe != _AUDIT_SCRIPT
    (tmp_path / "fresh.json").write_text("[]")
    r = subprocess.run([sys.executable, "-c", probe, str(REPLIES), str(tmp_path / "fresh.json")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    events = {e for e, _ in out["events"]}
    assert {"open", "import"} <= events and "csv" in out["new_modules"], out["events"][:5]
