"""The genome: every gene of a harness that evolution may vary, with its bounds, and the normal form
that makes behaviourally identical harnesses one candidate.

Genes (dotted paths into the harness; bounds come from the pydantic Field constraints in spec.py):
  categorical  mode, guard, memory.belief, memory.belief_scope, memory.progress, memory.experience,
               budget.meta_actions_spend_budget, reply.bare_line_fallback
  int          memory.history_window, memory.experience_bank_size, memory.experience_shown,
               budget.max_steps, model.max_tokens
  float        model.temperature
  blocks       prompt.system, prompt.turn: which library blocks appear, in which order
               (`choices` are the blocks that part may hold; harnevo/harness/blocks.py)
  text         prompt.text.instruction, prompt.text.reply_format, prompt.text.examples,
               prompt.text.headers.<section>; `variants` holds named alternatives from
               harness_templates/blocks/texts.yaml (instruction: default, careful, planner;
               reply_format: default, meta, action_only; examples: default, clean_apple)
A harness with hand-written `templates` has only its numeric genes and one text gene per template
(`templates.<name>`): its text fixes what it shows, so structure genes would not apply.

Use: `genes_of(h)` says which genes vary for `h`; `get(h, gene)` reads one; `with_genes(h, {gene: value})`
makes a new harness through the same loader as a file (`Harness.from_dict`), so an out-of-bounds or
inconsistent value is a HarnessError, never a silent fix. `normalize(h)` resets every field that has no
effect to its default; `behaviour_id(h)` hashes the normal form without name and description.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Literal, Mapping, get_args, get_origin

import annotated_types
from jinja2 import Environment, meta

from harnevo.errors import HarnessError
from harnevo.harness import blocks
from harnevo.harness.spec import (Harness, Headers, MemoryPolicy, ModelSettings, PromptText, ReplyPolicy,
                                  StepBudget, identity_hash)

Kind = Literal["categorical", "int", "float", "text", "blocks"]
PANELS = ("belief", "progress", "experience")


@dataclass(frozen=True)
class Gene:
    name: str  # dotted path, e.g. "memory.history_window"
    kind: Kind
    choices: tuple[Any, ...] = ()  # categorical: the values; blocks: the block names a list may hold
    low: float | None = None  # int/float: inclusive bounds
    high: float | None = None  # int/float: inclusive upper bound; text: most characters
    default: Any = None
    help: str = ""
    variants: tuple[tuple[str, str], ...] = ()  # text: (name, text) alternatives from the block library

    def variant(self, name: str) -> str:
        return dict(self.variants)[name]


def _field_gene(model: type, field: str, path: str) -> Gene:
    info = model.model_fields[field]
    ann, help_ = info.annotation, info.description or ""
    low = next((m.ge for m in info.metadata if isinstance(m, annotated_types.Ge)), None)
    high = next((m.le for m in info.metadata if isinstance(m, annotated_types.Le)), None)
    if ann is bool:
        return Gene(path, "categorical", (False, True), default=info.default, help=help_)
    if get_origin(ann) is Literal:
        return Gene(path, "categorical", get_args(ann), default=info.default, help=help_)
    if ann is int:
        return Gene(path, "int", low=low, high=high, default=info.default, help=help_)
    if ann is float:
        return Gene(path, "float", low=low, high=high, default=info.default, help=help_)
    if ann is str:
        most = next((m.max_length for m in info.metadata if isinstance(m, annotated_types.MaxLen)), None)
        gene = path.rsplit(".", 1)[-1]
        variants = tuple(blocks.text_variants().get(gene, {}).items()) if ".headers." not in path else ()
        return Gene(path, "text", high=most, default=info.default, help=help_, variants=variants)
    raise TypeError(f"no gene kind for {path} ({ann})")


def _build_genome() -> tuple[Gene, ...]:
    genes = [_field_gene(Harness, "mode", "mode"), _field_gene(Harness, "guard", "guard")]
    genes += [_field_gene(MemoryPolicy, f, f"memory.{f}") for f in MemoryPolicy.model_fields]
    genes += [_field_gene(StepBudget, f, f"budget.{f}") for f in StepBudget.model_fields]
    genes += [_field_gene(ModelSettings, f, f"model.{f}") for f in ModelSettings.model_fields]
    genes += [_field_gene(ReplyPolicy, f, f"reply.{f}") for f in ReplyPolicy.model_fields]
    for part in blocks.PARTS:
        genes.append(Gene(f"prompt.{part}", "blocks", blocks.block_names(part),
                          help=f"library blocks of the {part} message, in order"))
    genes += [_field_gene(PromptText, f, f"prompt.text.{f}") for f in PromptText.model_fields if f != "headers"]
    genes += [_field_gene(Headers, f, f"prompt.text.headers.{f}") for f in Headers.model_fields]
    return tuple(genes)


GENOME: tuple[Gene, ...] = _build_genome()
_BY_NAME = {g.name: g for g in GENOME}
NUMERIC = tuple(g for g in GENOME if g.kind in ("int", "float"))


def gene(name: str) -> Gene:
    """The gene called `name` (a GENOME gene; `templates.<name>` genes come from `genes_of`)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise HarnessError(f"unknown gene {name!r}") from None


def genes_of(harness: Harness) -> tuple[Gene, ...]:
    """The genes that vary for this harness: all of GENOME for a block-form prompt; for hand-written
    templates, the numeric genes and one text gene per template."""
    if harness.prompt is not None:
        return GENOME
    from harnevo.harness.render import MAX_TEMPLATE_CHARS

    texts = tuple(Gene(f"templates.{n}", "text", high=MAX_TEMPLATE_CHARS, help=f"the hand-written {n} template")
                  for n in harness.templates)
    return NUMERIC + texts


def _name(g: Gene | str) -> str:
    return g.name if isinstance(g, Gene) else g


def get(harness: Harness, g: Gene | str) -> Any:
    """The value of one gene of `harness` (a list for block genes)."""
    name = _name(g)
    if name.startswith("templates."):
        if harness.templates is None or name[len("templates."):] not in harness.templates:
            raise HarnessError(f"gene {name!r} does not apply to {harness.name!r}")
        return harness.templates[name[len("templates."):]]
    gene(name)
    if name.startswith("prompt.") and harness.prompt is None:
        raise HarnessError(f"gene {name!r} does not apply to {harness.name!r}: it has hand-written templates")
    value: Any = harness
    for part in name.split("."):
        value = getattr(value, part)
    return list(value) if isinstance(value, list) else value


def with_genes(harness: Harness, values: Mapping[Gene | str, Any]) -> Harness:
    """A new harness with these gene values, validated by the loader of harness files."""
    data = harness.model_dump(mode="json")
    for g, value in values.items():
        name = _name(g)
        if name.startswith("templates."):
            if harness.templates is None or name[len("templates."):] not in harness.templates:
                raise HarnessError(f"gene {name!r} does not apply to {harness.name!r}")
        else:
            gene(name)
            if name.startswith("prompt.") and harness.prompt is None:
                raise HarnessError(f"gene {name!r} does not apply to {harness.name!r}: it has hand-written templates")
        *path, last = name.split(".")
        node = data
        for part in path:
            node = node[part]
        node[last] = list(value) if isinstance(value, tuple) else value
    return Harness.from_dict(data, source=f"{harness.name} (genes)")


# --- the normal form -------------------------------------------------------------------------------
def referenced_names(sources: Mapping[str, str]) -> set[str]:
    """Context names any of these templates reads (parsed, never rendered)."""
    names: set[str] = set()
    for src in sources.values():
        names |= _names_read(src)
    return names


@functools.lru_cache(maxsize=512)
def _names_read(source: str) -> frozenset[str]:
    return frozenset(meta.find_undeclared_variables(Environment().parse(source)))


def _silent_blocks(h: Harness) -> set[str]:
    """Turn/system blocks that render nothing for this harness whatever the context."""
    text = h.prompt.text
    silent = {p for p in PANELS if not (h.mode == "always_on" and getattr(h.memory, p))}
    if h.memory.history_window == 0:
        silent.add("history")
    if h.guard in ("none", "reject"):
        silent.add("guard_note")  # only a guard that rewrites commands leaves a note (render.py's contract)
    if not text.examples:
        silent.add("examples")
    return silent


def normalized_data(h: Harness) -> dict[str, Any]:
    """`h` as a mapping with every no-effect field at its default (see `normalize`)."""
    data = h.model_dump(mode="json")
    if h.prompt is not None:
        silent = _silent_blocks(h)
        prompt = data["prompt"]
        for part in blocks.PARTS:
            prompt[part] = [b for b in prompt[part] if b not in silent]
        used = blocks.text_fields_used("system", prompt["system"]) | blocks.text_fields_used("turn", prompt["turn"])
        defaults = PromptText().model_dump(mode="json")
        for f in ("instruction", "reply_format", "examples"):
            if f not in used:
                prompt["text"][f] = defaults[f]
        for f in Headers.model_fields:
            if f"headers.{f}" not in used:
                prompt["text"]["headers"][f] = defaults["headers"][f]
        sources = blocks.assemble(Harness.validate_dict(data).prompt)
    else:
        sources = dict(h.templates)
    refs = referenced_names(sources)
    mem, dmem = data["memory"], MemoryPolicy().model_dump(mode="json")
    if data["mode"] == "env_only":
        for p in PANELS:
            mem[p] = False
    elif data["mode"] == "always_on":
        shown = {p: mem[p] and p in refs for p in PANELS}
        if any(shown.values()):
            mem.update(shown)
        elif "mode" not in refs:  # no panel can appear and nothing reads the mode: plain env_only
            data["mode"] = "env_only"
            for p in PANELS:
                mem[p] = False
    if not mem["belief"]:
        mem["belief_scope"] = dmem["belief_scope"]
    if not mem["experience"]:
        mem["experience_bank_size"] = dmem["experience_bank_size"]
        mem["experience_shown"] = dmem["experience_shown"]
    if "history" not in refs:
        mem["history_window"] = dmem["history_window"]
    if data["mode"] != "inline":
        data["budget"]["meta_actions_spend_budget"] = StepBudget().meta_actions_spend_budget
    return data


def normalize(h: Harness) -> Harness:
    """The same behaviour with every field that has no effect reset to its default: panels outside the
    modes that use them, belief_scope without belief, the bank sizes without experience, the history
    window when no template reads history, meta-action spending outside inline mode; for block-form
    prompts also the blocks that can only render nothing (a panel that is off, history with window 0,
    the guard note without a rewriting guard, empty examples) and the text genes no remaining block shows.
    Integral floats were already coerced when `h` was loaded. Name and description are kept."""
    return Harness.validate_dict(normalized_data(h), source=f"{h.name} (normalized)")


def behaviour_id(h: Harness) -> str:
    """Shared by harnesses that behave alike: the hash of the normal form without name and description."""
    n = normalize(h)
    data = n.canonical()
    data.pop("name")
    data.pop("description")
    return identity_hash(data, n)
