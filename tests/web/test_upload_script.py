"""docs/upload_folder.py against the real stack: Daphne, a Celery worker, the real pipeline."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from accounts.tokens import token_create
from kb.library.models import Document
from tests.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_the_script_uploads_a_folder_and_waits_until_every_document_is_ready(
    people: dict[str, Any], web_server: str, celery_worker: Any, tmp_path: Path
) -> None:
    handbook = tmp_path / "handbook"
    (handbook / "travel").mkdir(parents=True)
    (handbook / "leave.md").write_text("# Leave\n\n## Holidays\n\nEveryone gets 28 days of paid holiday a year.\n")
    (handbook / "travel" / "trains.txt").write_text("Book trains through the travel desk at least a week ahead.\n")
    (handbook / "tool.exe").write_bytes(b"MZ\x90\x00 not a document")
    _, token = token_create(user=people["admin"], scopes=["documents:read", "documents:write"])
    finance = people["groups"]["finance"].pk
    people["admin"].groups.add(finance)  # an upload matches only documents its uploader may read (issue 11)

    result = subprocess.run(
        [sys.executable, "docs/upload_folder.py", str(handbook), "--url", web_server, "--access", "restricted",
         "--group", str(finance), "--timeout", "240"],
        cwd=ROOT, env={"KB_TOKEN": token, "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=300, check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr  # the .exe was refused, the rest indexed
    lines = result.stdout.splitlines()
    assert any(line.startswith("refused") and "tool.exe" in line for line in lines), result.stdout
    assert sum(line.startswith("ready") for line in lines) == 2, result.stdout
    documents = Document.objects.order_by("filename")
    assert [d.filename for d in documents] == ["leave.md", "trains.txt"]
    assert all(d.status == Document.Status.READY and d.acl == [f"g:{finance}"] for d in documents)

    again = subprocess.run(
        [sys.executable, "docs/upload_folder.py", str(handbook / "travel"), "--url", web_server, "--access",
         "restricted", "--group", str(finance)],
        cwd=ROOT, env={"KB_TOKEN": token, "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=120,
        check=False,
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.startswith("same")  # identical content: nothing re-indexed
