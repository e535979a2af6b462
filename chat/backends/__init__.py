"""Generation backends behind one interface, chosen by KB_ANSWER_BACKEND.

A backend turns a Prompt into a stream of text pieces. It never sees a link, a
document id or an offset; whatever it writes goes through chat.citations before
anyone reads it. A failure the reader should hear about is a BackendError, whose
message is shown as it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol, runtime_checkable

from django.conf import settings
from django.utils.module_loading import import_string

from chat.prompts import Prompt


class BackendError(Exception):
    """The backend could not produce (the rest of) an answer; the message is for the reader."""


@runtime_checkable
class Backend(Protocol):
    name: str  # what Message.backend records
    model: str  # what Message.model records
    notice: str  # shown with every answer it writes ("" for none)

    def generate(self, prompt: Prompt) -> Iterator[str]:
        """Text pieces in order; raises BackendError when the model fails or stalls."""
        ...

    def release(self) -> None:
        """Drop what one answer left behind (buffers, connections); caches stay bounded."""
        ...


def get_backend(name: str | None = None) -> Backend:
    name = name or settings.KB_ANSWER_BACKEND
    if name == "extractive":
        from chat.backends.extractive import ExtractiveBackend

        return ExtractiveBackend()
    if name == "local":
        from chat.backends.local import LocalBackend

        return LocalBackend()
    if name == "openai":
        from chat.backends.openai import OpenAIBackend

        return OpenAIBackend()
    backend = import_string(name)()
    if not isinstance(backend, Backend):
        raise TypeError(f"{name} does not implement chat.backends.Backend")
    return backend
