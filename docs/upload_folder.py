#!/usr/bin/env python3
"""Upload every file of a local folder through the documents API, then wait until each is indexed.

Standard library only, so it runs on any machine with Python 3.9+:

    export KB_URL=https://kb.example.com KB_TOKEN=kb_...   # a token with the documents:write scope
    python3 docs/upload_folder.py ./handbook --folder 3                 # inherit folder 3's readers
    python3 docs/upload_folder.py ./payroll --access restricted --group 5 --group 7

Each file is sent in its own request, so one refused file (too big, unsupported type) is
reported and the rest go on. Exit status: 0 when every file is ready, 1 when any was refused
or failed to index (each with its reason), 2 on a usage or connection problem.
"""

from __future__ import annotations

import argparse
import json
import mimetypes
import os
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

DONE = {"ready", "failed"}


class ApiError(Exception):
    pass


def call(base: str, token: str, method: str, path: str, body: bytes | None = None, content_type: str = "") -> Any:
    request = urllib.request.Request(base.rstrip("/") + path, data=body, method=method)  # noqa: S310
    request.add_header("Authorization", f"Bearer {token}")
    request.add_header("Accept", "application/json")
    if content_type:
        request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:  # noqa: S310 (main() allows http(s) only)
            return json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")
        try:
            detail = json.loads(detail).get("detail", detail)
        except (ValueError, AttributeError):
            pass
        raise ApiError(f"{method} {path}: HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise ApiError(f"{method} {path}: cannot reach {base}: {exc}") from None


def multipart(fields: list[tuple[str, str]], path: Path) -> tuple[bytes, str]:
    """A multipart/form-data body with the form fields and one file under `files`."""
    boundary = uuid.uuid4().hex
    parts = []
    for name, value in fields:
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    header = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="{path.name}"\r\n'
        f"Content-Type: {mime}\r\n\r\n"
    )
    parts += [header.encode(), path.read_bytes(), f"\r\n--{boundary}--\r\n".encode()]
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--url", default=os.environ.get("KB_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--folder", default="", help="folder id (GET /api/folders lists them)")
    parser.add_argument("--access", default="", choices=["", "folder", "everyone", "restricted"])
    parser.add_argument("--group", action="append", default=[], help="group id, with --access restricted")
    parser.add_argument("--user", action="append", default=[], help="person id, with --access restricted")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds to wait for indexing")
    args = parser.parse_args(argv)
    if not args.url.startswith(("http://", "https://")):
        print(f"--url/KB_URL must be an http:// or https:// URL (got {args.url!r}).", file=sys.stderr)
        return 2
    token = os.environ.get("KB_TOKEN", "")
    if not token:
        print("Set KB_TOKEN to an API token with the documents:write scope (manage.py apitoken).", file=sys.stderr)
        return 2
    files = sorted(p for p in args.directory.rglob("*") if p.is_file() and not p.name.startswith("."))
    if not files:
        print(f"No files under {args.directory}.", file=sys.stderr)
        return 2

    fields = [("folder", args.folder), ("access", args.access)]
    fields += [("groups", g) for g in args.group] + [("users", u) for u in args.user]
    waiting: dict[int, str] = {}
    problems = 0
    try:
        for path in files:
            body, content_type = multipart(fields, path)
            [item] = call(args.url, token, "POST", "/api/documents", body, content_type)["items"]
            if item["error"]:
                problems += 1
                print(f"refused  {path}: {item['error']}")
                continue
            verb = "new" if item["created"] else ("replaced" if item["queued"] else "same")
            print(f"{verb:8} {path} -> document {item['document']['id']}")
            waiting[item["document"]["id"]] = str(path)

        deadline = time.monotonic() + args.timeout
        while waiting and time.monotonic() < deadline:
            for pk in list(waiting):
                document = call(args.url, token, "GET", f"/api/documents/{pk}")
                if document["status"] in DONE:
                    path = waiting.pop(pk)
                    if document["status"] == "ready":
                        print(f"ready    {path} ({document['chunk_count']} passages)")
                    else:
                        problems += 1
                        print(f"failed   {path} at {document['failed_stage']}: {document['failure_reason']}")
            if waiting:
                time.sleep(2)
    except ApiError as exc:
        print(exc, file=sys.stderr)
        return 2
    for path in waiting.values():
        problems += 1
        print(f"waiting  {path}: not indexed within {args.timeout:.0f}s")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
