"""Run the A/B benchmark: same binary, prompts and concurrency, with and without speculation.

Rounds interleave the arms in ABBA order (round r runs base then spec when r is even, spec then
base when odd) so slow drift of the machine hits both alike. Each arm launch warms up on
held-out prompts (not counted), then measures every concurrency level of the sweep (1, 2, 4, ...
up to 2×P95, plus P95) with the same request list; ``/metrics`` is scraped right before and
after each level so acceptance is a counter delta over exactly the measured window. In every
round the draft is served alone at the same concurrencies next to that round's baseline, so a
busy machine's load hits both sides of c alike.

Rounds are sequential: after the spec's ``rounds`` (whole ABBA pairs), pairs are added while
the P95 ratio CI still contains the threshold, until ``max_rounds``, futility, a settled
rejection (asked after every pair) or the budget. The looks are planned up front
(:class:`stats.LookPlan`), each a repeated CI at the per-look confidence, so stopping at the
first clear look keeps the nominal error rate.
The time budget (:func:`budget.default_time_budget`) is checked before every level, not only at
looks, and an interrupt (SIGINT, or SIGTERM as the CLI maps it) ends the rounds the same
way: the arm launch under way is dropped and the report carries every whole launch so far.
:mod:`specbundle.bench.analysis` turns the raw runs into the report.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from specbundle.bench import stats
from specbundle.bench.budget import (
    Mark,
    OutOfTime,
    PhaseClock,
    default_time_budget,
    marks,
    rollback,
    stopping,
)
from specbundle.bench.client import AiohttpTransport, CompletionRequest, LevelRun, run_level
from specbundle.bench.engines import adapter_for
from specbundle.bench.interface import ArmDriver
from specbundle.bench.numerics import TieProbe, collect
from specbundle.bench.prometheus import WindowDelta, window_delta
from specbundle.bench.report import Stopping, StopReason
from specbundle.bench.servers import attach, get_json, scrape, served_model
from specbundle.bench.verdict import percent
from specbundle.bench.verifycost import PROBE_ENGINES, VERIFY_SAMPLES, VerifySample, probe
from specbundle.bench.workload import Workload
from specbundle.errors import BenchError
from specbundle.spec import BundleSpec
from specbundle.strict import MalformedDocument

__all__ = ["ArmData", "BenchOptions", "CSettled", "Launcher", "Progress", "RawRun",
           "new_run_id", "run_raw", "sweep_levels"]

#: (what is running now, steps done so far, total steps); ``what`` names the round, the arm,
#: the level and the P95 ratio's current repeated CI, for a log line as much as for a bar.
Progress = Callable[[str, int, int], None]
#: Starts one arm ("base", "spec" or "draft": the draft served alone) and yields its URL.
Launcher = Callable[[str], AbstractContextManager[str]]
#: After each whole ABBA pair, the runs so far -> why rejection is settled, else None.
Settled = Callable[["RawRun"], str | None]
#: Before a draft probe, the runs so far and a level -> why c is settled there, else None.
CSettled = Callable[["RawRun", int], str | None]


@dataclass(frozen=True)
class BenchOptions:
    """How to run; ``None`` fields take the bundle spec's ``bench`` settings."""

    base_url: str | None = None
    baseline_url: str | None = None
    draft_url: str | None = None
    measure_draft: bool = True
    aa_rounds: int = 0  # extra baseline launches at P95 (A/A) to measure the noise floor
    runtime: str = "shell"  # how the rendered command runs: "shell" (host binary) or "docker"
    binary: Path | None = None
    rounds: int | None = None
    # Sequential extension: while the P95 ratio CI still straddles ``target_ratio`` (default:
    # the spec's admission threshold), add ABBA pairs of rounds up to ``max_rounds``.
    max_rounds: int | None = None
    target_ratio: float | None = None
    time_budget_s: float | None = None  # default: the spec's bench.time_budget_s
    requests_per_level: int | None = None
    max_tokens: int | None = None
    warmup_requests: int | None = None
    levels: tuple[int, ...] | None = None
    confidence: float = 0.90
    host: str = "127.0.0.1"
    startup_timeout_s: float = 300.0
    request_timeout_s: float = 600.0
    run_id: str | None = None

    @property
    def mode(self) -> str:
        """``base-url`` when servers are already running, else ``manifest``."""
        return "base-url" if self.base_url else "manifest"


def sweep_levels(p95: int) -> tuple[int, ...]:
    """1, 2, 4, ... up to 2×P95, plus P95 itself."""
    levels = {p95, 2 * p95}
    c = 1
    while c <= 2 * p95:
        levels.add(c)
        c *= 2
    return tuple(sorted(levels))


@dataclass
class ArmData:
    """Everything measured for one arm: per level, one entry per round."""

    runs: dict[int, list[LevelRun]] = field(default_factory=dict)
    deltas: dict[int, list[WindowDelta]] = field(default_factory=dict)
    props: dict[str, Any] | None = None
    kv_capacity: float | None = None
    max_sequences: int | None = None
    # verification-cost probe on the target alone (baseline launches only; bench.verifycost)
    verify: dict[int, list[VerifySample]] = field(default_factory=dict)
    verify_note: str = ""


@dataclass
class RawRun:
    """The raw material of a report."""

    run_id: str
    engine: str
    levels: tuple[int, ...]
    requests: dict[int, list[CompletionRequest]]
    base: ArmData
    spec: ArmData
    draft: ArmData | None
    aa: ArmData | None
    round_order: tuple[str, ...]
    settings_equal: bool | None
    settings_note: str
    server: dict[str, Any]
    notes: list[str]
    stopping: Stopping | None = None
    # baseline requests alternated with the draft's while both servers run (c's pairs)
    probe: ArmData | None = None
    phases: dict[str, float] = field(default_factory=dict)  # seconds per phase of the rounds
    ties: tuple[TieProbe, ...] = ()  # the target's margins at speculation's first divergences
    tie_note: str = ""


class _Runner:
    def __init__(self, spec: BundleSpec, engine: str, workload: Workload, opts: BenchOptions,
                 launcher: Launcher | None, can_serve_draft: bool,
                 progress: Progress | None, settled: Settled | None = None,
                 c_settled: CSettled | None = None, *, arms: ArmDriver | None = None) -> None:
        self.spec, self.engine, self.workload, self.opts = spec, engine, workload, opts
        self.arms: ArmDriver = self if arms is None else arms  # the seam the rule is tested on
        self.looks: list[int] = []  # rounds at which the sequential rule looked
        self.adapter = adapter_for(engine)
        self.launcher, self.settled, self.c_settled = launcher, settled, c_settled
        self.c_done: dict[int, str] = {}  # levels whose draft probe stopped, and why
        self.can_serve_draft = can_serve_draft
        self.progress = progress
        b = spec.bench
        self.rounds = opts.rounds or b.rounds
        self.n_req = opts.requests_per_level or b.requests_per_level
        self.max_tokens = opts.max_tokens or b.max_tokens
        self.warmup = b.warmup_requests if opts.warmup_requests is None else opts.warmup_requests
        self.levels = opts.levels or b.concurrency_levels or sweep_levels(
            spec.deployment.p95_concurrency)
        self.endpoint = self.adapter.measure_endpoint(b.endpoint)
        self.done = 0
        self.notes: list[str] = []
        if self.endpoint != b.endpoint:
            self.notes.append(f"{engine} measured through /{self.endpoint} (raw prompt text, no "
                              f"chat template) instead of the configured {b.endpoint!r} "
                              "endpoint: only there are per-request acceptance figures reported")
        self.p95 = spec.deployment.p95_concurrency
        self.max_rounds = max(self.rounds, opts.max_rounds or b.max_rounds
                              or min(64, 3 * self.rounds))
        self.target = opts.target_ratio or spec.admission.min_throughput_ratio_lower_bound
        self.plan = stats.LookPlan(self.rounds, self.max_rounds, opts.confidence, paired=True)
        self.per_round = (3 if self._has_draft() else 2) * len(self.levels)
        # The draft alone runs beside the baseline server (llama-server holds only its own
        # model; servers given by URL already run side by side), so c's pairs can alternate
        # request groups seconds apart instead of launches minutes apart.
        self.cohost = engine == "llamacpp" or opts.draft_url is not None
        launches = 3 if self._has_draft() and not self.cohost else 2
        self.budget = opts.time_budget_s or b.time_budget_s or default_time_budget(
            spec, arms_per_round=launches)
        self.t0 = time.monotonic()
        self.round = 0
        self.status = ""  # the P95 ratio's current repeated CI, for progress lines
        self.why = ""  # why the decision was settled, when it ended the rounds
        self.mark: Mark | None = None  # the data after the last whole arm launch
        self.clock = PhaseClock()  # seconds per phase of the rounds (where the time goes)
        self.ties: list[TieProbe] = []  # the target's margins at speculation's divergences
        self.tie_note = ""
        self.total = (self.per_round * self.rounds
                      + (opts.aa_rounds if self.p95 in self.levels else 0))

    def _has_draft(self) -> bool:
        if not self.opts.measure_draft:
            return False
        return self.opts.draft_url is not None or (self.launcher is not None
                                                   and self.can_serve_draft)

    def _tick(self, what: str) -> None:
        if self.progress is not None:
            elapsed = time.monotonic() - self.t0
            self.progress(f"round {self.round + 1}/{self.plan.last} {what}"
                          + (f" | {self.status}" if self.status else "")
                          + f" | {elapsed:.0f}/{self.budget:.0f} s", self.done, self.total)

    def _check_time(self) -> None:
        """Raise :class:`OutOfTime` once the budget is spent (checked before each level)."""
        if time.monotonic() - self.t0 >= self.budget:
            raise OutOfTime

    def requests(self, prompts_offset: int, n: int) -> list[CompletionRequest]:
        extras = dict(self.adapter.request_extras())
        return [CompletionRequest(f"{p.id}#{prompts_offset + i}", p.text, self.max_tokens,
                                  temperature=self.spec.speculative.temperature,
                                  ignore_eos=True, extras=extras)
                for i, p in enumerate(self.workload.cycle(n, prompts_offset))]

    def _run(self, url: str, model: str, reqs: list[CompletionRequest], c: int) -> LevelRun:
        async def go() -> LevelRun:
            transport = AiohttpTransport(limit=max(c, 1),
                                         timeout_s=self.opts.request_timeout_s)
            try:
                return await run_level(transport, url, reqs, c, endpoint=self.endpoint,
                                       model=model)
            finally:
                await transport.aclose()
        return asyncio.run(go())

    def measure(self, arm: str, url: str, data: ArmData, reqs: dict[int, list[CompletionRequest]],
                *, metrics: bool = True, levels: tuple[int, ...] | None = None) -> None:
        model = served_model(url)
        if data.props is None:
            data.props = get_json(url, self.adapter.props_path)
        self._warm(url, model)
        for c in levels or self.levels:
            self._check_time()
            self._tick(f"{arm} c={c}")
            before = self.adapter.read_metrics(scrape(url)) if metrics else None
            with self.clock.timed(f"measure:{arm}"):
                run = self._run(url, model, reqs[c], c)
            if before is not None:
                after = self.adapter.read_metrics(scrape(url))
                data.deltas.setdefault(c, []).append(window_delta(before, after))
                if data.kv_capacity is None:
                    data.kv_capacity = self.adapter.kv_capacity(data.props, after)
            data.runs.setdefault(c, []).append(run)
            data.max_sequences = self.adapter.max_sequences(data.props)
            self.done += 1
            self._tick(f"{arm} c={c}")

    @contextlib.contextmanager
    def server(self, speculation: bool) -> Iterator[str]:
        if self.opts.base_url or self.launcher is None:
            url = self.opts.base_url if speculation else self.opts.baseline_url
            if not url:
                raise BenchError("--base-url needs --baseline-url: a benchmark compares two "
                                 "servers, one with and one without speculation")
            with attach(url, timeout=self.opts.startup_timeout_s) as u:
                yield u
            return
        arm = "spec" if speculation else "base"
        with self.clock.up(self.launcher(arm), arm) as u:
            yield u

    def run(self) -> RawRun:
        reqs = {c: self.requests(i * self.n_req, self.n_req) for i, c in enumerate(self.levels)}
        base, spec = ArmData(), ArmData()
        draft = ArmData() if self._has_draft() else None
        probe = ArmData()  # baseline requests interleaved with the draft's (cohost)
        order: list[str] = []
        self.t0 = time.monotonic()
        arms = [a for a in (base, spec, draft, probe) if a is not None]
        self.mark = marks(arms)
        reason: StopReason = "fixed"
        try:
            reason = self._rounds(reqs, base, spec, draft, probe, order, arms)
        except OutOfTime:
            reason = "time_budget"
        except KeyboardInterrupt:  # SIGINT, or SIGTERM as the CLI maps it: report what we have
            reason = "interrupted"
        if reason in ("time_budget", "interrupted") and self.mark is not None:
            rollback(arms, self.mark)  # drop the arm launch under way: whole launches only
            del order[self.mark.order:]
        stopping = self._stopping(base, spec, self.round, reason, time.monotonic() - self.t0)
        aa = None
        if self.opts.aa_rounds and self.p95 in self.levels and reason not in (
                "time_budget", "interrupted"):
            aa = ArmData()
            for _ in range(self.opts.aa_rounds):
                with self.arms.server(False) as url:
                    self.arms.measure("A/A", url, aa, reqs, levels=(self.p95,))
        raw = self._raw(reqs, base, spec, draft, probe, order)
        raw.stopping, raw.aa = stopping, aa
        return raw

    def _raw(self, reqs: dict[int, list[CompletionRequest]], base: ArmData, spec: ArmData,
             draft: ArmData | None, probe: ArmData, order: list[str]) -> RawRun:
        return RawRun(
            run_id="", engine=self.engine, levels=tuple(self.levels), requests=reqs,
            base=base, spec=spec, draft=draft, aa=None, round_order=tuple(order),
            settings_equal=None, settings_note="", server={}, notes=self.notes,
            probe=probe if probe.runs else None, phases=self.clock.rounded(),
            ties=tuple(self.ties), tie_note=self.tie_note)

    def _rounds(self, reqs: dict[int, list[CompletionRequest]], base: ArmData, spec: ArmData,
                draft: ArmData | None, probe: ArmData, order: list[str],
                arms: list[ArmData]) -> StopReason:
        """ABBA rounds until the sequential rule (or the budget between looks) stops them."""
        while True:
            r = self.round
            look = self.plan.look(r, *self._p95(base, spec), self.target)
            if look is not None:  # only after whole ABBA pairs
                self.looks.append(r)
                if look.ci is not None:
                    self.status = (f"P95 ratio {look.ci.ratio:.2f} [{look.ci.low:.2f}, "
                                   f"{look.ci.high:.2f}] vs {self.target:.2f}")
            # after every whole ABBA pair, not only at the looks: a settled decision (α ≤ c,
            # or no draft length can pay at c's lower bound) ends the rounds as a rejection
            if self.settled is not None and r and r % 2 == 0 and (why := self.settled(
                    self._raw(reqs, base, spec, draft, probe, order))):
                self.notes.append(why)
                self.why = why
                return "settled"
            if look is not None:
                if look.stop is not None:
                    return look.stop
                pair_s = (time.monotonic() - self.t0) / r * 2
                if time.monotonic() - self.t0 + pair_s > self.budget:
                    return "time_budget"
                if r == self.plan.first:
                    self.notes.append(
                        f"CI at P95 inconclusive after {r} rounds: extended (up to "
                        f"{self.plan.looks} looks, each a repeated CI at "
                        f"{percent(self.plan.per_look_confidence)} for "
                        f"{percent(self.opts.confidence)} overall)")
                self.total += 2 * self.per_round
            for i, arm in enumerate(("base", "spec") if r % 2 == 0 else ("spec", "base")):
                self._check_time()  # no launch starts past the budget (levels check too)
                if i == 1 and draft is not None and not self.cohost:  # next to this base
                    self._draft(reqs, draft, self._open_levels(self._raw(
                        reqs, base, spec, draft, probe, order)))
                order.append(arm)
                with self.arms.server(arm == "spec") as url:
                    self.arms.measure(arm, url, spec if arm == "spec" else base, reqs)
                    if arm == "base":
                        with self.clock.timed("verify_probe"):
                            self.arms.verify_probe(url, base)
                        if r % 2 == 1:  # speculation ran before this baseline: probe its flips
                            with self.clock.timed("tie_probe"):
                                self._tie_probe(url, reqs, base, spec)
                        if draft is not None and self.cohost:
                            self._draft_probe(url, reqs, draft, probe, self._open_levels(
                                self._raw(reqs, base, spec, draft, probe, order)))
                self.mark = marks(arms, len(order))  # a whole launch: kept if stopped later
            self.round += 1

    def _tie_probe(self, url: str, reqs: dict[int, list[CompletionRequest]], base: ArmData,
                   spec: ArmData) -> None:
        """The baseline's margin at each new first divergence of speculation (numerics)."""
        texts = {q.prompt_id: q.prompt for qs in reqs.values() for q in qs}
        got, note = collect(url, self.engine, base.runs, spec.runs, texts, self.ties,
                            timeout=self.opts.request_timeout_s, endpoint=self.endpoint)
        self.ties += got
        self.tie_note = note or self.tie_note

    def verify_probe(self, url: str, data: ArmData) -> None:
        """v(g, batch) per level on the target alone, until each has VERIFY_SAMPLES pairs."""
        if all(len(data.verify.get(c, [])) >= VERIFY_SAMPLES for c in self.levels):
            return  # a hardware figure: more launches repeat it, and the gate never reads v
        if self.engine not in PROBE_ENGINES:
            data.verify_note = (f"{self.engine} reports no server-side prompt timings: "
                                "verification cost not probed")
            return
        ll = self.spec.engines.llamacpp
        k = (ll.draft_n_max if ll else None) or self.spec.speculative.num_speculative_tokens
        text = " ".join(p.text for p in self.workload.prompts)
        for c in self.levels:
            try:
                got = probe(url, batch=c, g=k, text=text, timeout=self.opts.request_timeout_s)
            except (httpx.HTTPError, MalformedDocument) as err:
                data.verify_note = f"verification probe failed at concurrency {c}: {err}"
                continue
            data.verify.setdefault(c, []).extend(got)

    def _p95(self, base: ArmData, spec: ArmData) -> tuple[list[float], list[float]]:
        """Per-round output throughputs at P95, base and spec."""
        return ([x.output_throughput for x in base.runs.get(self.p95, [])],
                [x.output_throughput for x in spec.runs.get(self.p95, [])])

    def _p95_ci(self, base: ArmData, spec: ArmData) -> stats.RatioCI | None:
        """The repeated CI at P95 (per-look confidence): the one the report carries."""
        return self.plan.ratio_ci(*self._p95(base, spec))

    def _stopping(self, base: ArmData, spec: ArmData, rounds: int, reason: StopReason,
                  elapsed: float) -> Stopping:
        return stopping(self.plan, self._p95_ci(base, spec), target=self.target,
                        reason=reason, rounds=rounds, budget=self.budget, elapsed=elapsed,
                        notes=self.notes, why=self.why)

    def _warm(self, url: str, model: str) -> None:
        """Held-out warm-up requests on a fresh launch (not counted)."""
        if self.warmup:
            with self.clock.timed("warmup"):
                self._run(url, model, self.warm_requests(), min(self.warmup, max(self.levels)))

    def warm_requests(self) -> list[CompletionRequest]:
        """A launch's warm-up, two draft-verify cycles long (2·(K + 1) tokens): further
        decode steps repeat them and add nothing (issue 24: a round's cost)."""
        n = min(self.max_tokens, 2 * (self.spec.speculative.num_speculative_tokens + 1))
        return [CompletionRequest(p.id, p.text, n, temperature=self.spec.speculative.temperature,
                                  extras=dict(self.adapter.request_extras()))
                for p in (self.workload.warmup * self.warmup)[: self.warmup]]

    def _open_levels(self, raw: RawRun) -> tuple[int, ...]:
        """The levels whose c is not settled yet. Sticky: a stopped probe stays stopped, so
        the draft's launch-paired rounds stay a prefix of the baseline's (same pairing)."""
        for c in self.levels:
            why = None if c in self.c_done or self.c_settled is None else self.c_settled(raw, c)
            if why:
                self.c_done[c] = why
                self.notes.append(f"draft probe stopped at concurrency {c} (round "
                                  f"{self.round + 1}): {why}")
        return tuple(c for c in self.levels if c not in self.c_done)

    def _draft_probe(self, base_url: str, reqs: dict[int, list[CompletionRequest]],
                     draft: ArmData, probe: ArmData, levels: tuple[int, ...]) -> None:
        """With the baseline still up: alternate groups of ``c`` requests between the
        baseline and the draft alone (B D, D B, ...), one (draft, baseline) pair per group."""
        if not levels:
            return  # c settled at every level: no launch
        ctx = attach(self.opts.draft_url, timeout=self.opts.startup_timeout_s) \
            if self.opts.draft_url else self._launch_draft()
        with self.clock.up(ctx, "draft") as durl:
            dmodel, bmodel = served_model(durl), served_model(base_url)
            if draft.props is None:
                draft.props = get_json(durl, self.adapter.props_path)
            self._warm(durl, dmodel)
            for c in levels:
                self._check_time()
                self._tick(f"draft c={c}")
                group = reqs[c]
                chunks = [group[i:i + c] for i in range(0, len(group), c)] or [group]
                for j, chunk in enumerate(chunks):
                    pair = ((base_url, bmodel, probe), (durl, dmodel, draft))
                    for url, model, data in (pair if j % 2 == 0 else pair[::-1]):
                        with self.clock.timed("draft_probe"):
                            data.runs.setdefault(c, []).append(self._run(url, model, chunk, c))
                self.done += 1

    def _launch_draft(self) -> AbstractContextManager[str]:
        if self.launcher is None:
            raise BenchError("no way to serve the draft alone")
        return self.launcher("draft")

    def _draft(self, reqs: dict[int, list[CompletionRequest]], data: ArmData,
               levels: tuple[int, ...]) -> None:
        """The draft alone as its own launch (servers that cannot run beside the baseline)."""
        if not levels:
            return  # c settled at every level: no launch
        ctx = attach(self.opts.draft_url, timeout=self.opts.startup_timeout_s) \
            if self.opts.draft_url else self._launch_draft()
        with self.clock.up(ctx, "draft") as u:
            self.arms.measure("draft", u, data, reqs, metrics=False, levels=levels)


def new_run_id() -> str:
    """Sortable, unique run id: UTC time plus a random suffix."""
    from specbundle.mirror import utc_now

    stamp = utc_now().replace(":", "").replace("-", "")
    return f"{stamp[:15]}-{uuid.uuid4().hex[:6]}"


def run_raw(spec: BundleSpec, engine: str, workload: Workload, opts: BenchOptions, *,
            launcher: Launcher | None, can_serve_draft: bool = False,
            progress: Progress | None = None, settled: Settled | None = None,
            c_settled: CSettled | None = None) -> RawRun:
    """Measure both arms (and the draft alone) and return the raw runs.

    ``launcher`` starts arms from the bundle's manifest; without one, the servers given by
    URL in ``opts`` are used.
    """
    runner = _Runner(spec, engine, workload, opts, launcher, can_serve_draft, progress,
                     settled, c_settled)
    return runner.run()
