"""A stand-in for an OpenAI-compatible chat-completions server, on loopback, speaking the real protocol.

POST /v1/chat/completions with "stream": true gets HTTP/1.1 chunked server-sent events:
`data: {"object": "chat.completion.chunk", "choices": [{"delta": {...}}]}` lines, a final
chunk with a finish_reason, then `data: [DONE]`. Modes reproduce the failures a real
deployment sees: a server that stalls mid-answer, one that dies mid-stream, one that
answers HTTP 500.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PAUSE_LIMIT = 120  # seconds a pause waits for resume(); a test that needs the limit fails (StubOpenAI.__exit__)
TOKENS = ("The", " Export", " button", " opens", " the", " Export", " dialog", " [1]", ".")


class StubOpenAI:
    def __init__(self, tokens: Sequence[str] = TOKENS, *, mode: str = "ok", delay: float = 0.0,
                 pause_after: int | None = None) -> None:
        self.tokens = list(tokens)
        self.mode = mode  # ok | stall | die | http500
        self.delay = delay
        self.pause_after = pause_after  # send this many tokens, then wait for resume()
        self.requests: list[dict[str, Any]] = []
        self.sent: list[tuple[float, str]] = []  # (monotonic time, token) as written to the socket
        self._resume = threading.Event()
        self._stop = threading.Event()
        self.paused = threading.Event()
        self.waited_out = False  # the pause ran out (PAUSE_LIMIT), no resume(): the test waited for nothing
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="stub-openai", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> StubOpenAI:
        self._thread.start()
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self._stop.set()
        self._resume.set()
        self._server.shutdown()
        self._server.server_close()
        assert exc_type is not None or not self.waited_out, "the stub's pause ran out before resume() was called"

    def resume(self) -> None:
        self._resume.set()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def _event(self, payload: dict[str, Any] | str) -> None:
                body = payload if isinstance(payload, str) else json.dumps(payload)
                self._chunk(f"data: {body}\n\n".encode())

            def _delta(self, delta: dict[str, str], finish: str | None = None) -> dict[str, Any]:
                return {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": int(time.time()),
                        "model": "stub-model", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                stub.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
                if stub.mode == "http500":
                    data = json.dumps({"error": {"message": "model overloaded", "type": "server_error"}}).encode()
                    self.send_response(500)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self._event(self._delta({"role": "assistant", "content": ""}))
                for i, token in enumerate(stub.tokens):
                    if stub.pause_after is not None and i == stub.pause_after:
                        stub.paused.set()
                        stub.waited_out = not stub._resume.wait(PAUSE_LIMIT)
                    if stub.mode == "stall" and i == 2:
                        stub._stop.wait(30)  # keep the connection open, send nothing
                        return
                    if stub.mode == "die" and i == 2:
                        self.connection.shutdown(2)  # mid-stream, no [DONE], no terminating chunk
                        self.connection.close()
                        return
                    self._event(self._delta({"content": token}))
                    stub.sent.append((time.monotonic(), token))
                    if stub.delay:
                        time.sleep(stub.delay)
                self._event(self._delta({}, finish="stop"))
                self._event("[DONE]")
                self._chunk(b"")

        return Handler
