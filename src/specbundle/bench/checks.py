"""Measurement checks that hold on real models and busy machines: c per round, agreement floor.

c is a ratio of two step times; measured once, in a quiet moment, against baseline rounds that
ran under load, it came out 7x too low for a draft that is the target itself. Here the draft
has its own launch in every round, so each round gives one paired ratio draft/baseline and c
gets a confidence interval over rounds (:func:`stats.paired_ratio_ci`). The black-box c the
A/B result implies is its cross-check (:class:`~specbundle.bench.report.CostCheck`).

Output agreement is judged against its own floor: two launches of the baseline (consecutive
rounds, the same requests) are an A/A pair at no extra cost, and their common prefix is what
hardware numerics alone allow.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specbundle.bench import stats
from specbundle.bench.client import LevelRun, RequestResult
from specbundle.bench.engines import adapter_for
from specbundle.bench.numerics import first_divergence
from specbundle.bench.report import Agreement, CostCheck
from specbundle.bench.runner import RawRun

__all__ = ["agreement", "cost_check", "draft_cost_ci", "round_steps"]


def _step(engine: str, run: LevelRun) -> float | None:
    """Median per-token step time of one run: server-side where reported, else client TPOT.

    The median over requests, because contention on a shared machine only ever slows a
    request down: one stalled request must not decide the run's figure.
    """
    adapter = adapter_for(engine)
    steps = [adapter.step_ms(r.server) for r in run.ok]
    vals = [s for s in steps if s] if steps and None not in steps else \
        [r.tpot for r in run.ok if r.tpot]
    return float(np.median(vals)) if vals else None


def round_steps(engine: str, runs: Sequence[LevelRun]) -> list[float | None]:
    """Per-round step times of one arm at one level."""
    return [_step(engine, run) for run in runs]


def draft_cost_ci(raw: RawRun, c: int, confidence: float) -> stats.RatioCI | None:
    """c with its CI: the draft's step time over the baseline's, pair by pair.

    Pairs are request groups alternated between the draft and the still running baseline
    (the probe) where the servers can run side by side, else rounds (round r's draft launch
    sits next to round r's baseline). A pair missing either side is dropped; fewer than two
    pairs: no interval.
    """
    if raw.draft is None:
        return None
    d = round_steps(raw.engine, raw.draft.runs.get(c, []))
    paired = raw.probe.runs.get(c, []) if raw.probe is not None else []
    b = round_steps(raw.engine, paired or raw.base.runs.get(c, []))
    pairs = [(x, y) for x, y in zip(d, b, strict=False) if x and y]
    if len(pairs) < 2:
        return None
    return stats.paired_median_ratio_ci([x for x, _ in pairs], [y for _, y in pairs],
                                        confidence=confidence)


def cost_check(c_ci: stats.RatioCI | None, tau: float | None, g: float | None,
               ratio: stats.RatioCI | None, *, v_low: float | None = None) -> CostCheck | None:
    """Measured c against the black-box c: consistent iff c_bb ∈ [c + (v − 1)/g, c + 1].

    S = τ / (g·c + v) where v ∈ [1, g + 1] is the cost of verifying g + 1 tokens in decode
    steps (between one step and g + 1 sequential steps), so c_bb = c + (v − 1)/g. A black-box
    c below that band means speculation ran faster than its measured draft cost allows (c
    over-measured); one above c + 1 means more cost than drafting and verifying can explain
    (c under-measured), allowing one draft forward per step beyond the g proposed: a draft
    that p_min stops early still ran for the token it did not propose, so with a short mean
    draft length g the band's ceiling is c·(1 + 1/g) + 1 (issue 24: the per-position vector
    could not tell "not drafted" from "rejected", and a right c ≈ 1 was called
    under-measured). With v measured on the target (:mod:`specbundle.bench.verifycost`)
    the band's floor uses v's lower bound ``v_low`` instead of v = 1: nothing the model leaves
    out makes speculation faster. Its ceiling stays c + 1: a ratio below the extended model
    can also be the KV ceiling or the scheduler, which the cost model's note reports.
    """
    if c_ci is None or ratio is None or not tau or not g:
        return None
    bb = stats.black_box_c_interval(tau, ratio, g)
    if bb is None:
        return None
    lo, hi = bb
    point = stats.black_box_c(tau, ratio.ratio, g)
    implied = None if point is None else point - c_ci.ratio
    floor = c_ci.low + (max(v_low, 1.0) - 1.0) / g if v_low is not None else c_ci.low
    with_v = f" + (v − 1)/g at measured v ≥ {v_low:.2f}" if v_low is not None else ""
    if hi < floor:
        ok, note = False, (f"black-box c [{lo:.3f}, {hi:.3f}] is below measured c "
                           f"[{c_ci.low:.3f}, {c_ci.high:.3f}]{with_v} (≥ {floor:.3f}): "
                           "speculation ran faster than the measured draft cost allows, so c "
                           "is over-measured")
    elif lo > c_ci.high * (1.0 + 1.0 / g) + 1.0:
        ok, note = False, (f"black-box c [{lo:.3f}, {hi:.3f}] exceeds measured c "
                           f"[{c_ci.low:.3f}, {c_ci.high:.3f}] by more than verification "
                           "(v/g ≤ 1) and a draft step p_min did not propose (c/g) can cost, "
                           "so c is under-measured")
    else:
        ok = True
        note = (f"black-box c [{lo:.3f}, {hi:.3f}] is consistent with measured c "
                f"[{c_ci.low:.3f}, {c_ci.high:.3f}]{with_v}"
                + (f"; the gap (v − 1)/g ≈ {implied:.3f} is verification cost" if implied and
                   implied > 0 and hi < c_ci.low + 1.0 and lo > c_ci.high else ""))
    return CostCheck(c_low=c_ci.low, c_high=c_ci.high, black_box_low=lo, black_box_high=hi,
                     consistent=ok, implied_verification=implied, note=note, v_low=v_low)


def _prefix(a: RequestResult, b: RequestResult) -> tuple[float, bool]:
    """Common prefix in tokens, and whether the outputs are identical.

    On token ids when both requests carry them; else on text, the character prefix scaled
    to tokens by the output's characters per token.
    """
    if a.token_ids and b.token_ids:
        sa: tuple[object, ...] = a.token_ids
        sb: tuple[object, ...] = b.token_ids
        per = 1.0
    else:
        sa, sb = tuple(a.text), tuple(b.text)
        per = min(a.completion_tokens, b.completion_tokens) / max(len(a.text), len(b.text), 1)
    same = sa == sb
    n = float(min(a.completion_tokens, b.completion_tokens)) if same else \
        stats.common_prefix(sa, sb) * per
    return n, same


def _pairs_of(runs_a: dict[int, list[LevelRun]], runs_b: dict[int, list[LevelRun]],
              shift: int) -> list[tuple[RequestResult, RequestResult]]:
    """Requests matched by prompt id: round r of ``a`` with round r + shift of ``b``."""
    out = []
    for c, ra in runs_a.items():
        rb = runs_b.get(c, [])
        for i, run in enumerate(ra):
            if i + shift >= len(rb):
                break
            other = {r.prompt_id: r for r in rb[i + shift].ok}
            out += [(r, other[r.prompt_id]) for r in run.ok if r.prompt_id in other]
    return out


def agreement(raw: RawRun, max_tokens: int) -> Agreement:
    """Speculation's common prefix with the baseline, and the baseline's own A/A prefix."""
    spec_pairs = _pairs_of(raw.base.runs, raw.spec.runs, 0)
    aa_pairs = _pairs_of(raw.base.runs, raw.base.runs, 1)
    ids = all(a.token_ids and b.token_ids for a, b in spec_pairs + aa_pairs)
    sp = [_prefix(a, b) for a, b in spec_pairs]
    ap = [_prefix(a, b) for a, b in aa_pairs]
    per: dict[str, list[float]] = {}
    for (a, _), (n, _) in zip(spec_pairs, sp, strict=True):
        per.setdefault(a.prompt_id.split("#")[0], []).append(n)

    def mean(xs: Sequence[float]) -> float | None:
        return sum(xs) / len(xs) if xs else None

    s_mean, a_mean = mean([n for n, _ in sp]), mean([n for n, _ in ap])
    rel = None
    if s_mean is not None and a_mean:
        rel = min(1.0, s_mean / a_mean)
    ties = {t.divergence for t in raw.ties if t.near_tie}
    texts = {q.prompt_id: q.prompt for qs in raw.requests.values() for q in qs}
    forgiven = [float(min(a.completion_tokens, b.completion_tokens))
                if not same and a.token_ids and b.token_ids and first_divergence(
                    texts.get(a.prompt_id, ""), a.token_ids, b.token_ids) in ties else n
                for (a, b), (n, same) in zip(spec_pairs, sp, strict=True)]
    rel_num = None
    if raw.ties and forgiven and a_mean:
        rel_num = min(1.0, (sum(forgiven) / len(forgiven)) / a_mean)
    return Agreement(
        basis="token-ids" if ids and (sp or ap) else "text", max_tokens=max_tokens,
        spec_pairs=len(sp), aa_pairs=len(ap),
        spec_identical=mean([float(s) for _, s in sp]),
        aa_identical=mean([float(s) for _, s in ap]),
        spec_mean_prefix=s_mean, aa_mean_prefix=a_mean, relative=rel,
        first_divergence={k: sum(v) / len(v) for k, v in sorted(per.items())},
        probed=len(raw.ties), near_ties=sum(t.near_tie for t in raw.ties),
        relative_numerics=rel_num, probe_note=raw.tie_note)
