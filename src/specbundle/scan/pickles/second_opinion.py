"""Optional second opinions: picklescan (strict mode) and ModelAudit's pickle scanner
(``modelaudit-picklescan``), run as sandboxed subprocesses on every pickle-bearing file.

They are extras (``pip install specbundle[scanners]``), never the gate: the built-in allow-list
walk decides. But their answers are fail-closed: a crash, a timeout, an unknown exit code, a
parse warning or "nothing scanned" is a blocking finding, never a clean result. Each runs
without network (a user+network namespace via ``unshare -rn`` where the kernel allows it, and
telemetry/proxy variables that go nowhere) and with a timeout. A tool that is not installed is
recorded as "not run".

Their cost is bounded up front as well as by the timeout: modelaudit-picklescan's analysis grows
with the square of a stream's opcodes (a 2 MB pickle of small opcodes took 44 s, a 10 MB one hit
the timeout), so a tool is not started on more pickle bytes than it analyses in bounded time;
that file gets the same blocking "failed" finding a timeout would give, at once ("too large to
analyse"), instead of minutes later. The (tool, file) runs share the machine's cores.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import ClassVar

from specbundle.scan.findings import CheckOutcome, Finding, SecondOpinion, Severity, finding
from specbundle.scan.interface import Check, CheckContext
from specbundle.scan.pickles.zipwalk import ZipAmbiguity, walk_zip
from specbundle.scan.sniff import FileKind

__all__ = ["TOOLS", "SecondOpinionCheck", "Tool", "Verdict", "offline_prefix", "pickle_bytes",
           "run_tool"]

_TORCH_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")


@dataclass(frozen=True)
class Verdict:
    """One tool's verdict on one file (clean, flagged, inconclusive, failed) and why."""

    status: str
    detail: str


def _picklescan_verdict(rc: int, out: str) -> Verdict:
    scanned = re.search(r"Scanned files: (\d+)", out)
    if scanned is None or scanned.group(1) == "0":
        return Verdict("failed", "nothing scanned")
    if rc == 1:
        hits = [ln for ln in out.splitlines() if "FOUND" in ln or "dangerous" in ln.lower()]
        return Verdict("flagged", "; ".join(hits)[:500] or "dangerous globals")
    if rc != 0:
        return Verdict("failed", f"exit code {rc}")
    if re.search(r"could not parse|ERROR", out):
        return Verdict("failed", "scan error: " + out.strip().splitlines()[0][:300])
    return Verdict("clean", "")


def _map_verdict(rc: int, out: str) -> Verdict:
    """modelaudit-picklescan, mapped explicitly: its fail-closed status/verdict pair.

    MALICIOUS blocks; an ERROR status or nothing scanned is a failure; INCONCLUSIVE or
    SUSPICIOUS without a malicious verdict is recorded as inconclusive (it says this for every
    benign torch state dict when torch is not importable, so it is advisory, per the
    reference study); only COMPLETE + CLEAN is clean.
    """
    try:
        doc = json.loads(out.strip().splitlines()[-1]) if rc == 0 else None
    except (ValueError, IndexError):
        doc = None
    if not isinstance(doc, dict):
        return Verdict("failed", f"exit code {rc}: {out.strip()[-300:]}")
    status, verdict = doc.get("status"), doc.get("verdict")
    if verdict == "malicious":
        return Verdict("flagged", "; ".join(doc.get("findings", []))[:500])
    if status == "error" or not doc.get("opcodes"):
        return Verdict("failed", f"status {status}, {doc.get('opcodes', 0)} opcodes scanned")
    if status == "complete" and verdict == "clean":
        return Verdict("clean", "")
    return Verdict("inconclusive", f"status {status}, verdict {verdict}: "
                   + "; ".join(doc.get("findings", []))[:400])


# Runs inside the subprocess; prints one JSON line (the package has no CLI).
_MAP_SCRIPT = (
    "import json,sys\n"
    "from modelaudit_picklescan import scan_file\n"
    "r=scan_file(sys.argv[1])\n"
    "print(json.dumps({'status':r.status.value,'verdict':r.verdict.value,"
    "'opcodes':r.coverage.opcode_count,"
    "'findings':[f'{f.rule_code}: {f.message}' for f in r.findings]}))\n"
)


@dataclass(frozen=True)
class Tool:
    """An external scanner: where it is, how to call it on one file, how to read its answer."""

    name: str
    distribution: str
    locate: Callable[[], str | None]
    argv: Callable[[str, str], list[str]]
    verdict: Callable[[int, str], Verdict]
    # pickle bytes past which the tool is not started (its cost is superlinear); None: no cap
    max_pickle_bytes: int | None = None

    def version(self) -> str | None:
        """Installed version, from package metadata (the tool is not imported)."""
        try:
            return metadata.version(self.distribution)
        except metadata.PackageNotFoundError:
            return None


def _console_script(name: str) -> Callable[[], str | None]:
    def locate() -> str | None:
        local = Path(sys.executable).parent / name
        return str(local) if local.exists() else shutil.which(name)
    return locate


def _python_module(module: str) -> Callable[[], str | None]:
    def locate() -> str | None:
        return sys.executable if importlib.util.find_spec(module) is not None else None
    return locate


TOOLS: tuple[Tool, ...] = (
    # linear, ~2 MB/s of small opcodes: 32 MiB stays well inside the default timeout
    Tool("picklescan", "picklescan", _console_script("picklescan"),
         lambda exe, p: [exe, "--strict", "-p", p], _picklescan_verdict, 32 << 20),
    # quadratic in opcodes (15k, 30k, 60k dict entries: 1.7, 3.8, 11.6 s): 1 MiB is ~4 s
    Tool("modelaudit-picklescan", "modelaudit-picklescan",
         _python_module("modelaudit_picklescan"),
         lambda exe, p: [exe, "-I", "-c", _MAP_SCRIPT, p], _map_verdict, 1 << 20),
)


@functools.cache
def offline_prefix() -> tuple[str, ...]:
    """``unshare -rn`` when this kernel lets an unprivileged user drop the network."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return ()
    try:
        ok = subprocess.run([unshare, "-rn", "true"], capture_output=True, timeout=10,
                            check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return (unshare, "-rn") if ok else ()


def _offline_env(home: str) -> dict[str, str]:
    dead = "http://127.0.0.1:9"
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "LANG": "C.UTF-8",
        "PROMPTFOO_DISABLE_TELEMETRY": "1", "NO_ANALYTICS": "1", "DO_NOT_TRACK": "1",
        "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
        "HTTP_PROXY": dead, "HTTPS_PROXY": dead, "http_proxy": dead, "https_proxy": dead,
        "ALL_PROXY": dead, "NO_PROXY": "",
    }


def pickle_bytes(path: Path, kind: FileKind) -> int:
    """How many bytes of pickle a file holds: a zip's ``.pkl`` members (uncompressed, as its
    central directory says), else the whole file (an unreadable zip counts whole)."""
    size = path.stat().st_size
    if kind is FileKind.ZIP:
        try:
            return sum(e.usize for e in walk_zip(path).entries if e.name.endswith(".pkl"))
        except (ZipAmbiguity, OSError, ValueError):
            return size
    return size


class _Children:
    """The tool subprocesses one check started, so that an interrupted check (Ctrl-C, an
    error) kills them at once instead of leaving worker threads waiting on their timeouts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._procs: list[subprocess.Popen[bytes]] = []
        self._stopped = False

    def start(self, argv: list[str], home: str) -> subprocess.Popen[bytes] | None:
        """A started tool, or None once the check is being stopped."""
        with self._lock:
            if self._stopped:
                return None
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    env=_offline_env(home), cwd=home)
            self._procs.append(proc)
            return proc

    def kill_all(self) -> None:
        """Stop starting tools and kill the running ones."""
        with self._lock:
            self._stopped = True
            for proc in self._procs:
                if proc.poll() is None:
                    proc.kill()


def run_tool(tool: Tool, exe: str, path: Path, timeout: float, kind: FileKind | None = None,
             children: _Children | None = None) -> Verdict:
    """Run one tool on one file, offline and time-limited (and size-limited, given its kind)."""
    if tool.max_pickle_bytes is not None and kind is not None:
        try:
            size = pickle_bytes(path, kind)
        except OSError as err:
            return Verdict("failed", f"could not measure the file: {err.strerror}")
        if size > tool.max_pickle_bytes:
            return Verdict("failed", f"too large to analyse: {size} bytes of pickle, over the "
                           f"{tool.max_pickle_bytes} it analyses in bounded time; not run")
    with tempfile.TemporaryDirectory(prefix="specbundle-2nd-") as home:
        argv = [*offline_prefix(), *tool.argv(exe, str(path))]
        try:
            proc = (children or _Children()).start(argv, home)
        except OSError as err:
            return Verdict("failed", f"could not start: {err}")
        if proc is None:
            return Verdict("failed", "not run: the scan was interrupted")
        try:
            out, err_out = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return Verdict("failed", f"timed out after {timeout:g} s")
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    text = out.decode(errors="replace") + err_out.decode(errors="replace")
    return tool.verdict(proc.returncode, text)


class SecondOpinionCheck(Check):
    """Runs the installed external scanners on every pickle-bearing file."""

    family = "second-opinion"
    rules: ClassVar[dict[str, str]] = {
        "second-opinion.flagged": "An external scanner flagged the file",
        "second-opinion.failed": "An external scanner crashed, timed out or scanned nothing",
        "second-opinion.inconclusive": "An external scanner could not decide (advisory)",
        "second-opinion.not-run": "An external scanner is not installed (recorded)",
    }
    tools: tuple[Tool, ...] = TOOLS

    def run(self, ctx: CheckContext) -> CheckOutcome:
        """Each tool on each pickle-bearing file; a summary per tool."""
        targets = [(t.role, PurePosixPath(f.rel), t.root / f.rel, ctx.kind(f.path))
                   for t in ctx.trees for f in t.files
                   if self._pickle_bearing(f.rel, ctx.kind(f.path))]
        findings: list[Finding] = []
        opinions: list[SecondOpinion | None] = []
        jobs: list[tuple[int, Tool, str]] = []
        for i, tool in enumerate(self.tools):
            exe = tool.locate() if ctx.options.second_opinions and targets else None
            if not targets or exe is None:
                why = ("disabled" if not ctx.options.second_opinions else
                       "no pickle-bearing files" if not targets else "not installed")
                opinions.append(SecondOpinion(tool.name, "not-run", why))
                if targets and ctx.options.second_opinions:
                    findings.append(finding("second-opinion.not-run", Severity.INFO,
                                            f"{tool.name} not installed; not run", tool=tool.name))
                continue
            opinions.append(None)
            jobs.append((i, tool, exe))
        # each run is a subprocess: threads only wait, the runs share the cores
        workers = max(1, min(len(jobs) * len(targets), os.cpu_count() or 1, 4))
        children = _Children()
        with ThreadPoolExecutor(max_workers=workers) as pool:
            try:
                futures = {}
                for i, tool, exe in jobs:
                    for role, rel, path, kind in targets:
                        if ctx.options.progress:
                            ctx.options.progress(f"{tool.name} {rel}")
                        futures[(i, rel, role)] = pool.submit(
                            run_tool, tool, exe, path, ctx.options.second_opinion_timeout_s,
                            kind, children)
                verdicts = {key: f.result() for key, f in futures.items()}
            except BaseException:  # Ctrl-C or an error: no tool outlives the check
                pool.shutdown(wait=False, cancel_futures=True)
                children.kill_all()
                raise
        for i, tool, _exe in jobs:
            statuses = []
            for role, rel, _path, _kind in targets:
                v = verdicts[(i, rel, role)]
                statuses.append(v.status)
                if v.status != "clean":
                    sev = Severity.MEDIUM if v.status == "inconclusive" else Severity.HIGH
                    findings.append(finding(f"second-opinion.{v.status}", sev,
                                            f"{tool.name}: {v.detail}", str(rel),
                                            tool=tool.name).with_role(role))
            status = next((s for s in ("failed", "flagged", "inconclusive")
                           if s in statuses), "clean")
            opinions[i] = SecondOpinion(tool.name, status, "", tool.version(), len(targets))
        return CheckOutcome(findings=tuple(findings),
                            second_opinions=tuple(o for o in opinions if o is not None))

    @staticmethod
    def _pickle_bearing(rel: str, kind: FileKind) -> bool:
        return kind is FileKind.PICKLE or (kind is FileKind.ZIP and rel.endswith(_TORCH_SUFFIXES))
