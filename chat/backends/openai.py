"""Any OpenAI-compatible chat-completions server (vLLM, Ollama, llama.cpp server, a hosted API).

POST {KB_OPENAI_BASE_URL}/chat/completions with `"stream": true` and read the
server-sent events (`data: {json}` ... `data: [DONE]`) with the standard library's
http.client, so no HTTP client dependency is needed. Three limits keep a bad server
from holding a worker: the connect timeout, the longest silence between two chunks
(a stalled server), and the whole answer's wall-clock limit. A stream that ends
without `[DONE]` or a finish reason is a failure, never a silently short answer.
"""

from __future__ import annotations

import http.client
import json
import ssl
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from chat.backends import BackendError
from chat.prompts import Prompt


class OpenAIBackend:
    name = "openai"
    notice = ""

    def __init__(self) -> None:
        self.base_url = settings.KB_OPENAI_BASE_URL
        self.model = settings.KB_OPENAI_MODEL or "default"
        self.api_key = settings.KB_OPENAI_API_KEY
        self.connect_timeout = settings.KB_OPENAI_CONNECT_TIMEOUT
        self.read_timeout = settings.KB_OPENAI_READ_TIMEOUT
        self.max_tokens = settings.KB_OPENAI_MAX_TOKENS
        self.deadline_s = settings.KB_ANSWER_TIMEOUT

    def _connection(self) -> tuple[http.client.HTTPConnection, str]:
        if not self.base_url:
            raise BackendError("the answer service is not configured: KB_OPENAI_BASE_URL is empty")
        url = urlsplit(f"{self.base_url}/chat/completions")
        if url.scheme not in ("http", "https") or not url.hostname:
            raise BackendError(f"KB_OPENAI_BASE_URL must be an http(s) URL (got {self.base_url!r})")
        connection: http.client.HTTPConnection
        if url.scheme == "https":
            connection = http.client.HTTPSConnection(
                url.hostname, url.port, timeout=self.connect_timeout, context=ssl.create_default_context()
            )
        else:
            connection = http.client.HTTPConnection(url.hostname, url.port, timeout=self.connect_timeout)
        return connection, url.path + (f"?{url.query}" if url.query else "")

    def generate(self, prompt: Prompt) -> Iterator[str]:
        connection, path = self._connection()
        where = urlsplit(self.base_url).netloc
        body = json.dumps({
            "model": self.model,
            "messages": prompt.messages,
            "stream": True,
            "temperature": 0,
            "max_tokens": self.max_tokens,
        }).encode()
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        deadline = time.monotonic() + self.deadline_s
        try:
            try:
                connection.connect()
                assert connection.sock is not None  # noqa: S101  (connect() just set it; narrows the type)
                connection.sock.settimeout(self.read_timeout)
                connection.request("POST", path, body=body, headers=headers)
                response = connection.getresponse()
            except TimeoutError:
                raise BackendError(f"the model server at {where} did not respond in time") from None
            except (OSError, http.client.HTTPException) as exc:
                raise BackendError(f"the model server at {where} is unreachable ({exc})") from None
            if response.status != 200:
                detail = _error_detail(response)
                raise BackendError(f"the model server at {where} answered HTTP {response.status}{detail}")
            yield from self._events(response, where, deadline)
        finally:
            connection.close()

    def release(self) -> None:
        return None  # the connection is closed when its stream ends, however it ends

    def _events(self, response: http.client.HTTPResponse, where: str, deadline: float) -> Iterator[str]:
        finished = False
        data: list[bytes] = []
        while True:
            if time.monotonic() > deadline:
                raise BackendError(f"the model took longer than {self.deadline_s:.0f}s to answer")
            try:
                line = response.readline(1 << 20)
            except TimeoutError:
                raise BackendError(
                    f"the model server at {where} stalled: nothing for {self.read_timeout:.0f}s"
                ) from None
            except (OSError, http.client.HTTPException) as exc:
                raise BackendError(
                    f"the connection to the model server at {where} broke mid-answer ({exc!r})"
                ) from None
            if not line:
                break
            line = line.rstrip(b"\r\n")
            if line.startswith(b"data:"):
                data.append(line[5:].lstrip(b" "))
                continue
            if line or not data:
                continue  # comments (":"), event/id/retry fields; a blank line ends an event
            payload, data = b"\n".join(data), []
            if payload.strip() == b"[DONE]":
                return
            for piece, done in _chunk(payload, where):
                finished = finished or done
                if piece:
                    yield piece
        if data and b"\n".join(data).strip() == b"[DONE]":
            return
        if not finished:
            raise BackendError(f"the model server at {where} closed the stream before the answer was complete")


def _chunk(payload: bytes, where: str) -> Iterator[tuple[str, bool]]:
    try:
        chunk: Any = json.loads(payload)
    except ValueError:
        raise BackendError(f"the model server at {where} sent a malformed chunk") from None
    if not isinstance(chunk, dict):
        raise BackendError(f"the model server at {where} sent a malformed chunk")
    if chunk.get("error"):
        error = chunk["error"]
        message = error.get("message") if isinstance(error, dict) else error
        raise BackendError(f"the model server at {where} reported an error: {str(message)[:300]}")
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") or {}
        yield (delta.get("content") or ""), bool(choice.get("finish_reason"))


def _error_detail(response: http.client.HTTPResponse) -> str:
    try:
        raw = response.read(2000)
    except (OSError, http.client.HTTPException):
        return ""
    try:
        error = json.loads(raw).get("error")
        text = str((error.get("message") if isinstance(error, dict) else error) or "")
    except (ValueError, AttributeError):
        text = raw.decode("utf-8", "replace")
    text = " ".join(text.split())[:300]
    return f": {text}" if text else ""
