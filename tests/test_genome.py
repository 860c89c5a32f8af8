"""The genome (genes, bounds, normal form, behaviour ids) and the prompt-block library: the block-form
seeds render byte for byte what the hand-written seeds of before rendered."""

from __future__ import annotations

import random

import pytest
import yaml
from jinja2 import DictLoader, StrictUndefined
from jinja2.sandbox import ImmutableSandboxedEnvironment

from harnevo.errors import HarnessError
from harnevo.harness import blocks
from harnevo.harness.genome import GENOME, gene, genes_of, get, normalize, normalized_data, with_genes
from harnevo.harness.render import EMPTY_SAMPLE_CONTEXT, SAMPLE_CONTEXT, Renderer
from harnevo.harness.spec import Harness, Headers, MemoryPolicy, PromptText, load_harness

SEEDS = ("react", "bpe_always_on", "bpe_inline")

# The seeds' templates as they were hand-written before the block library (harness_templates/*.yaml at
# commit f113d2d), copied here so that the reference does not move with the repository.
REFERENCE_TEMPLATES = yaml.safe_load(r"""
react:
    system: |
      You are an agent acting in a household simulated as a text game. Reach the goal given in the task.
      Every turn, reply with one short thought and exactly one command, in this form:
      Think: <one sentence>
      Action: <command>
      Commands: go to <receptacle>, open <receptacle>, close <receptacle>, take <object> from <receptacle>,
      move <object> to <receptacle>, heat <object> with <receptacle>, cool <object> with <receptacle>,
      clean <object> with <receptacle>, use <object>, examine <something>, look, inventory.
      Use object and receptacle names exactly as the game writes them, with their numbers (e.g. apple 1).
    turn: |
      ## Task
      Your task is to: {{ task }}

      ## Room
      {{ room }}

      {% if history %}
      ## History (last {{ history | length }} steps)
      {% for h in history %}
      > {{ h.action }}
      {{ h.observation }}
      {% endfor %}

      {% endif %}
      ## Observation
      {% if last_action %}
      > {{ last_action }}
      {% endif %}
      {{ observation }}

      Step {{ step }} of {{ max_steps }}. Your reply:
bpe_always_on:
    system: |
      You are an agent acting in a household simulated as a text game. Reach the goal given in the task.
      A workspace is kept for you every turn: Belief (what you have seen where, what is open, what you
      hold), Progress (the subgoals of the task and their status) and Experience (lessons from earlier
      episodes). Trust it instead of re-checking places you have already seen.
      Every turn, reply with one short thought and exactly one command, in this form:
      Think: <one sentence>
      Action: <command>
      Choose the command from the admissible actions listed in the turn.
    turn: |
      ## Task
      Your task is to: {{ task }}

      ## Room
      {{ room }}

      {% if history %}
      ## History (last {{ history | length }} steps)
      {% for h in history %}
      > {{ h.action }}
      {{ h.observation }}
      {% endfor %}

      {% endif %}
      {% if belief %}
      ## Belief
      {{ belief }}

      {% endif %}
      {% if progress %}
      ## Progress
      {{ progress }}

      {% endif %}
      {% if experience %}
      ## Experience
      {{ experience }}

      {% endif %}
      ## Observation
      {% if last_action %}
      > {{ last_action }}
      {% endif %}
      {{ observation }}

      ## Admissible actions
      {{ admissible | join(' | ') }}

      Step {{ step }} of {{ max_steps }}. Your reply:
bpe_inline:
    system: |
      You are an agent acting in a household simulated as a text game. Reach the goal given in the task.
      Besides game commands you have four meta-actions on your workspace. They do not change the game,
      each costs one step, and the result appears as the next observation:
        track [query]     show your Belief: what you have seen where, what is open, what you hold
        commit [subgoal]  mark a subgoal as done in your Progress
        recall [query]    show lessons from earlier episodes
        note [insight]    keep a lesson for later episodes
      Use them when your history no longer shows what you need.
      Every turn, reply with one short thought and exactly one command or meta-action, in this form:
      Think: <one sentence>
      Action: <command or meta-action>
      Game commands: go to <receptacle>, open <receptacle>, close <receptacle>, take <object> from
      <receptacle>, move <object> to <receptacle>, heat/cool/clean <object> with <receptacle>,
      use <object>, examine <something>, look, inventory.
    turn: |
      ## Task
      Your task is to: {{ task }}

      ## Room
      {{ room }}

      {% if history %}
      ## History (last {{ history | length }} steps)
      {% for h in history %}
      > {{ h.action }}
      {{ h.observation }}
      {% endfor %}

      {% endif %}
      ## Observation
      {% if last_action %}
      > {{ last_action }}
      {% endif %}
      {{ observation }}

      ## Admissible actions
      {{ admissible | join(' | ') }}

      Step {{ step }} of {{ max_steps }}. Your reply:
""")


def _reference_render(templates: dict[str, str], context: dict) -> dict[str, str]:
    """Rendered exactly as harnevo rendered before bounded rendering: the plain immutable sandbox."""
    env = ImmutableSandboxedEnvironment(loader=DictLoader(templates), undefined=StrictUndefined,
                                        autoescape=False, keep_trailing_newline=False, trim_blocks=True,
                                        lstrip_blocks=True)
    return {name: env.get_template(name).render(**context).strip() for name in templates}


_OBS = ["You arrive at countertop 1. On the countertop 1, you see a apple 1, and a bread 1.",
        "Nothing happens.", "You open the fridge 1. The fridge 1 is open. In it, you see a egg 1.",
        "two\nlines\n", "  padded  ", "{{ not a template }} {% neither %}", "ünïcødé ✓ — ok", "", "\n"]


def _contexts(seed: int, n: int):
    rng = random.Random(seed)
    yield dict(SAMPLE_CONTEXT, guard_note="")
    yield dict(EMPTY_SAMPLE_CONTEXT)
    for _ in range(n):
        ctx = {
            "task": rng.choice(["put a clean apple in fridge.", "look at alarmclock under the desklamp.", "", "x\n"]),
            "room": rng.choice(_OBS), "observation": rng.choice(_OBS),
            "last_action": rng.choice(["", "go to countertop 1", "track apple", "open fridge 1"]),
            "admissible": rng.sample(["go to fridge 1", "look", "inventory", "take apple 1 from countertop 1",
                                      "examine countertop 1"], rng.randint(0, 5)),
            "history": [{"action": rng.choice(["look", "go to desk 1", "", "> x"]), "observation": rng.choice(_OBS)}
                        for _ in range(rng.randint(0, 9))],
            "step": rng.randint(1, 50), "max_steps": rng.choice([30, 50]), "steps_left": rng.randint(0, 50),
            "mode": rng.choice(["env_only", "always_on", "inline"]),
            "meta_actions": rng.choice([[], ["track", "commit", "recall", "note"]]),
            "belief": rng.choice(["", "location: countertop 1\nholding: nothing\n- fridge 1: (closed)"]),
            "progress": rng.choice(["", "- [done] find apple\n- [todo] take apple"]),
            "experience": rng.choice(["", "- (no lessons yet)", "- apple was found at a countertop"]),
            "guard_note": "",
        }
        if rng.random() < 0.3:
            del ctx["guard_note"]  # the runtime of before did not pass it
        yield ctx


@pytest.mark.parametrize("name", SEEDS)
def test_block_seeds_render_byte_identical_to_the_hand_written_seeds(name):
    h = load_harness(name)
    assert h.templates is None and h.prompt is not None
    renderer = Renderer(h.template_sources())
    also_bounded = Renderer(REFERENCE_TEMPLATES[name])  # the bounded renderer changes no byte either
    for i, ctx in enumerate(_contexts(hash(name) % 1000, 250)):
        want = _reference_render(REFERENCE_TEMPLATES[name], ctx)
        got = {m["role"]: m["content"] for m in renderer.messages(ctx)}
        assert got == {"system": want["system"], "user": want["turn"]}, (name, i)
        assert {m["role"]: m["content"] for m in also_bounded.messages(ctx)} == got


def test_guard_note_is_shown_by_the_bpe_seeds_when_there_is_one():
    ctx = dict(SAMPLE_CONTEXT)
    note = ctx["guard_note"]
    for name in SEEDS:
        turn = Renderer(load_harness(name).template_sources()).render("turn", ctx)
        if name == "react":
            assert note not in turn
        else:
            assert f"## Observation\n> go to countertop 1\n{ctx['observation']}\n\n## Note\n{note}\n\n## Admissible" in turn


def test_block_files_follow_the_conventions():
    lib = blocks.library()
    assert set(lib) == {"system", "turn"}
    for name, src in lib["system"].items():
        assert src.endswith("\n") and not src.endswith("\n\n"), name
    for name, src in lib["turn"].items():
        assert src.endswith("\n\n") or src.endswith("{% endif %}\n") or name.endswith("_line"), name
    for part in lib:
        for name, src in lib[part].items():
            for field in blocks.text_fields_used(part, [name]):
                top, _, sub = field.partition(".")  # every gene a block names exists
                assert sub in Headers.model_fields if top == "headers" else top in PromptText.model_fields, name


@pytest.mark.parametrize("text", ["plain", "", "a \"quoted\" 'one'", "back\\slash \\n not a newline",
                                  "{{ task }} {% if x %} {# c #} %} }}", "line\nbreak\r\n\ttab", "\x00\x07\x7f",
                                  "ünïcødé ✓ 😀 \u2028", "\\", "\\\\\\"])
def test_text_genes_are_literal(text):
    h = with_genes(load_harness("react"), {"prompt.text.instruction": text, "prompt.text.headers.task": "T {{ x }}"
                                           if "\n" not in text else "T"})
    system = Renderer(h.template_sources()).render("system", SAMPLE_CONTEXT)
    assert system.startswith(text.strip()) if text.strip() else system.startswith("Every turn")
    lit = blocks.jinja_literal(text)
    out = Renderer({"system": "{{ " + lit + " }}", "turn": "x"}).render("system", {})
    assert out == text.strip()


def test_the_genome_declares_every_gene_with_bounds_from_the_schema():
    names = [g.name for g in GENOME]
    assert len(names) == len(set(names))
    kinds = {g.name: g.kind for g in GENOME}
    for n in ("mode", "guard", "memory.belief", "memory.belief_scope", "memory.progress", "memory.experience",
              "budget.meta_actions_spend_budget", "reply.bare_line_fallback"):
        assert kinds[n] == "categorical", n
    for n in ("memory.history_window", "memory.experience_bank_size", "memory.experience_shown",
              "budget.max_steps", "model.max_tokens"):
        assert kinds[n] == "int", n
    assert kinds["model.temperature"] == "float"
    assert kinds["prompt.system"] == kinds["prompt.turn"] == "blocks"
    for n in ("prompt.text.instruction", "prompt.text.reply_format", "prompt.text.examples",
              "prompt.text.headers.belief", "prompt.text.headers.admissible"):
        assert kinds[n] == "text", n
    hw = gene("memory.history_window")
    assert (hw.low, hw.high, hw.default) == (0, 200, 8)
    assert (gene("budget.max_steps").low, gene("budget.max_steps").high) == (1, 500)
    assert (gene("model.temperature").low, gene("model.temperature").high) == (0.0, 2.0)
    assert gene("guard").choices == ("none", "nearest_admissible", "nearest_same_objects", "reject")
    assert gene("memory.belief").choices == (False, True)
    assert set(gene("prompt.turn").choices) == set(blocks.block_names("turn")) >= {"task", "guard_note", "belief"}
    assert gene("prompt.text.instruction").high == 4000
    for g in ("prompt.text.instruction", "prompt.text.reply_format"):  # alternatives for operators
        variants = dict(gene(g).variants)
        assert len(variants) >= 2 and variants["default"] == gene(g).default
    with pytest.raises(HarnessError, match="unknown gene 'memory.nope'"):
        gene("memory.nope")


def test_get_and_with_genes_use_the_file_loader():
    h = load_harness("bpe_always_on")
    assert get(h, "memory.history_window") == 3 and get(h, gene("guard")) == "nearest_admissible"
    assert get(h, "prompt.turn")[:2] == ["task", "room"]
    assert get(h, "prompt.text.headers.belief") == "Belief"
    h2 = with_genes(h, {"memory.history_window": 5.0, "model.temperature": 1, "guard": "reject",
                        "prompt.text.headers.belief": "What you know",
                        "prompt.turn": ("task", "observation", "belief", "admissible", "step_line")})
    assert isinstance(h2, Harness) and h2.memory.history_window == 5 and h2.model.temperature == 1.0
    assert h2.prompt.turn == ["task", "observation", "belief", "admissible", "step_line"]
    turn = Renderer(h2.template_sources()).render("turn", SAMPLE_CONTEXT)
    assert turn.index("## Observation") < turn.index("## What you know") < turn.index("## Admissible actions")
    assert h == load_harness("bpe_always_on")  # the input is never changed
    for bad, why in [({"memory.history_window": 201}, "memory.history_window"),
                     ({"memory.history_window": 2.5}, "memory.history_window"),
                     ({"model.temperature": 2.5}, "model.temperature"),
                     ({"guard": "maybe"}, "guard"),
                     ({"prompt.turn": ["task", "nope"]}, "unknown block 'nope'"),
                     ({"prompt.text.headers.task": ""}, "headers.task"),
                     ({"prompt.text.instruction": "x" * 4001}, "instruction"),
                     ({"mode": "inline", "memory.belief": False, "memory.progress": False,
                       "memory.experience": False}, "needs at least one"),
                     ({"memory.nope": 1}, "unknown gene")]:
        with pytest.raises(HarnessError, match=why):
            with_genes(h, bad)
    for variant in ("default", "careful", "planner"):
        v = with_genes(h, {"prompt.text.instruction": gene("prompt.text.instruction").variant(variant)})
        assert Renderer(v.template_sources()).render("system", SAMPLE_CONTEXT).startswith(v.prompt.text.instruction)


def test_hand_written_harness_has_numeric_and_template_text_genes_only():
    seed = load_harness("react")
    data = seed.model_dump(mode="json")
    data["prompt"], data["templates"] = None, seed.template_sources()
    hand = Harness.from_dict(data)
    names = {g.name for g in genes_of(hand)}
    assert names == {"memory.history_window", "memory.experience_bank_size", "memory.experience_shown",
                     "budget.max_steps", "model.max_tokens", "model.temperature", "templates.system", "templates.turn"}
    assert {g.kind for g in genes_of(hand)} == {"int", "float", "text"}
    assert {g.name for g in genes_of(seed)} == {g.name for g in GENOME}
    assert get(hand, "templates.turn") == seed.template_sources()["turn"]
    h2 = with_genes(hand, {"templates.turn": "{{ task }}", "budget.max_steps": 30})
    assert h2.templates["turn"] == "{{ task }}" and h2.budget.max_steps == 30
    with pytest.raises(HarnessError, match="does not apply"):
        get(hand, "prompt.turn")
    with pytest.raises(HarnessError, match="does not apply"):
        with_genes(hand, {"prompt.text.instruction": "x"})
    with pytest.raises(HarnessError, match="does not apply"):
        with_genes(seed, {"templates.turn": "x"})
    with pytest.raises(HarnessError, match="no_such"):
        with_genes(hand, {"templates.turn": "{{ no_such }}"})


def test_seed_ids_and_behaviour_ids_are_distinct_and_stable():
    ids = {n: (load_harness(n).id, load_harness(n).behaviour_id) for n in SEEDS}
    assert len({i for pair in ids.values() for i in pair}) == 6
    for n in SEEDS:
        h = load_harness(n)
        assert normalize(h) == h  # the seeds are in normal form
        assert Harness.from_yaml(h.to_yaml()).behaviour_id == ids[n][1]


def test_renaming_keeps_the_behaviour_id():
    for n in SEEDS:
        h = load_harness(n)
        other = h.evolve(name="another name", description="says something else")
        assert other.behaviour_id == h.behaviour_id and other.id != h.id
        assert normalize(other).name == "another name"  # the YAML keeps the name


def _no_effect_changes():
    react, always, inline = (load_harness(n) for n in SEEDS)
    yield react, {"memory": {"belief": True, "progress": True, "experience": True}}  # env_only: no panels
    yield react, {"memory": {"belief_scope": "task"}}  # belief off
    yield react, {"memory": {"experience_bank_size": 77, "experience_shown": 9}}  # experience off
    yield react, {"budget": {"meta_actions_spend_budget": False}}  # no meta-actions outside inline
    yield react, {"prompt": {"text": {"headers": {"belief": "Known", "admissible": "Allowed"}}}}  # blocks absent
    yield react, {"prompt": {"turn": ["task", "room", "history", "observation", "guard_note", "step_line"]}}  # no guard
    yield react.evolve(guard="reject"), {"prompt": {"turn": ["task", "guard_note", "room", "history", "observation",
                                                             "step_line"]}}  # rejections are observations
    yield react, {"prompt": {"system": ["role", "reply_format", "commands", "names_rule", "examples"]}}  # no examples
    yield react, {"prompt": {"turn": ["task", "room", "belief", "history", "observation", "step_line"]}}  # env_only
    yield always, {"memory": {"experience": False, "experience_bank_size": 3}, "prompt": {
        "turn": ["task", "room", "history", "belief", "progress", "observation", "guard_note", "admissible",
                 "step_line"]}}, {"memory": {"experience": False}, "prompt": {
        "turn": ["task", "room", "history", "belief", "progress", "experience", "observation", "guard_note",
                 "admissible", "step_line"]}}  # a panel that is off vs its block missing
    yield always, {"budget": {"meta_actions_spend_budget": False}}
    yield inline, {"prompt": {"text": {"instruction": inline.prompt.text.instruction}}}
    yield inline, {"prompt": {"text": {"headers": {"experience": "Lessons"}}}}  # no experience block
    yield always, {"memory": {"history_window": 0, "belief": True}}, {
        "memory": {"history_window": 7}, "prompt": {"turn": [b for b in always.prompt.turn if b != "history"]}}


@pytest.mark.parametrize("case", list(range(14)))
def test_changes_without_effect_keep_the_behaviour_id(case):
    h, *variants = list(_no_effect_changes())[case]
    a = h.evolve(**variants[0])
    b = h.evolve(**variants[1]) if len(variants) > 1 else h
    assert a.id != b.id or a == b
    assert a.behaviour_id == b.behaviour_id, (variants, normalized_data(a), normalized_data(b))
    assert normalize(normalize(a)) == normalize(a)  # normal form is a fixed point
    _same_messages(a, normalize(a))


def _runtime_context(h: Harness, base: dict) -> dict:
    """A context as the runtime fills it for `h`: panels only in always_on, history up to the window."""
    ctx = dict(base, mode=h.mode, meta_actions=["track", "commit", "recall", "note"] if h.mode == "inline" else [])
    for p in ("belief", "progress", "experience"):
        if not (h.mode == "always_on" and getattr(h.memory, p)):
            ctx[p] = ""
    ctx["history"] = ctx["history"][-h.memory.history_window:] if h.memory.history_window else []
    if h.guard in ("none", "reject"):
        ctx["guard_note"] = ""
    return ctx


def _same_messages(a: Harness, b: Harness) -> None:
    ra, rb = Renderer(a.template_sources()), Renderer(b.template_sources())
    for ctx in _contexts(7, 40):
        ctx = dict(ctx, guard_note=ctx.get("guard_note") or "'x' read as 'y'")
        assert ra.messages(_runtime_context(a, ctx)) == rb.messages(_runtime_context(b, ctx))


def test_effective_changes_change_the_behaviour_id():
    react, always, inline = (load_harness(n) for n in SEEDS)
    changes = [
        (react, {"memory": {"history_window": 9}}), (react, {"guard": "nearest_admissible"}),
        (react, {"model": {"temperature": 0.7}}), (react, {"model": {"max_tokens": 300}}),
        (react, {"budget": {"max_steps": 30}}), (react, {"reply": {"bare_line_fallback": True}}),
        (react, {"prompt": {"text": {"headers": {"room": "Where you are"}}}}),
        (react, {"prompt": {"text": {"reply_format": "Reply with: Action: <command>"}}}),
        (react, {"prompt": {"turn": ["room", "task", "history", "observation", "step_line"]}}),  # order
        (react, {"prompt": {"system": ["role", "reply_format", "commands"]}}),
        (always, {"memory": {"belief_scope": "task"}}), (always, {"memory": {"experience_shown": 4}}),
        (always, {"memory": {"belief": False}}), (always, {"mode": "inline"}),
        (inline, {"budget": {"meta_actions_spend_budget": False}}), (inline, {"memory": {"progress": False}}),
        (inline, {"memory": {"experience_bank_size": 21}}), (inline, {"guard": "nearest_same_objects"}),
    ]
    for h, change in changes:
        assert h.evolve(**change).behaviour_id != h.behaviour_id, change


def test_hand_written_templates_normalize_by_what_they_read():
    seed = load_harness("bpe_always_on")
    data = seed.model_dump(mode="json")
    data["prompt"] = None
    data["templates"] = {"system": "Act.", "turn": "{{ task }}\n{{ belief }}\n{{ observation }}"}
    h = Harness.from_dict(data)
    n = normalize(h)
    assert n.memory.belief and not n.memory.progress and not n.memory.experience  # only belief is read
    assert n.memory.history_window == MemoryPolicy().history_window  # history is never read
    assert h.evolve(memory={"history_window": 1}).behaviour_id == h.behaviour_id
    assert h.evolve(memory={"belief_scope": "task"}).behaviour_id != h.behaviour_id
    data["templates"] = {"system": "Act.", "turn": "{{ task }}"}  # always_on that shows no panel: env_only
    assert normalize(Harness.from_dict(data)).mode == "env_only"
