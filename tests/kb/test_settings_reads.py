"""Settings are read one way (docs/ARCHITECTURE.md, "Settings"): kb/settings.py parses, types and validates every
value once, at start-up, through kb.env, and the apps read `django.conf.settings.KB_*` where they use it, at call
time, so the tests' `settings` fixture and override_settings reach every reader.

A scan of the apps' source keeps a second way from coming back: a settings module of an app's own (chat/conf.py
wrapped 13 settings in getters), a getter around one setting, `getattr(settings, …)` (its default hides a setting
that is missing), an import of kb.settings itself (its values, past override_settings) and an environment
variable read past kb/settings.py. kb/runtime starts processes before Django and reads its own variables."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import manage, service_env

ROOT = Path(__file__).resolve().parents[2]
APPS = ("accounts", "chat", "search", "kb", "lab")
THE_SETTINGS = {"kb/settings.py", "kb/env.py"}  # where the environment is read and every value parsed
BEFORE_DJANGO = "kb/runtime/"  # the launcher and the embedded servers: they run before any settings exist
CASTS = {"int", "float", "str", "bool"}


def _setting(node: ast.AST | None) -> str | None:
    """`NAME` when `node` is `settings.NAME`, or a cast of it (`float(settings.NAME)`)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in CASTS and len(node.args) == 1:
        node = node.args[0]
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "settings":
        return node.attr
    return None


def _environment_read(node: ast.AST) -> str | None:
    """The literal KB_* name an `os.environ.get`, `os.environ[…]` or `os.getenv` reads."""
    name: ast.expr | None = None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
        func = node.func
        if func.attr == "getenv" or (func.attr == "get" and isinstance(func.value, ast.Attribute)
                                     and func.value.attr == "environ"):
            name = node.args[0]
    elif (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "environ"
          and isinstance(node.ctx, ast.Load)):
        name = node.slice
    if isinstance(name, ast.Constant) and isinstance(name.value, str) and name.value.startswith("KB_"):
        return name.value
    return None


def second_ways(path: str, source: str) -> list[str]:
    """Each way `source` (the module at `path`, relative to the root) reads settings other than the one way."""
    if path in THE_SETTINGS:
        return []
    found = []
    if Path(path).name in {"conf.py", "settings.py", "app_settings.py"}:
        found.append(f"{path}: a settings module of its own (kb/settings.py holds every setting)")
    for node in ast.walk(ast.parse(source)):
        line = f"{path}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body[1:] if ast.get_docstring(node) is not None else node.body
            if len(body) == 1 and isinstance(body[0], ast.Return) and (name := _setting(body[0].value)):
                found.append(f"{line}: {node.name}() only returns settings.{name}: read the setting where it is used")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {"getattr", "hasattr"}
              and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id == "settings"):
            found.append(f"{line}: {node.func.id}(settings, …): every setting exists, read settings.NAME")
        elif isinstance(node, ast.ImportFrom) and (node.module == "kb.settings" or (
                node.module == "kb" and any(alias.name == "settings" for alias in node.names))):
            found.append(f"{line}: imports kb.settings: read django.conf.settings (override_settings reaches it)")
        elif isinstance(node, ast.Import) and any(alias.name == "kb.settings" for alias in node.names):
            found.append(f"{line}: imports kb.settings: read django.conf.settings (override_settings reaches it)")
        elif (name := _environment_read(node)) and not path.startswith(BEFORE_DJANGO):
            found.append(f"{line}: reads {name} from the environment: parse it in kb/settings.py")
    return found


def test_the_apps_read_settings_one_way() -> None:
    files = sorted(p for app in APPS for p in (ROOT / app).rglob("*.py"))
    assert len(files) > 100  # the apps were found
    found = [way for p in files for way in second_ways(p.relative_to(ROOT).as_posix(), p.read_text())]
    assert found == []


def test_the_scan_finds_each_second_way_in_a_bad_module_and_nothing_in_a_good_one() -> None:
    bad = '''
import os
from django.conf import settings
from kb.settings import KB_SEARCH_CAP
import kb.settings


def answer_lease() -> float:
    """Seconds an answer may run."""
    return float(settings.KB_ANSWER_LEASE_SECONDS)


def review_group():
    return settings.KB_REVIEW_GROUP


def cap() -> int:
    return getattr(settings, "KB_SEARCH_CAP", 5)


LIMIT = int(os.environ.get("KB_ASKS_PER_MINUTE", "20"))
MODEL = os.environ["KB_EMBEDDING_MODEL"]
'''
    found = second_ways("chat/conf.py", bad)
    expected = ["chat/conf.py: a settings module", "chat/conf.py:4: imports kb.settings", "chat/conf.py:5: imports kb.settings",
                "answer_lease() only returns settings.KB_ANSWER_LEASE_SECONDS", "review_group() only returns",
                "chat/conf.py:18: getattr(settings", "reads KB_ASKS_PER_MINUTE", "reads KB_EMBEDDING_MODEL"]
    for way in expected:
        assert sum(way in line for line in found) == 1, (way, found)
    assert len(found) == len(expected)  # cap()'s getattr is reported once, as a getattr

    good = '''
import os
from django.conf import settings


def status() -> str:
    return f"on ({settings.KB_RERANKER_PATH})" if settings.KB_RERANKER_PATH else "off"


def reach(threshold: float) -> float:
    return threshold + settings.KB_SEARCH_RELATED_MARGIN


def child_environment() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1"}
'''
    assert second_ways("search/rerank.py", good) == []
    assert second_ways("kb/runtime/launcher.py", 'import os\nN = os.environ.get("KB_WORKER_CONCURRENCY", "1")\n') == []


@pytest.mark.django_db
def test_a_bad_answer_backend_fails_at_start_up_naming_the_setting() -> None:
    """KB_ANSWER_BACKEND is checked once, as kb/settings.py loads, not when the first question is asked."""
    result = manage("check", env=service_env(KB_ANSWER_BACKEND="gpt"))
    assert result.returncode == 2, result.stderr
    assert "KB_ANSWER_BACKEND must be one of extractive, local, openai or a dotted class path (got 'gpt')" in result.stderr
    assert "Traceback" not in result.stderr
    read = manage("shell", "-v", "0", "-c", "from django.conf import settings; print(settings.KB_ANSWER_BACKEND,"
                  " settings.KB_OPENAI_BASE_URL, repr(settings.KB_OPENAI_READ_TIMEOUT))",
                  env=service_env(KB_ANSWER_BACKEND=" tests.web.paced_backend.PacedExtractive ",
                                  KB_OPENAI_BASE_URL="http://127.0.0.1:11434/v1/", KB_OPENAI_READ_TIMEOUT="45"))
    assert read.returncode == 0, read.stderr
    assert read.stdout.split() == ["tests.web.paced_backend.PacedExtractive", "http://127.0.0.1:11434/v1", "45.0"]
