"""Rendering a harness's templates: Jinja's immutable sandbox with StrictUndefined, within a time and
size budget enforced while the template runs (harnevo/harness/bounded.py).

The context a template sees (the contract for harness authors):
  task (str)            the goal sentence, e.g. "put a clean apple in fridge."
  room (str)            the first observation without the banner and task line
  observation (str)     the latest observation, or the result of the last meta-action
  last_action (str)     the command or meta-action that produced it ("" on the first turn)
  admissible (list)     the commands the engine accepts now
  history (list)        up to `memory.history_window` steps before the last one: {"action", "observation"}
  step, max_steps, steps_left (int)
  mode (str)            env_only | always_on | inline
  meta_actions (list)   the meta-actions offered (inline mode), else []
  belief, progress, experience (str)  panels (filled in always_on mode when enabled), else ""
  guard_note (str)      how the action guard rewrote the last command before sending it (e.g. "'put apple 1
                        in fridge 1' read as 'move apple 1 to fridge 1'"); "" when the command was sent as
                        written (a command the guard rejects is not sent: its note is the observation)

Budgets (per render call): RENDER_TIME_S of CPU time, MAX_RENDER_CHARS characters of output and of
any single value the template makes, MAX_RENDER_WORK characters of values made in all. A template
source may be at most MAX_TEMPLATE_CHARS characters. Renders are deterministic (no `random`, no `lipsum`).
"""

from __future__ import annotations

from typing import Any

from jinja2 import TemplateError, TemplateSyntaxError
from jinja2.sandbox import SecurityError

from harnevo.errors import HarnessError
from harnevo.harness.bounded import BoundedEnvironment, RenderBudget, RenderError, activate, deactivate

__all__ = ["MAX_RENDER_CHARS", "MAX_RENDER_WORK", "MAX_TEMPLATE_CHARS", "RENDER_TIME_S", "SAMPLE_CONTEXT",
           "RenderError", "Renderer", "check_templates"]

RENDER_TIME_S = 0.5  # CPU seconds per render call
MAX_RENDER_CHARS = 200_000
MAX_RENDER_WORK = 5_000_000
MAX_TEMPLATE_CHARS = 50_000
COMPILE_TIME_S = 2.0  # CPU seconds to compile all templates of a harness

SAMPLE_CONTEXT: dict[str, Any] = {
    "task": "put a clean apple in fridge.",
    "room": "You are in the middle of a room. Looking quickly around you, you see a countertop 1, a fridge 1, "
            "and a sinkbasin 1.",
    "observation": "You arrive at countertop 1. On the countertop 1, you see a apple 1.",
    "last_action": "go to countertop 1",
    "admissible": ["go to fridge 1", "take apple 1 from countertop 1", "look"],
    "history": [{"action": "go to countertop 1",
                 "observation": "You arrive at countertop 1. On the countertop 1, you see a apple 1."}],
    "step": 1, "max_steps": 50, "steps_left": 49,
    "mode": "always_on", "meta_actions": ["track", "commit", "recall", "note"],
    "belief": "location: countertop 1", "progress": "- [todo] take apple", "experience": "- (no lessons yet)",
    "guard_note": "'put apple 1 in fridge 1' read as 'move apple 1 to fridge 1'",
}
EMPTY_SAMPLE_CONTEXT: dict[str, Any] = {
    **SAMPLE_CONTEXT, "history": [], "last_action": "", "belief": "", "progress": "", "experience": "",
    "meta_actions": [], "mode": "env_only", "guard_note": "",
}


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


class Renderer:
    """Compiled templates of one harness. Thread-safe: renders may run concurrently in worker threads.
    A template that does not compile raises RenderError (one line, with the template and line)."""

    def __init__(self, templates: dict[str, str], *, time_s: float = RENDER_TIME_S,
                 max_chars: int = MAX_RENDER_CHARS, max_work: int = MAX_RENDER_WORK):
        self.time_s, self.max_chars, self.max_work = time_s, max_chars, max_work
        templates = dict(templates)
        for name, source in templates.items():
            if len(source) > MAX_TEMPLATE_CHARS:
                raise RenderError(f"template {name!r} is {len(source)} characters (limit {MAX_TEMPLATE_CHARS})")
        self._env = BoundedEnvironment(templates)
        token = activate(RenderBudget(COMPILE_TIME_S, max_chars, max_work))
        try:
            self._compiled = {name: self._env.get_template(name) for name in templates}
        except TemplateSyntaxError as e:
            raise RenderError(f"template {e.name!r} line {e.lineno}: {_one_line(e.message)}") from None
        except TemplateError as e:
            raise RenderError(_one_line(e)) from None
        except RecursionError:
            raise RenderError("a template is nested too deeply to compile") from None
        finally:
            deactivate(token)

    def render(self, name: str, context: dict[str, Any]) -> str:
        template = self._compiled[name]
        budget = RenderBudget(self.time_s, self.max_chars, self.max_work)
        token = activate(budget)
        try:
            parts: list[str] = []
            append, limit, size = parts.append, self.max_chars, 0
            for chunk in template.generate(**context):  # streamed: the output is bounded while it grows
                size += len(chunk)
                if size > limit:
                    raise RenderError(f"rendered more than {limit} characters")
                append(chunk)
        except RenderError as e:
            raise RenderError(f"template {name!r}: {_one_line(e)}") from None
        except SecurityError as e:
            raise RenderError(f"template {name!r} tried something unsafe: {_one_line(e)}") from None
        except TemplateError as e:
            raise RenderError(f"template {name!r}: {_one_line(e)}") from None
        except RecursionError:
            raise RenderError(f"template {name!r}: recursed too deeply") from None
        except MemoryError:
            raise RenderError(f"template {name!r}: ran out of memory") from None
        except Exception as e:  # a template is data: any failure of it is a render error, not a crash
            raise RenderError(f"template {name!r}: {type(e).__name__}: {_one_line(e)}") from None
        finally:
            deactivate(token)
        return "".join(parts).strip()

    def messages(self, context: dict[str, Any]) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.render("system", context)},
                {"role": "user", "content": self.render("turn", context)}]


def check_templates(harness: Any, *, source: str) -> None:
    """Compile every template and render it on two sample contexts (one full, one empty), so that
    syntax errors, unknown names, unsafe access and templates over budget are reported when the harness
    is loaded, in one line, not mid-run."""
    templates = harness.template_sources()
    try:
        renderer = Renderer(templates)
    except RenderError as e:
        raise HarnessError(f"{source}: {e}") from None
    for context in (SAMPLE_CONTEXT, EMPTY_SAMPLE_CONTEXT):
        for name in templates:
            try:
                renderer.render(name, context)
            except RenderError as e:
                raise HarnessError(f"{source}: {e}") from None
