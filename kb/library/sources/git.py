"""A Git repository as a source, through the `git` binary: a shallow clone of one branch kept in a cache
directory (VAR_DIR/sources/<id>), brought up to date with fetch + reset. Any URL git clones works (https,
ssh, file://); credentials never go on a command line or into a message (locations carrying them are
refused: see `location_check`); a token or password for https comes from kb.library.sources.secrets through
GIT_ASKPASS."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from functools import partial
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings

from kb.library.models import Source
from kb.library.sources.listing import Entry, ListingError, sub_path
from kb.library.sources.secrets import scrub, source_secret

GIT_TIMEOUT = 600  # seconds for one git command: a clone of a large repository over a slow link
_LS_TREE = re.compile(r"^(\d+) (\w+) ([0-9a-f]+) +(-|\d+)\t(.*)$", re.DOTALL)
_USERINFO = re.compile(r"(\w+://)[^/@\s]*@")
# The user name git asks for when the location names none: any name goes with a token on the common
# forges; a server that needs a particular one gets it in the location (https://name@host/...).
ASKPASS_USER = "x-access-token"
_ASKPASS = """#!/bin/sh
case "$1" in
  Username*) printf '%s\\n' "$KB_GIT_USERNAME" ;;
  *) printf '%s\\n' "$KB_GIT_PASSWORD" ;;
esac
"""


def location_check(location: str) -> None:
    """Refuse a URL with a password or token in it: it would be stored, shown and passed to git's command line."""
    if "://" in location and urlsplit(location).password is not None:
        raise ListingError("the repository URL holds a password or token; give it as the source's secret (or the "
                           "KB_SOURCE_<NAME>_TOKEN setting), or use ssh keys, never in the source's location")


def redact(text: str) -> str:
    """Text safe to record or log: no user:password@ part of a URL."""
    return _USERINFO.sub(r"\1…@", text)


def cache_dir(source: Source) -> Path:
    return Path(settings.VAR_DIR) / "sources" / str(source.pk)


def _askpass() -> Path:
    """A program git runs for a password (GIT_ASKPASS): it prints the one this process put in git's
    environment, so the secret never appears in an argument list (`ps`) or a file."""
    script = Path(settings.VAR_DIR) / "sources" / "askpass.sh"
    if not script.exists():
        script.parent.mkdir(parents=True, exist_ok=True)
        draft = script.with_name(f"askpass.{os.getpid()}")  # whole or absent: another process may run it now
        draft.write_text(_ASKPASS)
        draft.chmod(0o700)
        draft.replace(script)
    return script


def _git(*args: str, cwd: Path | None = None, secret: str | None = None) -> str:
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="", SSH_ASKPASS="", LC_ALL="C")
    env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")  # never wait for a passphrase or a host prompt
    options = []
    if secret:
        env.update(GIT_ASKPASS=str(_askpass()), KB_GIT_USERNAME=ASKPASS_USER, KB_GIT_PASSWORD=secret)
        options = ["-c", "credential.helper="]  # no credential store keeps a copy
    binary = shutil.which("git")
    if binary is None:
        raise ListingError("the git program is not installed on this server")
    try:
        done = subprocess.run([binary, *options, *args], cwd=cwd, env=env, capture_output=True, timeout=GIT_TIMEOUT,
                              check=False)
    except subprocess.TimeoutExpired:
        raise ListingError(f"git {args[0]} took longer than {GIT_TIMEOUT} s") from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.decode(errors="replace").splitlines() if line.strip()]
        reason = f"git {args[0]} failed: {' / '.join(lines[-3:]) or f'exit status {done.returncode}'}"
        raise ListingError(scrub(redact(reason), secret))
    return done.stdout.decode(errors="surrogateescape")


def update(source: Source) -> Path:
    """The cache directory at the tip of the source's branch: cloned the first time (or after the location
    changed), else fetched and reset. Returns the work tree."""
    location_check(source.location)
    secret = source_secret(source)
    work = cache_dir(source)
    ref = source.branch or "HEAD"
    if (work / ".git").is_dir() and _git("remote", "get-url", "origin", cwd=work).strip() == source.location:
        _git("fetch", "--quiet", "--depth", "1", "origin", ref, cwd=work, secret=secret)
        _git("reset", "--quiet", "--hard", "FETCH_HEAD", cwd=work)
        return work
    if work.exists():
        shutil.rmtree(work)
    work.parent.mkdir(parents=True, exist_ok=True)
    branch = ["--branch", source.branch] if source.branch else []
    # "--" ends the options: a location starting with "-" is a path, never an option to git.
    _git("clone", "--quiet", "--depth", "1", "--no-tags", *branch, "--", source.location, str(work), secret=secret)
    return work


def list_entries(source: Source) -> list[Entry]:
    """The regular files of the branch's tip (under the sub-path); the etag is the Git blob id, so an
    unchanged file is known without reading it. Symbolic links and submodules are left out."""
    work = update(source)
    under = sub_path(source.path)
    listing = _git("ls-tree", "-r", "-l", "-z", "--full-tree", "HEAD", *(["--", under] if under else []), cwd=work)
    # A shallow clone knows no file's own history: a change listed now was committed by the tip at the latest.
    committed = float(_git("log", "-1", "--format=%ct", "HEAD", cwd=work).strip())
    entries = []
    for record in listing.split("\0"):
        match = _LS_TREE.match(record)
        if match is None:
            continue
        mode, kind, blob, size, path = match.groups()
        if kind != "blob" or mode not in ("100644", "100755"):
            continue
        entries.append(Entry(path=path, size=int(size), etag=f"git:{blob}", read=partial((work / path).read_bytes),
                             modified=committed))
    return entries
