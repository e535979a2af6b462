"""Extraction in a child process with CPU-time and address-space limits.

Parsers have worst cases nobody has found yet (docutils is quadratic on unclosed inline
markup, a PDF page renders at any size): whatever a crafted file does to a reader, it does
it in a child that `resource.setrlimit` stops, so that document fails with a reason and the
worker goes on to the next. The child is forked from a *zygote*: an interpreter each process
starts once (`subprocess`, not `multiprocessing`: the ingest worker's pool processes are daemonic
and may not fork helpers that way) with only the extraction code imported, no Django, no torch,
and an environment without the worker's secrets. A fresh interpreter per file cost ~190 ms of CPU
against ~65 ms for a fork (bench/extraction.py). The worker passes the child's pipes to the zygote
over a Unix socket; the child sets its limits on itself after the fork.

The protocol is JSON lines on the child's stdout (a request line and the file's bytes go in on
stdin), so the worker never unpickles anything a parser of a hostile file ran next to.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import resource
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from kb.library.ingest.extract import Extracted, ExtractionError, Heading, Page, UnsupportedFile, display_name

log = logging.getLogger(__name__)

CPU_SETTING = "KB_EXTRACT_CPU_SECONDS"
MEMORY_SETTING = "KB_EXTRACT_MEMORY_MB"
_ROOT = Path(__file__).resolve().parents[3]
# `python -m kb.library.ingest.bounded` would run kb/__init__.py, which imports Celery (0.35 s a
# document); the child registers a bare `kb` package instead and imports only what it uses. It starts
# without `site` (-S), whose .pth files (the editable install's finder among them) cost ~80 ms of
# a ~200 ms child, and searches the parent's sys.path instead: the same modules, found the same way.
_BOOT = (
    "import os, sys, types; sys.path[:] = sys.argv[2].split(os.pathsep); "
    "kb = types.ModuleType('kb'); kb.__path__ = [sys.argv[1]]; sys.modules['kb'] = kb; "
    "from kb.library.ingest.bounded import zygote_main; zygote_main()"
)
ZYGOTE_ENDED = "the process that starts the readers (the extraction zygote) ended unexpectedly; a retry reads the file again"
_INT = struct.Struct("!i")  # a child's pid, then its exit code (negative: the signal that ended it)


def extract(
    *, data: bytes, mime: str, filename: str, ocr: bool, ocr_max_pixels: int, cpu_seconds: int, memory_mb: int,
    on_ocr_page: Callable[[int, int], None] | None = None,
) -> Extracted:
    """`kb.library.ingest.extract.extract` in a child limited to `cpu_seconds` of CPU (granted again for each
    page read by OCR) and `memory_mb` of address space.

    Raises what the reader raised (same class, same message), or ExtractionError naming the limit
    the child ran into.
    """
    name = display_name(filename)
    request = {"mime": mime, "filename": filename, "ocr": ocr, "ocr_max_pixels": ocr_max_pixels,
               "cpu_seconds": cpu_seconds, "memory_mb": memory_mb, "size": len(data)}
    with ZYGOTES.child() as child:
        return _converse(child, request, data, name=name, cpu_seconds=cpu_seconds, memory_mb=memory_mb,
                         on_ocr_page=on_ocr_page)


class Forked:
    """A reader child forked by a zygote: what `_converse` needs of a `subprocess.Popen`."""

    def __init__(self, pid: int, pipes: tuple[int, int, int], zygote: socket.socket) -> None:
        self.pid, self._zygote = pid, zygote
        self.returncode: int | None = None
        self.stdin, self.stdout, self.stderr = (os.fdopen(pipes[0], "wb"), os.fdopen(pipes[1], "rb", buffering=0),
                                                os.fdopen(pipes[2], "rb", buffering=0))

    def poll(self) -> int | None:
        if self.returncode is None:
            with selectors.DefaultSelector() as ready:
                ready.register(self._zygote, selectors.EVENT_READ)
                if ready.select(0):
                    self.wait()
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:  # the zygote reaps its child and says how it ended
            self.returncode = _INT.unpack(_receive(self._zygote, _INT.size))[0]
        return self.returncode

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    def close(self) -> None:
        for stream in (self.stdin, self.stdout, self.stderr):
            if not stream.closed:
                stream.close()


class Zygote:
    """An interpreter with the readers imported, forking a child for each file it is handed."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        self.owner = os.getpid()
        with theirs:
            self.process = subprocess.Popen(
                [sys.executable, "-S", "-c", _BOOT, str(_ROOT / "kb"), os.pathsep.join(sys.path)], cwd=_ROOT,
                env=_child_env(), stdin=theirs.fileno(), stdout=subprocess.DEVNULL,
            )
        self.socket = ours

    def fork(self) -> Forked:
        """A child reading stdin and answering on stdout, started by the zygote with pipes of ours."""
        stdin, stdout, stderr = os.pipe(), os.pipe(), os.pipe()
        try:
            socket.send_fds(self.socket, [b"f"], [stdin[0], stdout[1], stderr[1]])
            pid = _INT.unpack(_receive(self.socket, _INT.size))[0]
        except BaseException:
            for fd in (stdin[1], stdout[0], stderr[0]):
                os.close(fd)
            raise
        finally:
            for fd in (stdin[0], stdout[1], stderr[1]):
                os.close(fd)
        return Forked(pid, (stdin[1], stdout[0], stderr[0]), self.socket)

    def close(self) -> None:
        """Its socket closed, the zygote reads the end of its input and exits."""
        self.socket.close()
        if self.owner == os.getpid():
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=5)


class _Zygotes:
    """This process's idle zygotes: one per reader running at once (threads), started when first needed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[Zygote] = []

    @contextlib.contextmanager
    def child(self) -> Iterator[Forked]:
        """A reader child, killed if it is still running when the caller is done (also on a task's soft time
        limit: never leave a reader running); its zygote serves the next file once the child is reaped."""
        zygote, child = self._fork()
        try:
            yield child
        finally:
            reaped = False
            try:
                if child.poll() is None:
                    child.kill()
                child.wait()
                reaped = True
            except ExtractionError:  # the zygote died first: its child, now init's, is stopped all the same
                child.kill()
            finally:
                child.close()
                if reaped:
                    with self._lock:
                        self._idle.append(zygote)
                else:
                    zygote.close()

    def close(self) -> None:
        """End the idle zygotes (a fresh one starts for the next file)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for zygote in idle:
            zygote.close()

    def _fork(self) -> tuple[Zygote, Forked]:
        """From an idle zygote, or else a new one (also when the idle one has died)."""
        with self._lock:
            live = []
            for idle in self._idle:
                # A forked process (a Celery pool process) must not share its parent's zygotes: it closes its
                # copies of their sockets, so each still ends when its owner closes it.
                if idle.owner == os.getpid() and idle.process.poll() is None:
                    live.append(idle)
                else:
                    idle.socket.close()
            self._idle = live
            zygote = self._idle.pop() if self._idle else None
        if zygote is not None:
            try:
                return zygote, zygote.fork()
            except (OSError, ExtractionError):
                zygote.close()
        zygote = Zygote()
        return zygote, zygote.fork()


ZYGOTES = _Zygotes()


def _receive(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ExtractionError(ZYGOTE_ENDED)
        data += chunk
    return data


_SECRET = re.compile(r"SECRET|PASSWORD|TOKEN|KEY|_URL$")


def _child_env() -> dict[str, str]:
    """The worker's environment without what a parser exploited by a hostile file could use against us:
    the database and Redis URLs, the secret key, API keys and passwords."""
    kept = {name: value for name, value in os.environ.items() if not _SECRET.search(name.upper())}
    # glibc gives each thread (ONNX Runtime starts one a core) its own 64 MB heap reservation,
    # which counts against the address-space limit without ever being used.
    return {**kept, "MALLOC_ARENA_MAX": "2"}


def wall_seconds(cpu_seconds: int) -> float:
    """A reader blocked without using CPU (or starved of it on a busy machine) is stopped by the clock."""
    return 3 * cpu_seconds + 10


def _converse(child: Forked, request: dict[str, Any], data: bytes, *, name: str, cpu_seconds: int,
              memory_mb: int, on_ocr_page: Callable[[int, int], None] | None) -> Extracted:
    try:
        child.stdin.write(json.dumps(request).encode() + b"\n")
        child.stdin.write(data)
        child.stdin.close()
    except BrokenPipeError:
        pass  # the child died before reading it all: its exit status says why
    deadline = time.monotonic() + wall_seconds(cpu_seconds)
    answer: dict[str, Any] | None = None
    out, err = bytearray(), bytearray()
    with selectors.DefaultSelector() as selector:
        selector.register(child.stdout, selectors.EVENT_READ, out)
        selector.register(child.stderr, selectors.EVENT_READ, err)
        while selector.get_map() and answer is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ExtractionError(f"{name}: took longer than {wall_seconds(cpu_seconds):.0f} s to read "
                                      f"(by the clock; {CPU_SETTING} is {cpu_seconds})")
            for key, _ in selector.select(timeout=min(left, 1.0)):
                chunk = os.read(key.fd, 1 << 20)
                if not chunk:
                    selector.unregister(key.fileobj)
                elif key.data is err:
                    err.extend(chunk)
                    del err[:-8192]  # the reader's stray output: only its end is worth logging
                else:
                    out.extend(chunk)
                    while b"\n" in chunk and b"\n" in out and answer is None:  # an answer may come in many chunks
                        line, _, rest = bytes(out).partition(b"\n")
                        out[:] = rest
                        message = json.loads(line)
                        if "progress" in message:
                            if on_ocr_page is not None:
                                on_ocr_page(*message["progress"])
                            deadline = time.monotonic() + wall_seconds(cpu_seconds)
                        else:
                            answer = message
    if answer is None:
        raise _died(child.wait(), name=name, cpu_seconds=cpu_seconds, memory_mb=memory_mb, stderr=bytes(err))
    return _answer(answer, name=name, memory_mb=memory_mb)


def _died(code: int, *, name: str, cpu_seconds: int, memory_mb: int, stderr: bytes) -> ExtractionError:
    """Why a child ended without an answer, in the words an admin needs."""
    log.warning("extraction of %s ended with status %s: %s", name, code, stderr.decode(errors="replace")[-2000:])
    if code == -signal.SIGXCPU:  # RLIMIT_CPU's soft limit
        return ExtractionError(f"{name}: took longer than {cpu_seconds} s to read ({CPU_SETTING})")
    if code < 0:  # C code under RLIMIT_AS aborts on a failed allocation; SIGKILL: the system's OOM killer
        return ExtractionError(f"{name}: the reader crashed ({signal.Signals(-code).name}); "
                               f"it may have needed more than {memory_mb} MB ({MEMORY_SETTING})")
    return ExtractionError(f"{name}: the reader exited with status {code} without an answer")


def _answer(answer: dict[str, Any], *, name: str, memory_mb: int) -> Extracted:
    if "extracted" in answer:
        found = answer["extracted"]
        return Extracted(
            text=found["text"], headings=tuple(Heading(**h) for h in found["headings"]),
            pages=tuple(Page(**p) for p in found["pages"]), warnings=tuple(found["warnings"]), title=found["title"],
        )
    kind, message = answer["error"], answer["message"]
    if kind == "memory":
        raise ExtractionError(f"{name}: needed more than {memory_mb} MB to read ({MEMORY_SETTING})")
    if kind == "UnsupportedFile":
        raise UnsupportedFile(message)
    if kind == "ExtractionError":
        raise ExtractionError(message)
    log.error("extraction of %s failed in the child:\n%s", name, answer.get("traceback", ""))
    raise ReaderFailed(message)


class ReaderFailed(RuntimeError):
    """A reader raised something unexpected in the child (a bug, not the file's fault)."""


# --------------------------------------------------------------------------- the child


def zygote_main() -> None:
    """Import the readers once, then fork a child for each set of pipes the parent sends, and report its end."""
    from kb.library.ingest import extract  # noqa: F401  (every child reads with it)

    control = socket.socket(fileno=os.dup(0))
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # 0, 1 and 2 stay taken, so the pipes received never land on them
    os.close(devnull)
    while True:
        try:
            _, fds, _, _ = socket.recv_fds(control, 1, 3)
            if len(fds) != 3:  # the parent closed its end (or died)
                return
            pid = os.fork()
            if pid == 0:
                control.close()
                _child_after_fork(fds)
            for fd in fds:
                os.close(fd)
            control.sendall(_INT.pack(pid))
            _, status = os.waitpid(pid, 0)
            control.sendall(_INT.pack(os.waitstatus_to_exitcode(status)))
        except OSError:  # the parent is gone
            return


def _child_after_fork(fds: list[int]) -> None:
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    code = 0
    try:
        child_main()
    except BaseException:  # as an interpreter would: the traceback on stderr, status 1
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        sys.stderr.flush()
        os._exit(code)


def child_main() -> None:
    """Read one request from stdin, extract under the limits, write the answer to stdout."""
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # a library's print() must not corrupt the protocol
    stdin = sys.stdin.buffer
    request = json.loads(stdin.readline())
    cpu_seconds, memory_mb = int(request["cpu_seconds"]), int(request["memory_mb"])
    signal.signal(signal.SIGXCPU, signal.SIG_DFL)  # a parent that ignored it must not keep the limit from acting
    _limit_memory(memory_mb)
    _grant_cpu(cpu_seconds)
    data = stdin.read(int(request["size"]))

    from kb.library.ingest import extract

    def page_done(done: int, total: int) -> None:
        _send(out, {"progress": [done, total]})
        _grant_cpu(cpu_seconds)  # each page read by OCR gets the budget again

    try:
        found = extract.extract(data=data, mime=request["mime"], filename=request["filename"], ocr=request["ocr"],
                                ocr_max_pixels=request["ocr_max_pixels"], on_ocr_page=page_done)
        del data
        answer: dict[str, Any] = {"extracted": asdict(found)}
    except BaseException as exc:
        answer = _error(exc)
    _send(out, answer)


def _error(exc: BaseException) -> dict[str, str]:
    import traceback

    cause: BaseException | None = exc
    while cause is not None:  # readers wrap what their library raised; a failed allocation anywhere is the limit
        if isinstance(cause, MemoryError) or "std::bad_alloc" in str(cause):  # C++ libraries (ONNX Runtime) say so
            return {"error": "memory", "message": ""}
        cause = cause.__cause__ or cause.__context__
    if isinstance(exc, (ExtractionError, UnsupportedFile)):
        return {"error": type(exc).__name__, "message": str(exc)}
    return {"error": "internal", "message": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}


def _send(out: IO[str], message: dict[str, Any]) -> None:
    out.write(json.dumps(message) + "\n")
    out.flush()


def _limit_memory(megabytes: int) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = megabytes * 2**20 if hard == resource.RLIM_INFINITY else min(megabytes * 2**20, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _grant_cpu(seconds: int) -> None:
    """Move the soft CPU limit to `seconds` past what this process has used so far.

    The hard limit stays where it was (usually unlimited), so the limit can be moved again;
    SIGXCPU at the soft limit ends the process.
    """
    usage = resource.getrusage(resource.RUSAGE_SELF)
    used = int(usage.ru_utime + usage.ru_stime) + 1
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = used + seconds if hard == resource.RLIM_INFINITY else min(used + seconds, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
