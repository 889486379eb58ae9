"""The speed-up model with verification cost, and the advice it gives. Pure maths.

Leviathan et al. (arXiv:2211.17192, Thm 3.8) predict the walltime improvement of
speculative decoding as ``(1 − α^(g+1)) / ((1 − α)(g·c + 1))``: the ``+ 1`` is one target
step to verify g + 1 tokens, which holds only while the target is memory-bound. On a CPU,
or past the critical batch size on a GPU, verifying g + 1 tokens per sequence costs
``v`` ordinary decode steps, so the denominator becomes ``g·c + v``::

    improvement(α, g, c, v) = τ(α, g) / (g·c + v),   τ(α, g) = (1 − α^(g+1)) / (1 − α)

With ``v = 1`` this is the paper's form. ``v`` depends on g: the verification forward is
roughly affine in the tokens it processes, so ``v(g) = 1 + s·g`` where ``s`` is the extra
cost of one more token per sequence, in decode steps (:func:`v_at`).

Both forms predict the decode phase. A measured throughput ratio is end to end: each request
also pays its prefill and first token, which speculation does not speed up (the draft's own
prefill makes it, if anything, slower). With ``p`` that share of a baseline request's time
and ``q`` the speculative arm's time to first token over the same baseline request time, the
request-level improvement is ``1 / (q + (1 − p) / S)``, Amdahl's law when ``q = p``
(:func:`end_to_end`). The model explains the decode phase; the time to first token is
measured in each arm, not modelled. On short outputs this is most of what separated the
decode-phase model from the measurement (llama-server, 32-token outputs: p ≈ 0.12 turns a
decode speed-up of 2.76 into 2.29 against 2.24 measured).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields

from scipy import optimize

__all__ = [
    "Advice",
    "Interval",
    "ModelCheck",
    "Prediction",
    "advise",
    "best_k",
    "break_even_alpha",
    "break_even_c",
    "break_even_v",
    "end_to_end",
    "expected_tokens",
    "extended_improvement",
    "k_schedule",
    "largest_paying_k",
    "paper_improvement",
    "predict",
    "reconcile",
    "v_at",
]


@dataclass(frozen=True)
class Interval:
    """A value with its interval (``low <= value <= high``)."""

    value: float
    low: float
    high: float

    def contains(self, x: float) -> bool:
        """Whether ``x`` lies inside the interval (ends included)."""
        return self.low <= x <= self.high

    def overlaps(self, low: float, high: float) -> bool:
        """Whether ``[low, high]`` shares a point with the interval."""
        return low <= self.high and self.low <= high


def expected_tokens(alpha: float, g: float) -> float:
    """τ: expected tokens committed per verification step, bonus token included."""
    if alpha >= 1.0:
        return g + 1.0
    return float((1.0 - alpha ** (g + 1.0)) / (1.0 - alpha))


def paper_improvement(alpha: float, g: float, c: float) -> float:
    """Leviathan's closed form: verification costs one decode step."""
    return extended_improvement(alpha, g, c, 1.0)


def extended_improvement(alpha: float, g: float, c: float, v: float) -> float:
    """τ / (g·c + v): verification of g + 1 tokens costs ``v`` decode steps."""
    den = g * c + v
    return expected_tokens(alpha, g) / den if den > 0 else math.inf


def _shares(prefill_share: float, spec_prefill_share: float | None) -> tuple[float, float]:
    """(p, q) made usable: p in [0, 1], q ≥ 0, a missing or non-finite q taken as p."""
    p = min(max(prefill_share, 0.0), 1.0) if math.isfinite(prefill_share) else 0.0
    if spec_prefill_share is None or not math.isfinite(spec_prefill_share):
        return p, p
    return p, max(spec_prefill_share, 0.0)


def end_to_end(decode: float, prefill_share: float,
               spec_prefill_share: float | None = None) -> float:
    """The request-level improvement of a decode-phase one, ``1 / (q + (1 − p) / S)``.

    ``prefill_share`` (p): a baseline request's time to first token over its latency;
    ``spec_prefill_share`` (q): the speculative arm's time to first token over the same
    baseline latency (default p: speculation leaves the prefill as it is).
    """
    p, q = _shares(prefill_share, spec_prefill_share)
    if p == 0.0 and q == 0.0:
        return decode
    if decode <= 0:
        return 0.0
    den = q + (1.0 - p) / decode  # an infinite decode speed-up leaves q
    return 1.0 / den if den > 0 else math.inf


def v_at(v_measured: float, g_measured: float, g: float) -> float:
    """v at another draft length, from one measured (g, v): affine in the tokens verified."""
    if g_measured <= 0:
        return v_measured
    return max(1.0, 1.0 + (v_measured - 1.0) * g / g_measured)


@dataclass(frozen=True)
class Prediction:
    """Both forms of the model at one level, and the inputs they were computed from."""

    alpha: float
    g: float
    c: float
    v: Interval
    paper: float
    extended: Interval


def predict(alpha: float, g: float, c: Interval, v: Interval) -> Prediction:
    """Paper and extended predictions; the extended interval spans c's and v's intervals.

    The improvement falls as c or v rises, so its ends are the corners of the box.
    """
    ext = Interval(extended_improvement(alpha, g, c.value, v.value),
                   extended_improvement(alpha, g, c.high, v.high),
                   extended_improvement(alpha, g, c.low, v.low))
    return Prediction(alpha=alpha, g=g, c=c.value, v=v, paper=paper_improvement(alpha, g, c.value),
                      extended=ext)


def break_even_c(alpha: float, g: float, v: float, *, target: float = 1.0) -> float:
    """The largest draft cost c at which speculation still reaches ``target`` (may be < 0)."""
    if g <= 0:
        return math.nan
    return (expected_tokens(alpha, g) / target - v) / g


def break_even_v(alpha: float, g: float, c: float, *, target: float = 1.0) -> float:
    """The largest verification cost v (decode steps) at which speculation reaches ``target``."""
    return expected_tokens(alpha, g) / target - g * c


def break_even_alpha(g: float, c: float, v: float, *, target: float = 1.0) -> float | None:
    """The acceptance α at which τ(α, g) = target·(g·c + v); ``None`` if no α ≤ 1 reaches it."""
    need = target * (g * c + v)
    if need <= 1.0:
        return 0.0
    if need >= g + 1.0:  # τ < g + 1 for every α < 1
        return None
    return float(optimize.brentq(lambda a: expected_tokens(a, g) - need, 0.0, 1.0 - 1e-12,
                                 xtol=1e-9))


def _improvements(alpha: float, c: float, v: float, g_measured: float,
                  k_max: int) -> list[tuple[int, float]]:
    return [(k, extended_improvement(alpha, k, c, v_at(v, g_measured, k)))
            for k in range(1, k_max + 1)]


def largest_paying_k(alpha: float, c: float, v: float, g_measured: float, k_max: int, *,
                     target: float = 1.0) -> int:
    """The largest draft length K ≤ ``k_max`` whose predicted improvement exceeds ``target``.

    0 means no K pays: switch speculation off at this level. ``v`` is the verification
    cost measured at draft length ``g_measured`` (scaled to other K by :func:`v_at`).
    """
    paying = [k for k, s in _improvements(alpha, c, v, g_measured, k_max) if s > target]
    return max(paying, default=0)


def best_k(alpha: float, c: float, v: float, g_measured: float, k_max: int) -> tuple[int, float]:
    """The K ≤ ``k_max`` with the highest predicted improvement, and that improvement."""
    return max(_improvements(alpha, c, v, g_measured, k_max), key=lambda kv: kv[1],
               default=(0, 1.0))


def k_schedule(levels: Sequence[tuple[int, float, float, float, float]], k_max: int, *,
               target: float = 1.0) -> list[tuple[int, int]]:
    """(concurrency, largest paying K) per level from (concurrency, α, c, v, g) tuples.

    For ``tune``: a K-per-batch-size schedule predicted from one measured configuration,
    to choose which K to measure, never as a substitute for measuring them.
    """
    return [(conc, largest_paying_k(a, c, v, g, k_max, target=target))
            for conc, a, c, v, g in levels]


@dataclass(frozen=True)
class ModelCheck(Prediction):
    """Both predictions beside the measured ratio at one level.

    ``extended`` here is the request-level prediction, the one comparable with the measured
    ratio: the decode-phase ``τ / (g·c + v)`` (kept as ``extended_decode``) with the
    ``prefill_share`` of each request left unsped (:func:`end_to_end`). ``paper`` stays the
    paper's own decode-phase figure, what an operator computes by hand from α, g and c.
    ``agrees`` is whether the measured ratio's CI meets the extended model's interval: when
    it does not, something the model leaves out is moving throughput (KV ceiling,
    preemption, the scheduler, an eager draft beside a graphed target).
    """

    measured: float | None
    measured_low: float | None
    measured_high: float | None
    paper_error: float | None  # |paper − measured| / measured
    extended_error: float | None
    agrees: bool | None
    # reports before the prefill term carry none of these: their ``extended`` is the decode form
    prefill_share: float = 0.0
    spec_prefill_share: float = 0.0
    extended_decode: Interval | None = None


def reconcile(pred: Prediction, measured: Interval | None, *, prefill_share: float = 0.0,
              spec_prefill_share: float | None = None) -> ModelCheck:
    """Put a prediction beside the measurement (``None``: the ratio was not measured).

    ``prefill_share``: the share of a baseline request's time spent before its first token
    (mean TTFT over mean end-to-end latency at this level); ``spec_prefill_share``: the
    speculative arm's mean TTFT over the same baseline latency (default: the same share).
    """
    m = measured
    p, q = _shares(prefill_share, spec_prefill_share)
    ext = Interval(*(end_to_end(x, p, q) for x in
                     (pred.extended.value, pred.extended.low, pred.extended.high)))
    base = {f.name: getattr(pred, f.name) for f in fields(pred)}
    base["extended"] = ext
    return ModelCheck(
        **base,
        measured=m.value if m else None, measured_low=m.low if m else None,
        measured_high=m.high if m else None,
        paper_error=abs(pred.paper - m.value) / m.value if m and m.value > 0 else None,
        extended_error=abs(ext.value - m.value) / m.value if m and m.value > 0 else None,
        agrees=ext.overlaps(m.low, m.high) if m else None,
        prefill_share=p, spec_prefill_share=q, extended_decode=pred.extended)


@dataclass(frozen=True)
class Advice:
    """What the extended model says to change at one level."""

    k_configured: int
    largest_paying_k: int  # 0: switch speculation off at this level
    best_k: int
    best_k_improvement: float
    break_even_c: float  # the dearest draft that still breaks even at the measured g and v
    break_even_v: float  # the dearest verification that still breaks even at the measured c
    break_even_alpha: float | None  # None: no acceptance can pay at this c and v


def advise(alpha: float, g: float, c: float, v: float, k_configured: int) -> Advice:
    """The seed's advice, computed: K per level, and the break-even c, v and α."""
    k_max = max(k_configured, 1)
    k, s = best_k(alpha, c, v, g, k_max)
    return Advice(k_configured=k_configured,
                  largest_paying_k=largest_paying_k(alpha, c, v, g, k_max), best_k=k,
                  best_k_improvement=s, break_even_c=break_even_c(alpha, g, v),
                  break_even_v=break_even_v(alpha, g, c),
                  break_even_alpha=break_even_alpha(g, c, v))
