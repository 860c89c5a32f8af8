"""Rendering a harness's templates: Jinja's immutable sandbox with StrictUndefined, bounded output.

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
"""

from __future__ import annotations

from typing import Any

from jinja2 import DictLoader, StrictUndefined, TemplateError, TemplateSyntaxError
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

from harnevo.errors import HarnessError

MAX_RENDER_CHARS = 200_000

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
}


class RenderError(Exception):
    """A template failed at render time (the episode records it)."""


def _env(templates: dict[str, str]) -> ImmutableSandboxedEnvironment:
    return ImmutableSandboxedEnvironment(loader=DictLoader(templates), undefined=StrictUndefined,
                                         autoescape=False, keep_trailing_newline=False, trim_blocks=True,
                                         lstrip_blocks=True)


class Renderer:
    """Compiled templates of one harness."""

    def __init__(self, templates: dict[str, str]):
        self._env = _env(dict(templates))
        self._compiled = {name: self._env.get_template(name) for name in templates}

    def render(self, name: str, context: dict[str, Any]) -> str:
        try:
            out = self._compiled[name].render(**context)
        except SecurityError as e:
            raise RenderError(f"template {name!r} tried something unsafe: {e}") from None
        except TemplateError as e:
            raise RenderError(f"template {name!r}: {e}") from None
        if len(out) > MAX_RENDER_CHARS:
            raise RenderError(f"template {name!r} rendered {len(out)} characters (limit {MAX_RENDER_CHARS})")
        return out.strip()

    def messages(self, context: dict[str, Any]) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.render("system", context)},
                {"role": "user", "content": self.render("turn", context)}]


def check_templates(harness: Any, *, source: str) -> None:
    """Compile every template and render it once on a sample context, so that syntax errors, unknown
    names and unsafe attribute access are reported when the harness is loaded, not mid-run."""
    try:
        renderer = Renderer(harness.templates)
    except TemplateSyntaxError as e:
        raise HarnessError(f"{source}: template {e.name!r} line {e.lineno}: {e.message}") from None
    except TemplateError as e:
        raise HarnessError(f"{source}: {e}") from None
    for mode_ctx in ({**SAMPLE_CONTEXT}, {**SAMPLE_CONTEXT, "history": [], "last_action": "", "belief": "", "progress": "",
                                          "experience": "", "meta_actions": [], "mode": "env_only"}):
        for name in harness.templates:
            try:
                renderer.render(name, mode_ctx)
            except RenderError as e:
                raise HarnessError(f"{source}: {e}") from None
