"""A loopback OpenAI-style streaming stub server (the bench client's counterpart in tests)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web


@dataclass
class StubConfig:
    """How the stub streams: tokens per chunk, gap between chunks, failures."""

    chunks: int = 8
    tokens_per_chunk: int = 1
    gap_s: float = 0.0
    status: int = 200
    sent_ns: list[list[int]] = field(default_factory=list)
    bodies: list[dict[str, object]] = field(default_factory=list)


CFG = web.AppKey("cfg", StubConfig)


def _chunk(text: str, chat: bool, cum: int, finish: str | None = None) -> bytes:
    choice: dict[str, object] = {"index": 0, "finish_reason": finish}
    if chat:
        choice["delta"] = {"content": text}
    else:
        choice["text"] = text
    obj = {"choices": [choice], "usage": {"prompt_tokens": 5, "completion_tokens": cum}}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


async def _stream(request: web.Request) -> web.StreamResponse:
    cfg = request.app[CFG]
    body = await request.json()
    cfg.bodies.append(body)
    if cfg.status != 200:
        return web.Response(status=cfg.status, text="overloaded")
    chat = request.path.endswith("chat/completions")
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    # registered before the first byte: the client can read [DONE] and return before this
    # handler runs another line, so a list appended at the end raced the test (seen in CI)
    sent: list[int] = []
    cfg.sent_ns.append(sent)
    if chat:  # role-only opening chunk: not a token
        await resp.write(b'data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n')
    cum = 0
    for i in range(cfg.chunks):
        if cfg.gap_s:
            await asyncio.sleep(cfg.gap_s)
        cum += cfg.tokens_per_chunk
        sent.append(time.perf_counter_ns())
        await resp.write(_chunk(f"t{i} ", chat, cum))
    await resp.write(_chunk("", chat, cum, "length"))
    final = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": cum},
             "timings": {"predicted_n": cum, "draft_n": 2 * cum, "draft_n_accepted": cum}}
    await resp.write(b": keep-alive comment\n\ndata: " + json.dumps(final).encode() + b"\n\n")
    await resp.write(b"data: [DONE]\n\n")
    return resp


@pytest.fixture
def stub_server() -> Iterator[tuple[str, StubConfig]]:
    """A running stub on 127.0.0.1; yields (base_url, config) — mutate config per test."""
    cfg = StubConfig()
    app = web.Application()
    app[CFG] = cfg
    app.router.add_post("/v1/completions", _stream)
    app.router.add_post("/v1/chat/completions", _stream)
    with serve_app(app) as url:
        yield url, cfg


@contextlib.contextmanager
def serve_app(app: web.Application) -> Iterator[str]:
    """Serve an aiohttp app on a loopback port from a background thread; yields its URL."""
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
