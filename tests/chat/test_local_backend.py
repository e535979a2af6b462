"""The `local` backend: SmolLM2-135M-Instruct from site-packages, no network, streamed token by token."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import pytest

from chat.answering import answer_stream
from chat.backends.local import NOTICE, gguf_location
from kb.library.models import Document
from tests.chat.conftest import EXPORT_QUESTION, received


def _loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any connection off this machine fails the test: the model must load from local files."""
    real_connect = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            host = address[0]
            try:
                loopback = ipaddress.ip_address(host).is_loopback
            except ValueError:
                loopback = host == "localhost"
            if not loopback:
                raise AssertionError(f"network access to {address} while loading the local model")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)


@pytest.mark.slow
def test_the_local_model_streams_an_answer_from_site_packages(
    corpus: dict[str, Document], people: dict[str, Any], settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, name = gguf_location()
    assert "site-packages" in str(folder) and name.endswith(".gguf")
    _loopback_only(monkeypatch)
    settings.KB_ANSWER_BACKEND = "local"
    settings.KB_LOCAL_MAX_TOKENS = 24
    events = received(answer_stream(user=people["carol"], question=EXPORT_QUESTION))
    generating = events[1]
    assert generating["state"] == "generating" and generating["backend"] == "local"
    assert generating["notice"] == NOTICE and "may be wrong" in NOTICE
    tokens = [e for e in events if e["type"] == "token"]
    assert len(tokens) >= 3, events
    done = events[-1]
    assert done["type"] == "done", done
    assert done["text"] == "".join(t["text"] for t in tokens) and done["notice"] == NOTICE
    assert "SmolLM2-135M" in done["model"]
