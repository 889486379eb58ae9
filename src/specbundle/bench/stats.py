"""Pure statistics of the verification benchmark: no I/O, no clocks, deterministic.

Definitions follow ``vllm bench serve`` where a headline number has a vLLM name (linear
percentiles, population std) and Leviathan et al. 2022 (arXiv:2211.17192) for the
speculation model: α (i.i.d. acceptance), g (draft length), c (draft/target step cost).
The throughput ratio spec/base is analysed on the log scale, where run-to-run noise is
multiplicative and a ratio's confidence interval is symmetric.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
from scipy import optimize, special
from scipy import stats as sps

__all__ = [
    "Look",
    "LookPlan",
    "RatioCI",
    "Side",
    "Summary",
    "abba_ratio_ci",
    "acceptance_rate",
    "alpha_from_tau",
    "black_box_c",
    "black_box_c_interval",
    "bootstrap_ratio_ci",
    "common_prefix",
    "crossover_concurrency",
    "depth_collapses",
    "distinct_ngram_ratio",
    "mean_acceptance_length",
    "paired_median_ratio_ci",
    "paired_ratio_ci",
    "per_position_rates",
    "predicted_improvement",
    "ratio_side",
    "replay_looks",
    "rounds_needed",
    "rounds_to_resolve",
    "summarize",
    "welch_ratio_ci",
]

PERCENTILES = (50.0, 95.0, 99.0)


@dataclass(frozen=True)
class Summary:
    """Distribution of one per-request (or per-chunk) metric, vLLM key style."""

    n: int
    mean: float
    median: float
    std: float
    p50: float
    p95: float
    p99: float


def summarize(values: Sequence[float]) -> Summary | None:
    """Mean, median, population std and linear p50/p95/p99; ``None`` for no data."""
    if not values:
        return None
    a = np.asarray(values, dtype=float)
    p50, p95, p99 = (float(x) for x in np.percentile(a, PERCENTILES, method="linear"))
    return Summary(n=int(a.size), mean=float(a.mean()), median=float(np.median(a)),
                   std=float(a.std(ddof=0)), p50=p50, p95=p95, p99=p99)


def acceptance_rate(accepted: float, draft_tokens: float) -> float | None:
    """Engine draft acceptance rate, accepted / proposed draft tokens (not Leviathan's α)."""
    return accepted / draft_tokens if draft_tokens > 0 else None


def mean_acceptance_length(accepted: float, drafts: float) -> float | None:
    """τ = 1 + accepted / verification steps (includes the bonus token)."""
    return 1.0 + accepted / drafts if drafts > 0 else None


def per_position_rates(accepted_per_pos: Sequence[float], drafts: float) -> tuple[float, ...]:
    """Unconditional per-position acceptance p_i = accepted at position i / verification steps."""
    if drafts <= 0:
        return ()
    return tuple(a / drafts for a in accepted_per_pos)


def depth_collapses(per_pos: Sequence[float], *, ratio: float = 0.25,
                    healthy_first: float = 0.2) -> bool:
    """True when position 0 is healthy but acceptance after it falls below ``ratio`` of it.

    A vector that collapses after the first position means the draft depth is too deep
    for this pair (configuration, not a bad drafter); a draft that already fails at
    position 0 is a bad drafter, not a depth problem, and is not flagged.
    """
    if len(per_pos) < 2 or per_pos[0] < healthy_first:
        return False
    return per_pos[1] < ratio * per_pos[0]


def _expected_tokens(alpha: float, g: float) -> float:
    if alpha >= 1.0:
        return g + 1.0
    return float((1.0 - alpha ** (g + 1.0)) / (1.0 - alpha))


def alpha_from_tau(tau: float, g: float) -> float:
    """Leviathan's α: the root of (1 − α^(g+1)) / (1 − α) = τ on [0, 1].

    g is the mean draft length actually used (may be fractional). The left side is
    increasing in α from 1 to g + 1, so τ outside that range clamps to 0 or 1.
    """
    if g <= 0 or tau <= 1.0:
        return 0.0
    if tau >= g + 1.0:
        return 1.0
    root = optimize.brentq(lambda a: _expected_tokens(a, g) - tau, 0.0, 1.0 - 1e-12,
                           xtol=1e-12)
    return float(root)


def predicted_improvement(alpha: float, g: float, c: float) -> float:
    """Expected walltime improvement (1 − α^(g+1)) / ((1 − α)(g·c + 1)) (Leviathan Thm 3.8)."""
    return _expected_tokens(alpha, g) / (g * c + 1.0)


def black_box_c(tau: float, ratio: float, g: float) -> float | None:
    """c implied by a measured speedup: solve S = τ / (1 + g·c) for c.

    It lumps draft cost and the extra cost of verifying g + 1 tokens, so it is a
    cross-check of the independently measured c, not evidence on its own.
    """
    if g <= 0 or ratio <= 0:
        return None
    return (tau / ratio - 1.0) / g


@dataclass(frozen=True)
class RatioCI:
    """Ratio spec/base of mean throughput with a two-sided confidence interval."""

    ratio: float
    low: float
    high: float
    confidence: float
    method: str
    n_base: int
    n_spec: int
    log_sd: float  # pooled sample sd of log throughput (the run-to-run noise)
    dof: float


def _clean(xs: Sequence[float]) -> np.ndarray:
    a = np.asarray(xs, dtype=float)
    if a.size == 0 or not np.all(np.isfinite(a)) or np.any(a <= 0):
        raise ValueError("throughputs must be positive finite numbers")
    return a


def welch_ratio_ci(base: Sequence[float], spec: Sequence[float], *,
                   confidence: float = 0.90) -> RatioCI:
    """Welch t-interval on log throughput across rounds, exponentiated to a ratio CI.

    Needs at least two rounds per arm; with zero spread the interval is the point.
    """
    a, b = np.log(_clean(base)), np.log(_clean(spec))
    if a.size < 2 or b.size < 2:
        raise ValueError("a confidence interval needs at least two rounds per arm")
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    diff = float(b.mean() - a.mean())
    se = math.sqrt(va + vb)
    pooled = math.sqrt((a.var(ddof=1) * (a.size - 1) + b.var(ddof=1) * (b.size - 1))
                       / (a.size + b.size - 2))
    if se == 0.0:
        dof = float(a.size + b.size - 2)
        half = 0.0
    else:
        dof = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
        # stdtrit is what t.ppf evaluates, without its argument checks (~50x faster): the
        # stopping rule's simulation (tests, benchmarks) calls this tens of thousands of times
        half = float(special.stdtrit(dof, 0.5 + confidence / 2.0)) * se
    return RatioCI(ratio=math.exp(diff), low=math.exp(diff - half), high=math.exp(diff + half),
                   confidence=confidence, method="welch-log", n_base=int(a.size),
                   n_spec=int(b.size), log_sd=pooled, dof=dof)


def bootstrap_ratio_ci(base: Sequence[float], spec: Sequence[float], *, confidence: float = 0.90,
                       resamples: int = 10_000, seed: int = 0) -> RatioCI:
    """Percentile bootstrap of the ratio of mean throughputs (rounds resampled per arm)."""
    a, b = _clean(base), _clean(spec)
    rng = np.random.default_rng(seed)
    ra = a[rng.integers(0, a.size, (resamples, a.size))].mean(axis=1)
    rb = b[rng.integers(0, b.size, (resamples, b.size))].mean(axis=1)
    ratios = rb / ra
    lo, hi = np.percentile(ratios, [50 * (1 - confidence), 50 * (1 + confidence)])
    la, lb = np.log(a), np.log(b)
    pooled = math.sqrt(max(0.0, (la.var(ddof=1) * (a.size - 1) + lb.var(ddof=1) * (b.size - 1))
                           / max(1, a.size + b.size - 2))) if a.size + b.size > 2 else 0.0
    return RatioCI(ratio=float(b.mean() / a.mean()), low=float(lo), high=float(hi),
                   confidence=confidence, method="bootstrap-percentile", n_base=int(a.size),
                   n_spec=int(b.size), log_sd=pooled, dof=float(a.size + b.size - 2))


def rounds_needed(ratio: float, log_sd: float, threshold: float, *,
                  confidence: float = 0.90, cap: int = 1000) -> int | None:
    """Rounds per arm for the Welch lower bound to clear ``threshold`` at the seen noise.

    ``None`` when the observed ratio itself is not above the threshold (no number of
    rounds makes the gate pass) or more than ``cap`` would be needed.
    """
    if ratio <= threshold:
        return None
    margin = math.log(ratio) - math.log(threshold)
    if log_sd == 0.0:
        return 2
    for n in range(2, cap + 1):
        t = float(sps.t.ppf(0.5 + confidence / 2.0, 2 * n - 2))
        if t * log_sd * math.sqrt(2.0 / n) <= margin:
            return n
    return None


def crossover_concurrency(levels: Sequence[int], lows: Sequence[float | None]) -> int | None:
    """Largest concurrency up to which every level's lower ratio bound stays above 1."""
    best: int | None = None
    for level, low in sorted(zip(levels, lows, strict=True)):
        if low is None or low <= 1.0:
            break
        best = level
    return best


def distinct_ngram_ratio(tokens: Sequence[str], n: int = 3) -> float:
    """Distinct n-grams / all n-grams; near 0 means a degenerate repetition loop.

    Repetition inflates both acceptance and throughput, so a low value invalidates a run.
    """
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    if not grams:
        return 1.0
    return len(set(grams)) / len(grams)


def black_box_c_interval(tau: float, ratio: RatioCI, g: float) -> tuple[float, float] | None:
    """The black-box c over the ratio's CI: a high ratio implies a low c, so the bounds swap."""
    lo, hi = black_box_c(tau, ratio.high, g), black_box_c(tau, ratio.low, g)
    return None if lo is None or hi is None else (lo, hi)


def paired_ratio_ci(numerator: Sequence[float], denominator: Sequence[float], *,
                    confidence: float = 0.90) -> RatioCI:
    """t-interval of the mean log ratio of paired observations (one pair per round).

    Used for c: the draft's per-step time over the baseline's, each pair measured in the same
    round, so slow drift of a busy machine cancels in the ratio instead of entering the
    interval. Needs two pairs; with zero spread the interval is the point.
    """
    num, den = _clean(numerator), _clean(denominator)
    if num.size != den.size or num.size < 2:
        raise ValueError("a paired interval needs at least two pairs of equal length")
    d = np.log(num) - np.log(den)
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    dof = float(d.size - 1)
    half = float(special.stdtrit(dof, 0.5 + confidence / 2.0)) * sd / math.sqrt(d.size) \
        if sd else 0.0
    return RatioCI(ratio=math.exp(mean), low=math.exp(mean - half), high=math.exp(mean + half),
                   confidence=confidence, method="paired-log", n_base=int(d.size),
                   n_spec=int(d.size), log_sd=sd, dof=dof)


def abba_ratio_ci(base: Sequence[float], spec: Sequence[float], *,
                  confidence: float = 0.90) -> RatioCI:
    """spec/base over ABBA rounds, paired by round: its two launches are adjacent, so a slow
    drift of a busy machine cancels in each round's ratio instead of widening the interval
    (benchmarks/README.md: Welch on the unpaired rounds loses power under drift). A round
    missing either arm is left out; ``log_sd`` is the per-arm noise (the differences' sd
    over √2), the figure the rule's futility and rounds-to-resolve read."""
    n = min(len(base), len(spec))
    ci = paired_ratio_ci(spec[:n], base[:n], confidence=confidence)
    return replace(ci, log_sd=ci.log_sd / math.sqrt(2.0))


def rounds_to_resolve(ci: RatioCI, threshold: float, *, cap: int = 1000) -> int | None:
    """Rounds per arm until the Welch CI excludes ``threshold`` on whichever side the ratio is.

    The sequential rule stops on either side (a clear loss is as final as a clear win), so
    unlike :func:`rounds_needed` a ratio below the threshold also has an answer. At the CI's
    own confidence: for the rule's repeated CI that is the per-look confidence
    (:class:`LookPlan`), the width the rule must see shrink below the margin.
    """
    if ci.ratio == threshold:
        return None
    if ci.ratio > threshold:
        return rounds_needed(ci.ratio, ci.log_sd, threshold, confidence=ci.confidence, cap=cap)
    return rounds_needed(1.0 / ci.ratio, ci.log_sd, 1.0 / threshold, confidence=ci.confidence,
                         cap=cap)


#: Where a ratio CI lies against the admission threshold (``unmeasured``: no CI).
Side = Literal["above", "below", "inconclusive", "unmeasured"]


def ratio_side(ci: RatioCI | None, threshold: float) -> Side:
    """Which side of ``threshold`` the CI lies on wholly; ``inconclusive`` if it contains it."""
    if ci is None:
        return "unmeasured"
    if ci.low >= threshold:
        return "above"
    if ci.high < threshold:
        return "below"
    return "inconclusive"


@dataclass(frozen=True)
class Look:
    """One look of the sequential rule: its repeated CI, the side, and whether to stop."""

    rounds: int
    ci: RatioCI | None
    side: Side
    # None: add a pair, look again; "futile": inconclusive, but no later look can admit
    stop: Literal["resolved", "futile", "max_rounds", "fixed"] | None


@dataclass(frozen=True)
class LookPlan:
    """The sequential rule's looks, planned before the first round, and their confidence.

    The rule looks at the P95 ratio after ``rounds`` and after every further ABBA pair (even
    round counts only) up to ``max_rounds``: ``looks`` = K looks, 1 for a fixed design.
    Stopping at the first of K looks at a nominal 90 % interval that clears the threshold
    admits a ratio sitting exactly on it far more often than 5 % (optional stopping). So every
    look uses a repeated confidence interval (Jennison & Turnbull 1989) at the per-look
    confidence 1 − (1 − confidence)/K, a Bonferroni split over the K planned looks: by the
    union bound all K intervals cover the true ratio together with probability ≥
    ``confidence``, hence so does the interval at *any* stopping time (the rule's own,
    ``max_rounds``, a time budget) and the one-sided false-admission rate stays ≤
    (1 − confidence)/2, whichever side the rule stops on.

    Bonferroni rather than a Pocock or O'Brien-Fleming boundary: those are exact only for a
    normal statistic with planned information increments, while here the variance is
    estimated (Welch, its dof changing per look) and the increments are uneven or cut short
    (odd ``rounds``, the time budget); the union bound needs none of that. It is conservative
    (successive looks share most of their rounds), which costs rounds, not validity
    (benchmarks/README.md). ``corrected=False`` is the former rule (the nominal confidence at
    every look), kept only to measure what the correction buys; the bench never uses it.

    Futility (``futility``, on by default) stops early on the other side too: when even the
    top of this look's repeated CI, narrowed to the width the last look would have at the
    noise seen, stays below the threshold (:meth:`futile`), no remaining look can admit, so
    the rule stops and rejects. The boundary is non-binding: it only ever turns a later
    admission into a rejection, so the false-admission bound above holds unchanged; what it
    costs is power near the threshold, which benchmarks/bench_sequential.py measures.
    """

    rounds: int
    max_rounds: int
    confidence: float = 0.90
    corrected: bool = True
    futility: bool = True
    paired: bool = False  # the bench's: :func:`abba_ratio_ci` at each look, else Welch

    @property
    def first(self) -> int:
        """Rounds at the first look (whole ABBA pairs, at least one)."""
        return max(2, self.rounds + self.rounds % 2)

    @property
    def last(self) -> int:
        """Rounds at the last possible look: the first even count ≥ ``max_rounds``."""
        return max(self.first, self.max_rounds + self.max_rounds % 2)

    @property
    def looks(self) -> int:
        """K, the number of looks the rule can make."""
        return (self.last - self.first) // 2 + 1

    @property
    def sequential(self) -> bool:
        """Rounds may be added after ``rounds`` (else a fixed design)."""
        return self.max_rounds > self.rounds

    @property
    def per_look_confidence(self) -> float:
        """Two-sided confidence of each look's repeated CI: 1 − (1 − confidence)/K."""
        if not self.corrected:
            return self.confidence
        return 1.0 - (1.0 - self.confidence) / self.looks

    def is_look(self, rounds: int) -> bool:
        """The rule looks after whole ABBA pairs from ``rounds`` on."""
        return rounds >= self.first and rounds % 2 == 0

    def ratio_ci(self, base: Sequence[float], spec: Sequence[float]) -> RatioCI | None:
        """The repeated (per-look confidence) CI of spec/base; ``None`` if unmeasurable."""
        if len(base) < 2 or len(spec) < 2 or min(*base, *spec) <= 0:
            return None
        ci = abba_ratio_ci if self.paired else welch_ratio_ci
        return ci(base, spec, confidence=self.per_look_confidence)

    def look(self, rounds: int, base: Sequence[float], spec: Sequence[float],
             threshold: float) -> Look | None:
        """The rule after ``rounds`` rounds (per-round throughputs so far); ``None``: no look.

        Stops as soon as the CI lies wholly on one side (a clear loss is as final as a clear
        win), when admission has become futile, or at the last look; the caller may stop
        earlier (time budget): still valid.
        """
        if not self.is_look(rounds):
            return None
        ci = self.ratio_ci(base, spec)
        side = ratio_side(ci, threshold)
        stop: Literal["resolved", "futile", "max_rounds", "fixed"] | None = None
        if side != "inconclusive":
            stop = "resolved" if self.sequential else "fixed"
        elif rounds >= self.max_rounds:
            stop = "max_rounds" if self.sequential else "fixed"
        elif ci is not None and self.futile(ci, threshold):
            stop = "futile"
        return Look(rounds, ci, side, stop)

    def futile(self, ci: RatioCI, threshold: float) -> bool:
        """No look up to the last can clear ``threshold``, even at the top of ``ci``.

        The best case for admission is a true ratio at the CI's upper end, measured until
        the last look: that look's lower bound would sit one last-look half-width (the
        per-look t at 2·last − 2 degrees of freedom × the pooled log sd × √(2/last)) below
        it. If that is still under the threshold the pair cannot be admitted in the rounds
        planned at the noise seen. Off for a fixed design and with no spread (a point CI).
        """
        if not self.futility or not self.sequential or ci.log_sd <= 0.0:
            return False
        n = self.last
        t = float(special.stdtrit(n - 1 if self.paired else 2 * n - 2,
                                  0.5 + self.per_look_confidence / 2.0))
        half = t * ci.log_sd * math.sqrt(2.0 / n)
        return math.log(ci.high) - half < math.log(threshold)


def replay_looks(plan: LookPlan, base: Sequence[float], spec: Sequence[float],
                 threshold: float) -> Look | None:
    """The rule replayed on per-round throughputs in launch order: the look it stops at.

    The same decision the runner takes round by round (:meth:`LookPlan.look`), for
    simulations; the last look made when the rounds given run out first (as under a time
    budget), ``None`` if there was none.
    """
    last = None
    for r in range(1, min(len(base), len(spec)) + 1):
        got = plan.look(r, base[:r], spec[:r], threshold)
        if got is not None:
            last = got
            if got.stop is not None:
                break
    return last


def common_prefix(a: Sequence[object], b: Sequence[object]) -> int:
    """Length of the common prefix: the first position at which two outputs diverge."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def paired_median_ratio_ci(numerator: Sequence[float], denominator: Sequence[float], *,
                           confidence: float = 0.90) -> RatioCI:
    """Median of paired log ratios with its distribution-free (sign-test) interval.

    For c on a shared machine: contention comes and goes in bursts that stall either side of
    a pair, so the per-pair log ratios are heavy-tailed and the median pair, not the mean,
    is the uncontended one. The interval is [d_(k), d_(n+1-k)] of the sorted log ratios
    with the largest k for which P(Binomial(n, ½) < k) ≤ (1 − confidence) / 2; with too few
    pairs for any such k it is the full range.
    """
    num, den = _clean(numerator), _clean(denominator)
    if num.size != den.size or num.size < 2:
        raise ValueError("a paired interval needs at least two pairs of equal length")
    d = np.sort(np.log(num) - np.log(den))
    n = int(d.size)
    k = 1
    while k + 1 <= n // 2 and float(sps.binom.cdf(k, n, 0.5)) <= (1.0 - confidence) / 2.0:
        k += 1
    lo, hi = float(d[k - 1]), float(d[n - k])
    sd = float(d.std(ddof=1))
    return RatioCI(ratio=math.exp(float(np.median(d))), low=math.exp(lo), high=math.exp(hi),
                   confidence=confidence, method="paired-median", n_base=n, n_spec=n,
                   log_sd=sd, dof=float(n - 1))
