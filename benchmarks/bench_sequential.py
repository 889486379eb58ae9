"""The sequential stopping rule, simulated: false admissions and the rounds it costs.

No engine: per-round log throughputs are drawn at a given true ratio spec/base and
run-to-run noise, and the bench's own rule (:meth:`stats.LookPlan.look`, through
:func:`stats.replay_looks`, the decision the runner takes round by round) decides when to
stop and which side the P95 ratio CI lies on. Two versions of the rule on the same draws:

* ``nominal``: every look at the nominal 90 % two-sided CI (the rule before repeated CIs);
* ``repeated``: every look a repeated CI at the Bonferroni per-look confidence.

Figures, as ratios against a reference rather than pass/fail:

1. at a true ratio exactly on the threshold, the false-admission rate (the last look's CI
   wholly above the threshold) over the nominal one-sided 5 %, per look schedule;
2. at true ratios 1.3-1.8 against the test gate's threshold 1.0 (the good synthetic pair on
   a CPU) and 10-30 % run-to-run noise, the mean rounds per arm of ``repeated`` over
   ``nominal``, and the share admitted by each (power);
3. futility (issue 24), the repeated rule with and without it on the same draws: the
   false-admission rate on the threshold (it must not rise: the boundary is non-binding),
   and at true ratios from "cannot pay" (1.0, a self-drafting pair) to a clear win, the mean
   rounds per arm to a decision with / without, and the share admitted by each.

4. pairing (issue 24): the repeated CI from Welch on the unpaired rounds (the bench's) against
   a paired one, the log of each round's spec/base ratio (its two launches adjacent, so a
   slow drift of the machine cancels) as a one-sample t at r − 1 degrees of freedom, and
   against one per ABBA pair (pairs − 1 degrees of freedom); the same draws, with and
   without a drift: false admissions on the threshold, rounds to a decision and admissions.

Noise is log-normal per round; ``--drift`` adds a slow random walk that both arms share in
launch order (a machine warming up or getting busier), which ABBA order cancels in the mean.

    python benchmarks/bench_sequential.py [--sims 4000] [--seed 1] [--drift 0.0] [--parts 1234]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special

from specbundle.bench import stats

NOMINAL = 0.90
SCHEDULES = ((4, 12), (2, 6), (4, 64), (4, 4))  # (rounds, max_rounds): spec default, tests
RATIOS = (1.3, 1.5, 1.8)
NOISE = (0.10, 0.20, 0.30)  # sd of log throughput per round (≈ 10-30 % run to run)


@dataclass(frozen=True)
class Outcome:
    """Share of runs admitted (last look wholly above) and mean rounds per arm."""

    admitted: float
    rounds: float


def draws(rng: np.random.Generator, n: int, ratio: float, sd: float,
          drift: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-round throughputs of both arms in ABBA launch order, ``n`` rounds each."""
    base = rng.normal(0.0, sd, n)
    spec = rng.normal(math.log(ratio), sd, n)
    if drift:
        walk = np.cumsum(rng.normal(0.0, drift, 2 * n))  # one step per launch
        order = [(0, 1) if r % 2 == 0 else (1, 0) for r in range(n)]  # (base, spec) slot
        base += np.array([walk[2 * r + o[0]] for r, o in enumerate(order)])
        spec += np.array([walk[2 * r + o[1]] for r, o in enumerate(order)])
    return 100.0 * np.exp(base), 100.0 * np.exp(spec)


def simulate(plans: tuple[stats.LookPlan, ...], sims: int, ratio: float, sd: float, *,
             threshold: float, drift: float, seed: int) -> tuple[Outcome, ...]:
    """Each plan on the same draws."""
    rng = np.random.default_rng(seed)
    n = max(p.last for p in plans)
    admitted = [0] * len(plans)
    rounds = [0] * len(plans)
    for _ in range(sims):
        b, s = draws(rng, n, ratio, sd, drift)
        bl, sl = b.tolist(), s.tolist()
        for i, plan in enumerate(plans):
            look = stats.replay_looks(plan, bl, sl, threshold)
            assert look is not None  # the draws cover the last look
            admitted[i] += look.side == "above"
            rounds[i] += look.rounds
    return tuple(Outcome(a / sims, r / sims) for a, r in zip(admitted, rounds, strict=True))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--drift", type=float, default=0.0, help="sd of the shared walk per launch")
    ap.add_argument("--parts", default="123", help="which figures to run, e.g. 3")
    a = ap.parse_args()
    t0 = time.monotonic()
    if "1" in a.parts:
        _part1(a.sims, a.seed, a.drift)
    if "2" in a.parts:
        _part2(a.sims, a.seed, a.drift)
    if "3" in a.parts:
        _part3(a.sims, a.seed, a.drift)
    if "4" in a.parts:
        _part4(a.sims, a.seed)
    print(f"({time.monotonic() - t0:.0f} s)")
    return 0


def _part1(sims: int, seed: int, drift: float) -> None:
    print(f"1. true ratio on the threshold (1.05), log sd 0.2, {sims} runs per schedule: "
          "false-admission rate / nominal 5 %")
    for rounds, max_rounds in SCHEDULES:
        plans = (stats.LookPlan(rounds, max_rounds, NOMINAL, corrected=False),
                 stats.LookPlan(rounds, max_rounds, NOMINAL))
        nom, rep = simulate(plans, sims, 1.05, 0.2, threshold=1.05, drift=drift,
                            seed=seed)
        se = math.sqrt(0.05 * 0.95 / sims)
        print(f"  rounds {rounds:2d}, max {max_rounds:2d}: K = {plans[1].looks:2d} looks, "
              f"per look {plans[1].per_look_confidence:.4f}; nominal {nom.admitted:.4f} "
              f"(ratio {nom.admitted / 0.05:.2f}), repeated {rep.admitted:.4f} "
              f"(ratio {rep.admitted / 0.05:.2f}); Monte-Carlo se at 5 %: {se:.4f}")


def _part2(sims: int, seed: int, drift: float) -> None:
    print("2. rounds 4, max 12, threshold 1.0 (the test gate): mean rounds per arm repeated / "
          "nominal, share admitted")
    plans = (stats.LookPlan(4, 12, NOMINAL, corrected=False), stats.LookPlan(4, 12, NOMINAL))
    for ratio in RATIOS:
        for sd in NOISE:
            nom, rep = simulate(plans, sims // 4, ratio, sd, threshold=1.0, drift=drift,
                                seed=seed)
            print(f"  ratio {ratio:.1f}, log sd {sd:.2f}: rounds {nom.rounds:5.2f} -> "
                  f"{rep.rounds:5.2f} (x{rep.rounds / nom.rounds:.2f}, "
                  f"+{rep.rounds - nom.rounds:.2f}); admitted {nom.admitted:.3f} -> "
                  f"{rep.admitted:.3f}")


def _part3(sims: int, seed: int, drift: float) -> None:
    print("3. futility: rounds 4, max 12, threshold 1.05; with / without on the same draws")
    plans = (stats.LookPlan(4, 12, NOMINAL), stats.LookPlan(4, 12, NOMINAL, futility=False))
    for sd in (0.2, 0.5):  # a quiet box; a loaded one (the 0.13-4.65 after 4 rounds)
        for ratio in (1.0, 1.05, 1.3, 1.6):
            fut, plain = simulate(plans, sims // 4, ratio, sd, threshold=1.05,
                                  drift=drift, seed=seed)
            print(f"  log sd {sd:.1f}, ratio {ratio:.2f}: rounds {plain.rounds:5.2f} -> "
                  f"{fut.rounds:5.2f} (x{fut.rounds / plain.rounds:.2f}); admitted "
                  f"{plain.admitted:.3f} -> {fut.admitted:.3f}"
                  + (f" (false admissions / nominal 5 %: {plain.admitted / 0.05:.2f} -> "
                     f"{fut.admitted / 0.05:.2f})" if ratio == 1.05 else ""))


def paired_ci(base: Sequence[float], spec: Sequence[float], confidence: float, *,
              per: int = 1) -> stats.RatioCI | None:
    """The ratio's CI from paired log differences: one per round (``per`` 1: its base and
    spec launches adjacent) or per ABBA pair (``per`` 2), a one-sample t at n − 1 dof.

    ``log_sd`` is the differences' sd over √2, the per-arm noise the rule's futility and
    rounds-to-resolve read (the same standard error as Welch's at equal spread)."""
    n = min(len(base), len(spec)) // per
    if n < 2:
        return None
    d = np.log(np.asarray(spec[: n * per])) - np.log(np.asarray(base[: n * per]))
    d = d.reshape(n, per).mean(axis=1)
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    half = float(special.stdtrit(n - 1, 0.5 + confidence / 2.0)) * sd / math.sqrt(n)
    return stats.RatioCI(ratio=math.exp(mean), low=math.exp(mean - half),
                         high=math.exp(mean + half), confidence=confidence,
                         method=f"paired-log/{per}", n_base=n * per, n_spec=n * per,
                         log_sd=sd * math.sqrt(per) / math.sqrt(2.0), dof=n - 1.0)


@dataclass(frozen=True)
class PairedPlan(stats.LookPlan):
    """The bench's rule with the paired CI in place of Welch's (the same looks, per-look
    confidence and futility)."""

    per: int = 1

    def ratio_ci(self, base: Sequence[float], spec: Sequence[float]) -> stats.RatioCI | None:
        return paired_ci(base, spec, self.per_look_confidence, per=self.per)


def _part4(sims: int, seed: int) -> None:
    print("4. pairing: rounds 4, max 12, threshold 1.05; Welch / paired per round / paired per "
          "ABBA pair on the same draws (false admissions / nominal 5 %, mean rounds per arm, "
          "share admitted)")
    plans = (stats.LookPlan(4, 12, NOMINAL), PairedPlan(4, 12, NOMINAL),
             PairedPlan(4, 12, NOMINAL, per=2))
    for sd, drift in ((0.2, 0.0), (0.2, 0.1), (0.5, 0.0), (0.3, 0.3)):
        for ratio in (1.05, 1.0, 1.3, 1.6):
            got = simulate(plans, sims if ratio == 1.05 else sims // 4, ratio, sd,
                           threshold=1.05, drift=drift, seed=seed)
            what = " / ".join(f"{o.admitted / 0.05:.2f}" if ratio == 1.05 else
                              f"{o.rounds:5.2f} r, {o.admitted:.3f}" for o in got)
            print(f"  log sd {sd:.1f}, drift {drift:.1f}/launch, ratio {ratio:.2f}: {what}",
                  flush=True)


if __name__ == "__main__":
    sys.exit(main())
