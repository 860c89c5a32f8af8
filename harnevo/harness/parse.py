"""Turning a model's reply into an action or a meta-action, tolerantly. An unparseable reply is not an
exception: it comes back with `error` set, and the episode records an invalid step.

A reply is read from, in this order: the last line "Action: <command>" (also "act:", "command:", bold or
backticked), else the last line "> <command>". With `bare_line=True` (a harness's
`reply.bare_line_fallback`), a reply with neither is read from its last line when that line is at most
80 characters (or is the only line); by default such a reply is invalid, so chatter like
"Sure! Here is my answer." is never sent to the game as a command."""

from __future__ import annotations

import re
from dataclasses import dataclass

from harnevo.harness.spec import META_ACTIONS

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.S | re.I)
_ACTION_LINE = re.compile(r"^\s*[*_`]*\s*(?:action|act|command)\s*[*_`]*\s*[:>]\s*(.*)$", re.I | re.M)
_PROMPT_LINE = re.compile(r"^\s*>\s*(.+)$", re.M)
_THOUGHT_LINE = re.compile(r"^\s*(?:think|thought|reasoning|plan)\s*:", re.I)
MAX_ACTION_CHARS = 200


@dataclass(frozen=True)
class ParsedReply:
    action: str | None = None  # an environment command, normalised
    meta: tuple[str, str] | None = None  # (meta-action name, argument)
    error: str | None = None  # why nothing could be read

    @property
    def text(self) -> str:
        if self.meta:
            return f"{self.meta[0]} {self.meta[1]}".strip()
        return self.action or ""


def normalise(cmd: str) -> str:
    cmd = cmd.strip().strip("`*_\"' ")
    cmd = re.sub(r"^\[|\]$", "", cmd).strip()
    cmd = cmd.rstrip(".!").strip().strip("`*_\"' ")
    cmd = re.sub(r"\s+", " ", cmd)
    return cmd.lower()


def parse_reply(text: str, *, meta_actions: bool = False, bare_line: bool = False) -> ParsedReply:
    if not text or not text.strip():
        return ParsedReply(error="empty reply")
    body = _THINK_BLOCK.sub("", text)
    body = re.sub(r"</?think>", "", body, flags=re.I)
    candidates = [m.group(1) for m in _ACTION_LINE.finditer(body)]
    if not candidates:
        candidates = [m.group(1) for m in _PROMPT_LINE.finditer(body)]
    if not candidates and bare_line:
        lines = [ln for ln in body.strip().splitlines() if ln.strip() and not _THOUGHT_LINE.match(ln)]
        if len(lines) == 1 or (lines and len(lines[-1]) <= 80):
            candidates = [lines[-1]]
    cmd = normalise(candidates[-1]) if candidates else ""
    if not cmd:
        return ParsedReply(error="no action found (expected a line 'Action: <command>')")
    if len(cmd) > MAX_ACTION_CHARS:
        return ParsedReply(error=f"action longer than {MAX_ACTION_CHARS} characters")
    head, _, rest = cmd.partition(" ")
    if meta_actions and head in META_ACTIONS:
        return ParsedReply(meta=(head, rest.strip()))
    return ParsedReply(action=cmd)
