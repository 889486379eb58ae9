"""The benchmark report: typed, frozen, versioned JSON with a published schema.

The JSON schema (``manifests/schemas/bench-report.schema.json``) is generated from these
dataclasses by pydantic, and the same adapter validates a report read back from the mirror,
so the published schema, the writer and the reader cannot drift apart. Headline keys follow
``vllm bench serve`` (``output_throughput``, ``ttft``/``tpot``/``e2el`` in ms); the two ITL
flavours carry distinct names (``itl_chunk_ms``, ``itl_token_ms``) and never redefine "itl".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import TypeAdapter

from specbundle.bench.costmodel import Advice, ModelCheck
from specbundle.bench.stats import RatioCI, Summary
from specbundle.bench.verdict import Verdict, verdict_first
from specbundle.bench.verifycost import VerifyCost

__all__ = [
    "SCHEMA_ID",
    "SCHEMA_VERSION",
    "Acceptance",
    "Agreement",
    "ArmLevel",
    "BenchReport",
    "Ceiling",
    "CostCheck",
    "LevelResult",
    "RunSettings",
    "StopReason",
    "Stopping",
    "Validity",
    "report_schema",
]

SCHEMA_VERSION = "specbundle.bench-report/v1"
SCHEMA_ID = "https://specbundle.dev/schemas/bench-report/v1.json"

Arm = Literal["base", "spec", "draft"]
#: Why the rounds ended (:class:`Stopping`): ``futile`` (the CI still holds the threshold
#: but no planned look could clear it: rejected), ``time_budget`` and ``interrupted``
#: (SIGINT/SIGTERM) end early with the evidence so far, which is never a pass; ``settled``:
#: α is not above c's lower bound, or no draft length can pay even at c's (and v's) lower
#: bound (:func:`specbundle.bench.analysis.decision_settled`): rejected.
StopReason = Literal["resolved", "futile", "settled", "max_rounds", "time_budget",
                     "interrupted", "fixed"]


@dataclass(frozen=True)
class ArmLevel:
    """One arm at one concurrency, pooled over rounds (throughputs kept per round)."""

    arm: Arm
    concurrency: int
    round_output_throughput: tuple[float, ...]
    output_throughput: float
    request_throughput: float
    completed: int
    failed: int
    total_output_tokens: int
    ttft_ms: Summary | None
    tpot_ms: Summary | None
    itl_chunk_ms: Summary | None
    itl_token_ms: Summary | None
    e2el_ms: Summary | None
    server_output_tokens: float | None = None


@dataclass(frozen=True)
class Acceptance:
    """Speculation figures of the spec arm over the measured windows of one level.

    ``acceptance_rate`` is the engine's accepted/proposed; ``alpha`` is Leviathan's α
    recovered from τ and g; they differ, and both are reported.
    """

    source: Literal["counters", "meta_info", "gauges", "none"]
    comparable_as_counters: bool
    drafts: float | None
    draft_tokens: float | None
    accepted: float | None
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    mean_draft_length: float | None
    per_position: tuple[float, ...]
    depth_too_deep: bool
    alpha: float | None
    request_draft_tokens: float | None
    request_accepted: float | None
    request_cross_check: bool | None
    gauges: dict[str, float] = field(default_factory=dict)
    note: str = ""


@dataclass(frozen=True)
class LevelResult:
    """Both arms at one concurrency: the ratio with its CI and the speculation model."""

    concurrency: int
    base: ArmLevel
    spec: ArmLevel
    draft: ArmLevel | None
    ratio: RatioCI | None
    ratio_bootstrap: RatioCI | None
    rounds_needed: int | None
    acceptance: Acceptance
    c_measured: float | None
    c_black_box: float | None
    predicted_improvement: float | None
    alpha_above_c: bool | None
    preemptions_base: float | None
    preemptions_spec: float | None
    kv_usage_end_base: float | None
    kv_usage_end_spec: float | None
    # c measured interleaved (one draft launch per round), with its CI over rounds, and the
    # cross-check against the c the A/B result implies; absent in reports before them.
    c_ci: RatioCI | None = None
    c_check: CostCheck | None = None
    # verification cost and the extended model (bench.verifycost, bench.costmodel)
    verify_cost: VerifyCost | None = None
    verify_note: str = ""
    model: ModelCheck | None = None
    advice: Advice | None = None


@dataclass(frozen=True)
class CostCheck:
    """The measured c against the black-box c the throughput ratio implies.

    S = τ / (g·c + v) with v ∈ [1, g + 1] the cost of verifying g + 1 tokens in decode steps,
    so the black-box c = c + (v − 1)/g must lie in [c, c + 1], its floor raised by the
    measured v where it was probed (``v_low``). Outside that band (beyond both intervals) one
    of the two measurements is wrong and c cannot be trusted.
    """

    c_low: float
    c_high: float
    black_box_low: float
    black_box_high: float
    consistent: bool
    implied_verification: float | None  # (v − 1)/g = black-box c − c at the point estimates
    note: str
    v_low: float | None = None  # measured v's lower bound (decode steps) behind the band's floor


@dataclass(frozen=True)
class Agreement:
    """Output agreement of speculation against the baseline's own relaunch-to-relaunch floor.

    Greedy speculation is lossless only up to numerics: batch shapes differ in verification,
    near-ties flip, and after a flip the outputs part. So outputs are compared by their
    common prefix (the first-divergence position), on token ids where the engine returns
    them, and speculation's prefix is judged against the baseline's A/A prefix; where the
    target's margins were probed, against that floor with its near-tie flips forgiven
    (``relative_numerics``), so only a divergence beyond numerics fails the gate.
    """

    basis: Literal["token-ids", "text"]
    max_tokens: int
    spec_pairs: int
    aa_pairs: int
    spec_identical: float | None  # share of full outputs identical (reported, not gated)
    aa_identical: float | None
    spec_mean_prefix: float | None  # tokens
    aa_mean_prefix: float | None
    relative: float | None  # spec_mean_prefix / aa_mean_prefix
    first_divergence: dict[str, float] = field(default_factory=dict)  # prompt -> mean prefix
    # The target's own margin at each first divergence (bench.numerics): a flip to its close
    # runner-up is numerics of the verification batch, which the A/A floor cannot see.
    probed: int = 0  # distinct divergences probed
    near_ties: int = 0  # of them, flips within numerics.TIE_MARGIN
    relative_numerics: float | None = None  # ``relative`` with near-tie flips counted as agreeing
    probe_note: str = ""


@dataclass(frozen=True)
class Stopping:
    """How many rounds ran and why the bench stopped there (sequential rule at P95).

    The rule plans ``looks`` looks and judges each with a repeated CI at
    ``per_look_confidence`` (:class:`specbundle.bench.stats.LookPlan`); the ratio CIs of the
    report are those same intervals at the stopping time, so the gate judges what the rule
    saw. Reports from before the correction load with ``looks`` 0 and no per-look
    confidence: each of their looks used the nominal ``settings.confidence``.
    """

    rule: Literal["sequential", "fixed"]
    outcome: Literal["above", "below", "inconclusive", "unmeasured"]
    reason: StopReason
    rounds: int
    min_rounds: int
    max_rounds: int
    threshold: float
    time_budget_s: float | None
    elapsed_s: float
    rounds_to_resolve: int | None  # for "inconclusive": rounds per arm at the seen noise
    looks: int = 0  # looks planned (1: fixed design); 0: not recorded (older reports)
    per_look_confidence: float | None = None  # two-sided; None: the nominal (older reports)
    why: str = ""  # for "settled": what settled the rejection (α ≤ c, or no draft length pays)


@dataclass(frozen=True)
class Ceiling:
    """KV capacity (tokens) and parallel sequences the engine reports, per arm."""

    kv_capacity_base: float | None
    kv_capacity_spec: float | None
    drop: float | None
    max_sequences_base: int | None
    max_sequences_spec: int | None
    note: str = ""


@dataclass(frozen=True)
class Validity:
    """Checks that make the comparison fair; ``problems`` lists every failed one."""

    token_agreement: float | None
    compared_outputs: int
    disagreeing_prompts: tuple[str, ...]
    distinct_ngram_base: float | None
    distinct_ngram_spec: float | None
    degenerate_repetition: bool
    fixed_length: bool
    settings_equal: bool | None
    settings_note: str
    slots_cover_concurrency: bool | None
    engine_errors: int
    error_samples: tuple[str, ...]
    spec_counters_moved: bool | None
    base_counters_flat: bool | None
    problems: tuple[str, ...]
    agreement: Agreement | None = None


@dataclass(frozen=True)
class RunSettings:
    """What was run: identical for both arms."""

    endpoint: str
    max_tokens: int
    temperature: float
    ignore_eos: bool
    requests_per_level: int
    rounds: int
    round_order: tuple[str, ...]
    warmup_requests: int
    levels: tuple[int, ...]
    p95_concurrency: int
    confidence: float
    mode: Literal["manifest", "base-url"]


@dataclass(frozen=True)
class BenchReport:
    """The whole verification benchmark of one bundle on one engine."""

    schema_version: str
    run_id: str
    bundle: str
    engine: str
    created: str
    tool_version: str
    settings: RunSettings
    workload_source: str
    workload_sha256: str
    prompts: int
    server: dict[str, Any]
    levels: tuple[LevelResult, ...]
    crossover_concurrency: int | None
    ceiling: Ceiling
    validity: Validity
    aa_noise: RatioCI | None = None
    notes: tuple[str, ...] = ()
    stopping: Stopping | None = None
    verdict: Verdict | None = None  # the decision first (bench.verdict)

    def level(self, concurrency: int) -> LevelResult | None:
        """The result at one concurrency, if it was measured."""
        return next((lv for lv in self.levels if lv.concurrency == concurrency), None)

    @property
    def at_p95(self) -> LevelResult | None:
        """The result at the deployment's P95 concurrency (the gate's operating point)."""
        return self.level(self.settings.p95_concurrency)

    def to_json(self) -> dict[str, Any]:
        """JSON-able dict that validates against the published schema."""
        out: dict[str, Any] = _ADAPTER.dump_python(self, mode="json")
        return out

    def to_bytes(self) -> bytes:
        """Stable serialisation (the verdict first, then sorted keys): the bytes admission signs."""
        return verdict_first(self.to_json()).encode()

    @classmethod
    def from_json(cls, data: Any) -> BenchReport:
        """Validate and rebuild a stored report (raises pydantic's ValidationError)."""
        return _ADAPTER.validate_python(data)


_ADAPTER: TypeAdapter[BenchReport] = TypeAdapter(BenchReport)


def report_schema() -> dict[str, Any]:
    """The JSON schema of the report, as published in ``manifests/schemas``."""
    schema: dict[str, Any] = _ADAPTER.json_schema(mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = SCHEMA_ID
    schema["title"] = "specbundle verification benchmark report"
    schema["properties"]["schema_version"]["const"] = SCHEMA_VERSION
    return schema
