"""Local OpenAI-compatible servers that play the mutator of the reflective mutation (harnevo/evolve/reflect.py),
reached through litellm like any model (`openai/<name>` with `api_base`). Built on fake_openai_server.py's
server (same HTTP handling, auth and counters); only the completion differs.

  GoodMutator   reads the current text between the request's markers and proposes it with one more
                sentence (numbered per request), so every proposal is new, valid and traceable.
  BadMutator    answers each new request (retries of one request get the same answer) with the next of
                KINDS, in turn:
                  truncated    a proposal cut off, finish_reason "length"
                  down         HTTP 500 to the request and to all its retries (an unreachable mutator)
                  empty        the markers with only white space between them
                  oversized    500 characters more than the limit the request states
                  inject       template injection: `{{ ''.__class__.__mro__ }}` the first time, then
                               `{% for c in ().__class__.__base__.__subclasses__() %}...{% endfor %}`,
                               in turn
                  unparseable  a diagnosis without markers

`proposals` lists (kind or "good", the proposed text) per request; `requests_text` the request contents.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

from fake_openai_server import FakeOpenAIServer, approx_tokens

OPEN, CLOSE = "<new_text>", "</new_text>"
KINDS = ("truncated", "down", "empty", "oversized", "inject", "unparseable")
_LIMIT = re.compile(r"at most (\d+) characters")


def current_text(content: str) -> str:
    """The gene's current text: between the first marker pair of the request."""
    i, j = content.find(OPEN), content.find(CLOSE)
    return content[i + len(OPEN): j].strip("\n") if 0 <= i < j else ""


class _MutatorServer(FakeOpenAIServer):
    def __init__(self, **kw: Any) -> None:
        super().__init__(fault_fn=self._fault, **kw)
        self.proposals: list[tuple[str, str]] = []
        self.requests_text: list[str] = []
        self._seen: dict[str, int] = {}
        self._recorded: set[str] = set()
        self._plock = threading.Lock()

    def _index(self, content: str) -> int:
        """The request's number among distinct requests (a retry of a request has its number)."""
        with self._plock:
            if content not in self._seen:
                self._seen[content] = len(self._seen)
                self.requests_text.append(content)
            return self._seen[content]

    def _record(self, content: str, kind: str, text: str) -> None:
        with self._plock:
            if content not in self._recorded:
                self._recorded.add(content)
                self.proposals.append((kind, text))

    def _fault(self, n: int, body: dict) -> str | None:
        return None

    def propose(self, content: str, k: int) -> tuple[str, str, str]:  # (kind, reply text, finish_reason)
        raise NotImplementedError

    def _completion(self, body: dict) -> dict:
        messages = body.get("messages") or []
        content = "".join(str(m.get("content") or "") for m in messages)
        kind, text, finish = self.propose(content, self._index(content))
        self._record(content, kind, text)
        pt, ct = approx_tokens(content), approx_tokens(text)
        with self._lock:
            self.served += 1
            n = self.served
        return {"id": f"chatcmpl-mutator-{n}", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model", "mutator"),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
                "usage": {"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct}}


class GoodMutator(_MutatorServer):
    def propose(self, content: str, k: int) -> tuple[str, str, str]:
        new = f"{current_text(content)}\nLesson {k}: search every closed receptacle before concluding."
        return "good", f"The agent gives up too early.\n{OPEN}\n{new}\n{CLOSE}", "stop"


class BadMutator(_MutatorServer):
    def _fault(self, n: int, body: dict) -> str | None:
        content = "".join(str(m.get("content") or "") for m in body.get("messages") or [])
        if KINDS[self._index(content) % len(KINDS)] == "down":
            self._record(content, "down", "")
            return "500"
        return None

    def propose(self, content: str, k: int) -> tuple[str, str, str]:
        kind = KINDS[k % len(KINDS)]
        m = _LIMIT.search(content)
        limit = int(m.group(1)) if m else 4000
        if kind == "truncated":
            return kind, f"Diagnosis.\n{OPEN}\nAlways look in the", "length"
        if kind == "empty":
            return kind, f"{OPEN}\n   \n{CLOSE}", "stop"
        if kind == "oversized":
            return kind, f"{OPEN}\n{'x' * (limit + 500)}\n{CLOSE}", "stop"
        if kind == "inject" and (k // len(KINDS)) % 2 == 0:
            return kind, f"{OPEN}\nYou act. {{{{ ''.__class__.__mro__ }}}}\n{CLOSE}", "stop"
        if kind == "inject":
            return kind, (f"{OPEN}\n{{% for c in ().__class__.__base__.__subclasses__() %}}{{{{ c }}}}"
                          f"{{% endfor %}}\n{CLOSE}"), "stop"
        if kind == "unparseable":
            return kind, "The agent should look harder in the fridge.", "stop"
        raise AssertionError(kind)  # "down" never reaches a completion
