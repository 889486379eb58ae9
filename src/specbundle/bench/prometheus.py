"""Typed readings of the engines' Prometheus ``/metrics`` text, and deltas over a window.

Parsing uses ``prometheus_client``'s own text parser (escaping, labels, the ``_total``
normalisation of counters, ``_created`` samples) instead of line splitting. Each engine
names its speculation figures differently:

* vLLM: counters ``vllm:spec_decode_num_{drafts,draft_tokens,accepted_tokens}_total`` and
  the per-position vector ``..._num_accepted_tokens_per_pos_total{position}``, per ``engine``
  label (summed over data-parallel engines), plus preemptions and KV-cache usage.
* llama.cpp (``--metrics``, builds after PR #26389): ``llamacpp:spec_decode_*`` counters of
  the same schema; the per-position series appears only after the first speculative request.
  llama-server prints values with six significant digits, so counters above 10^6 lose
  precision: benchmark windows stay far below that.
* SGLang: only gauges of the last logging interval (``sglang:spec_accept_length``,
  ``sglang:spec_accept_rate``): kept and labelled "not comparable as counters"; the
  preemption counter ``sglang:num_retracted_requests_total`` is a real counter.

Acceptance is computed only from counter deltas scraped right before and right after the
measured window, so warm-up and earlier traffic never count.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from specbundle.errors import BenchError

__all__ = [
    "NOT_COMPARABLE",
    "READERS",
    "SERIES",
    "EngineReading",
    "LlamaCppMetrics",
    "SGLangMetrics",
    "Scrape",
    "SpecCounters",
    "VllmMetrics",
    "WindowDelta",
    "parse_scrape",
    "window_delta",
]

NOT_COMPARABLE = "not comparable as counters"

_Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Scrape:
    """One ``/metrics`` response: every sample with its labels (``_created`` dropped)."""

    samples: tuple[tuple[str, _Labels, float], ...]

    def names(self) -> frozenset[str]:
        """Sample names present."""
        return frozenset(s[0] for s in self.samples)

    def total(self, name: str, **match: str) -> float | None:
        """Sum of a sample over label sets matching ``match``; ``None`` when absent."""
        vals = [v for n, labels, v in self.samples
                if n == name and all(dict(labels).get(k) == x for k, x in match.items())]
        return float(sum(vals)) if vals else None

    def peak(self, name: str) -> float | None:
        """Largest value over label sets: for a ratio per engine/rank (KV usage with DP or
        PP), which a sum would push past 1; the fullest rank is the one that preempts."""
        vals = [v for n, _, v in self.samples if n == name]
        return float(max(vals)) if vals else None

    def by_label(self, name: str, label: str) -> dict[str, float]:
        """Values of ``name`` summed per value of ``label`` (e.g. per ``position``)."""
        out: dict[str, float] = {}
        for n, labels, v in self.samples:
            key = dict(labels).get(label)
            if n == name and key is not None:
                out[key] = out.get(key, 0.0) + v
        return out

    def label_sets(self, name: str) -> list[dict[str, str]]:
        """Label dictionaries of every sample of ``name`` (info-style gauges)."""
        return [dict(labels) for n, labels, _ in self.samples if n == name]


def parse_scrape(text: str) -> Scrape:
    """Parse Prometheus text exposition; a malformed page is a :class:`BenchError`."""
    out: list[tuple[str, _Labels, float]] = []
    try:
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if s.name.endswith("_created"):
                    continue
                out.append((s.name, tuple(sorted(s.labels.items())), float(s.value)))
    except ValueError as err:
        raise BenchError(f"unparseable /metrics text: {err}") from None
    return Scrape(tuple(out))


@dataclass(frozen=True)
class SpecCounters:
    """Cumulative (or, after :meth:`minus`, windowed) speculation counters."""

    drafts: float
    draft_tokens: float
    accepted: float
    accepted_per_pos: tuple[float, ...] = ()

    def minus(self, before: SpecCounters) -> SpecCounters:
        """Delta over a window; a counter that went backwards means the server restarted."""
        pos = [a - (before.accepted_per_pos[i] if i < len(before.accepted_per_pos) else 0.0)
               for i, a in enumerate(self.accepted_per_pos)]
        d = SpecCounters(self.drafts - before.drafts, self.draft_tokens - before.draft_tokens,
                         self.accepted - before.accepted, tuple(pos))
        if min((d.drafts, d.draft_tokens, d.accepted, *d.accepted_per_pos), default=0.0) < 0:
            raise BenchError("a speculation counter went backwards inside the measured window "
                             "(engine restarted?)")
        return d


@dataclass(frozen=True)
class EngineReading:
    """What one scrape says, typed; ``None`` means the engine does not export it."""

    engine: str
    spec: SpecCounters | None
    preemptions: float | None
    generation_tokens: float | None
    kv_usage: float | None
    kv_capacity_tokens: float | None
    gauges: Mapping[str, float] = field(default_factory=dict)
    counters_comparable: bool = True
    note: str = ""
    #: ``preemptions`` is a counter (window delta) even where acceptance has only gauges.
    preemptions_counter: bool = True
    #: SGLang's ``spec_verify_calls_total``: verify steps of finished requests (a counter).
    verify_calls: float | None = None


@dataclass(frozen=True)
class WindowDelta:
    """Counter deltas over the measured window plus gauges read at its end."""

    engine: str
    spec: SpecCounters | None
    preemptions: float | None
    generation_tokens: float | None
    kv_usage_end: float | None
    kv_capacity_tokens: float | None
    gauges_end: Mapping[str, float]
    counters_comparable: bool
    note: str
    verify_calls: float | None = None


_SPEC_SERIES = ("spec_decode_num_drafts_total", "spec_decode_num_draft_tokens_total",
                "spec_decode_num_accepted_tokens_total",
                "spec_decode_num_accepted_tokens_per_pos_total")


def _spec(s: Scrape, prefix: str) -> SpecCounters | None:
    drafts = s.total(f"{prefix}spec_decode_num_drafts_total")
    tokens = s.total(f"{prefix}spec_decode_num_draft_tokens_total")
    acc = s.total(f"{prefix}spec_decode_num_accepted_tokens_total")
    if drafts is None or tokens is None or acc is None:
        return None
    per = s.by_label(f"{prefix}spec_decode_num_accepted_tokens_per_pos_total", "position")
    vec = tuple(per.get(str(i), 0.0) for i in range(max((int(k) for k in per), default=-1) + 1))
    return SpecCounters(drafts, tokens, acc, vec)


class VllmMetrics:
    """vLLM V1 ``/metrics`` (``SpecDecodingProm`` and ``PrometheusStatLogger``)."""

    engine = "vllm"

    def read(self, s: Scrape) -> EngineReading:
        """Sum every ``engine`` label; KV capacity from ``vllm:cache_config_info``
        (``kv_cache_size_tokens``, else ``num_gpu_blocks`` × ``block_size``)."""
        usage = s.peak("vllm:kv_cache_usage_perc")
        if usage is None:
            usage = s.peak("vllm:gpu_cache_usage_perc")
        cap = 0.0
        infos = s.label_sets("vllm:cache_config_info")
        for lab in infos:
            try:  # kv_cache_size_tokens is group-aware (hybrid/draft layers): prefer it
                cap += float(lab["kv_cache_size_tokens"]) if "kv_cache_size_tokens" in lab \
                    else float(lab["num_gpu_blocks"]) * float(lab["block_size"])
            except (KeyError, ValueError):
                cap = float("nan")
        return EngineReading(
            engine=self.engine, spec=_spec(s, "vllm:"),
            preemptions=s.total("vllm:num_preemptions_total"),
            generation_tokens=s.total("vllm:generation_tokens_total"),
            kv_usage=usage, kv_capacity_tokens=cap if infos and cap == cap else None,
        )


#: What b11434's ``server_task_result_metrics::to_metrics`` really exports beside the
#: counters: no KV gauge at all (``kv_cache_usage_ratio``/``kv_cache_tokens`` are gone);
#: ``n_tokens_max`` is the longest sequence seen, kept as a labelled figure.
_LLAMACPP_GAUGES = ("llamacpp:n_tokens_max", "llamacpp:requests_processing",
                    "llamacpp:requests_deferred", "llamacpp:n_busy_slots_per_decode")
_LLAMACPP_KV_NOTE = ("KV usage unmeasured: llama-server (b11434) exports no KV-usage series; "
                     "capacity is slots x n_ctx from /props, llamacpp:n_tokens_max is the "
                     "longest sequence seen")


class LlamaCppMetrics:
    """llama-server ``/metrics`` (hand-rendered ``server_task_result_metrics::to_metrics``)."""

    engine = "llamacpp"

    def read(self, s: Scrape) -> EngineReading:
        """llama.cpp keeps KV per slot, allocated at start, and never preempts a request."""
        # n_tokens_max is TYPE counter without a _total suffix: the parser names it ..._total.
        gauges = {g: v for g in _LLAMACPP_GAUGES
                  if (v := s.total(g) if s.total(g) is not None else s.total(g + "_total"))
                  is not None}
        return EngineReading(
            engine=self.engine, spec=_spec(s, "llamacpp:"), preemptions=0.0,
            generation_tokens=s.total("llamacpp:tokens_predicted_total"),
            kv_usage=None, kv_capacity_tokens=None, gauges=gauges,
            note="llama.cpp allocates KV per slot at start and has no preemption; "
                 + _LLAMACPP_KV_NOTE,
        )


_SGLANG_GAUGES = ("sglang:spec_accept_length", "sglang:spec_accept_rate", "sglang:spec_num_steps",
                  "sglang:spec_num_draft_tokens", "sglang:gen_throughput",
                  "sglang:num_retracted_reqs", "sglang:num_running_reqs", "sglang:num_queue_reqs")


class SGLangMetrics:
    """SGLang ``/metrics`` (``--enable-metrics``): gauges of the last logging interval."""

    engine = "sglang"

    def read(self, s: Scrape) -> EngineReading:
        """Keep the spec gauges, labelled as not comparable; retractions count as preemption.

        Preemptions come from the counter ``sglang:num_retracted_requests_total`` (0.5.23),
        not the gauge ``sglang:num_retracted_reqs`` (the size of the last retraction, reset
        every log interval). Releases without the counter (0.5.4) leave them unmeasured.
        """
        gauges = {g: v for g in _SGLANG_GAUGES if (v := s.total(g)) is not None}
        return EngineReading(
            engine=self.engine, spec=None,
            preemptions=s.total("sglang:num_retracted_requests_total"),
            generation_tokens=s.total("sglang:generation_tokens_total"),
            kv_usage=s.peak("sglang:token_usage"), kv_capacity_tokens=None, gauges=gauges,
            counters_comparable=False, verify_calls=s.total("sglang:spec_verify_calls_total"),
            note=f"SGLang reports acceptance as last-interval gauges: {NOT_COMPARABLE}",
        )


#: Every series the readers look for, per engine, as exposed (counters with ``_total``).
#: The tests hold each name to the engine's own code: vLLM's and SGLang's metric
#: declarations in their packages, the strings of the built llama-server b11434.
SERIES: dict[str, frozenset[str]] = {
    "vllm": frozenset({*(f"vllm:{n}" for n in _SPEC_SERIES), "vllm:kv_cache_usage_perc",
                       "vllm:gpu_cache_usage_perc", "vllm:cache_config_info",
                       "vllm:num_preemptions_total", "vllm:generation_tokens_total"}),
    "llamacpp": frozenset({*(f"llamacpp:{n}" for n in _SPEC_SERIES), *_LLAMACPP_GAUGES,
                           "llamacpp:tokens_predicted_total"}),
    "sglang": frozenset({*_SGLANG_GAUGES, "sglang:num_retracted_requests_total",
                         "sglang:generation_tokens_total", "sglang:token_usage",
                         "sglang:spec_verify_calls_total"}),
}

READERS: dict[str, VllmMetrics | LlamaCppMetrics | SGLangMetrics] = {
    "vllm": VllmMetrics(), "llamacpp": LlamaCppMetrics(), "sglang": SGLangMetrics(),
}


def _sub(after: float | None, before: float | None) -> float | None:
    return None if after is None or before is None else after - before


def window_delta(before: EngineReading, after: EngineReading) -> WindowDelta:
    """Deltas between two readings of the same engine (before/after the measured window)."""
    if before.engine != after.engine:
        raise BenchError(f"readings of different engines: {before.engine} vs {after.engine}")
    spec = None
    if after.spec is not None:
        spec = after.spec.minus(before.spec or SpecCounters(0.0, 0.0, 0.0))
    if before.preemptions_counter:
        pre = _sub(after.preemptions, before.preemptions)
    else:  # a gauge: the count at the end of the window, not a delta
        pre = after.preemptions
    return WindowDelta(
        engine=after.engine, spec=spec, preemptions=pre,
        generation_tokens=_sub(after.generation_tokens, before.generation_tokens),
        kv_usage_end=after.kv_usage, kv_capacity_tokens=after.kv_capacity_tokens,
        gauges_end=dict(after.gauges), counters_comparable=after.counters_comparable,
        note=after.note, verify_calls=_sub(after.verify_calls, before.verify_calls),
    )
