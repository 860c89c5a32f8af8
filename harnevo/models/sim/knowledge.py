"""Knowledge a model would bring to a household: typical places of object types (a small prior, best
first), which receptacles open, and the appliance and state word of each transformation."""

from __future__ import annotations

_KITCHEN_FOOD = ("fridge", "countertop", "diningtable", "microwave", "garbagecan", "sinkbasin")
_UTENSIL = ("countertop", "diningtable", "drawer", "sinkbasin")
_DISH = ("cabinet", "countertop", "diningtable", "fridge", "sinkbasin", "microwave", "shelf")
_DESK_THING = ("desk", "sidetable", "dresser", "drawer", "shelf", "bed", "coffeetable")
PRIORS: dict[str, tuple[str, ...]] = {
    "apple": _KITCHEN_FOOD, "tomato": _KITCHEN_FOOD, "potato": _KITCHEN_FOOD, "egg": _KITCHEN_FOOD,
    "lettuce": ("countertop", "diningtable", "fridge", "sinkbasin"),
    "bread": ("countertop", "diningtable", "fridge"),
    "butterknife": _UTENSIL, "knife": _UTENSIL, "fork": _UTENSIL, "spoon": _UTENSIL, "spatula": _UTENSIL,
    "ladle": ("countertop", "drawer", "cabinet", "diningtable"),
    "mug": ("coffeemachine", "countertop", "cabinet", "fridge", "diningtable", "sinkbasin", "microwave",
            "shelf"),
    "cup": _DISH, "bowl": _DISH, "plate": ("cabinet", "countertop", "diningtable", "fridge", "shelf"),
    "pan": ("stoveburner", "countertop", "cabinet", "diningtable"),
    "pot": ("stoveburner", "countertop", "cabinet", "fridge", "diningtable"),
    "kettle": ("stoveburner", "countertop", "cabinet"),
    "dishsponge": ("countertop", "cabinet", "diningtable", "drawer", "sinkbasin"),
    "peppershaker": ("cabinet", "countertop", "diningtable", "drawer", "shelf"),
    "saltshaker": ("cabinet", "countertop", "diningtable", "drawer", "shelf"),
    "winebottle": ("cabinet", "countertop", "diningtable", "fridge", "shelf"),
    "glassbottle": ("countertop", "diningtable", "cabinet", "fridge"),
    "soapbottle": ("countertop", "cabinet", "toilet", "shelf", "garbagecan", "diningtable"),
    "soapbar": ("countertop", "toilet", "sinkbasin", "bathtubbasin", "cabinet", "shelf"),
    "spraybottle": ("toilet", "countertop", "cabinet", "garbagecan", "shelf"),
    "toiletpaper": ("toiletpaperhanger", "toilet", "cabinet", "countertop", "shelf", "drawer"),
    "cloth": ("cabinet", "bathtubbasin", "countertop", "drawer", "shelf", "sinkbasin"),
    "candle": ("toilet", "countertop", "cabinet", "shelf", "sidetable", "drawer"),
    "handtowel": ("handtowelholder", "countertop"), "towel": ("towelholder", "countertop"),
    "tissuebox": ("sidetable", "coffeetable", "diningtable", "shelf", "dresser", "countertop"),
    "alarmclock": ("desk", "sidetable", "shelf", "dresser", "diningtable"),
    "book": ("bed", "desk", "sidetable", "shelf", "dresser", "drawer", "coffeetable"),
    "cd": ("desk", "drawer", "dresser", "sidetable", "shelf", "garbagecan"),
    "cellphone": ("bed", "desk", "dresser", "sidetable", "drawer", "shelf"),
    "creditcard": ("desk", "sidetable", "dresser", "shelf", "coffeetable", "armchair", "drawer"),
    "keychain": ("sidetable", "dresser", "desk", "armchair", "shelf", "drawer", "coffeetable"),
    "pen": _DESK_THING, "pencil": _DESK_THING,
    "laptop": ("bed", "desk", "sofa", "diningtable", "sidetable", "armchair"),
    "pillow": ("bed", "sofa", "armchair"),
    "remotecontrol": ("sofa", "coffeetable", "armchair", "sidetable", "tvstand", "drawer"),
    "newspaper": ("sofa", "coffeetable", "armchair", "diningtable", "sidetable", "shelf"),
    "box": ("coffeetable", "diningtable", "sofa", "dresser", "sidetable", "shelf"),
    "statue": ("shelf", "coffeetable", "sidetable", "dresser", "countertop", "diningtable"),
    "vase": ("shelf", "countertop", "cabinet", "sidetable", "diningtable", "dresser"),
    "watch": ("coffeetable", "sidetable", "dresser", "tvstand", "shelf", "drawer"),
    "desklamp": ("desk", "sidetable", "dresser", "nightstand", "shelf", "coffeetable"),
    "floorlamp": ("sidetable", "desk", "dresser"),
}
GENERIC = ("countertop", "diningtable", "desk", "sidetable", "shelf", "dresser", "coffeetable", "cabinet",
           "drawer")  # where an object type without a prior might be
SURFACES = ("diningtable", "countertop", "coffeetable", "desk", "sidetable", "dresser")
OPENABLE = frozenset({"cabinet", "drawer", "fridge", "microwave", "safe", "box"})
APPLIANCE = {"heat": "microwave", "cool": "fridge", "clean": "sinkbasin"}
STATE_OF = {"heat": "hot", "cool": "cool", "clean": "clean"}
LAMPS = ("desklamp", "floorlamp")
