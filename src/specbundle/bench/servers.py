"""Start, probe and stop the engine processes the benchmark measures (loopback only).

A server is either started from the bundle's rendered shell script (``run.sh`` honours
``SPECBUNDLE_HOST``/``SPECBUNDLE_PORT``/``SPECBUNDLE_SPECULATION`` and the binary override),
started from an argv (the draft served alone), or an already running one given by URL.
Started processes get their own session so the whole process group is stopped, whatever
happened inside the block, and on Linux a parent-death signal, so a benchmark killed outright
(kill -9, an OOM kill, a CI timeout) leaves no engine behind holding a core and a port.
Plain HTTP calls use httpx; only the measurement client streams.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from specbundle._fsutil import open_append
from specbundle.bench.prometheus import Scrape, parse_scrape
from specbundle.errors import BenchError
from specbundle.strict import MalformedDocument, open_regular

__all__ = ["attach", "binary_env", "free_port", "get_json", "launch", "resolve_program", "scrape",
           "served_model"]

_LOCAL = ("127.0.0.1", "localhost", "::1")


_PR_SET_PDEATHSIG = 1
_TAIL_BYTES = 64 * 1024


def _die_with_parent() -> Any:
    """A ``preexec_fn`` that asks the kernel to SIGTERM the child when its parent dies.

    Hand-written (ctypes ``prctl``) because ``subprocess`` has no such option. The libc
    function is looked up here, before the fork, so the child only makes the call; a parent
    already gone by then is caught by comparing the parent pid. ``None`` off Linux.
    """
    if os.uname().sysname != "Linux":
        return None
    try:
        prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)
    return preexec


def free_port(host: str = "127.0.0.1") -> int:
    """A loopback TCP port that was free a moment ago."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _tail(log: Path, n: int = 25) -> str:
    try:
        with open_regular(log) as fh:  # never blocks on a FIFO planted in its place
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - _TAIL_BYTES))
            text = fh.read(_TAIL_BYTES).decode(errors="replace")
        return "\n".join(text.splitlines()[-n:])
    except (OSError, MalformedDocument):
        return "(no log)"


def _wait_healthy(url: str, health: str, timeout: float, proc: subprocess.Popen[bytes] | None,
                  log: Path | None) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc is not None and proc.poll() is not None:
            raise BenchError(f"engine exited with {proc.returncode} before it was healthy:\n"
                             f"{_tail(log) if log else ''}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + health, timeout=2.0, trust_env=False).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise BenchError(f"engine at {url} not healthy after {timeout:.0f}s"
                             + (f":\n{_tail(log)}" if log else ""))
        time.sleep(0.1)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@contextlib.contextmanager
def launch(argv: Sequence[str], *, env: Mapping[str, str], host: str, port: int, log: Path,
           health: str = "/health", timeout: float = 300.0) -> Iterator[str]:
    """Run ``argv`` (a script or a server command) and yield its base URL once healthy."""
    if host not in _LOCAL:
        raise BenchError(f"the benchmark starts engines on loopback only, not {host!r}")
    full_env = {**os.environ, **env, "NO_PROXY": "127.0.0.1,localhost"}
    with os.fdopen(open_append(log), "ab") as out:  # never through a planted link
        try:
            proc = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT,
                                    env=full_env, start_new_session=True,
                                    preexec_fn=_die_with_parent())
        except OSError as err:
            raise BenchError(f"cannot start {argv[0]}: {err.strerror}") from None
    url = f"http://{host}:{port}"
    try:
        _wait_healthy(url, health, timeout, proc, log)
        yield url
    finally:
        _stop(proc)


@contextlib.contextmanager
def attach(url: str, *, health: str = "/health", timeout: float = 30.0) -> Iterator[str]:
    """An already running server: only checks that it is healthy."""
    base = url.rstrip("/")
    _wait_healthy(base, health, timeout, None, None)
    yield base


def get_json(url: str, path: str | None) -> dict[str, Any] | None:
    """GET a JSON document; ``None`` when the engine has no such endpoint."""
    if path is None:
        return None
    try:
        r = httpx.get(url + path, timeout=10.0, trust_env=False)
    except httpx.HTTPError:
        return None
    if r.status_code != 200:
        return None
    try:
        doc = r.json()
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def scrape(url: str, path: str = "/metrics") -> Scrape:
    """One ``/metrics`` page, parsed; a server without metrics is a :class:`BenchError`."""
    try:
        r = httpx.get(url + path, timeout=10.0, trust_env=False)
    except httpx.HTTPError as err:
        raise BenchError(f"cannot read {url}{path}: {err}") from None
    if r.status_code != 200:
        raise BenchError(f"{url}{path} answered HTTP {r.status_code}",
                         hint="llama-server needs --metrics, SGLang --enable-metrics")
    return parse_scrape(r.text)


def served_model(url: str) -> str:
    """The model id the server expects in requests (``/v1/models``), or ``default``."""
    doc = get_json(url, "/v1/models")
    data = doc.get("data") if doc else None
    if isinstance(data, list) and data and isinstance(data[0], dict) and "id" in data[0]:
        return str(data[0]["id"])
    return "default"


def binary_env(binary: Path | None, env_name: str) -> dict[str, str]:
    """The engine binary override for a rendered script (``LLAMA_SERVER=...``)."""
    if binary is not None:
        return {env_name: str(binary)}
    found = os.environ.get(env_name)
    return {env_name: found} if found else {}


def resolve_program(program: tuple[str, ...], env: Mapping[str, str], env_name: str) -> list[str]:
    """The first word of a command with the binary override applied, else from PATH."""
    first = env.get(env_name) or shutil.which(program[0])
    if not first:
        raise BenchError(f"{program[0]} not found", hint=f"set {env_name} or put it on PATH")
    if not shutil.which(first):
        raise BenchError(f"engine binary {first} ({env_name} / --binary) is not an executable "
                         "file", hint=f"point {env_name} or --binary at the {program[0]} binary")
    return [first, *program[1:]]
