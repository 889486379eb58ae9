"""Bench reports built directly (no engine): inputs for the admission gate and verdicts."""

from __future__ import annotations

from specbundle.bench.report import (
    SCHEMA_VERSION,
    Acceptance,
    ArmLevel,
    BenchReport,
    Ceiling,
    LevelResult,
    RunSettings,
    Validity,
)
from specbundle.bench.stats import welch_ratio_ci


def arm_level(arm: str, tps: tuple[float, ...]) -> ArmLevel:
    """One arm at concurrency 4 with these per-round throughputs."""
    return ArmLevel(arm=arm, concurrency=4, round_output_throughput=tps,  # type: ignore[arg-type]
                    output_throughput=sum(tps) / len(tps), request_throughput=1.0, completed=8,
                    failed=0, total_output_tokens=256, ttft_ms=None, tpot_ms=None,
                    itl_chunk_ms=None, itl_token_ms=None, e2el_ms=None)


def bench_report(base: tuple[float, ...] = (100.0, 102.0, 98.0, 101.0),
                 spec: tuple[float, ...] = (150.0, 152.0, 149.0, 151.0), *,
                 alpha: float | None = 0.8, c: float | None = 0.1, drop: float | None = 0.0,
                 pre: tuple[float | None, float | None] = (0.0, 0.0),
                 agreement: float | None = 1.0, errors: int = 0,
                 problems: tuple[str, ...] = ()) -> BenchReport:
    """A one-level vLLM report whose measurements are these (defaults: a clear win)."""
    acc = Acceptance(source="counters", comparable_as_counters=True, drafts=100.0,
                     draft_tokens=400.0, accepted=300.0, acceptance_rate=0.75,
                     mean_acceptance_length=4.0, mean_draft_length=4.0,
                     per_position=(0.9, 0.8, 0.7, 0.6), depth_too_deep=False, alpha=alpha,
                     request_draft_tokens=400.0, request_accepted=300.0, request_cross_check=True)
    lv = LevelResult(concurrency=4, base=arm_level("base", base), spec=arm_level("spec", spec), draft=None,
                     ratio=welch_ratio_ci(base, spec), ratio_bootstrap=None, rounds_needed=2,
                     acceptance=acc, c_measured=c, c_black_box=0.2, predicted_improvement=2.0,
                     alpha_above_c=None if alpha is None or c is None else alpha > c,
                     preemptions_base=pre[0], preemptions_spec=pre[1], kv_usage_end_base=None,
                     kv_usage_end_spec=None)
    validity = Validity(token_agreement=agreement, compared_outputs=32, disagreeing_prompts=(),
                        distinct_ngram_base=0.9, distinct_ngram_spec=0.9,
                        degenerate_repetition=False, fixed_length=True, settings_equal=True,
                        settings_note="", slots_cover_concurrency=True, engine_errors=errors,
                        error_samples=("HTTP 500: boom",) if errors else (),
                        spec_counters_moved=True, base_counters_flat=True, problems=problems)
    settings = RunSettings(endpoint="completions", max_tokens=64, temperature=0.0,
                           ignore_eos=True, requests_per_level=8, rounds=4,
                           round_order=("base", "spec") * 4, warmup_requests=2, levels=(4,),
                           p95_concurrency=4, confidence=0.9, mode="manifest")
    return BenchReport(schema_version=SCHEMA_VERSION, run_id="r1", bundle="b", engine="vllm",
                       created="2026-11-29T00:00:00Z", tool_version="0", settings=settings,
                       workload_source="built-in", workload_sha256="0" * 64, prompts=14,
                       server={}, levels=(lv,), crossover_concurrency=4,
                       ceiling=Ceiling(1000.0, 1000.0 * (1 - (drop or 0.0)), drop, None, None),
                       validity=validity)
