"""The prompt-block library: small Jinja files that block-form harnesses assemble into their templates.

A block-form harness says which blocks make its system message and its turn message, in order, and
sets the text genes (`prompt.text`) that the blocks show. The blocks live in
`harnevo/harness_templates/blocks/<part>/<name>.j2` and are joined verbatim, in the order listed:

  system  role             the instruction (text gene `instruction`)
          workspace_intro  what the always-on workspace is (Belief, Progress, Experience)
          meta_actions     the four meta-actions of inline mode
          reply_format     how to reply (text gene `reply_format`)
          commands         the game's command syntax (long form)
          game_commands    the game's command syntax (short form, used next to meta_actions)
          admissible_rule  "choose the command from the admissible actions"
          names_rule       "use names exactly as the game writes them, with their numbers"
          examples         worked examples (text gene `examples`; shows nothing when it is "")
  turn    task, room, history, belief, progress, experience, observation, guard_note, admissible:
                           one "## <header>" section each (headers are text genes `headers.<block>`);
                           history/belief/progress/experience/guard_note show nothing when empty
          step_line        "Step N of M. Your reply:"
          steps_left_line  "K steps left. Your reply:"

Conventions of a block file: a system block is whole lines (it ends with one newline); a turn block
is a section followed by one blank line, inside its `{% if %}` when the section may be absent. Blocks
read the runtime context (harnevo/harness/render.py) and name the harness's text genes as
`text.instruction`, `text.reply_format`, `text.examples`, `text.headers.<block>`: at assembly each such
name is replaced by the gene's value as a Jinja string literal, so text genes are literal text, never
Jinja, and cost nothing at render time.

`texts.yaml` next to the blocks holds named alternatives of the text genes (the `default` entry is
the default of the field).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import yaml

PARTS = ("system", "turn")
_TEXT_REF = re.compile(r"\btext\.(?:headers\.(\w+)|(\w+))")


def blocks_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "harness_templates" / "blocks"


@functools.lru_cache(maxsize=1)
def library() -> dict[str, dict[str, str]]:
    """{part: {block name: Jinja source}}, read once from the package."""
    out: dict[str, dict[str, str]] = {}
    for part in PARTS:
        out[part] = {p.stem: p.read_text(encoding="utf-8") for p in sorted((blocks_dir() / part).glob("*.j2"))}
    return out


def block_names(part: str) -> tuple[str, ...]:
    return tuple(library()[part])


@functools.lru_cache(maxsize=1)
def text_variants() -> dict[str, dict[str, str]]:
    """{text gene: {variant name: text}} from blocks/texts.yaml; every gene has a `default`."""
    data = yaml.safe_load((blocks_dir() / "texts.yaml").read_text(encoding="utf-8"))
    return {gene: dict(variants) for gene, variants in data.items()}


def default_text(gene: str) -> str:
    return text_variants()[gene]["default"]


def text_fields_used(part: str, names: list[str] | tuple[str, ...]) -> set[str]:
    """The text genes the given blocks show: 'instruction', 'reply_format', 'examples', 'headers.<name>'."""
    used: set[str] = set()
    lib = library()[part]
    for name in names:
        for header, field in _TEXT_REF.findall(lib[name]):
            used.add(f"headers.{header}" if header else field)
    return used


def jinja_literal(text: str) -> str:
    """`text` as a Jinja string literal that evaluates to exactly `text` (Jinja decodes backslash
    escapes of its string literals like Python's unicode-escape codec)."""
    out = ['"']
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)  # the lexer backslash-escapes and decodes non-ASCII itself: same character
    out.append('"')
    return "".join(out)


def _text_value(text: Any, header: str, field: str) -> str:
    value = getattr(text.headers, header) if header else getattr(text, field)
    if not isinstance(value, str):
        raise ValueError(f"a block names text.{field}, which is not a text gene")
    return value


def bake(source: str, text: Any) -> str:
    """Replace every `text.<gene>` of a block by the gene's value as a Jinja string literal, so Jinja
    folds it into the template at compile time (no runtime cost, no `text` variable)."""
    return _TEXT_REF.sub(lambda m: jinja_literal(_text_value(text, m.group(1), m.group(2))), source)


def assemble(prompt: Any) -> dict[str, str]:
    """The template sources of a block-form prompt (a `spec.Prompt`): {"system": ..., "turn": ...}."""
    lib = library()
    out = {}
    for part in PARTS:
        names = list(getattr(prompt, part))
        out[part] = "".join(bake(lib[part][n], prompt.text) for n in names)
    return out
