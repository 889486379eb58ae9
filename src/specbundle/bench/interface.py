"""Plug-in points of the benchmark: the streaming transport and the engine adapter.

The transport is kept behind :class:`StreamTransport` because the measurement client's
own speed decides whether TTFT and ITL are trustworthy: aiohttp sustains ~40k chunks/s on
one core where httpx falls to ~10k under concurrency (see ``benchmarks/bench_client.py``).
Engines differ in request switches, where per-request speculation figures live and how
KV capacity is reported; :class:`EngineAdapter` holds exactly those differences.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Literal, Protocol

from specbundle.bench.prometheus import EngineReading, Scrape, WindowDelta

if TYPE_CHECKING:
    from specbundle.bench.client import CompletionRequest, LevelRun
    from specbundle.bench.report import Acceptance
    from specbundle.bench.runner import ArmData

__all__ = ["ArmDriver", "Endpoint", "EngineAdapter", "EventSink", "StreamTransport",
           "TransportError"]

#: Where measurement requests go: the OpenAI endpoints, or SGLang's native ``/generate``.
Endpoint = Literal["completions", "chat", "generate"]

# Called once per SSE ``data`` payload with its arrival time (perf_counter_ns, taken when
# the bytes were read, before any decoding); returns False to stop reading the stream.
EventSink = Callable[[int, bytes], bool]


class TransportError(Exception):
    """The request failed on the wire (connection, HTTP status, timeout)."""


class StreamTransport(Protocol):
    """POST a JSON body and feed each server-sent event to a sink."""

    async def post_sse(self, url: str, body: bytes, sink: EventSink) -> None:
        """Stream one request; raise :class:`TransportError` on any failure."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


class EngineAdapter(Protocol):
    """What the runner needs to know about one serving engine."""

    name: str
    props_path: str | None  # JSON endpoint with slots / KV capacity, if the engine has one
    serves_gguf: bool  # whether the model argument is a GGUF file rather than a folder

    def request_extras(self) -> Mapping[str, Any]:
        """Body fields that keep both arms comparable (prefix cache off, timings, ...)."""
        ...

    def read_metrics(self, scrape: Scrape) -> EngineReading:
        """Typed reading of a ``/metrics`` page."""
        ...

    def request_spec(self, extras: Mapping[str, Any]) -> tuple[float, float] | None:
        """(drafted, accepted) tokens of one request from its final chunk, if reported."""
        ...

    def step_ms(self, extras: Mapping[str, Any]) -> float | None:
        """Server-side decode milliseconds per token of one request, if reported."""
        ...

    def max_sequences(self, props: Mapping[str, Any] | None) -> int | None:
        """How many requests the server runs at once (more queue), if known."""
        ...

    def kv_capacity(self, props: Mapping[str, Any] | None, reading: EngineReading) -> float | None:
        """Tokens the server can hold in KV across all concurrent requests, if known."""
        ...

    def draft_only_argv(self, argv: Sequence[str], draft_path: str) -> list[str]:
        """The baseline argv with the draft served as the model (to time the draft alone)."""
        ...

    def measure_endpoint(self, configured: Endpoint) -> Endpoint:
        """The endpoint measurement requests use (where per-request figures are reported)."""
        ...

    def window_acceptance(self, deltas: Sequence[WindowDelta],
                          runs: Sequence[LevelRun]) -> Acceptance | None:
        """Acceptance from per-request figures, for engines without counters; else ``None``."""
        ...


class ArmDriver(Protocol):
    """How the runner serves and measures one arm; the rounds and their stopping rule are the
    runner's own. The runner itself is the engine implementation; a driver of synthetic
    throughputs exercises the sequential rule without a server."""

    def server(self, speculation: bool) -> AbstractContextManager[str]:
        """Serve one arm (with or without speculation) for the block; yields its URL."""
        ...

    def measure(self, arm: str, url: str, data: ArmData,
                reqs: dict[int, list[CompletionRequest]], *, metrics: bool = True,
                levels: tuple[int, ...] | None = None) -> None:
        """Measure every level (or ``levels``) of one arm launch into ``data``."""
        ...

    def verify_probe(self, url: str, data: ArmData) -> None:
        """Probe the verification cost on the baseline, while it is up."""
        ...
