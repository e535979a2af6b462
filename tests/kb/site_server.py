"""A small intranet site for the `site` source's tests, run as its own process under wsgiref:
`python -m tests.kb.site_server ROOT LOG CONTROL` serves the files under ROOT, prints its port, and
appends one JSON line per request to LOG (path, query, the conditional headers it got, the status it
answered, the time). HTML files carry an ETag (their content's hash) and answer If-None-Match with
304; other files carry Last-Modified and answer If-Modified-Since with 304. CONTROL, a JSON file read
at each request, may map paths to a status to answer instead ({"status": {"/docs/a.html": 500}}), to a
redirect ({"redirect": {"/docs/": "http://…"}}) or to another Content-Type ({"type": {"/docs/a.txt": "text/html"}}),
and require a token ({"token": "…"}: a request without `Authorization: Bearer …` gets 401)."""

from __future__ import annotations

import hashlib
import json
import mimetypes
import sys
import time
from collections.abc import Callable, Iterable
from email.utils import formatdate, parsedate_to_datetime
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

mimetypes.add_type("text/markdown", ".md")


def app(root: Path, log: Path, control: Path) -> Callable[..., Iterable[bytes]]:
    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        inm, ims = environ.get("HTTP_IF_NONE_MATCH", ""), environ.get("HTTP_IF_MODIFIED_SINCE", "")
        rules = json.loads(control.read_text()) if control.exists() else {}
        authorized = environ.get("HTTP_AUTHORIZATION") == f"Bearer {rules.get('token')}"
        if rules.get("token") and not authorized:
            status, headers, body = 401, [("Content-Type", "text/plain")], b"a token is needed"
        elif path in rules.get("redirect", {}):
            status, headers, body = 302, [("Location", rules["redirect"][path])], b""
        else:
            status, headers, body = answer(root, rules.get("status", {}).get(path), path, inm, ims)
            if path in rules.get("type", {}):
                headers = [(k, rules["type"][path] if k == "Content-Type" else v) for k, v in headers]
        with log.open("a") as out:
            out.write(json.dumps({"path": path, "query": environ.get("QUERY_STRING", ""), "if_none_match": inm,
                                  "if_modified_since": ims, "status": status, "agent": environ.get("HTTP_USER_AGENT", ""),
                                  "authorized": authorized, "host": environ.get("HTTP_HOST", ""),
                                  "time": time.time()}) + "\n")
        start_response(f"{status} X", [*headers, ("Content-Length", str(len(body)))])
        return [body]

    return serve


def answer(root: Path, forced: int | None, path: str, inm: str, ims: str) -> tuple[int, list[tuple[str, str]], bytes]:
    if forced:
        return forced, [("Content-Type", "text/plain")], b"forced"
    file = root / path.lstrip("/")
    if path.endswith("/"):
        file = file / "index.html"
    if ".." in Path(path).parts or not file.is_file():
        return 404, [("Content-Type", "text/plain")], b"not found"
    body = file.read_bytes()
    content_type = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
    if file.suffix == ".html":
        tag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
        if inm == tag:
            return 304, [("ETag", tag)], b""
        return 200, [("Content-Type", f"{content_type}; charset=utf-8"), ("ETag", tag)], body
    modified = int(file.stat().st_mtime)
    if ims and parsedate_to_datetime(ims).timestamp() >= modified:
        return 304, [], b""
    return 200, [("Content-Type", content_type), ("Last-Modified", formatdate(modified, usegmt=True))], body


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def main() -> None:
    root, log, control = (Path(arg) for arg in sys.argv[1:4])
    server = make_server("127.0.0.1", 0, app(root, log, control), handler_class=QuietHandler)
    print(server.server_port, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
