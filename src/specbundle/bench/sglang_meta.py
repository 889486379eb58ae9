"""SGLang acceptance from per-request ``meta_info``, summed over the measured window.

SGLang has no speculation counters: ``/metrics`` carries gauges of the last logging
interval and ``/get_server_info`` an average cumulative since server start, so neither
covers exactly the measured window. The final ``meta_info`` of every native ``/generate``
response does (``tokenizer_manager`` fills it when the request finishes), so summing it
over the measured requests (warm-up requests are never in the window) gives the same
figures the other engines' counter deltas give:

* draft count (verify steps) = Σ ``spec_verify_ct``
* acceptance rate = Σ correct drafts / Σ proposed drafts
* mean acceptance length = Σ ``completion_tokens`` / Σ ``spec_verify_ct`` (SGLang's own
  definition: it includes the token the prefill produced); Leviathan's α is solved from
  the per-step τ = 1 + correct / verify_ct, which does not
* per-position acceptance from ``spec_correct_drafts_histogram`` (index = drafts a step
  accepted, value = steps), when every request carries it.

Field names drift across releases: current ``spec_num_correct_drafts`` /
``spec_num_proposed_drafts``, the backward-compatible aliases ``spec_accepted_drafts`` /
``spec_proposed_drafts``, older ``spec_accept_token_num`` / ``spec_draft_token_num``;
histogram ``spec_correct_drafts_histogram`` or its alias ``spec_accept_histogram``. A
request whose figures are missing or contradict each other makes the window unmeasured,
with the reason (fail closed). SGLang omits every spec field from a request that ran no
verify step, which is legitimate only for a one-token output.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from specbundle.bench import stats
from specbundle.bench.client import LevelRun
from specbundle.bench.prometheus import NOT_COMPARABLE, WindowDelta
from specbundle.bench.report import Acceptance
from specbundle.errors import BenchError

__all__ = [
    "ADAPTIVE_NOTE",
    "MetaWindow",
    "RequestSpec",
    "adaptive_seen",
    "chain_only",
    "meta_acceptance",
    "read_meta",
    "sum_window",
]

#: (what it counts, names newest first: current, backward-compatible alias, older release)
_CORRECT = ("accepted drafts", ("spec_num_correct_drafts", "spec_accepted_drafts",
                                "spec_accept_token_num"))
_PROPOSED = ("proposed drafts", ("spec_num_proposed_drafts", "spec_proposed_drafts",
                                 "spec_draft_token_num"))
_HISTOGRAM = ("spec_correct_drafts_histogram", "spec_accept_histogram")
_GENERATION = {0: "current", 1: "alias", 2: "legacy"}
_REL_TOL = 1e-9


@dataclass(frozen=True)
class RequestSpec:
    """Speculation figures of one finished request."""

    verify_ct: int
    completion_tokens: int
    correct: int
    proposed: int
    histogram: tuple[int, ...] | None
    names: str  # which field-name generation carried the counts: current, alias, legacy
    self_check: bool | None  # the request's own spec_accept_rate/_length agree with its counts


def _count(meta: Mapping[str, Any], name: str) -> int | None:
    v = meta.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or v < 0 or v != int(v):
        raise BenchError(f"meta_info {name}={v!r} is not a non-negative integer")
    return int(v)


def _pick(meta: Mapping[str, Any], what: str, names: Sequence[str]) -> tuple[int, str] | None:
    """The value under the newest name present; aliases that disagree are an error."""
    found = [(n, v) for n in names if (v := _count(meta, n)) is not None]
    if not found:
        return None
    if len({v for _, v in found}) > 1:
        raise BenchError(f"meta_info reports {what} inconsistently: "
                         + ", ".join(f"{n}={v}" for n, v in found))
    return found[0][1], _GENERATION[names.index(found[0][0])]


def _histogram(meta: Mapping[str, Any]) -> tuple[int, ...] | None:
    for name in _HISTOGRAM:
        h = meta.get(name)
        if h is None:
            continue
        if not isinstance(h, list) or not all(
                isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in h):
            raise BenchError(f"meta_info {name} is not a list of non-negative integers")
        return tuple(h)
    return None


def _agrees(reported: Any, expected: float) -> bool:
    return isinstance(reported, int | float) and math.isclose(float(reported), expected,
                                                              rel_tol=_REL_TOL, abs_tol=1e-12)


def read_meta(meta: Any) -> RequestSpec:
    """Parse one request's final ``meta_info``; :class:`BenchError` names what is missing."""
    if not isinstance(meta, Mapping):
        raise BenchError("the response carried no meta_info (not SGLang's native /generate?)")
    completion = _count(meta, "completion_tokens")
    if completion is None:
        raise BenchError("meta_info lacks completion_tokens")
    verify = _count(meta, "spec_verify_ct")
    correct = _pick(meta, _CORRECT[0], _CORRECT[1])
    proposed = _pick(meta, _PROPOSED[0], _PROPOSED[1])
    if verify is None and correct is None and proposed is None and completion <= 1:
        return RequestSpec(0, completion, 0, 0, None, "none", None)  # no verify step ran
    missing = [label for label, v in (("spec_verify_ct", verify),
                                      (" / ".join(_CORRECT[1]), correct),
                                      (" / ".join(_PROPOSED[1]), proposed)) if v is None]
    if missing or verify is None or correct is None or proposed is None:
        raise BenchError("meta_info lacks " + " and ".join(missing)
                         + " (speculation off, or a release that does not report it)")
    if correct[0] > proposed[0]:
        raise BenchError(f"meta_info reports more accepted ({correct[0]}) than proposed "
                         f"({proposed[0]}) drafts")
    checks = []
    if verify and "spec_accept_length" in meta:
        checks.append(_agrees(meta["spec_accept_length"], completion / verify))
    if proposed[0] and "spec_accept_rate" in meta:
        checks.append(_agrees(meta["spec_accept_rate"], correct[0] / proposed[0]))
    return RequestSpec(verify, completion, correct[0], proposed[0], _histogram(meta),
                       correct[1] if correct[1] == proposed[1] else f"{correct[1]}+{proposed[1]}",
                       all(checks) if checks else None)


@dataclass(frozen=True)
class MetaWindow:
    """Per-request figures summed over one measured window (or why it is unmeasured)."""

    requests: int
    zero_verify: int  # requests that ran no verify step (one-token outputs)
    verify_ct: int
    completion_tokens: int
    correct: int
    proposed: int
    histogram: tuple[int, ...] | None  # summed; None unless every request carried a valid one
    names: tuple[str, ...]
    self_check: bool | None
    reason: str | None
    notes: tuple[str, ...] = ()

    @property
    def measured(self) -> bool:
        """Whether the sums can be reported: every request parsed and a verify step ran."""
        return self.reason is None and self.verify_ct > 0

    def accepted_per_position(self) -> tuple[int, ...]:
        """Steps that accepted the draft at position i (i.e. more than i drafts)."""
        h = self.histogram or ()
        return tuple(sum(h[i + 1:]) for i in range(len(h) - 1))


def _hist_ok(r: RequestSpec) -> bool:
    h = r.histogram
    return h is not None and sum(h) == r.verify_ct and sum(
        j * n for j, n in enumerate(h)) == r.correct


def sum_window(metas: Iterable[Any]) -> MetaWindow:
    """Sum the final ``meta_info`` of every measured request; the first failure is the reason."""
    parsed: list[RequestSpec] = []
    problems: list[str] = []
    n = 0
    for meta in metas:
        n += 1
        try:
            parsed.append(read_meta(meta))
        except BenchError as err:
            problems.append(err.message)
    real = [r for r in parsed if r.names != "none"]
    notes: list[str] = []
    hists = [r for r in real if r.histogram is not None]
    hist: tuple[int, ...] | None = None
    if real and len(hists) == len(real) and all(_hist_ok(r) for r in real):
        width = max(len(r.histogram or ()) for r in real)
        hist = tuple(sum((r.histogram or ())[j] if j < len(r.histogram or ()) else 0
                         for r in real) for j in range(width))
    elif hists:
        notes.append("spec_correct_drafts_histogram missing from some requests or "
                     "inconsistent with spec_verify_ct / accepted drafts: per-position "
                     "acceptance not reported")
    checks = [r.self_check for r in real if r.self_check is not None]
    reason = None
    if problems:
        reason = (f"SGLang meta_info unusable in {len(problems)} of {n} request(s): "
                  f"{problems[0]}")
    elif n == 0:
        reason = "no request completed in the measured window"
    elif not any(r.verify_ct for r in real):
        reason = "no request ran a speculative verify step (spec_verify_ct = 0)"
    return MetaWindow(
        requests=n, zero_verify=len(parsed) - len(real),
        verify_ct=sum(r.verify_ct for r in real),
        completion_tokens=sum(r.completion_tokens for r in real),
        correct=sum(r.correct for r in real), proposed=sum(r.proposed for r in real),
        histogram=hist, names=tuple(sorted({r.names for r in real})),
        self_check=all(checks) if checks else None, reason=reason, notes=tuple(notes),
    )


#: Why SGLang's proposed count is wrong under ``--speculative-adaptive`` (0.5.23
#: ``tokenizer_manager._calculate_spec_decoding_metrics``).
ADAPTIVE_NOTE = ("approximate under --speculative-adaptive: SGLang counts proposed drafts as "
                 "spec_verify_ct x (static speculative_num_draft_tokens - 1), not the width the "
                 "adaptive tier ran, so acceptance rate, draft tokens and alpha are not "
                 "reported; mean acceptance length and accepted drafts per verify step are exact")


def adaptive_seen(gauges: Mapping[str, float], w: MetaWindow) -> bool:
    """The active tier's width (``sglang:spec_num_draft_tokens``) differs from the counted one."""
    active = gauges.get("sglang:spec_num_draft_tokens")
    return active is not None and w.verify_ct > 0 and active > 0 \
        and not math.isclose(active - 1, w.proposed / w.verify_ct)


def meta_acceptance(deltas: Sequence[WindowDelta], runs: Sequence[LevelRun], *,
                    adaptive: bool | None = None) -> Acceptance:
    """The spec arm's acceptance at one level from the requests' ``meta_info`` sums.

    The gauges read at the end of each window stay in the report as a labelled
    cross-check: they cover SGLang's last logging interval, not the window. With
    ``adaptive`` (or, when None, an active width that differs from the counted one) the
    proposed-draft figures are dropped as approximate (:data:`ADAPTIVE_NOTE`).
    """
    w = sum_window(r.server.get("meta_info") for run in runs for r in run.ok)
    gauges = dict(deltas[-1].gauges_end) if deltas else {}
    if adaptive is None:
        adaptive = adaptive_seen(gauges, w)
    label = f"sglang:* gauges are a cross-check only ({NOT_COMPARABLE})" if gauges else ""
    if not w.measured:
        return Acceptance(
            source="gauges" if gauges else "none", comparable_as_counters=False, drafts=None,
            draft_tokens=None, accepted=None, acceptance_rate=None, mean_acceptance_length=None,
            mean_draft_length=None, per_position=(), depth_too_deep=False, alpha=None,
            request_draft_tokens=None, request_accepted=None, request_cross_check=None,
            gauges=gauges, note="; ".join(x for x in (w.reason, label) if x),
        )
    per_pos = stats.per_position_rates([float(a) for a in w.accepted_per_position()],
                                       w.verify_ct)
    g = w.proposed / w.verify_ct
    step_tau = stats.mean_acceptance_length(w.correct, w.verify_ct)
    deep = stats.depth_collapses(per_pos)
    notes = [f"from SGLang per-request meta_info ({'/'.join(w.names)} field names) summed "
             f"over {w.requests} measured request(s); mean acceptance length = "
             "completion_tokens / spec_verify_ct (includes the prefill token), "
             "α solved from 1 + accepted / verify steps", *w.notes]
    if adaptive:
        notes.insert(0, ADAPTIVE_NOTE)
    else:
        notes.append(f"K in force: {g:g} draft tokens per verify step (SGLang's own width, "
                     "which may differ from the spec's num_speculative_tokens)")
    if w.zero_verify:
        notes.append(f"{w.zero_verify} request(s) ran no verify step")
    if w.self_check is False:
        notes.append("a request's own spec_accept_rate / spec_accept_length disagree with "
                     "its counts")
    if deep:
        notes.append("draft depth too deep: acceptance collapses after position 1")
    if label:
        notes.append(label)
    checks = [c for c in (w.self_check, _counter_check(deltas, runs, w, notes)) if c is not None]
    exact = not adaptive
    return Acceptance(
        source="meta_info", comparable_as_counters=True, drafts=float(w.verify_ct),
        draft_tokens=float(w.proposed) if exact else None, accepted=float(w.correct),
        acceptance_rate=stats.acceptance_rate(w.correct, w.proposed) if exact else None,
        mean_acceptance_length=w.completion_tokens / w.verify_ct,
        mean_draft_length=g if exact else None, per_position=per_pos, depth_too_deep=deep,
        alpha=stats.alpha_from_tau(step_tau, g) if step_tau is not None and exact else None,
        request_draft_tokens=float(w.proposed) if exact else None,
        request_accepted=float(w.correct),
        request_cross_check=all(checks) if checks else None, gauges=gauges,
        note="; ".join(notes),
    )


def _counter_check(deltas: Sequence[WindowDelta], runs: Sequence[LevelRun], w: MetaWindow,
                   notes: list[str]) -> bool | None:
    """Hold the summed ``spec_verify_ct`` to SGLang's own counter over the same windows.

    ``sglang:spec_verify_calls_total`` grows by each finished request's ``spec_verify_ct``
    (``observe_one_finished_request``, 0.5.23), so over a window in which every request
    finished and was read it must equal the sum; a request that failed on our side may
    still have been counted by the engine, so the check then only bounds the sum. None when
    the engine does not export it.
    """
    counts = [d.verify_calls for d in deltas]
    if not counts or any(c is None for c in counts):
        return None
    counted = sum(c for c in counts if c is not None)
    every_ok = all(len(run.ok) == len(run.results) for run in runs)
    agrees = counted == w.verify_ct if every_ok else counted >= w.verify_ct
    word = "matches" if agrees else "disagrees with"
    notes.append(f"summed spec_verify_ct ({w.verify_ct}) {word} SGLang's counter "
                 f"sglang:spec_verify_calls_total over the window ({counted:g})")
    return agrees


def chain_only(acc: Acceptance, props: Mapping[str, Any] | None) -> Acceptance:
    """α solved from τ assumes a chain; with the tree SGLang resolved (``/server_info``:
    topk > 1, e.g. NGRAM's breadth 10 or an auto-chosen (5, 4, 8)) it is not reported."""
    topk = (props or {}).get("speculative_eagle_topk")
    if not isinstance(topk, int) or topk <= 1 or acc.alpha is None:
        return acc
    note = (f"tree in force (topk {topk}, {(props or {}).get('speculative_num_draft_tokens')} "
            "draft tokens per verify step): α as a chain is not defined and is not reported")
    return replace(acc, alpha=None, note="; ".join(x for x in (note, acc.note) if x))
