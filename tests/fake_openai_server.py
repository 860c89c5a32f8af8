"""A real OpenAI-compatible chat-completions server on 127.0.0.1, for tests and benchmarks.

It speaks HTTP (stdlib `ThreadingHTTPServer`, HTTP/1.1 keep-alive, one thread per connection) on an
ephemeral port, answers `POST /v1/chat/completions` (also `/chat/completions`) with a reply chosen by a
Python callable from the request's messages, reports `usage`, counts requests, checks the bearer key,
and injects faults from a schedule.

    from tests.fake_openai_server import FakeOpenAIServer, TEST_API_KEY

    with FakeOpenAIServer(reply=lambda messages: "Action: look", faults="429*2,500,hang") as srv:
        # OPENAI_API_KEY=TEST_API_KEY in the environment of the client
        model = get_model("openai/test-model", api_base=srv.url)
        ...
        assert srv.requests == 5          # 4 faults then one good reply

Fault schedule: a list (or comma-separated string) of tokens, consumed one per request in arrival order;
when it is used up every request is served normally. `TOKEN*N` repeats a token N times.
    ok            serve normally
    429           HTTP 429 with `Retry-After: <retry_after>` (default "0"); `429:2` sets Retry-After: 2
    500 / 502 / 503
                  that status with an OpenAI-style error body
    hang          read the request, then send nothing for `hang_s` seconds (past the client timeout),
                  then close the connection
    malformed     HTTP 200 with a body that is not JSON
    empty         HTTP 200 with a well-formed completion whose `choices` list is empty
    401           HTTP 401 (what a wrong key gets)
Instead of (or after) the list, `fault_fn(n, body) -> token | None` may decide per request (n counts
from 0 over all chat requests); it is consulted only when the list is used up.

A request whose `Authorization` header is not `Bearer <api_key>` gets a 401 whose message echoes the key
it presented (as some providers do): tests use it to check that errors are scrubbed.

Counters (thread-safe): `requests` (all chat requests, faulty or not), `served` (good replies),
`faults_served` (list of tokens served), `bodies` (the JSON bodies received, in order),
`max_active` (the most chat requests handled at once; `latency_s` makes each one take that long).

Pytest: `from fake_openai_server import fake_openai` (or `tests.fake_openai_server`) in a test module
gives a fixture that sets OPENAI_API_KEY=TEST_API_KEY and yields a started server (stopped after).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TEST_API_KEY = "sk-test-HARNEVO-0123456789abcdef"  # a fake key: tests grep for it where it must not be

ReplyFn = Callable[[list[dict[str, Any]]], str]


def default_reply(messages: list[dict[str, Any]]) -> str:
    """A minimal ReAct-style reply: always look around."""
    return "Think: I should look around.\nAction: look"


def approx_tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4) if text else 0


def parse_faults(spec: str | Iterable[str] | None) -> list[str]:
    """'429*2,500,hang' or ['429*2', '500', 'hang'] -> ['429', '429', '500', 'hang']."""
    if spec is None:
        return []
    tokens = spec.split(",") if isinstance(spec, str) else list(spec)
    out: list[str] = []
    for raw in tokens:
        tok = raw.strip()
        if not tok:
            continue
        name, _, count = tok.partition("*")
        n = int(count) if count else 1
        if name.split(":")[0] not in {"ok", "429", "500", "502", "503", "hang", "malformed", "empty", "401"}:
            raise ValueError(f"unknown fault token {tok!r}")
        out.extend([name] * n)
    return out


class FakeOpenAIServer:
    """See the module docstring. Use as a context manager or call start()/stop()."""

    def __init__(
        self,
        reply: ReplyFn | None = None,
        *,
        api_key: str = TEST_API_KEY,
        faults: str | Iterable[str] | None = None,
        fault_fn: Callable[[int, dict], str | None] | None = None,
        retry_after: str = "0",
        hang_s: float = 5.0,
        latency_s: float = 0.0,
    ) -> None:
        self.reply = reply or default_reply
        self.api_key = api_key
        self.fault_fn = fault_fn
        self.retry_after = retry_after
        self.hang_s = hang_s
        self.latency_s = latency_s
        self._lock = threading.Lock()
        self._faults: list[str] = parse_faults(faults)
        self._stopping = threading.Event()
        self.requests = 0
        self.served = 0
        self.faults_served: list[str] = []
        self.bodies: list[dict] = []
        self.active = 0  # chat requests being handled now
        self.max_active = 0  # the most handled at once
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------
    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        """The api_base to give a client: http://127.0.0.1:PORT/v1"""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> "FakeOpenAIServer":
        handler = _make_handler(self)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), name="fake-openai", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = self._thread = None

    def __enter__(self) -> "FakeOpenAIServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- control ---------------------------------------------------------------------------------
    def set_faults(self, faults: str | Iterable[str] | None) -> None:
        """Replace the remaining fault schedule."""
        with self._lock:
            self._faults = parse_faults(faults)

    def reset_counters(self) -> None:
        with self._lock:
            self.requests = self.served = 0
            self.faults_served = []
            self.bodies = []
            self.max_active = self.active

    def _next(self, body: dict) -> str:
        with self._lock:
            n = self.requests
            self.requests += 1
            self.bodies.append(body)
            if self._faults:
                tok = self._faults.pop(0)
            else:
                tok = (self.fault_fn(n, body) if self.fault_fn else None) or "ok"
            if tok != "ok":
                self.faults_served.append(tok)
            return tok

    def _completion(self, body: dict) -> dict:
        messages = body.get("messages") or []
        text = self.reply(messages)
        prompt = "".join(str(m.get("content") or "") for m in messages)
        finish = "stop"
        limit = body.get("max_tokens")
        if isinstance(limit, int) and approx_tokens(text) > limit:  # as a real server: cut at max_tokens
            text, finish = text[: 4 * limit], "length"
        pt, ct = approx_tokens(prompt), approx_tokens(text)
        with self._lock:
            self.served += 1
            n = self.served
        return {
            "id": f"chatcmpl-fake-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "test-model"),
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
            ],
            "usage": {"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct},
        }


def _error_body(message: str, kind: str, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _make_handler(server: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 30  # idle keep-alive connections end after this

        def setup(self) -> None:
            super().setup()
            # headers and body go out as separate writes: without this, Nagle + delayed ACK add ~40 ms
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _send(self, status: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def _json(self, status: int, obj: dict, headers: dict[str, str] | None = None) -> None:
            self._send(status, json.dumps(obj).encode(), headers)

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/models"):
                self._json(200, {"object": "list", "data": [{"id": "test-model", "object": "model"}]})
            else:
                self._json(404, _error_body("not found", "invalid_request_error"))

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._json(404, _error_body(f"no route {self.path}", "invalid_request_error"))
                return
            auth = self.headers.get("Authorization", "")
            if auth != f"Bearer {server.api_key}":
                presented = auth.removeprefix("Bearer ")
                self._json(401, _error_body(f"Incorrect API key provided: {presented}", "invalid_request_error", "invalid_api_key"))
                return
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError:
                self._json(400, _error_body("request body is not JSON", "invalid_request_error"))
                return
            with server._lock:
                server.active += 1
                server.max_active = max(server.max_active, server.active)
            try:
                self._chat(body)
            finally:
                with server._lock:
                    server.active -= 1

        def _chat(self, body: dict) -> None:
            tok = server._next(body)
            if server.latency_s:
                time.sleep(server.latency_s)
            name, _, arg = tok.partition(":")
            if name == "ok":
                self._json(200, server._completion(body))
            elif name == "429":
                self._json(429, _error_body("Rate limit reached, slow down", "rate_limit_error", "rate_limit_exceeded"),
                           {"Retry-After": arg or server.retry_after})
            elif name in {"500", "502", "503"}:
                self._json(int(name), _error_body("The server had an error", "server_error"))
            elif name == "401":
                self._json(401, _error_body("Incorrect API key provided", "invalid_request_error", "invalid_api_key"))
            elif name == "malformed":
                self._send(200, b'{"id": "chatcmpl-broken", "choices": [ {"index": 0, "mess')
            elif name == "empty":
                completion = server._completion(body)
                completion["choices"] = []
                self._json(200, completion)
            elif name == "hang":
                server._stopping.wait(server.hang_s)
                self.close_connection = True
            else:  # parse_faults rejects unknown tokens; a fault_fn may not
                self._json(500, _error_body(f"unknown fault {tok!r}", "server_error"))

    return Handler


try:
    import pytest
except ImportError:  # usable without pytest (bench/)
    pytest = None

if pytest is not None:

    @pytest.fixture
    def fake_openai(monkeypatch):
        """A started FakeOpenAIServer with the client key in the environment; stopped afterwards."""
        monkeypatch.setenv("OPENAI_API_KEY", TEST_API_KEY)
        with FakeOpenAIServer() as srv:
            yield srv
