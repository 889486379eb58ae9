"""``run_tune``: sweep K (and llama.cpp's p_min) × concurrency on the real engine; sign it.

Speculation pays at low concurrency and stops paying as batches fill, so one static K is a
compromise; vLLM and SGLang can take K per batch size, and this measures it. Each round
launches the baseline and every setting once, in an order that reverses every round (the
ABBA idea for more than two arms), and measures every concurrency level with the same
requests; ratios are Welch intervals on log throughput against that baseline, exactly as in
the A/B bench. Rounds extend (whole reversed pairs) while a level is undecided, up to the
spec's ``max_rounds`` or the time budget.

The result is stored as ``bundles/<name>/tune/<run-id>/tune.json``; the schedule render
reads (``tune/schedule.json``) is bound by digest to a signed in-toto statement
(:data:`~specbundle.attest.predicates.TUNE_SCHEDULE_V1`) in the bundle's attestation log.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from specbundle import __version__
from specbundle._fsutil import real_dir, remove_at
from specbundle.attest import (
    SigningKey,
    Statement,
    append_attestation,
    sign_statement,
)
from specbundle.attest.models import DigestRef, TuneChoice, TuneScheduleV1
from specbundle.bench import stats
from specbundle.bench.api import _Manifest, _workload
from specbundle.bench.runner import ArmData, BenchOptions, Progress, _Runner, new_run_id
from specbundle.bench.tune_analysis import (
    TUNE_VERSION,
    TuneResult,
    Variant,
    choose,
    variant_levels,
)
from specbundle.bench.tune_html import render_tune_html
from specbundle.bench.verdict import percent
from specbundle.bundle import Bundle
from specbundle.digest import sha256_bytes
from specbundle.errors import BenchError, UsageError
from specbundle.mirror import utc_now
from specbundle.schedule import SCHEDULE_FILE
from specbundle.spec import BundleSpec

__all__ = ["TuneOptions", "default_ks", "run_tune", "with_setting"]


@dataclass(frozen=True)
class TuneOptions:
    """What to sweep; ``None`` takes the spec (K: 1, 2, 4, … up to num_speculative_tokens)."""

    ks: tuple[int, ...] | None = None
    p_mins: tuple[float, ...] | None = None  # llama.cpp only
    levels: tuple[int, ...] | None = None
    rounds: int | None = None
    max_rounds: int | None = None
    time_budget_s: float | None = None
    requests_per_level: int | None = None
    max_tokens: int | None = None
    warmup_requests: int | None = None
    confidence: float = 0.90
    binary: Any = None  # Path of the engine binary (as ``bench --binary``)
    run_id: str | None = None


def default_ks(spec: BundleSpec) -> tuple[int, ...]:
    """1, 2, 4, … up to the spec's num_speculative_tokens, and that value itself."""
    top = spec.speculative.num_speculative_tokens
    ks = {top}
    k = 1
    while k < top:
        ks.add(k)
        k *= 2
    return tuple(sorted(ks))


def _swap(args: list[str], flag: str, value: str) -> list[str]:
    if flag not in args[:-1]:
        raise BenchError(f"cannot set {flag}: it is not in the rendered speculative command")
    i = args.index(flag)
    return [*args[:i + 1], value, *args[i + 2:]]


def with_setting(engine: str, args: Sequence[str], v: Variant) -> list[str]:
    """The speculative arm's argv with K (and p_min) replaced, engine by engine."""
    out = list(args)
    if engine == "llamacpp":
        out = _swap(out, "--spec-draft-n-max", str(v.k))
        if v.p_min is not None:
            out = _swap(out, "--spec-draft-p-min", f"{v.p_min:g}")
        return out
    if engine == "vllm":
        i = out.index("--speculative-config") + 1 if "--speculative-config" in out else -1
        if i <= 0 or i >= len(out):
            raise BenchError("no --speculative-config in the rendered vLLM command")
        cfg = json.loads(out[i])
        cfg["num_speculative_tokens"] = v.k
        cfg.pop("num_speculative_tokens_per_batch_size", None)  # one static K per arm
        out[i] = json.dumps(cfg, sort_keys=True)
        return out
    if engine == "sglang":
        out = [a for a in out if a != "--speculative-adaptive"]
        out = _swap(out, "--speculative-num-steps", str(v.k))
        return _swap(out, "--speculative-num-draft-tokens", str(v.k + 1))
    raise BenchError(f"tune does not know how to set K for engine {engine!r}")


def _sign(bundle: Bundle, keys: Sequence[SigningKey], result: TuneResult,
          result_bytes: bytes, schedule_bytes: bytes) -> int:
    mirror, name = bundle.mirror, bundle.name
    subjects = bundle.subjects()  # the version measured, as every statement about it names it
    base = f"specbundle:bundle/{name}/tune/{result.run_id}"
    choices = [TuneChoice(concurrency=c.concurrency, k=c.k,
                          p_min=None if c.p_min is None else format(c.p_min, ".6g"),
                          ratio=format(c.ratio, ".6g"), ratio_low=format(c.ratio_low, ".6g"),
                          gain_over_fixed=None if c.gain_over_fixed is None
                          else format(c.gain_over_fixed, ".6g")) for c in result.choices]
    st = Statement.of(subjects, TuneScheduleV1(
        time_created=result.created, run_id=result.run_id, engine=result.engine,
        result=DigestRef(uri=f"{base}/tune.json", digest={"sha256": sha256_bytes(result_bytes)},
                         schema_=TUNE_VERSION),
        schedule=DigestRef(uri=f"specbundle:bundle/{name}/{SCHEDULE_FILE}",
                           digest={"sha256": sha256_bytes(schedule_bytes)}),
        choices=choices,
        best_fixed=None if result.best_fixed is None else result.best_fixed.name,
        crossover_concurrency=result.crossover_concurrency))
    return append_attestation(mirror, name, sign_statement(st, keys))


class _Sweep:
    """The rounds: baseline and every setting, order reversed each round."""

    def __init__(self, runner: _Runner, variants: Sequence[Variant], levels: Sequence[int],
                 max_rounds: int, budget: float | None) -> None:
        self.runner, self.variants, self.levels = runner, list(variants), list(levels)
        self.max_rounds, self.budget = max_rounds, budget
        self.base = ArmData()
        self.arms = {v: ArmData() for v in variants}
        self.order: list[tuple[str, ...]] = []

    def throughputs(self) -> tuple[dict[int, tuple[float, ...]],
                                   dict[Variant, dict[int, tuple[float, ...]]]]:
        def tp(d: ArmData) -> dict[int, tuple[float, ...]]:
            return {c: tuple(r.output_throughput for r in runs) for c, runs in d.runs.items()}
        return tp(self.base), {v: tp(d) for v, d in self.arms.items()}

    def undecided(self, confidence: float) -> bool:
        base, arms = self.throughputs()
        choices, _, _ = choose(variant_levels(base, arms, confidence), self.levels)
        return any(not ch.decided for ch in choices)

    def run(self, min_rounds: int, confidence: float) -> tuple[int, str]:
        r, t0 = 0, time.monotonic()
        reqs = {c: self.runner.requests(i * self.runner.n_req, self.runner.n_req)
                for i, c in enumerate(self.levels)}
        names = ["base", *(v.name for v in self.variants)]
        while True:
            if r >= min_rounds and r % 2 == 0:
                if not self.undecided(confidence):
                    return r, "resolved"
                if r >= self.max_rounds:
                    return r, "max_rounds"
                pair = (time.monotonic() - t0) / r * 2
                if self.budget is not None and time.monotonic() - t0 + pair > self.budget:
                    return r, "time_budget"
                self.runner.total += 2 * self.runner.per_round
            order = tuple(names if r % 2 == 0 else reversed(names))
            self.order.append(order)
            for arm in order:
                data = self.base if arm == "base" else next(
                    d for v, d in self.arms.items() if v.name == arm)
                with self.runner.launcher(arm) as url:  # type: ignore[misc]
                    self.runner.measure(arm, url, data, reqs)
            r += 1


def run_tune(bundle: Bundle, *, engine: str = "llamacpp",
             options: TuneOptions | None = None, keys: Sequence[SigningKey] = (),
             progress: Progress | None = None) -> TuneResult:
    """Sweep the settings on ``bundle``, store the result and the schedule, sign the schedule
    statement (naming the bundle version measured)."""
    opts = options or TuneOptions()
    if not keys:
        raise UsageError("no signing key given", hint="pass --key KEY.pem: the schedule is "
                                                      "signed evidence")
    mirror, name, spec = bundle.mirror, bundle.name, bundle.spec
    if engine not in {e.value for e in spec.engines.enabled()}:
        raise BenchError(f"bundle {name!r} has no {engine} settings to render and run")
    ks = opts.ks or default_ks(spec)
    if min(ks) < 1 or max(ks) > 64:
        raise UsageError("K values must be between 1 and 64 (K = 0 is the baseline itself)")
    if opts.p_mins and engine != "llamacpp":
        raise UsageError("--p-min applies to llama.cpp only")
    p_mins: tuple[float | None, ...] = opts.p_mins or (None,)
    variants = [Variant(k, p) for k in sorted(set(ks)) for p in p_mins]
    run_id = opts.run_id or new_run_id()
    log_dir = real_dir(mirror.root, f"tmp/tune-{run_id}")  # never a link planted in tmp/
    bopts = BenchOptions(binary=opts.binary, measure_draft=False, rounds=opts.rounds,
                         requests_per_level=opts.requests_per_level, max_tokens=opts.max_tokens,
                         warmup_requests=opts.warmup_requests, levels=opts.levels,
                         confidence=opts.confidence, max_rounds=opts.max_rounds,
                         time_budget_s=opts.time_budget_s)
    man: _Manifest | None = None
    try:
        man = _Manifest(bundle, engine, bopts, log_dir)
        man.variants = {v.name: with_setting(engine, man.spec_cmd.args, v) for v in variants}
        runner = _Runner(spec, engine, _workload(bundle), bopts, man.launcher,
                         False, progress)
        runner.per_round = (1 + len(variants)) * len(runner.levels)
        runner.total = runner.per_round * runner.rounds
        sweep = _Sweep(runner, variants, runner.levels, runner.max_rounds, runner.budget)
        # the sweep stops at its first decided look: each look's CIs are repeated CIs at the
        # per-look confidence, as the bench's rule (stats.LookPlan), or a setting that wins at
        # one lucky look would be put in force more often than the confidence says
        plan = stats.LookPlan(runner.rounds, runner.max_rounds, opts.confidence)
        ci_confidence = plan.per_look_confidence
        t0 = time.monotonic()
        rounds, reason = sweep.run(runner.rounds, ci_confidence)
        elapsed = time.monotonic() - t0
    finally:
        remove_at(mirror.root, log_dir.relative_to(mirror.root).as_posix())
        if man is not None:
            shutil.rmtree(man.private, ignore_errors=True)
    base, arms = sweep.throughputs()
    results = variant_levels(base, arms, ci_confidence)
    choices, fixed, crossover = choose(results, runner.levels)
    notes = [f"stopped after {rounds} rounds: {reason.replace('_', ' ')}"
             + (f" ({plan.looks} planned looks, each a repeated CI at "
                f"{percent(ci_confidence)} for {percent(opts.confidence)} overall)"
                if plan.sequential else "")]
    notes += [f"concurrency {c.concurrency}: undecided (no setting significantly wins or "
              "every one significantly loses): speculation off (K = 0) until measured"
              for c in choices if not c.decided]
    result = TuneResult(
        schema_version=TUNE_VERSION, run_id=run_id, bundle=name, engine=engine,
        created=utc_now(), tool_version=__version__, levels=tuple(runner.levels),
        variants=tuple(variants), rounds=rounds, round_order=tuple(sweep.order),
        requests_per_level=runner.n_req, max_tokens=runner.max_tokens,
        confidence=opts.confidence, per_look_confidence=ci_confidence,
        base_throughput=base, results=results, choices=choices,
        best_fixed=fixed, crossover_concurrency=crossover,
        p95_concurrency=spec.deployment.p95_concurrency, elapsed_s=elapsed,
        minutes_per_k=elapsed / 60.0 / max(1, len(variants)), notes=tuple(notes))
    data, sched = result.to_bytes(), result.schedule().to_bytes()
    mirror.write_bundle_file(name, f"tune/{run_id}/tune.html", render_tune_html(result).encode())
    mirror.write_bundle_file(name, f"tune/{run_id}/tune.json", data)
    with mirror.lock():
        mirror.write_bundle_file(name, SCHEDULE_FILE, sched)
        line = _sign(bundle, keys, result, data, sched)
        mirror.append_event("tune", name, {"run_id": run_id, "engine": engine,
                                           "custody": bundle.custody(),
                                           "attestation_line": line,
                                           "schedule_sha256": sha256_bytes(sched)})
    return result
