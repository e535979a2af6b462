"""A Git repository as a source, through the `git` binary: a shallow clone of one branch kept in a cache
directory (VAR_DIR/sources/<id>), brought up to date with fetch + reset.

No value a staff user writes ever reaches git as an option or a command (docs/SOURCES.md, "Where sources may
point"): the location is https, ssh, http or a local repository under KB_SOURCE_FOLDER_ROOTS (`location_check`),
and git may use that transport only (`protocol.allow=never` but for it; no ext::, fd:: or other remote helper);
the branch is a branch name git accepts and never starts with '-' (`branch_check`); every location, ref and
path goes after `--` or in `--opt=value` form. Git runs without hooks, fsmonitor or symbolic links in the work
tree, with an environment of its own (`_environment`): never the server's, which holds its database URL,
secret key and the sources' tokens. Credentials never go on a command line or into a message: a token or
password for https comes from kb.library.sources.secrets through GIT_ASKPASS."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import unicodedata
from functools import partial
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings

from kb.library.models import Source
from kb.library.sources.listing import Entry, ListingError, sub_path
from kb.library.sources.policy import local_root_check, read_listed
from kb.library.sources.secrets import scrub, source_secret

GIT_TIMEOUT = 600  # seconds for one git command: a clone of a large repository over a slow link
TRANSPORTS = ("https", "ssh", "http", "file")  # "file": a local path or a file:// URL
_LS_TREE = re.compile(r"^(\d+) (\w+) ([0-9a-f]+) +(-|\d+)\t(.*)$", re.DOTALL)
_USERINFO = re.compile(r"(\w+://)[^/@\s]*@")
_HELPER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9+.-]*::")  # <transport>::<address>: git runs git-remote-<transport>
# What git's own options always are here: no hook, no fsmonitor command, no symbolic link checked out (a file
# holding its target instead), no credential kept, and no transport but the one the location is allowed.
_SAFE = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "core.symlinks=false",
         "-c", "credential.helper=", "-c", "protocol.allow=never", "--literal-pathspecs")
# The operator's settings git needs from the server's environment: ssh (a command, an agent), proxies and CAs.
_PASSED = ("GIT_SSH_COMMAND", "SSH_AUTH_SOCK", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY",
           "no_proxy", "ALL_PROXY", "all_proxy", "GIT_SSL_CAINFO", "GIT_SSL_CAPATH", "SSL_CERT_FILE", "SSL_CERT_DIR")
# The user name git asks for when the location names none: any name goes with a token on the common
# forges; a server that needs a particular one gets it in the location (https://name@host/...).
ASKPASS_USER = "x-access-token"
_ASKPASS = """#!/bin/sh
case "$1" in
  Username*) printf '%s\\n' "$KB_GIT_USERNAME" ;;
  *) printf '%s\\n' "$KB_GIT_PASSWORD" ;;
esac
"""


def location_check(location: str) -> str:
    """The transport a location uses (one of TRANSPORTS), or ListingError saying why git may not be given it:
    a password or token in it (it would be stored, shown and passed to git's command line), an option in
    disguise (a host or user starting with '-', as ssh would take it), a remote helper (ext::, fd::), another
    scheme, or a local repository outside KB_SOURCE_FOLDER_ROOTS."""
    value = location.strip()
    shown = redact(value)
    if not value or _hidden(value):
        raise ListingError(f"{shown!r}: a repository location is a URL or a path, without control or invisible "
                           "formatting characters")
    if value.startswith("-"):
        raise ListingError(f"{shown!r}: a repository location never starts with '-' (git would take it as an option)")
    if _HELPER.match(value):
        raise ListingError(f"{shown!r}: remote helpers (<transport>::<address>) are not allowed; give an https or "
                           "ssh URL, or a local path")
    if "://" in value:
        return _url_check(value, shown)
    colon = value.find("]:") + 1 if value.startswith("[") else value.find(":")  # [user@host]:path, [::1]:path
    slash = value.find("/")
    if colon > 0 and (slash < 0 or colon < slash):  # [user@]host:path, ssh as git reads it
        user, _, host = value[:colon].strip("[]").rpartition("@")
        _host_check(host, user, shown)
        return "ssh"
    local_root_check(value)
    return "file"


def _url_check(value: str, shown: str) -> str:
    scheme = value.partition("://")[0].lower()
    if scheme not in TRANSPORTS:
        raise ListingError(f"{shown!r}: git sources are reached over {', '.join(t for t in TRANSPORTS if t != 'file')} "
                           f"or file://, not {scheme}://")
    if scheme == "file":
        path = value[len("file://"):]
        if not path.startswith("/") or "%" in path:
            raise ListingError(f"{shown!r}: write a file:// URL as file:///absolute/path, without %-escapes")
        local_root_check(path)
        return "file"
    try:
        parts = urlsplit(value)
        # A port that is no number (ssh://host:-oProxyCommand=…/x) raises ValueError here too.
        password, user, _port = parts.password, parts.username or "", parts.port
    except ValueError as exc:
        raise ListingError(f"{shown!r}: not a URL git can use ({exc})") from None
    if password is not None:
        raise ListingError("the repository URL holds a password or token; give it as the source's secret (or the "
                           "KB_SOURCE_<NAME>_TOKEN setting), or use ssh keys, never in the source's location")
    _host_check(parts.netloc.rpartition("@")[2].strip("[]"), user, shown)
    return scheme


def _host_check(host: str, user: str, shown: str) -> None:
    """A host and user name that ssh cannot take for an option (ssh://-oProxyCommand=…/x, -oProxyCommand=…:x)."""
    if not host:
        raise ListingError(f"{shown!r}: no host name")
    if host.startswith("-") or user.startswith("-"):
        raise ListingError(f"{shown!r}: a host or user name starting with '-', which ssh would take as an option")


def _hidden(text: str) -> bool:
    """Whether text holds a control character or an invisible one (bidi override, zero width, line separator),
    which would make what is shown differ from what git is given."""
    return any(unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp") for char in text)


def branch_check(branch: str) -> str:
    """The branch name, stripped ("" for the repository's default branch), or ListingError: a name git's
    `check-ref-format --branch` refuses, or one it allows that a command line or refspec reads otherwise
    (starting with '-' or '+', '@')."""
    name = branch.strip()
    if not name:
        return ""
    if name.startswith(("-", "+")) or name == "@" or _hidden(name):
        raise ListingError(f"{name!r}: a branch name never starts with '-' or '+' nor holds control or invisible "
                           "formatting characters (see git check-ref-format)")
    try:
        _git("check-ref-format", "--branch", name)
    except ListingError:
        raise ListingError(f"{name!r}: not a branch name git accepts (git check-ref-format --branch)") from None
    return name


def redact(text: str) -> str:
    """Text safe to record or log: no user:password@ part of a URL."""
    return _USERINFO.sub(r"\1…@", text)


def cache_dir(source: Source) -> Path:
    return Path(settings.VAR_DIR) / "sources" / str(source.pk)


def _home() -> Path:
    """An empty directory as git's HOME and working directory outside a clone: no one's configuration."""
    home = Path(settings.VAR_DIR) / "sources" / ".git-home"
    home.mkdir(parents=True, exist_ok=True)
    return home


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


def _environment(secret: str | None) -> dict[str, str]:
    """Git's whole environment: what it needs and the operator's ssh, proxy and CA settings, nothing else of
    the server's (whose environment holds DATABASE_URL, SECRET_KEY and tokens); no system or global
    configuration; never a prompt (ssh in batch mode); the secret only to the askpass program."""
    home = _home()
    env = {name: os.environ[name] for name in _PASSED if name in os.environ}
    env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
    # where git finds its helpers (git-remote-https, ssh), as the server's own processes do
    env.update(PATH=os.environ.get("PATH", os.defpath), HOME=str(home), XDG_CONFIG_HOME=str(home), LC_ALL="C",
               GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_CEILING_DIRECTORIES=str(home.parent),
               GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="", SSH_ASKPASS="")
    if secret:
        env.update(GIT_ASKPASS=str(_askpass()), KB_GIT_USERNAME=ASKPASS_USER, KB_GIT_PASSWORD=secret)
    return env


def _git(*args: str, cwd: Path | None = None, secret: str | None = None, transport: str = "") -> str:
    """Run git with `_SAFE` options and `_environment`; `transport` is the one protocol it may use."""
    binary = shutil.which("git")
    if binary is None:
        raise ListingError("the git program is not installed on this server")
    allowed = ("-c", f"protocol.{transport}.allow=always") if transport else ()
    try:
        done = subprocess.run([binary, *_SAFE, *allowed, *args], cwd=cwd or _home(), env=_environment(secret),
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=GIT_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        raise ListingError(f"git {args[0]} took longer than {GIT_TIMEOUT} s") from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.decode(errors="replace").splitlines() if line.strip()]
        reason = f"git {args[0]} failed: {' / '.join(lines[-3:]) or f'exit status {done.returncode}'}"
        raise ListingError(scrub(redact(reason), secret))
    return done.stdout.decode(errors="surrogateescape")


def update(source: Source) -> Path:
    """The cache directory at the tip of the source's branch: cloned the first time (or after the location
    changed), else fetched and reset. Returns the work tree. The location and branch are checked again here,
    whatever wrote them (an older version, the database by hand), before git sees them."""
    transport = location_check(source.location)
    branch = branch_check(source.branch)
    secret = source_secret(source) if transport in ("https", "http") else None  # what git asks a password for
    work = cache_dir(source)
    if (work / ".git").is_dir() and _git("remote", "get-url", "origin", cwd=work).strip() == source.location:
        _git("fetch", "--quiet", "--depth", "1", "--no-tags", "--", "origin", branch or "HEAD", cwd=work,
             secret=secret, transport=transport)
        _git("reset", "--quiet", "--hard", "FETCH_HEAD", cwd=work)
        return work
    if work.exists():
        shutil.rmtree(work)
    work.parent.mkdir(parents=True, exist_ok=True)
    # No template (no sample hooks), the branch as --branch=NAME, and "--" before the location and the directory.
    _git("clone", "--quiet", "--depth", "1", "--no-tags", "--template=", *([f"--branch={branch}"] if branch else []),
         "--", source.location, str(work), secret=secret, transport=transport)
    return work


def _inside(path: str) -> bool:
    """Whether a path git lists stays in the work tree: no absolute, empty, '.', '..' or .git part."""
    parts = path.split("/")
    return all(part not in ("", ".", "..") and part.lower() != ".git" for part in parts)


def list_entries(source: Source) -> list[Entry]:
    """The regular files of the branch's tip (under the sub-path); the etag is the Git blob id, so an
    unchanged file is known without reading it. Symbolic links and submodules are left out; a file is read
    with `read_listed`, through no link, and only while it is the file listed."""
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
        if kind != "blob" or mode not in ("100644", "100755") or not _inside(path):
            continue
        try:
            found = os.lstat(work / path)
        except OSError:
            continue  # not checked out (a path git refuses to write)
        if not stat.S_ISREG(found.st_mode):
            continue
        entries.append(Entry(path=path, size=int(size), etag=f"git:{blob}", read=partial(read_listed, work, path, found),
                             modified=committed))
    return entries
