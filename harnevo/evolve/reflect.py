"""Reflective mutation (`harnevo evolve --mutator-model M`): a language model rewrites one text gene of a
parent from the evidence of the games the parent lost, as GEPA and Promptbreeder do; our own wording, in
one template file the user can replace (`mutator_template`, default harness_templates/reflect.j2).

For a parent (an async mutation operator of the registry, operators.py):
  gene       one live text gene: `prompt.text.instruction`, `reply_format`, `examples` (the block-form
             genes a block shows; headers are too short to be worth a call) or `templates.<name>` of a
             hand-written harness. Round robin: the generation plus a number drawn from the parent's
             behaviour id picks it, so successive generations rewrite different genes of a lineage and a
             resumed run picks the same one (no state outside the store).
  evidence   from the store, never whole traces: the task families where the parent lost most (worst
             first), and up to `failures` lost episodes, one per family in that order, each as the turns
             around its first wrong move (the first turn whose reply was unusable, whose command the guard
             rewrote or rejected, or that the game answered "Nothing happens."; else the last turns),
             with the commands, the guard's notes, the observations (each cut to OBS_CHARS) and the reason
             the episode ended.
  request    the template rendered in the bounded sandbox (harness/render.py) as one user message, at
             most `max_tokens` tokens as harnevo counts them elsewhere (`models.base.approx_tokens`):
             evidence is trimmed (turns, then whole failures, then families) until it fits, before anything
             is sent; a request that cannot fit even without evidence is rejected (`over_cap`) unsent.
  reply      the text between `<new_text>` and `</new_text>`, checked in order:
               truncated   the reply stopped at its token limit (finish_reason "length")
               unparseable no (or more than one) complete marker pair
               empty       nothing but white space between the markers
               oversized   more characters than the gene allows
               unsafe      template syntax in a literal text gene, any `__` name or a sandbox refusal in a
                           template gene (template injection)
               invalid     the child does not load (the harness loader renders it in the sandbox)
               unchanged   the child behaves as the parent
             A rejected proposal is counted by its reason and the operator returns None: the mutation
             goes on with a structural operator. A model that cannot be reached (after its retries) is
             counted in `infra_errors` and falls back the same way: not the harness's failure. A parent
             with no lost episode in the store is `skipped` (no request).
The model is any `get_model` string; its calls go through the run's reply cache (same request, same reply,
on resume too) and the run's budget (`BudgetedModel`), and its spend is summed here (`summary()`), saved
with every generation and reported in summary.json. An accepted child's lineage detail holds under
"reflection": the gene, the evidence summary (families, which games and steps were shown), the proposal,
the request's token count and sha256, the reply's usage and whether it came from the cache."""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harnevo.errors import BudgetExhausted, HarnessError, HarnevoError, ModelCallError
from harnevo.harness.genome import behaviour_id, gene, genes_of, get, normalize, with_genes
from harnevo.harness.spec import Harness
from harnevo.models.base import Message, Usage, approx_tokens

OPEN, CLOSE = "<new_text>", "</new_text>"
DEFAULT_MAX_TOKENS = 6000
DEFAULT_FAILURES = 3
FAMILIES_SHOWN = 4
TURNS_BEFORE, TURNS_AFTER = 2, 1  # turns shown around the first wrong move
OBS_CHARS = 300  # most characters of an observation or a reply shown
TEMPERATURE = 0.7
REASONS = ("truncated", "unparseable", "empty", "oversized", "unsafe", "invalid", "unchanged", "over_cap")
TEXT_GENES = ("prompt.text.instruction", "prompt.text.reply_format", "prompt.text.examples")
_JINJA_MARKS = ("{{", "}}", "{%", "%}", "{#", "#}")
_WRONG_OBS = ("nothing happens",)


def default_template_path() -> Path:
    return Path(__file__).resolve().parent.parent / "harness_templates" / "reflect.j2"


def load_template(path: str | Path | None) -> str:
    """The request template's source: the shipped one, or the user's file (one-line error if unreadable
    or if it does not compile in the sandbox)."""
    from harnevo.harness.render import MAX_TEMPLATE_CHARS, RenderError, Renderer

    p = default_template_path() if path is None else Path(path)
    try:
        source = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise HarnevoError(f"mutator_template {p}: cannot read it ({type(e).__name__})") from None
    if len(source) > MAX_TEMPLATE_CHARS:
        raise HarnevoError(f"mutator_template {p}: {len(source)} characters (limit {MAX_TEMPLATE_CHARS})")
    try:
        Renderer({"reflect": source})
    except RenderError as e:
        raise HarnevoError(f"mutator_template {p}: {e}") from None
    return source


def request_tokens(messages: list[Message]) -> int:
    """Tokens of a request as harnevo counts them where no tokenizer answers (models.base.approx_tokens)."""
    return sum(approx_tokens(m["content"]) for m in messages)


# --- choosing the gene ----------------------------------------------------------------------------------------
def text_genes(h: Harness) -> list[str]:
    """The text genes the reflective mutation may rewrite for `h`: those that show something."""
    from harnevo.harness import blocks

    if h.prompt is None:
        return [g.name for g in genes_of(h) if g.name.startswith("templates.")]
    used = blocks.text_fields_used("system", h.prompt.system) | blocks.text_fields_used("turn", h.prompt.turn)
    return [g for g in TEXT_GENES if g.rsplit(".", 1)[-1] in used]


def pick_gene(h: Harness, generation: int) -> str | None:
    """Round robin over the live text genes: the generation plus a number drawn from the behaviour id."""
    live = text_genes(h)
    if not live:
        return None
    offset = int(h.behaviour_id[:8], 16)
    return live[(generation + offset) % len(live)]


def max_chars_of(h: Harness, name: str) -> int:
    if name.startswith("templates."):
        from harnevo.harness.render import MAX_TEMPLATE_CHARS

        return MAX_TEMPLATE_CHARS
    return int(gene(name).high or 4000)


# --- evidence ---------------------------------------------------------------------------------------------------
def _cut(text: str | None, n: int = OBS_CHARS) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= n else text[: n - 3] + "..."


def first_wrong(turns: list[Any]) -> int:
    """Index of the first wrong move (module docstring); the last turn when none looks wrong."""
    for i, t in enumerate(turns):
        if t.invalid or t.guard_note or str(t.observation).strip().lower().startswith(_WRONG_OBS):
            return i
    return max(0, len(turns) - 1)


def compact_failure(traj: Any) -> dict[str, Any]:
    """One lost episode as the turns around its first wrong move (never the whole trace)."""
    turns = list(traj.turns)
    w = first_wrong(turns)
    shown = turns[max(0, w - TURNS_BEFORE): w + TURNS_AFTER + 1]
    return {
        "game": traj.game, "family": traj.family, "task": _cut(traj.task, 200), "reason": _cut(traj.reason, 200),
        "steps": traj.steps, "first_wrong_step": turns[w].step if turns else 0,
        "turns": [{"step": t.step, "action": t.meta or t.action or "", "executed": t.executed or "",
                   "guard_note": _cut(t.guard_note, 200), "invalid": _cut(t.invalid, 200),
                   "observation": _cut(t.observation), "reply": _cut(t.reply)} for t in shown],
    }


def gather_evidence(store: Any, h: Harness, model: str, failures: int = DEFAULT_FAILURES) -> dict[str, Any]:
    """{parent, families, failures} for `h` from the store's episodes with `model` (ok episodes only)."""
    rows = [r for r in store.episodes(h.behaviour_id, model).values() if r.ok]
    by_family: dict[str, list[Any]] = {}
    for r in sorted(rows, key=lambda r: (r.split, r.game, r.sample)):
        by_family.setdefault(r.family, []).append(r)
    families = [{"family": f, "failed": sum(not r.success for r in rs), "played": len(rs)}
                for f, rs in by_family.items()]
    families = [f for f in families if f["failed"]]
    families.sort(key=lambda f: (-f["failed"] / f["played"], -f["failed"], f["family"]))
    lost = {f["family"]: [r for r in by_family[f["family"]] if not r.success] for f in families}
    picked: list[Any] = []
    while len(picked) < failures and any(lost.values()):  # one per family, worst family first, round robin
        for f in families:
            if lost[f["family"]] and len(picked) < failures:
                picked.append(lost[f["family"]].pop(0))
    shown = [compact_failure(store.trajectory(h.behaviour_id, model, r.split, r.game, r.sample)) for r in picked]
    wins = sum(r.success for r in rows)
    return {"parent": {"name": h.name, "success": wins / len(rows) if rows else 0.0, "games": len(rows)},
            "families": families[:FAMILIES_SHOWN], "failures": shown}


# --- the request ------------------------------------------------------------------------------------------------
def build_request(template: str, h: Harness, gene_name: str, evidence: dict[str, Any], cap: int
                  ) -> tuple[list[Message] | None, dict[str, Any], int]:
    """(messages or None when even no evidence fits, the evidence actually shown, its token count).
    Evidence is trimmed until the request is at most `cap` tokens: the last turn of the longest failure
    (a failure keeps one), then the last failure, then the last family."""
    from harnevo.harness.render import Renderer

    renderer = Renderer({"reflect": template})
    ev = json.loads(json.dumps(evidence))  # a private copy to trim
    kind = "template" if gene_name.startswith("templates.") else "text"
    g_help = gene(gene_name).help if not gene_name.startswith("templates.") else f"the hand-written {gene_name[10:]} template"
    omitted = 0
    while True:
        context = {"gene": {"name": gene_name, "help": g_help, "kind": kind, "max_chars": max_chars_of(h, gene_name)},
                   "current": get(h, gene_name), "parent": ev["parent"], "families": ev["families"],
                   "failures": ev["failures"], "omitted": omitted, "open": OPEN, "close": CLOSE}
        messages = [{"role": "user", "content": renderer.render("reflect", context)}]
        tokens = request_tokens(messages)
        if tokens <= cap:
            return messages, ev, tokens
        longest = max(ev["failures"], key=lambda e: len(e["turns"]), default=None)
        if longest is not None and len(longest["turns"]) > 1:
            longest["turns"].pop()
        elif ev["failures"]:
            ev["failures"].pop()
        elif ev["families"]:
            ev["families"].pop()
        else:
            return None, ev, tokens
        omitted += 1


# --- the reply --------------------------------------------------------------------------------------------------
class Rejected(Exception):
    def __init__(self, reason: str, detail: str = ""):
        super().__init__(reason)
        self.reason, self.detail = reason, detail


def extract(text: str, *, truncated: bool) -> str:
    """The new text between the markers, or Rejected(truncated | unparseable | empty)."""
    if truncated:
        raise Rejected("truncated", "the reply stopped at its token limit")
    if text.count(OPEN) != 1 or text.count(CLOSE) != 1 or text.index(OPEN) > text.index(CLOSE):
        raise Rejected("unparseable", f"expected one {OPEN} ... {CLOSE} pair")
    body = text[text.index(OPEN) + len(OPEN): text.index(CLOSE)]
    body = body.removeprefix("\r").removeprefix("\n").removesuffix("\n").removesuffix("\r")
    if not body.strip():
        raise Rejected("empty", "nothing between the markers")
    return body


def check_text(h: Harness, gene_name: str, text: str) -> None:
    """Size and safety of a proposal before it is built (Rejected(oversized | unsafe))."""
    most = max_chars_of(h, gene_name)
    if len(text) > most:
        raise Rejected("oversized", f"{len(text)} characters (limit {most})")
    if gene_name.startswith("templates."):
        if "__" in text:
            raise Rejected("unsafe", "a dunder name in a template (template injection)")
    elif any(m in text for m in _JINJA_MARKS):
        raise Rejected("unsafe", "template syntax in literal text (template injection)")


def build_child(base: Harness, gene_name: str, text: str) -> Harness:
    """The child with the new text, loaded (so rendered in the sandbox) and normalized; Rejected(unsafe |
    invalid | unchanged)."""
    try:
        child = normalize(with_genes(base, {gene_name: text}))
    except HarnessError as e:
        msg = " ".join(str(e).split())
        raise Rejected("unsafe" if "unsafe" in msg else "invalid", msg[:300]) from None
    if behaviour_id(child) == behaviour_id(base):
        raise Rejected("unchanged", "the child behaves as the parent")
    return child


# --- the operator -------------------------------------------------------------------------------------------------
@dataclass
class MutatorStats:
    requests: int = 0
    accepted: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    infra_errors: int = 0
    skipped: int = 0  # parents without a lost episode or a text gene: no request
    cache_hits: int = 0
    prompt_tokens: int = 0  # what was paid (cache hits free)
    completion_tokens: int = 0
    usd: float = 0.0
    max_request_tokens: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "accepted": self.accepted, "rejected": dict(sorted(self.rejected.items())),
                "rejected_total": sum(self.rejected.values()), "infra_errors": self.infra_errors,
                "skipped": self.skipped, "cache_hits": self.cache_hits, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "tokens": self.prompt_tokens + self.completion_tokens,
                "usd": self.usd, "max_request_tokens": self.max_request_tokens}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MutatorStats":
        keys = ("requests", "accepted", "infra_errors", "skipped", "cache_hits", "prompt_tokens",
                "completion_tokens", "usd", "max_request_tokens")
        return cls(**{k: d[k] for k in keys if k in d}, rejected=dict(d.get("rejected", {})))


class ReflectiveMutator:
    """The reflective mutation of one run: `propose` is the async operator (operators.MutationFn).
    `store` and `eval_model` name where the parents' episodes are; `model` is the mutator (a Model)."""

    def __init__(self, model: Any, store: Any, eval_model: str, *, template: str | None = None,
                 max_tokens: int = DEFAULT_MAX_TOKENS, failures: int = DEFAULT_FAILURES, log: list | None = None):
        if max_tokens < 200:
            raise HarnevoError(f"mutator_max_tokens must be at least 200, got {max_tokens}")
        self.model, self.store, self.eval_model = model, store, eval_model
        self.template = template if template is not None else load_template(None)
        self.max_tokens, self.failures = max_tokens, failures
        self.stats = MutatorStats()
        self.log = log  # when a list: one dict per request (tests, debugging)

    @property
    def name(self) -> str:
        return self.model.name

    def spent(self) -> Usage:
        s = self.stats
        return Usage(s.prompt_tokens, s.completion_tokens, s.usd)

    def summary(self) -> dict[str, Any]:
        return {"model": self.model.name, "max_request_tokens_cap": self.max_tokens, **self.stats.as_dict()}

    def restore(self, saved: dict[str, Any] | None) -> None:
        """Counters and spend of earlier invocations of this run (from the last saved generation)."""
        if saved:
            self.stats = MutatorStats.from_dict(saved)

    def _reject(self, reason: str) -> None:
        self.stats.rejected[reason] = self.stats.rejected.get(reason, 0) + 1

    async def propose(self, parent: Harness, rng: random.Random, ctx: Any):
        """A Proposal rewriting one text gene of `parent`, or None (rejected, unreachable or not applicable:
        the mutation then goes on with a structural operator)."""
        from harnevo.evolve.operators import Proposal
        from harnevo.models.cost import spend_of

        generation = getattr(ctx, "generation", 0)
        gene_name = pick_gene(parent, generation)
        if gene_name is None:
            self.stats.skipped += 1
            return None
        evidence = gather_evidence(self.store, parent, self.eval_model, self.failures)
        if not evidence["failures"]:
            self.stats.skipped += 1
            return None
        messages, shown, tokens = build_request(self.template, parent, gene_name, evidence, self.max_tokens)
        if messages is None:
            self._reject("over_cap")
            return None
        reply_tokens = max_chars_of(parent, gene_name) * 3 // 8 + 400  # the longest allowed text, and a diagnosis
        entry: dict[str, Any] = {"gene": gene_name, "request_tokens": tokens, "parent": parent.behaviour_id}
        if self.log is not None:
            self.log.append(entry)
        self.stats.requests += 1
        self.stats.max_request_tokens = max(self.stats.max_request_tokens, tokens)
        try:
            reply = await self.model.complete(messages, temperature=TEMPERATURE, max_tokens=reply_tokens)
        except (ModelCallError, BudgetExhausted) as e:
            self.stats.infra_errors += 1
            entry["outcome"] = f"infra: {' '.join(str(e).split())[:200]}"
            return None
        paid = spend_of(reply)
        self.stats.prompt_tokens += paid.prompt_tokens
        self.stats.completion_tokens += paid.completion_tokens
        self.stats.usd += paid.cost_usd
        self.stats.cache_hits += int(reply.cached)
        try:
            text = extract(reply.text, truncated=reply.truncated)
            check_text(parent, gene_name, text)
            build_child(parent, gene_name, text)
        except Rejected as r:
            self._reject(r.reason)
            entry["outcome"] = f"rejected: {r.reason}"
            return None
        self.stats.accepted += 1
        entry["outcome"] = "accepted"
        reflection = {
            "model": self.model.name, "gene": gene_name, "request_tokens": tokens,
            "request_sha256": hashlib.sha256(messages[0]["content"].encode("utf-8")).hexdigest(),
            "evidence": {"families": shown["families"],
                         "failures": [{"game": e["game"], "family": e["family"], "reason": e["reason"],
                                       "first_wrong_step": e["first_wrong_step"],
                                       "steps_shown": [t["step"] for t in e["turns"]]} for e in shown["failures"]],
                         "parent_success": shown["parent"]["success"], "parent_games": shown["parent"]["games"]},
            "proposal": text, "cached": reply.cached,
            "usage": {"prompt_tokens": reply.usage.prompt_tokens, "completion_tokens": reply.usage.completion_tokens,
                      "cost_usd": reply.usage.cost_usd},
        }
        return Proposal({gene_name: text}, {"gene": gene_name, "reflection": reflection})

    def registry(self, base: Any, prob: float) -> Any:
        """`base` with this operator added as "reflect", weighted so that about `prob` of the mutations
        try it first (the others and every fallback are `base`'s structural operators)."""
        total = sum(o.weight for o in base.of("mutation"))
        weight = total * 1e6 if prob >= 1.0 else total * prob / (1.0 - prob)
        return base.register("reflect", self.propose, weight=weight)


__all__ = ["ReflectiveMutator", "MutatorStats", "Rejected", "OPEN", "CLOSE", "REASONS", "DEFAULT_MAX_TOKENS",
           "build_request", "gather_evidence", "compact_failure", "extract", "check_text", "build_child",
           "pick_gene", "text_genes", "load_template", "default_template_path", "request_tokens"]
