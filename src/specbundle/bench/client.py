"""Async streaming OpenAI-compatible client that times every chunk.

Definitions follow ``vllm bench serve`` so numbers compare across tools: TTFT is the first
output-carrying chunk, E2E the last one (the usage-only chunk and ``[DONE]`` do not extend
it), TPOT = (E2E − TTFT) / (completion tokens − 1) with the server's ``usage`` count. ITL is
reported twice, under two names, because speculation sends several tokens per chunk:
``itl_chunk`` (gaps between chunks, vLLM's "itl") and ``itl_token`` (each gap divided by the
tokens the chunk carried). Greedy decoding and the fixed output length are set explicitly
on every request (``temperature``, ``ignore_eos``, ``max_tokens``).

The SSE parser is hand-written (a dozen lines) because it sits on the hot path: timestamps
are taken when bytes arrive, before decoding, and no per-event object is allocated beyond
the JSON decode that every client does.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from specbundle.bench.interface import Endpoint, EventSink, StreamTransport, TransportError
from specbundle.bench.native import GenerateRecorder, generate_body

__all__ = [
    "AiohttpTransport",
    "CompletionRequest",
    "LevelRun",
    "RequestResult",
    "build_body",
    "run_level",
    "stream_request",
]

# json.loads(bytes) sniffs the encoding on every call; SSE payloads are UTF-8 by definition.
_decode = json.JSONDecoder().decode
_PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions",
          "generate": "/generate"}


class AiohttpTransport:
    """aiohttp implementation of :class:`StreamTransport` with a bounded connection pool."""

    def __init__(self, *, limit: int = 256, timeout_s: float = 600.0) -> None:
        self._limit = limit
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=30)
        self._session: aiohttp.ClientSession | None = None
        self._fresh: aiohttp.ClientSession | None = None

    def _sess(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._limit, limit_per_host=self._limit),
                timeout=self._timeout, trust_env=False,
            )
        return self._session

    def _fresh_sess(self) -> aiohttp.ClientSession:
        """A session whose every request opens a new connection: the pool may hold several
        connections the server closed at once (an idle timeout), and a retry drawn from it
        would meet the next one."""
        if self._fresh is None:
            self._fresh = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._limit, force_close=True),
                timeout=self._timeout, trust_env=False,
            )
        return self._fresh

    async def post_sse(self, url: str, body: bytes, sink: EventSink) -> None:
        """Stream one POST; each ``data:`` payload goes to ``sink`` with its arrival time.

        A kept-alive connection the server has already closed (llama-server's cpp-httplib
        closes one after a few requests, or when it sat idle) fails before any response byte;
        only then is the request sent once more, on a new connection (never another pooled
        one): the server sent nothing for the first try, so nothing of it is counted.
        """
        for attempt in (0, 1):
            replied = False
            sess = self._fresh_sess() if attempt else self._sess()
            try:
                async with sess.post(
                    url, data=body, headers={"Content-Type": "application/json"}
                ) as resp:
                    replied = True
                    await self._read(resp, sink)
                    return
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as err:
                if attempt or replied or not _stale(err):
                    raise TransportError(f"{type(err).__name__}: {err}") from None
            except (TimeoutError, aiohttp.ClientError, UnicodeDecodeError) as err:
                raise TransportError(f"{type(err).__name__}: {err}") from None

    @staticmethod
    async def _read(resp: aiohttp.ClientResponse, sink: EventSink) -> None:
        if resp.status != 200:
            text = (await resp.text())[:300]
            raise TransportError(f"HTTP {resp.status}: {text}")
        clock = time.perf_counter_ns
        buf = b""
        async for chunk in resp.content.iter_any():
            now = clock()
            buf += chunk
            if b"\n\n" not in buf:
                continue
            if b"\r" in buf:
                buf = buf.replace(b"\r\n", b"\n")
            *events, buf = buf.split(b"\n\n")
            for ev in events:
                # fast path: one ``data:`` line, the shape every engine sends
                if ev[:6] == b"data: " and b"\ndata:" not in ev:
                    if not sink(now, ev[6:]):
                        return
                elif not _dispatch(ev, now, sink):
                    return

    async def aclose(self) -> None:
        """Close the sessions."""
        for sess in (self._session, self._fresh):
            if sess is not None:
                await sess.close()
        self._session = self._fresh = None


def _stale(err: Exception) -> bool:
    """A failure that means "the pooled connection was already closed", before any reply."""
    if isinstance(err, aiohttp.ServerDisconnectedError):
        return True
    return "Can not write request body" in str(err) or "Connection reset" in str(err)


def _dispatch(ev: bytes, now: int, sink: EventSink) -> bool:
    data: list[bytes] = []
    for line in ev.split(b"\n"):
        if line.startswith(b"data:"):
            data.append(line[5:].removeprefix(b" "))
        elif line.startswith(b"error:"):
            raise TransportError(f"server error event: {line[6:].strip()[:300]!r}")
    return sink(now, b"\n".join(data)) if data else True


@dataclass(frozen=True)
class CompletionRequest:
    """One prompt with its sampling settings; the same object is sent to both arms."""

    prompt_id: str
    prompt: str
    max_tokens: int
    temperature: float = 0.0
    ignore_eos: bool = True
    extras: Mapping[str, Any] = field(default_factory=dict)


def build_body(req: CompletionRequest, endpoint: Endpoint, model: str) -> bytes:
    """The JSON body: streaming with usage, greedy and fixed length stated explicitly."""
    if endpoint == "generate":  # SGLang native: per-request speculation figures in meta_info
        return generate_body(req.prompt, req.max_tokens, req.temperature, req.ignore_eos,
                             req.extras)
    body: dict[str, Any] = {
        "model": model, "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "temperature": req.temperature, "ignore_eos": req.ignore_eos,
        "max_tokens": req.max_tokens,
    }
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": req.prompt}]
        body["max_completion_tokens"] = req.max_tokens
    else:
        body["prompt"] = req.prompt
    body.update(req.extras)
    return json.dumps(body).encode()


@dataclass(frozen=True)
class RequestResult:
    """Timings and counts of one request; times in seconds from the send."""

    prompt_id: str
    ok: bool
    error: str | None
    start_ns: int
    ttft: float | None
    e2e: float | None
    tpot: float | None
    itl_chunk: tuple[float, ...]
    itl_token: tuple[float, ...]
    chunks: int
    prompt_tokens: int | None
    completion_tokens: int
    token_source: str
    text: str
    finish_reason: str | None
    server: Mapping[str, Any] = field(default_factory=dict)
    # generated token ids, where the engine streams them (llama.cpp ``return_tokens``)
    token_ids: tuple[int, ...] | None = None


class _Recorder:
    """Per-request state fed by the transport; kept small because it runs per chunk."""

    __slots__ = ("chat", "cum", "finish", "ids", "parts", "server", "times", "usage")

    def __init__(self, chat: bool) -> None:
        self.chat = chat
        self.times: list[int] = []
        self.cum: list[int | None] = []
        self.parts: list[str] = []
        self.usage: dict[str, Any] | None = None
        self.server: dict[str, Any] = {}
        self.finish: str | None = None
        self.ids: list[int] | None = []

    def __call__(self, now: int, payload: bytes) -> bool:
        if payload == b"[DONE]":
            return False
        obj = _decode(payload.decode())
        choices = obj.get("choices")
        if not choices:  # usage-only / metrics-only chunk: never an output token
            self._extras(obj)
            return True
        c = choices[0]
        if self.chat:
            delta = c.get("delta") or {}
            text = delta.get("content")
            if text is None:
                text = delta.get("reasoning_content") or None
        else:
            text = c.get("text")
        fin = c.get("finish_reason")
        if fin:
            self.finish = fin
            self._extras(obj)
        if text is None or (text == "" and fin):
            return True
        self.times.append(now)
        self.parts.append(text)
        if self.ids is not None:
            self._ids(obj, c)
        usage = obj.get("usage")
        if usage is not None:  # vLLM continuous_usage_stats: cumulative per chunk
            self.usage = usage
            self.cum.append(usage.get("completion_tokens"))
            return True
        timings = obj.get("timings")  # llama.cpp timings_per_token: cumulative predicted_n
        if timings is not None:
            self.server["timings"] = timings
            self.cum.append(timings.get("predicted_n"))
        else:
            self.cum.append(None)
        return True

    def _ids(self, obj: dict[str, Any], choice: dict[str, Any]) -> None:
        """Token ids of this chunk: llama.cpp ``__verbose.tokens`` (request ``verbose``), vLLM
        ``token_ids`` (request ``return_token_ids``); the first chunk without them stops the
        collection, and outputs then compare as text."""
        assert self.ids is not None  # noqa: S101 - checked by the caller
        verbose = obj.get("__verbose")
        toks = verbose.get("tokens") if isinstance(verbose, dict) else choice.get("token_ids")
        if isinstance(toks, list) and all(isinstance(t, int) for t in toks):
            self.ids.extend(toks)
        else:
            self.ids = None

    def _extras(self, obj: dict[str, Any]) -> None:
        if obj.get("usage"):
            self.usage = obj["usage"]
        for key in ("timings", "metrics", "sglext"):
            if key in obj:
                self.server[key] = obj[key]


def _per_chunk_tokens(rec: _Recorder | GenerateRecorder,
                      total: int) -> tuple[list[int] | None, str]:
    n = len(rec.times)
    if n and None not in rec.cum:
        cum = [int(c) for c in rec.cum if c is not None]
        return [cum[0], *(b - a for a, b in itertools.pairwise(cum))], "per-chunk"
    if total == n:
        return [1] * n, "one-per-chunk"
    return None, "unknown"


def _finish(prompt_id: str, start: int, rec: _Recorder | GenerateRecorder) -> RequestResult:
    times = rec.times
    if not times:
        return _failed(prompt_id, start, "no output chunk arrived")
    ttft = (times[0] - start) / 1e9
    e2e = (times[-1] - start) / 1e9
    gaps = [(b - a) / 1e9 for a, b in itertools.pairwise(times)]
    usage = rec.usage or {}
    total = usage.get("completion_tokens")
    source = "usage"
    if total is None:
        t = rec.server.get("timings", {}).get("predicted_n")
        total, source = (t, "timings") if t is not None else (len(times), "chunks")
    total = int(total)
    per, how = _per_chunk_tokens(rec, total)
    if per is not None:
        itl_token = [g / k for g, k in zip(gaps, per[1:], strict=False) for _ in range(k) if k > 0]
    else:  # spread the tokens after the first chunk evenly over the later gaps
        share = max(total - 1, 1) / max(len(gaps), 1)
        itl_token = [g / share for g in gaps]
    server = dict(rec.server)
    server["itl_token_basis"] = how
    return RequestResult(
        prompt_id=prompt_id, ok=True, error=None, start_ns=start, ttft=ttft, e2e=e2e,
        tpot=(e2e - ttft) / (total - 1) if total > 1 else None,
        itl_chunk=tuple(gaps), itl_token=tuple(itl_token), chunks=len(times),
        prompt_tokens=usage.get("prompt_tokens"), completion_tokens=total, token_source=source,
        text="".join(rec.parts), finish_reason=rec.finish, server=server,
        token_ids=tuple(rec.ids) if isinstance(rec, _Recorder) and rec.ids else None,
    )


def _failed(prompt_id: str, start: int, error: str) -> RequestResult:
    return RequestResult(prompt_id=prompt_id, ok=False, error=error, start_ns=start, ttft=None,
                         e2e=None, tpot=None, itl_chunk=(), itl_token=(), chunks=0,
                         prompt_tokens=None, completion_tokens=0, token_source="none",  # noqa: S106
                         text="",
                         finish_reason=None)


async def stream_request(transport: StreamTransport, base_url: str, req: CompletionRequest, *,
                         endpoint: Endpoint, model: str) -> RequestResult:
    """Send one streaming request and time it; failures come back as ``ok=False``."""
    body = build_body(req, endpoint, model)
    rec = GenerateRecorder() if endpoint == "generate" else _Recorder(endpoint == "chat")
    start = time.perf_counter_ns()
    try:
        await transport.post_sse(base_url.rstrip("/") + _PATHS[endpoint], body, rec)
    except TransportError as err:
        return _failed(req.prompt_id, start, str(err))
    except (ValueError, TypeError, AttributeError) as err:  # malformed JSON from the server
        return _failed(req.prompt_id, start, f"bad stream payload: {err}")
    return _finish(req.prompt_id, start, rec)


@dataclass(frozen=True)
class LevelRun:
    """All requests of one concurrency level in one arm of one round."""

    concurrency: int
    duration_s: float
    results: tuple[RequestResult, ...]

    @property
    def ok(self) -> tuple[RequestResult, ...]:
        """Successful requests."""
        return tuple(r for r in self.results if r.ok)

    @property
    def output_throughput(self) -> float:
        """Output tokens per second over the whole level (vLLM ``output_throughput``)."""
        return sum(r.completion_tokens for r in self.ok) / self.duration_s

    @property
    def request_throughput(self) -> float:
        """Completed requests per second."""
        return len(self.ok) / self.duration_s


async def run_level(transport: StreamTransport, base_url: str,
                    requests: Sequence[CompletionRequest], concurrency: int, *,
                    endpoint: Endpoint, model: str) -> LevelRun:
    """Closed loop: ``concurrency`` requests in flight until all are done."""
    sem = asyncio.Semaphore(concurrency)

    async def one(r: CompletionRequest) -> RequestResult:
        async with sem:
            return await stream_request(transport, base_url, r, endpoint=endpoint, model=model)

    t0 = time.perf_counter()
    results = await asyncio.gather(*(one(r) for r in requests))
    return LevelRun(concurrency, max(time.perf_counter() - t0, 1e-9), tuple(results))
