"""Bounded rendering: every render runs within a time and size budget enforced while it runs, in any
thread; templates within budget render exactly as plain Jinja renders them."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import yaml
from jinja2 import DictLoader, StrictUndefined
from jinja2.sandbox import ImmutableSandboxedEnvironment

from harnevo.errors import HarnessError
from harnevo.harness.render import MAX_RENDER_CHARS, SAMPLE_CONTEXT, Renderer, RenderError
from harnevo.harness.spec import Harness, load_harness

# (template, what the refusal says). Each would hang, or allocate hundreds of MB or more, unbounded.
ATTACKS = [
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "time budget"),
    ("{% for i in range(100000) %}{% for c in 'x' * 100000 %}{% endfor %}{% endfor %}", "time budget|made more"),
    ("{% for i in range(3) recursive %}{{ loop(range(3)) if loop.depth < 30 else '' }}{% endfor %}",
     "time budget"),
    ("{% for i in range(3) recursive %}{{ loop(range(3)) }}{% endfor %}", "recursed too deeply"),
    ("{{ 'a' * 300000000 }}", "'\\*' would make a value of 300000000"),
    ("{{ 'a' * 10**9 }}", "would make a value of 1000000000"),
    ("{{ 10 * 'a' * 10**8 }}", "would make a value"),
    ("{{ [1] * 10**9 }}", "would make a value"),
    ("{{ 2 ** (10 ** 8) }}", "integer of more than"),
    ("{% set ns = namespace(n=3) %}{% for i in range(40) %}{% set ns.n = ns.n * ns.n %}{% endfor %}",
     "integer of more than"),
    ("{% set ns = namespace(s='a') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
     "'~' would make a value"),
    ("{% set ns = namespace(s='a') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
     "'\\+' would make a value"),
    ("{% set ns = namespace(s='a') %}{% for i in range(64) %}{% set t %}{{ ns.s }}{{ ns.s }}{% endset %}"
     "{% set ns.s = t %}{% endfor %}", "a block would make a value"),
    ("{% set ns = namespace(s=['a']) %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
     "would make a value"),
    ("{% set ns = namespace(x=[1]) %}{% for i in range(64) %}{% set ns.x = [ns.x, ns.x] %}{% endfor %}{{ ns.x }}",
     "a literal would make a value"),
    ("{% set ns = namespace(x=[1], y=[1]) %}{% for i in range(64) %}{% set ns.x = [ns.x, ns.x] %}"
     "{% set ns.y = [ns.y, ns.y] %}{% endfor %}{{ ns.x == ns.y }}", "would make a value"),
    ("{% set ns = namespace(c=0) %}{% for i in range(64) %}{% set n = namespace() %}{% set n.a = ns.c %}"
     "{% set n.b = ns.c %}{% set ns.c = n %}{% endfor %}{{ ns.c }}", "namespace cannot be put"),
    ("{% set x = 'a' * 150000 %}{{ [x, x, x, x, x, x, x, x, x, x] }}", "a literal would make a value"),
    ("{% set ns = namespace(s='a' * 150000) %}{% macro m() %}{{ varargs }}{% endmacro %}{{ m(" + ", ".join(["ns"] * 3000)
     + ") }}", "namespace cannot be put"),
    ("{% set ns = namespace(s='a' * 150000) %}{% set c = cycler(" + ", ".join(["ns"] * 3000) + ") %}{{ c.items }}",
     "namespace cannot be put"),
    ("{% set ns = namespace(s='a' * 150000) %}{% macro m() %}{{ varargs|tojson|length }}{% endmacro %}{{ m("
     + ", ".join(["ns"] * 3000) + ") }}", "namespace cannot be put"),
    ("{% macro f(n) %}{% if n %}{{ f(n-1) }}{{ f(n-1) }}{% else %}aaaa{% endif %}{% endmacro %}{{ f(40) }}",
     "made more than|time budget|would make a value"),
    ("{% macro f(n) %}{% if n %}{{ f(n-1) }}{{ f(n-1) }}{% endif %}{% endmacro %}{{ f(60) }}", "time budget"),
    ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "recursed too deeply"),
    ("{% include 'turn' %}", "recursed too deeply"),
    ("{% for i in range(100000) %}{{ i }}{% endfor %}{% for i in range(100000) %}{{ i }}{% endfor %}",
     "rendered more than"),
    ("{{ 'a'|center(1000000000) }}", "center would make a value"),
    ("{{ 'a\nb\nc'|indent(100000000) }}", "indent would make a value"),
    ("{{ 'a\nb\nc'|indent('x' * 100000) }}", "indent would make a value"),
    ("{{ range(100000)|join('x' * 100000) }}", "join would make a value"),
    ("{{ ('a' * 100000)|replace('', 'bbbbbbbbbb') }}", "replace would make a value"),
    ("{{ ('a' * 100000)|replace('a', 'b' * 100) }}", "replace would make a value"),
    ("{{ ('a ' * 50000)|wordwrap(1, wrapstring='x' * 1000) }}", "wordwrap would make a value"),
    ("{{ '%0999999999d'|format(1) }}", "format width"),
    ("{{ '%0999999999d' % 1 }}", "format width"),
    ("{{ '%*d' % (999999999, 1) }}", "'\\*' width"),
    ("{{ '{:999999999}'.format(1) }}", "format width"),
    ("{{ '{:{w}}'.format(1, w=999999999) }}", "nested replacement"),
    ("{{ 'a'.ljust(10**9) }}", "ljust would make a value"),
    ("{{ 'a'.zfill(1000000000) }}", "zfill would make a value"),
    ("{{ ('\t' * 100000).expandtabs(100000) }}", "expandtabs would make a value"),
    ("{{ ('a' * 100000).translate({97: 'b' * 1000}) }}", "translate would make a value"),
    ("{{ (10).to_bytes(1000000000, 'big') }}", "to_bytes would make a value"),
    ("{{ ','.join(range(100000)|map('string')|map('center', 1000)) }}", "made more than|would make a value"),
    ("{{ range(100000)|map('center', 100000)|list|length }}", "made more than"),
    ("{{ [[1] * 100000] * 100000|sum(start=[]) }}", "would make a value"),
    ("{{ range(10)|batch(1000000000, 'x')|list }}", "batch would make a value"),
    ("{{ range(1)|slice(1000000000)|list }}", "slice would make a value"),
    ("{{ [1, [2]]|tojson(100000000) }}", "tojson indent"),
    ("{{ lipsum(1000000) }}", "'lipsum' is undefined"),
    ("{{ range(10**9)|list }}", "Range too big"),
    ("{{ [1, 2]|random }}", "No filter named 'random'"),
]

# Runs in a child with a 2 GB address-space limit, so that a regression fails the test instead of the
# machine; reports per attack the error, the CPU seconds and the growth of the resident set.
_BATTERY = textwrap.dedent("""
    import json, resource, sys, time
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    from harnevo.harness.render import Renderer, RenderError, SAMPLE_CONTEXT
    out = []
    for src in json.loads(sys.stdin.read()):
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.process_time()
        try:
            Renderer({"system": "x", "turn": src}).render("turn", SAMPLE_CONTEXT)
            error = None
        except RenderError as e:
            error = str(e)
        except BaseException as e:
            error = "NOT A RenderError: " + type(e).__name__ + ": " + str(e)[:200]
        out.append({"error": error, "cpu": time.process_time() - t0,
                    "rss_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024})
    print(json.dumps(out))
""")


def test_attacks_are_refused_while_they_run():
    r = subprocess.run([sys.executable, "-c", _BATTERY], input=json.dumps([a for a, _ in ATTACKS]),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    results = json.loads(r.stdout)
    import re

    for (src, why), res in zip(ATTACKS, results):
        err = res["error"]
        assert err is not None, f"rendered: {src}"
        assert err.startswith("template 'turn'") and "\n" not in err, err
        assert re.search(why, err), (src, err)
        assert "memory" not in err, (src, err)  # refused by a check, not by running out
        assert res["cpu"] < 1.5, (src, res)  # 0.5 s budget plus the checks' granularity
        assert res["rss_mb"] < 200, (src, res)


def _plain(templates: dict[str, str], ctx: dict) -> str:
    env = ImmutableSandboxedEnvironment(loader=DictLoader(templates), undefined=StrictUndefined, autoescape=False,
                                        keep_trailing_newline=False, trim_blocks=True, lstrip_blocks=True)
    return env.get_template("turn").render(**ctx).strip()


LEGIT = [
    "{% for h in history %}{{ loop.index }}/{{ loop.length }} {{ h.action|upper }}{{ ',' if not loop.last }}"
    "{% else %}none{% endfor %}",
    "{% macro sec(t, body) %}## {{ t }}\n{{ body }}\n{% endmacro %}{{ sec('Task', task) }}{{ sec('Obs', observation) }}",
    "{% set ns = namespace(n=0, seen=[]) %}{% for a in admissible %}{% set ns.n = ns.n + a|length %}"
    "{% set ns.seen = ns.seen + [a] %}{% endfor %}{{ ns.n }} {{ ns.seen|join(';') }}",
    "{{ admissible|map('upper')|select('ne', 'LOOK')|join(' | ') }} {{ admissible|batch(2)|list }}"
    " {{ admissible|slice(2)|list }} {{ [1, 2, 3]|sum }} {{ [[1], [2]]|sum(start=[]) }}",
    "{{ '%s has %d steps' % (task, max_steps) }} {{ '{} of {}'.format(step, max_steps) }} {{ '%05.1f'|format(3.14159) }}",
    "{{ task|center(60) }}|{{ room|wordwrap(40) }}|{{ observation|indent(2, true) }}|{{ task|replace('a', 'A') }}",
    "{{ {'a': [1, 2], 'b': (3, 4)}|tojson(2) }} {{ history|tojson }} {{ dict(x=1, y=[task]) }}",
    "{% set a, b = task.split(' ', 1) %}{{ b ~ ' / ' ~ a ~ step }} {{ ('-' * 20) + '>' }} {{ 2 ** 10 }}",
    "{% macro sec2() %}{{ caller('in') }}{% endmacro %}"
    "{% filter upper %}{{ task }}{% endfilter %} {% call(x) sec2() %}[{{ x }}]{% endcall %}",
    "{% for x in [[1, [2, 3]], [4]] recursive %}({% if x is iterable %}{{ loop(x) }}{% else %}{{ x }}{% endif %})"
    "{% endfor %}",
    "{% include 'part' %} {{ history|map(attribute='observation')|map('truncate', 20)|join('\n') }}",
    "{{ task.upper().center(50, '*') }} {{ ', '.join(admissible) }} {{ 'x'.zfill(5) }} {{ room.replace(' ', '_') }}",
    "{% for i in range(2000) %}{% for j in range(20) %}{% endfor %}{% endfor %}{{ range(1000)|list|length }}",
]


@pytest.mark.parametrize("src", LEGIT)
def test_templates_within_budget_render_as_plain_jinja(src):
    templates = {"system": "x", "turn": src, "part": "[{{ task }}]"}
    ctx = dict(SAMPLE_CONTEXT, history=SAMPLE_CONTEXT["history"] * 3)
    assert Renderer(templates).render("turn", ctx) == _plain(templates, ctx)


def test_custom_budgets_and_template_size():
    r = Renderer({"system": "{{ task * 20 }}", "turn": "{{ 'a' * 300 }}"}, max_chars=200)
    with pytest.raises(RenderError, match="'\\*' would make a value of 300"):
        r.render("turn", SAMPLE_CONTEXT)
    with pytest.raises(RenderError, match="would make a value of 560"):
        r.render("system", SAMPLE_CONTEXT)
    slow = Renderer({"system": "x", "turn": "{% for i in range(100000) %}{% for j in range(100000) %}"
                     "{% endfor %}{% endfor %}"}, time_s=0.05)
    t0 = time.process_time()
    with pytest.raises(RenderError, match="time budget \\(0.05 s"):
        slow.render("turn", SAMPLE_CONTEXT)
    assert time.process_time() - t0 < 0.5
    with pytest.raises(RenderError, match="characters \\(limit 50000\\)"):
        Renderer({"system": "x" * 50_001, "turn": "x"})
    with pytest.raises(RenderError, match="nested too deeply"):
        Renderer({"system": "{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}", "turn": "x"})


def test_errors_are_one_line_and_the_next_render_is_unaffected():
    r = Renderer({"system": "ok {{ task }}", "turn": "{{ 1 / 0 }}", "t2": "{{ no_such }}",
                  "t3": "{% for i in range(100000) %}{{ i }}{% endfor %}"})
    for name, why in (("turn", "ZeroDivisionError"), ("t2", "'no_such' is undefined"), ("t3", "rendered more than")):
        with pytest.raises(RenderError, match=why) as e:
            r.render(name, SAMPLE_CONTEXT)
        assert "\n" not in str(e.value)
        assert r.render("system", SAMPLE_CONTEXT) == "ok " + SAMPLE_CONTEXT["task"]


def test_renders_in_threads_have_their_own_budgets():
    seeds = {n: Renderer(load_harness(n).template_sources()) for n in ("react", "bpe_always_on", "bpe_inline")}
    want = {n: r.messages(SAMPLE_CONTEXT) for n, r in seeds.items()}
    bomb = Renderer({"system": "x", "turn": "{% for i in range(100000) %}{% for j in range(100000) %}"
                     "{% endfor %}{% endfor %}"})
    big = Renderer({"system": "x", "turn": "{% for i in range(40) %}{{ 'a' * 4000 }}{% endfor %}"})
    errors: list[str] = []
    wrong: list[str] = []

    def seed_worker(n: str) -> None:
        for _ in range(300):  # 600 renders: their work adds up to more than one budget, which must not carry over
            if seeds[n].messages(SAMPLE_CONTEXT) != want[n]:
                wrong.append(n)
            if len(big.render("turn", SAMPLE_CONTEXT)) != 160_000:
                wrong.append("big")

    def bomb_worker() -> None:
        try:
            bomb.render("turn", SAMPLE_CONTEXT)
        except RenderError as e:
            errors.append(str(e))

    threads = [threading.Thread(target=bomb_worker) for _ in range(2)]
    threads += [threading.Thread(target=seed_worker, args=(n,)) for n in seeds]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not wrong and len(errors) == 2 and all("time budget" in e for e in errors)


def test_renders_off_the_event_loop():
    r = Renderer(load_harness("bpe_always_on").template_sources())
    bomb = Renderer({"system": "x", "turn": "{{ 'a' * 10**9 }}"})

    async def main():
        ok = await asyncio.gather(*(asyncio.to_thread(r.messages, SAMPLE_CONTEXT) for _ in range(16)))
        with pytest.raises(RenderError, match="would make a value"):
            await asyncio.to_thread(bomb.render, "turn", SAMPLE_CONTEXT)
        return ok

    ok = asyncio.run(main())
    assert all(m == ok[0] for m in ok) and "## Belief" in ok[0][1]["content"]


def test_over_budget_templates_are_refused_at_load():
    for bomb in ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                 "{{ 'a' * 10**9 }}", "{{ 'a'|center(1000000000) }}"):
        data = load_harness("react").model_dump(mode="json")
        data["prompt"], data["templates"] = None, {"system": "x", "turn": bomb}
        with pytest.raises(HarnessError, match="template 'turn'") as e:
            Harness.from_dict(data, source="bomb.yaml")
        assert str(e.value).startswith("bomb.yaml: ") and "\n" not in str(e.value)
    assert MAX_RENDER_CHARS == 200_000


@pytest.mark.parametrize("bomb,why", [
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "time budget"),
    ("{{ 'a' * 10**9 }}", "would make a value of 1000000000"),
])
def test_cli_refuses_a_bomb_in_one_line_within_seconds(tmp_path, bomb, why):
    data = load_harness("react").to_dict()
    data.pop("prompt")
    data["templates"] = {"system": "You act.", "turn": "{{ task }}\n" + bomb}
    path = tmp_path / "bomb.yaml"
    path.write_text(yaml.safe_dump(data))
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "harnevo.cli", "harness", "show", str(path)],
                       capture_output=True, text=True, timeout=60)
    elapsed = time.perf_counter() - t0
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and why in r.stderr and str(path) in r.stderr, r.stderr
    assert elapsed < 5, elapsed
