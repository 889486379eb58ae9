"""Snapshot tests of the verdict sentences, one per kind of outcome and of failure.

The figures go through the real cost model (:mod:`specbundle.bench.costmodel`) as the
analysis does; the sentences are pinned in ``data/verdict_snapshots.json``. After an
intended wording change, regenerate with ``SPECBUNDLE_UPDATE_SNAPSHOTS=1`` and review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from specbundle.admit.decision import Criterion
from specbundle.bench import costmodel as cm
from specbundle.bench.verdict import Figures, gate_verdict, level_verdict, verdict_first

SNAPSHOTS = Path(__file__).parent / "data" / "verdict_snapshots.json"


def fig(conc: int, ratio: float, lo: float, hi: float, a: float, c: float, g: float,
        v: float | None, *, prefill: float = 0.0, **kw: Any) -> Figures:
    """Figures as the analysis computes them from α, c, g, v (±5 %) and the measured ratio.

    ``prefill``: the share of each baseline request before its first token (end-to-end model).
    """
    d: dict[str, Any] = {"concurrency": conc, "ratio": ratio, "ratio_low": lo,
                         "ratio_high": hi, "alpha": a, "c": c, "g": g}
    if v is not None:
        vi = cm.Interval(v, v * 0.95, v * 1.05)
        p = cm.predict(a, g, cm.Interval(c, c, c), vi)
        adv = cm.advise(a, g, c, v, 8)
        m = cm.reconcile(p, cm.Interval(ratio, lo, hi), prefill_share=prefill)
        d.update(v=v, v_low=vi.low, v_high=vi.high, paper=p.paper, extended=m.extended.value,
                 extended_low=m.extended.low, extended_high=m.extended.high, agrees=m.agrees,
                 prefill_share=m.prefill_share,
                 extended_decode=m.extended_decode.value if m.extended_decode else None,
                 break_even_c=adv.break_even_c, break_even_v=adv.break_even_v, k_configured=8,
                 largest_paying_k=adv.largest_paying_k, best_k=adv.best_k,
                 best_k_improvement=adv.best_k_improvement)
    d.update(kw)
    return Figures(**d)


CLEAR = {"kv_drop": 0.0, "preemption_increase": 0.0, "slots_cover": True}
CASES: dict[str, Figures] = {
    # high acceptance, cheap draft, and a target that is compute-bound: verification eats it
    "verification_dominates": fig(32, 0.9, 0.85, 0.96, 0.99, 0.1, 8, 8.5, **CLEAR),
    # the draft is the target: c ≈ 1
    "draft_costs_like_target": fig(1, 0.52, 0.47, 0.57, 0.99, 0.97, 8, 1.3, **CLEAR),
    "acceptance_below_cost": fig(1, 0.31, 0.28, 0.34, 0.04, 0.09, 8, 2.0),
    "kv_ceiling_and_preemption": fig(16, 0.7, 0.65, 0.75, 0.9, 0.1, 8, 1.2, kv_drop=0.3,
                                     preemption_increase=12.0, slots_cover=True),
    "queueing": fig(8, 0.8, 0.7, 0.9, 0.9, 0.1, 8, 1.5, kv_drop=0.0, slots_cover=False),
    "inconclusive": fig(1, 1.1, 0.8, 1.5, 0.9, 0.1, 8, 3.0, rounds_needed=14),
    "win": fig(1, 1.62, 1.41, 1.86, 0.93, 0.11, 8, 3.4, **CLEAR),
    # short outputs: the prefill and first token (12 % of a request) dilute the decode win
    "win_short_outputs": fig(1, 2.24, 2.05, 2.45, 1.0, 0.07, 6.75, 2.36, prefill=0.12,
                             **CLEAR),
    "shorter_draft_pays": fig(4, 1.05, 0.98, 1.12, 0.8, 0.05, 8, 6.0, **CLEAR),
    "model_mismatch": fig(4, 0.62, 0.58, 0.66, 0.93, 0.11, 8, 2.0, **CLEAR),
    "invalid": Figures(concurrency=1, ratio=1.2, ratio_low=1.1, ratio_high=1.3,
                       problems=("3 request(s) failed",
                                 "not every request generated exactly max_tokens=32")),
    "unmeasured": Figures(concurrency=2),
    # the gate holds α against c's upper bound: α 0.6 beats c 0.55 but not its bound 0.7
    "alpha_below_c_upper_bound": fig(1, 0.6, 0.55, 0.65, 0.6, 0.55, 4, 1.2, c_high=0.7,
                                     **CLEAR),
    # measured and black-box c disagree (bench.checks.cost_check): c counts as unmeasured
    "c_untrusted": fig(1, 0.45, 0.4, 0.5, 0.9, 0.3, 4, 1.1, c_high=0.35,
                       c_note="black-box c [1.80, 2.31] exceeds measured c [0.25, 0.35] by "
                       "more than verification can cost (v/g ≤ 1), so c is under-measured"),
    # the sequential rule ran out of budget with the CI straddling the admission threshold
    "inconclusive_sequential": fig(2, 1.04, 0.9, 1.2, 0.9, 0.1, 8, 3.0, stop_outcome=
                                   "inconclusive", stop_rounds=8, stop_reason="time_budget",
                                   stop_threshold=1.05, stop_rounds_to_resolve=40, stop_looks=5,
                                   stop_per_look_confidence=0.98, confidence=0.98),
    "v_unmeasured": Figures(concurrency=1, ratio=0.8, ratio_low=0.7, ratio_high=0.9, alpha=0.9,
                            c=0.2, g=8, paper=2.4,
                            v_note="vllm reports no server-side prompt timings"),
}


def _render(f: Figures) -> dict[str, Any]:
    v = level_verdict(f, where=f"at your P95 concurrency {f.concurrency}")
    return {"outcome": v.outcome, "headline": v.headline, "reasons": list(v.reasons)}


def _snapshots() -> dict[str, Any]:
    got = {k: _render(f) for k, f in CASES.items()}
    if os.environ.get("SPECBUNDLE_UPDATE_SNAPSHOTS"):
        SNAPSHOTS.write_text(json.dumps(got, indent=2, ensure_ascii=False) + "\n")
    data: dict[str, Any] = json.loads(SNAPSHOTS.read_text())
    return data


@pytest.mark.parametrize("kind", sorted(CASES))
def test_sentences_match_the_snapshot(kind: str) -> None:
    assert _render(CASES[kind]) == _snapshots()[kind]


def test_every_snapshot_has_a_case() -> None:
    assert set(_snapshots()) == set(CASES)


def test_each_kind_names_its_cause() -> None:
    said = {k: " ".join([_render(f)["headline"], *_render(f)["reasons"]]) for k, f in CASES.items()}
    assert "each verification costs 8.5 decode steps" in said["verification_dominates"]
    assert "break-even needs v <" in said["verification_dominates"]
    assert "c ≈ 1" in said["draft_costs_like_target"]
    assert "not above the draft cost" in said["acceptance_below_cost"]
    assert "not the drafter's" in said["kv_ceiling_and_preemption"]
    assert "requests queued" in said["queueing"]
    assert _render(CASES["win"])["outcome"] == "wins"
    assert "K ≤" in said["shorter_draft_pays"]
    assert "validity note" in said["model_mismatch"] and "checked and clear" in \
        said["model_mismatch"]
    assert "rounds per arm would resolve it" in said["inconclusive"]
    assert "upper bound 0.70" in said["alpha_below_c_upper_bound"]
    assert "cannot be trusted" in said["c_untrusted"]
    assert "stopped after 8 rounds (time budget; 5 planned looks, each a repeated CI at 98%)" \
        in said["inconclusive_sequential"]
    assert "about 40 rounds per arm" in said["inconclusive_sequential"]


def test_gate_verdict_names_the_measurement_criteria() -> None:
    crit = (
        Criterion("throughput_ratio", False, "inconclusive", ">= 1.050",
                  "ratio 1.04: inconclusive, the CI contains 1.050 after 8 rounds"),
        Criterion("alpha_above_c", False, "α=0.900 c=unmeasured", "α > c",
                  "c unmeasured: measured and black-box c disagree (…)"),
        Criterion("token_agreement", False, "0.200", ">= 0.50 of the A/A floor",
                  "mean common prefix 6.0 of 32 tokens vs the baseline's own 30.0"),
        Criterion("tuned_schedule", False, "K=0 at 4", "K > 0 at P95",
                  "tuned schedule (run r) switches speculation off at the P95 concurrency 4"),
    )
    v = gate_verdict(crit, None, admitted=False)
    assert v.reasons == (
        "throughput ratio: ratio 1.04: inconclusive, the CI contains 1.050 after 8 rounds",
        "the draft cost c could not be trusted, so α > c fails: c unmeasured: measured and "
        "black-box c disagree (…)",
        "the two arms do not generate the same outputs: mean common prefix 6.0 of 32 tokens vs "
        "the baseline's own 30.0",
        "the tuned schedule leaves no speculative configuration to admit: tuned schedule (run r) "
        "switches speculation off at the P95 concurrency 4",
    )


def test_gate_verdict_explains_each_failed_criterion() -> None:
    crit = (
        Criterion("throughput_ratio", False, "0.520", ">= 1.050", "lower bound 0.52 < 1.05"),
        Criterion("alpha_above_c", True, "α=0.99 c=0.97", "α > c", "α = 0.99 > c = 0.97"),
        Criterion("ceiling_drop", False, "0.300", "<= 0.100", "KV capacity drops by 30.0%"),
        Criterion("preemption_increase", False, "unmeasured", "<= 0",
                  "preemptions unmeasured at P95 concurrency"),
        Criterion("some_new_check", False, "x", "y", "it failed"),
    )
    v = gate_verdict(crit, None, admitted=False, earlier=["verification: bad signature"])
    assert v.outcome == "rejected"
    assert v.headline == ("rejected: 4 of 5 criteria failed (throughput_ratio, ceiling_drop, "
                          "preemption_increase, some_new_check)")
    assert v.reasons == (
        "verification: bad signature",
        "throughput ratio: lower bound 0.52 < 1.05",
        "speculation takes too much of the KV cache: KV capacity drops by 30.0%; that memory "
        "would buy more concurrency than the draft buys speed",
        "preemption increase could not be measured, so it fails: preemptions unmeasured at P95 "
        "concurrency",
        "some new check: it failed",
    )
    ok = gate_verdict(crit[1:2], None, admitted=True)
    assert ok.outcome == "admitted" and ok.headline == "admitted: every criterion passed"


def test_verdict_comes_first_in_the_json() -> None:
    text = verdict_first({"b": {"z": 1, "a": 2}, "verdict": {"outcome": "wins"}, "a": [1]})
    assert list(json.loads(text)) == ["verdict", "a", "b"]
    assert text.index('"a": 2') < text.index('"z": 1')  # nested keys sorted
