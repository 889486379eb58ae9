"""Engine adapters for the benchmark: llama.cpp, vLLM and SGLang, siblings of one interface.

Each adapter says which request switches keep the arms comparable, where a single request's
speculation figures are reported, how much KV the server can hold and which endpoint tells
it, and how to serve the draft alone (to time its forward pass at the same batch shape).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specbundle.bench.client import LevelRun
from specbundle.bench.interface import Endpoint, EngineAdapter
from specbundle.bench.prometheus import READERS, EngineReading, Scrape, WindowDelta
from specbundle.bench.report import Acceptance
from specbundle.bench.sglang_meta import meta_acceptance, read_meta
from specbundle.errors import BenchError

__all__ = ["ADAPTERS", "LlamaCppAdapter", "SGLangAdapter", "VllmAdapter", "adapter_for"]


def _swap_value(argv: Sequence[str], flags: Sequence[str], value: str) -> list[str]:
    out = list(argv)
    for i, a in enumerate(out[:-1]):
        if a in flags:
            out[i + 1] = value
            return out
    raise BenchError(f"cannot serve the draft alone: none of {list(flags)} in the command line")


class LlamaCppAdapter:
    """llama-server: per-request ``timings.draft_n``/``draft_n_accepted``; ``/props`` slots."""

    name: str = "llamacpp"
    props_path: str | None = "/props"
    serves_gguf: bool = True

    def request_extras(self) -> Mapping[str, Any]:
        """No prompt cache (both arms prefill every prompt); per-chunk timings for token counts;
        ``verbose`` for each chunk's token ids (``__verbose.tokens``: outputs compare by id)."""
        return {"cache_prompt": False, "timings_per_token": True, "verbose": True}

    def read_metrics(self, scrape: Scrape) -> EngineReading:
        """``llamacpp:*`` counters."""
        return READERS["llamacpp"].read(scrape)

    def request_spec(self, extras: Mapping[str, Any]) -> tuple[float, float] | None:
        """``draft_n`` is absent when the request drafted nothing: that is (0, 0)."""
        t = extras.get("timings")
        if not isinstance(t, Mapping):
            return None
        return float(t.get("draft_n", 0)), float(t.get("draft_n_accepted", 0))

    def step_ms(self, extras: Mapping[str, Any]) -> float | None:
        """Server-side decode time per generated token (no HTTP or client in it)."""
        t = extras.get("timings")
        if not isinstance(t, Mapping) or not t.get("predicted_n"):
            return None
        return float(t["predicted_ms"]) / float(t["predicted_n"])

    def kv_capacity(self, props: Mapping[str, Any] | None, reading: EngineReading) -> float | None:
        """Slots × per-slot context: llama.cpp reserves the whole KV at start."""
        if not props:
            return None
        try:
            per_slot = float(props["default_generation_settings"]["n_ctx"])
            return float(props["total_slots"]) * per_slot
        except (KeyError, TypeError, ValueError):
            return None

    def max_sequences(self, props: Mapping[str, Any] | None) -> int | None:
        """Parallel slots: more concurrent requests than this queue silently."""
        try:
            return int(props["total_slots"]) if props else None
        except (KeyError, TypeError, ValueError):
            return None

    def draft_only_argv(self, argv: Sequence[str], draft_path: str) -> list[str]:
        """The baseline command with ``-m`` pointing at the draft GGUF."""
        return _swap_value(argv, ("-m", "--model"), draft_path)

    def measure_endpoint(self, configured: Endpoint) -> Endpoint:
        """The configured OpenAI endpoint."""
        return configured

    def window_acceptance(self, deltas: Sequence[WindowDelta],
                          runs: Sequence[LevelRun]) -> Acceptance | None:
        """Counters cover the window: acceptance comes from their deltas."""
        return None


class VllmAdapter:
    """vLLM: ``metrics.speculative_decoding`` per request; KV from ``cache_config_info``."""

    name: str = "vllm"
    props_path: str | None = None
    serves_gguf: bool = False

    def request_extras(self) -> Mapping[str, Any]:
        """The generated token ids on every chunk (``return_token_ids``): agreement compares
        ids, and the near-tie probe finds speculation's first divergence by them."""
        return {"return_token_ids": True}

    def read_metrics(self, scrape: Scrape) -> EngineReading:
        """``vllm:*`` counters summed over engines."""
        return READERS["vllm"].read(scrape)

    def request_spec(self, extras: Mapping[str, Any]) -> tuple[float, float] | None:
        """Only with ``--per-request-spec-decode-metrics``; otherwise not reported."""
        m = extras.get("metrics")
        sd = m.get("speculative_decoding") if isinstance(m, Mapping) else None
        if not isinstance(sd, Mapping):
            return None
        return float(sd.get("num_draft_tokens", 0)), float(sd.get("num_accepted_draft_tokens", 0))

    def step_ms(self, extras: Mapping[str, Any]) -> float | None:
        """Not reported per request; the client's TPOT is used instead."""
        return None

    def kv_capacity(self, props: Mapping[str, Any] | None, reading: EngineReading) -> float | None:
        """num_gpu_blocks × block_size from ``vllm:cache_config_info``."""
        return reading.kv_capacity_tokens

    def max_sequences(self, props: Mapping[str, Any] | None) -> int | None:
        """Not exposed over HTTP; the rendered ``--max-num-seqs`` is checked by render lint."""
        return None

    def draft_only_argv(self, argv: Sequence[str], draft_path: str) -> list[str]:
        """``vllm serve <draft>``: the positional model (the first word of the arguments
        render builds, or the word after ``serve`` in a full argv), or ``--model``."""
        out = list(argv)
        if "--model" in out:
            return _swap_value(out, ("--model",), draft_path)
        if "serve" in out and out.index("serve") + 1 < len(out):
            out[out.index("serve") + 1] = draft_path
            return out
        if out and not out[0].startswith("-"):
            out[0] = draft_path
            return out
        raise BenchError("cannot serve the draft alone: no model argument in the vLLM command")

    def measure_endpoint(self, configured: Endpoint) -> Endpoint:
        """The configured OpenAI endpoint."""
        return configured

    def window_acceptance(self, deltas: Sequence[WindowDelta],
                          runs: Sequence[LevelRun]) -> Acceptance | None:
        """Counters cover the window: acceptance comes from their deltas."""
        return None


class SGLangAdapter:
    """SGLang: acceptance from native ``/generate`` ``meta_info``; KV from ``/server_info``
    (0.5.23 deprecates ``/get_server_info``, an alias that logs a warning on every call).

    Its ``/metrics`` has gauges only (kept as a labelled cross-check), so measurement
    requests go through ``/generate`` whose final ``meta_info`` carries each request's
    speculation figures; their sums over the window stand in for counter deltas.
    """

    name: str = "sglang"
    props_path: str | None = "/server_info"
    serves_gguf: bool = False

    def request_extras(self) -> Mapping[str, Any]:
        """Nothing beyond ``sampling_params`` (greedy, fixed length) on ``/generate``."""
        return {}

    def read_metrics(self, scrape: Scrape) -> EngineReading:
        """``sglang:*`` gauges (not comparable as counters)."""
        return READERS["sglang"].read(scrape)

    def request_spec(self, extras: Mapping[str, Any]) -> tuple[float, float] | None:
        """(proposed, correct) drafts from the final ``meta_info`` of ``/generate``."""
        try:
            r = read_meta(extras.get("meta_info"))
        except BenchError:
            return None
        return float(r.proposed), float(r.correct)

    def step_ms(self, extras: Mapping[str, Any]) -> float | None:
        """Not reported per request; the client's TPOT is used instead."""
        return None

    def kv_capacity(self, props: Mapping[str, Any] | None, reading: EngineReading) -> float | None:
        """``max_total_num_tokens`` of the scheduler."""
        try:
            return float(props["max_total_num_tokens"]) if props else None
        except (KeyError, TypeError, ValueError):
            return None

    def max_sequences(self, props: Mapping[str, Any] | None) -> int | None:
        """``max_running_requests`` as the server resolved it."""
        try:
            return int(props["max_running_requests"]) if props else None
        except (KeyError, TypeError, ValueError):
            return None

    def draft_only_argv(self, argv: Sequence[str], draft_path: str) -> list[str]:
        """``--model-path <draft>`` (the baseline command has no speculative flags)."""
        return _swap_value(argv, ("--model-path", "--model"), draft_path)

    def measure_endpoint(self, configured: Endpoint) -> Endpoint:
        """Always ``/generate``: only its ``meta_info`` reports per-request acceptance."""
        return "generate"

    def window_acceptance(self, deltas: Sequence[WindowDelta],
                          runs: Sequence[LevelRun]) -> Acceptance | None:
        """Sums of the measured requests' ``meta_info``; the gauges ride along, labelled."""
        return meta_acceptance(deltas, runs)


ADAPTERS: dict[str, EngineAdapter] = {
    "llamacpp": LlamaCppAdapter(), "vllm": VllmAdapter(), "sglang": SGLangAdapter(),
}


def adapter_for(engine: str) -> EngineAdapter:
    """The adapter of an engine name (``llamacpp``, ``vllm``, ``sglang``)."""
    try:
        return ADAPTERS[engine]
    except KeyError:
        raise BenchError(f"unknown engine {engine!r}; known: {', '.join(ADAPTERS)}") from None
