"""From a K sweep's raw runs to the measured schedule: pure, deterministic, no I/O.

Every (K, p_min) setting is an arm of its own, compared with the baseline measured in the same
rounds by the same Welch interval on log throughput as the A/B bench. Per concurrency the
schedule takes the setting with the highest ratio among those whose CI lower bound clears
1 (a significant win), else K = 0: speculation stays off wherever it is not shown to pay, the
fail-closed reading of "K = 0 where speculation loses". Beside it: the best fixed setting
(highest mean log ratio over all levels: what a single static K would give), the schedule's
gain over it per level, and the crossover concurrency (the largest level up to which the
schedule keeps speculation on).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter

from specbundle.bench import stats
from specbundle.schedule import Tier, TunedSchedule

__all__ = [
    "TUNE_VERSION", "LevelChoice", "TuneResult", "Variant", "VariantLevel", "choose",
    "variant_levels",
]

TUNE_VERSION = "specbundle.tune-result/v1"


@dataclass(frozen=True)
class Variant:
    """One speculation setting of the sweep."""

    k: int
    p_min: float | None = None

    @property
    def name(self) -> str:
        return f"k{self.k}" + ("" if self.p_min is None else f"-p{self.p_min:g}")


@dataclass(frozen=True)
class VariantLevel:
    """One setting at one concurrency against the baseline of the same rounds."""

    k: int
    p_min: float | None
    concurrency: int
    throughput: tuple[float, ...]  # per round
    ratio: stats.RatioCI | None


@dataclass(frozen=True)
class LevelChoice:
    """The schedule at one concurrency, the best fixed setting there, and the gain."""

    concurrency: int
    k: int
    p_min: float | None
    ratio: float  # 1.0 for K = 0 (the baseline itself)
    ratio_low: float
    ratio_high: float
    fixed_ratio: float | None  # the best fixed setting at this level
    gain_over_fixed: float | None  # schedule ratio / fixed ratio
    decided: bool  # a significant win, or every setting significantly losing


@dataclass(frozen=True)
class TuneResult:
    """A whole sweep: the per-setting results, the schedule and the summary figures."""

    schema_version: str
    run_id: str
    bundle: str
    engine: str
    created: str
    tool_version: str
    levels: tuple[int, ...]
    variants: tuple[Variant, ...]
    rounds: int
    round_order: tuple[tuple[str, ...], ...]
    requests_per_level: int
    max_tokens: int
    confidence: float
    base_throughput: dict[int, tuple[float, ...]]
    results: tuple[VariantLevel, ...]
    choices: tuple[LevelChoice, ...]
    best_fixed: Variant | None
    crossover_concurrency: int | None
    p95_concurrency: int
    elapsed_s: float
    minutes_per_k: float
    notes: tuple[str, ...] = ()
    # the confidence of every CI in ``results`` (the sequential sweep's per-look one,
    # stats.LookPlan); None in results stored before it was recorded: ``confidence``
    per_look_confidence: float | None = None

    def decision(self) -> tuple[str, str]:
        """The schedule in one word (ON / OFF at the P95 concurrency) and the why, first."""
        at = next((c for c in self.choices if c.concurrency == self.p95_concurrency), None)
        off = [c.concurrency for c in self.choices if c.k == 0]
        if at is None:
            return "UNMEASURED", (f"the P95 concurrency {self.p95_concurrency} was not in the "
                                  "sweep")
        if at.k == 0:
            on = ", ".join(str(c.concurrency) for c in self.choices if c.k)
            if not on:
                return "OFF", ("no draft length K showed a throughput ratio whose interval "
                               "clears 1 at any concurrency, so speculation stays off (K = 0)")
            return "OFF", (f"no draft length K showed a significant win at your P95 "
                           f"concurrency {at.concurrency}, so speculation is off there "
                           f"(K = 0); it stays on at {on}")
        tail = f"; off (K = 0) at concurrency {', '.join(map(str, off))}" if off else ""
        return "ON", (f"K = {at.k} at your P95 concurrency {at.concurrency}: throughput ratio "
                      f"{at.ratio:.2f}× ({at.ratio_low:.2f}–{at.ratio_high:.2f}){tail}")

    def schedule(self) -> TunedSchedule:
        """The schedule render consumes."""
        return TunedSchedule(self.engine, self.run_id, self.p95_concurrency,
                             tuple(Tier(c.concurrency, c.k, c.p_min) for c in self.choices))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = _ADAPTER.dump_python(self, mode="json")
        return out

    def to_bytes(self) -> bytes:
        return (json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n").encode()

    @classmethod
    def from_json(cls, data: Any) -> TuneResult:
        return _ADAPTER.validate_python(data)


_ADAPTER: TypeAdapter[TuneResult] = TypeAdapter(TuneResult)


def variant_levels(base: Mapping[int, Sequence[float]],
                   arms: Mapping[Variant, Mapping[int, Sequence[float]]],
                   confidence: float) -> tuple[VariantLevel, ...]:
    """Welch ratio CI of every setting at every level (None where fewer than 2 rounds)."""
    out = []
    for v, per in arms.items():
        for c, ts in sorted(per.items()):
            tb = list(base.get(c, ()))
            ok = len(tb) >= 2 and len(ts) >= 2 and min([*tb, *ts]) > 0
            out.append(VariantLevel(v.k, v.p_min, c, tuple(ts),
                                    stats.welch_ratio_ci(tb, ts, confidence=confidence)
                                    if ok else None))
    return tuple(out)


def _best_fixed(results: Sequence[VariantLevel]) -> Variant | None:
    by: dict[Variant, list[float]] = {}
    for r in results:
        if r.ratio is not None:
            by.setdefault(Variant(r.k, r.p_min), []).append(math.log(r.ratio.ratio))
    if not by:
        return None
    n = max(len(v) for v in by.values())
    full = {v: sum(xs) / len(xs) for v, xs in by.items() if len(xs) == n}
    return max(full, key=lambda v: (full[v], -v.k)) if full else None


def choose(results: Sequence[VariantLevel], levels: Sequence[int]
           ) -> tuple[tuple[LevelChoice, ...], Variant | None, int | None]:
    """The schedule per level, the best fixed setting and the crossover concurrency."""
    fixed = _best_fixed(results)
    choices = []
    for c in levels:
        here = [r for r in results if r.concurrency == c and r.ratio is not None]
        wins = [r for r in here if r.ratio is not None and r.ratio.low > 1.0]
        fx = next((r for r in here if fixed and r.k == fixed.k and r.p_min == fixed.p_min), None)
        fixed_ratio = fx.ratio.ratio if fx and fx.ratio else None
        if wins:
            best = max(wins, key=lambda r: (r.ratio.ratio if r.ratio else 0.0, -r.k))
            assert best.ratio is not None  # noqa: S101 - filtered above
            ratio, lo, hi = best.ratio.ratio, best.ratio.low, best.ratio.high
            k, p, decided = best.k, best.p_min, True
        else:
            ratio = lo = hi = 1.0
            k, p = 0, None
            decided = bool(here) and all(r.ratio is not None and r.ratio.high < 1.0
                                         for r in here)
        gain = ratio / fixed_ratio if fixed_ratio else None
        choices.append(LevelChoice(c, k, p, ratio, lo, hi, fixed_ratio, gain, decided))
    crossover = None
    for ch in choices:
        if ch.k == 0:
            break
        crossover = ch.concurrency
    return tuple(choices), fixed, crossover
