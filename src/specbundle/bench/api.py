"""``run_bench``: the benchmark stage's one entry point.

It reads the bundle from the mirror, starts both arms from the bundle's own rendered shell
manifest (or attaches to running servers), measures, analyses, and stores
``bundles/<name>/bench/<run-id>/report.json`` (+ ``report.html`` and the engine logs).
The JSON is written last, so a run directory with a ``report.json`` is always complete.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from specbundle import __version__
from specbundle._fsutil import real_dir, remove_at
from specbundle.bench import stats
from specbundle.bench.analysis import (
    AnalysisInputs,
    analyse_levels,
    c_settled,
    ceiling,
    decision_settled,
    validity,
)
from specbundle.bench.engines import adapter_for
from specbundle.bench.html import render_html
from specbundle.bench.logs import sum_llamacpp_slots
from specbundle.bench.report import SCHEMA_VERSION, BenchReport, RunSettings
from specbundle.bench.runner import (
    BenchOptions,
    Progress,
    RawRun,
    new_run_id,
    run_raw,
)
from specbundle.bench.servers import attach, binary_env, free_port, launch, resolve_program
from specbundle.bench.verdict import bench_verdict
from specbundle.bench.workload import (
    Workload,
    default_workload,
    prompts_from_bytes,
)
from specbundle.bundle import Bundle
from specbundle.errors import BenchError, CorruptMirror
from specbundle.mirror import Mirror, utc_now
from specbundle.render import render_bundle
from specbundle.spec import BundleSpec
from specbundle.strict import MalformedDocument, loads_json, read_mirror_file

__all__ = ["load_report", "report_path", "run_bench"]

_MAX_ENGINE_LOG = 256 * 1024 * 1024


def report_path(mirror: Mirror, name: str, run_id: str) -> Path:
    """Where a run's ``report.json`` lives."""
    return mirror.bundle_dir(name) / "bench" / run_id / "report.json"


def load_report(mirror: Mirror, name: str, run_id: str) -> BenchReport:
    """Read a stored report back (validated against the schema's dataclasses)."""
    data = mirror.read_bundle_file(name, f"bench/{run_id}/report.json")
    if data is None:
        raise BenchError(f"bundle {name!r} has no bench run {run_id!r}")
    try:
        doc = loads_json(data, what=f"bench report {run_id}")
    except MalformedDocument as err:
        raise BenchError(str(err)) from None
    return BenchReport.from_json(doc)


def _workload(bundle: Bundle) -> Workload:
    """The benchmark prompts: the bytes the bundle value gives (see :meth:`Bundle.prompts`)."""
    found = bundle.prompts()
    return default_workload() if found is None else prompts_from_bytes(*found)


def _subsequence(short: tuple[str, ...], long: tuple[str, ...]) -> bool:
    it = iter(long)
    return all(any(x == y for y in it) for x in short)


class _Manifest:
    """Both arms from the rendered manifest; the draft alone from the baseline command.

    ``shell`` runs the rendered ``serve.sh`` with the host binary (``SPECBUNDLE_SPECULATION``
    picks the arm); ``docker`` runs the same commands in the bundle's loaded engine image
    (``specbundle images load``), pinned by image ID, bound to loopback.
    """

    def __init__(self, bundle: Bundle, engine: str, opts: BenchOptions, log_dir: Path) -> None:
        if opts.runtime not in ("shell", "docker"):
            raise BenchError(f"unknown runtime {opts.runtime!r}; allowed: shell, docker")
        self.mirror, self.opts, self.log_dir = bundle.mirror, opts, log_dir
        spec, rec = bundle.spec, bundle.record
        result = render_bundle(bundle, engine, "shell")
        self.spec_cmd, self.base_cmd = result.command, result.baseline
        scripts = [f for f in result.files if f.suffix == ".sh"]
        if not scripts:
            raise BenchError(f"render wrote no shell script into {result.out_dir}")
        self.script = scripts[0]
        # what runs is the script just rendered, from a private folder outside the mirror:
        # never the file in the mirror, which anyone who writes the mirror could swap
        self.private = Path(tempfile.mkdtemp(prefix="specbundle-bench-"))
        self.run_script = self.private / self.script.name
        fd = os.open(self.run_script, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                     0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(result.contents[self.script.name])
        self.env = binary_env(opts.binary, self.base_cmd.binary_env)
        if opts.runtime == "shell":  # fail before any launch, naming the binary and the fix
            resolve_program(self.base_cmd.program, self.env, self.base_cmd.binary_env)
        self.settings_equal = _subsequence(self.base_cmd.args, self.spec_cmd.args)
        self.settings_note = (
            "the speculative arm adds only speculation flags to the baseline command"
            if self.settings_equal else
            f"baseline args {list(self.base_cmd.args)} are not contained in "
            f"{list(self.spec_cmd.args)}")
        self.argv = {"spec": list(self.spec_cmd.argv), "base": list(self.base_cmd.argv)}
        self.draft_args: list[str] | None = None
        #: extra arms served from their own argv (``tune``'s K settings), by arm name
        self.variants: dict[str, list[str]] = {}
        draft_dir = self.spec_cmd.draft_path
        if opts.measure_draft and draft_dir is not None and spec.draft is not None:
            adapter = adapter_for(engine)
            model = str(draft_dir / spec.draft.gguf_file) if adapter.serves_gguf and \
                spec.draft.gguf_file else str(draft_dir)
            self.draft_args = adapter.draft_only_argv(self.base_cmd.args, model)
        self.image: Any = None
        if opts.runtime == "docker":  # the bundle value's record: signed when verified
            self.image = bundle.image_record(engine)
            if self.image is None:
                raise BenchError(f"bundle {rec.name!r} carries no {engine} engine image",
                                 hint="specbundle images save (connected side), then "
                                      "specbundle images load (isolated side)")

    @contextlib.contextmanager
    def launcher(self, arm: str) -> Iterator[str]:
        port = free_port(self.opts.host)
        log = self.log_dir / f"{arm}.log"
        if self.opts.runtime == "docker":
            with self._container(arm, port, log) as url:
                yield url
            return
        direct = {**self.variants, "draft": self.draft_args}.get(arm)
        if arm == "draft" or arm in self.variants:  # argv run directly, not the script
            assert direct is not None  # noqa: S101 - only asked for when set
            cmd = self.base_cmd
            argv = [*resolve_program(cmd.program, self.env, cmd.binary_env), *direct,
                    cmd.host_flag, self.opts.host, cmd.port_flag, str(port)]
            env = {**cmd.env_dict, **self.env}
        else:
            argv = ["sh", str(self.run_script)]
            env = {**self.env, "SPECBUNDLE_HOST": self.opts.host, "SPECBUNDLE_PORT": str(port),
                   "SPECBUNDLE_SPECULATION": "1" if arm == "spec" else "0"}
        with launch(argv, env=env, host=self.opts.host, port=port, log=log,
                    health=self.base_cmd.health_path,
                    timeout=self.opts.startup_timeout_s) as url:
            yield url

    @contextlib.contextmanager
    def _container(self, arm: str, port: int, log: Path) -> Iterator[str]:
        from specbundle.images import run_container, serve_container

        timeout = self.opts.startup_timeout_s
        if arm != "draft":
            cmd = self.spec_cmd if arm == "spec" else self.base_cmd
            with serve_container(cmd, self.image, mirror=self.mirror, port=port, log=log,
                                 health_timeout=timeout) as run:
                yield run.base_url
            return
        assert self.draft_args is not None  # noqa: S101 - only asked for when set
        cmd = self.base_cmd
        argv = [*cmd.container_program, *self.draft_args, cmd.host_flag, "127.0.0.1",
                cmd.port_flag, str(port)]
        with run_container(self.image, argv, mirror=self.mirror, port=port, env=cmd.env_dict,
                           gpus=cmd.gpus, log=log) as run, \
                attach(run.base_url, health=cmd.health_path, timeout=timeout) as url:
            yield url


def _build_report(raw: RawRun, spec: BundleSpec, name: str, workload: Workload,
                  opts: BenchOptions, rounds: int, n_req: int, max_tokens: int,
                  warmup: int) -> BenchReport:
    st = raw.stopping  # the ratio CIs are the rule's repeated CIs at the stopping time
    inp = AnalysisInputs(max_tokens=max_tokens, confidence=opts.confidence,
                         min_ratio_lower_bound=spec.admission.min_throughput_ratio_lower_bound,
                         min_token_agreement=spec.admission.min_token_agreement,
                         min_agreement_vs_floor=spec.admission.min_agreement_vs_floor,
                         ratio_confidence=st.per_look_confidence if st else None)
    levels = analyse_levels(raw, inp)
    crossover = stats.crossover_concurrency([lv.concurrency for lv in levels],
                                            [lv.ratio.low if lv.ratio else None for lv in levels])
    settings = RunSettings(
        endpoint=adapter_for(raw.engine).measure_endpoint(spec.bench.endpoint),
        max_tokens=max_tokens,
        temperature=spec.speculative.temperature, ignore_eos=True, requests_per_level=n_req,
        rounds=rounds, round_order=raw.round_order, warmup_requests=warmup, levels=raw.levels,
        p95_concurrency=spec.deployment.p95_concurrency, confidence=opts.confidence,
        mode="base-url" if opts.base_url else "manifest",
    )
    notes = list(raw.notes)
    valid = validity(raw, inp)
    bad_c = [lv for lv in levels if lv.c_check is not None and not lv.c_check.consistent]
    if bad_c:  # one of the gate's inputs is wrong: a validity problem, never a pass
        valid = replace(valid, problems=(*valid.problems, *(
            f"c at concurrency {lv.concurrency} disagrees with the A/B result: "
            f"{lv.c_check.note}" for lv in bad_c if lv.c_check)))
    for lv in levels:
        if lv.alpha_above_c is False:
            c_hi = lv.c_ci.high if lv.c_ci else lv.c_measured
            notes.append(f"concurrency {lv.concurrency}: α = {lv.acceptance.alpha:.3f} ≤ c = "
                         f"{c_hi:.3f} (upper bound): no speed-up is possible at any draft depth")
        if lv.acceptance.depth_too_deep:
            notes.append(f"concurrency {lv.concurrency}: per-position acceptance collapses "
                         "after position 1: draft depth too deep")
    aa = None
    p95 = spec.deployment.p95_concurrency
    if raw.aa is not None:
        tb = [r.output_throughput for r in raw.base.runs.get(p95, [])]
        ta = [r.output_throughput for r in raw.aa.runs.get(p95, [])]
        if len(tb) >= 2 and len(ta) >= 2 and min(tb + ta) > 0:
            aa = stats.welch_ratio_ci(tb, ta, confidence=opts.confidence)
            notes.append(f"A/A noise at concurrency {p95}: baseline relaunched gives ratio "
                         f"{aa.ratio:.3f} [{aa.low:.3f}, {aa.high:.3f}]")
    report = BenchReport(
        schema_version=SCHEMA_VERSION, run_id=raw.run_id, bundle=name, engine=raw.engine,
        created=utc_now(), tool_version=__version__, settings=settings,
        workload_source=workload.source, workload_sha256=workload.sha256,
        prompts=len(workload.prompts), server=raw.server, levels=levels,
        crossover_concurrency=crossover, ceiling=ceiling(raw.base, raw.spec, raw.engine),
        validity=valid, aa_noise=aa, notes=tuple(notes), stopping=raw.stopping,
    )
    return dataclasses.replace(report, verdict=bench_verdict(report))  # the decision first


def _engine_log(path: Path) -> bytes:
    """A log this run's engine wrote under the mirror's ``tmp/``: never a FIFO planted there."""
    try:
        return read_mirror_file(path, max_bytes=_MAX_ENGINE_LOG, what=str(path))
    except MalformedDocument as err:
        raise CorruptMirror(str(err)) from None


def _store(mirror: Mirror, report: BenchReport, log_dir: Path) -> None:
    base = f"bench/{report.run_id}"
    for log in sorted(log_dir.glob("*.log")):
        mirror.write_bundle_file(report.bundle, f"{base}/logs/{log.name}", _engine_log(log))
    mirror.write_bundle_file(report.bundle, f"{base}/report.html", render_html(report).encode())
    mirror.write_bundle_file(report.bundle, f"{base}/report.json", report.to_bytes())
    with mirror.lock():
        mirror.append_event("bench", report.bundle, {
            "run_id": report.run_id, "engine": report.engine,
            "report": f"bundles/{report.bundle}/{base}/report.json"})


def run_bench(bundle: Bundle, *, engine: str = "llamacpp",
              options: BenchOptions | None = None,
              progress: Progress | None = None) -> BenchReport:
    """Benchmark ``bundle`` on ``engine`` with and without speculation; store the report.

    Everything measured comes from the bundle value: its record and spec, its prompts, its
    engine image record and tuned schedule (for a verified bundle, only the signed ones).
    """
    opts = options or BenchOptions()
    mirror, spec, name = bundle.mirror, bundle.spec, bundle.name
    if not opts.base_url and engine not in {e.value for e in spec.engines.enabled()}:
        raise BenchError(f"bundle {name!r} has no {engine} settings to render and run",
                         hint=f"enabled engines: {[e.value for e in spec.engines.enabled()]}")
    workload = _workload(bundle)
    run_id = opts.run_id or new_run_id()
    log_dir = real_dir(mirror.root, f"tmp/bench-{run_id}")
    private: Path | None = None
    try:
        server: dict[str, Any] = {"mode": opts.mode, "custody": bundle.custody()}
        launcher = None
        can_draft = False
        settings_equal: bool | None = None
        note = "servers given by URL: settings not compared"
        if not opts.base_url:
            tuned = bundle.tuned_schedule(engine)
            if tuned is not None:  # render put it in force: the bench measures what deploys
                server["tuned_schedule"] = {**tuned.to_json(), "sha256": tuned.digest,
                                            "off_levels": list(tuned.off_levels),
                                            "k_at_p95": tuned.at(tuned.p95_concurrency).k}
            man = _Manifest(bundle, engine, opts, log_dir)
            private = man.private
            launcher, can_draft = man.launcher, man.draft_args is not None
            settings_equal, note = man.settings_equal, man.settings_note
            server.update(script=str(man.script), argv=man.argv, runtime=opts.runtime)
        p95 = spec.deployment.p95_concurrency
        ll, target = spec.engines.llamacpp, (opts.target_ratio
                                             or spec.admission.min_throughput_ratio_lower_bound)
        k = (ll.draft_n_max if ll else None) or spec.speculative.num_speculative_tokens
        raw = run_raw(spec, engine, workload, opts, launcher=launcher,
                      can_serve_draft=can_draft, progress=progress,
                      settled=lambda r: decision_settled(
                          r, p95, opts.confidence, target=target, k=k,
                          require_alpha_above_c=spec.admission.require_alpha_above_c),
                      c_settled=lambda r, c: c_settled(r, c, opts.confidence, target=target,
                                                       k=k))
        raw.run_id, raw.settings_equal, raw.settings_note = run_id, settings_equal, note
        if raw.spec.props and raw.base.props:
            server["build"] = raw.spec.props.get("build_info")
            keys = [k for k in ("total_slots", "max_running_requests", "max_total_num_tokens")
                    if k in raw.base.props]
            if any(raw.base.props.get(k) != raw.spec.props.get(k) for k in keys) and \
                    raw.engine != "sglang":
                raw.settings_equal = False
                raw.settings_note = "the arms report different slot counts"
        spec_log = log_dir / "spec.log"
        if spec_log.is_file():  # llama-server's per-request slot lines, warm-up included
            text = _engine_log(spec_log).decode(errors="replace")
            slots = sum_llamacpp_slots(text.splitlines())
            if slots is not None:
                server["log_acceptance"] = {"accepted": slots[0], "drafted": slots[1],
                                            "scope": "all requests incl. warm-up (engine log)"}
        server["phase_seconds"] = raw.phases  # where the rounds' time went (issue 24)
        raw.server = server
        b = spec.bench
        report = _build_report(
            raw, spec, name, workload, opts, rounds=len(raw.round_order) // 2,
            n_req=opts.requests_per_level or b.requests_per_level,
            max_tokens=opts.max_tokens or b.max_tokens,
            warmup=b.warmup_requests if opts.warmup_requests is None else opts.warmup_requests)
        _store(mirror, report, log_dir)
        return report
    finally:
        remove_at(mirror.root, log_dir.relative_to(mirror.root).as_posix())
        if private is not None:
            shutil.rmtree(private, ignore_errors=True)
