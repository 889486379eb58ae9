"""Bench fixtures: a loopback OpenAI-style stub server, and synthetic bundles in a mirror."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from specbundle.mirror import Mirror
from specbundle.pull import pull_bundle
from specbundle.spec import parse_spec
from specbundle.synth import SynthPair, make_pair


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


# -- a real bundle in a real mirror, benchmarked on a real llama-server ----------------------

#: Small enough for 2 shared cores: 2 rounds (ABBA), 4 requests of 32 tokens per level. One
#: engine thread: two spinning threads on a shared 2-core box stall each other for tens of ms.
BENCH = {"max_tokens": 32, "requests_per_level": 4, "rounds": 2, "warmup_requests": 2}


#: Short prompts: prefill is the same in both arms and would dilute the decode speed-up.
SHORT_PROMPTS = "\n".join(json.dumps({"id": f"s{i}", "category": c, "prompt": t}) for i, (c, t) in
                          enumerate((("chat", "Hello there"), ("code", "def add(a, b):"),
                                     ("summarisation", "Summary: the meeting moved."),
                                     ("chat", "Why is the sky blue?")))) + "\n"
PROMPTS_FILE = "prompts/bench.jsonl"


def bundle_doc(name: str, pair: SynthPair, *, levels: list[int],
               admission: dict[str, Any] | None = None) -> dict[str, Any]:
    """A llama.cpp bundle spec over a synthetic pair (both served from ``dir:`` sources)."""
    return {
        "apiVersion": "specbundle/v1", "metadata": {"name": name},
        "target": {"repo": "synth/target", "source": f"dir:{pair.target_dir}",
                   "gguf_file": "model.gguf"},
        "draft": {"repo": f"synth/draft-{pair.quality}", "source": f"dir:{pair.draft_dir}",
                  "gguf_file": "model.gguf"},
        "speculative": {"method": "draft_model", "num_speculative_tokens": 8},
        # flash attention on CPU makes the 9-token verification batch slower than the plain
        # kernels here (measured: ratio ~0.9-1.2 with it, ~1.3-1.7 without)
        # --prio 2: the shared test box's other load should not decide the measurement
        "engines": {"llamacpp": {"draft_p_min": 0.0, "ctx_size": 1024, "threads": 1,
                                 "flash_attn": "off", "extra_args": ["--prio", "2"]}},
        "deployment": {"p95_concurrency": 1},
        "admission": admission or {},
        "bench": {**BENCH, "concurrency_levels": levels, "prompts_file": PROMPTS_FILE},
    }


def pull_synth(mirror_root: Path, doc: dict[str, Any]) -> Mirror:
    """Pull a spec with ``dir:`` sources into the mirror (no hub, no network)."""
    mirror = Mirror.open(mirror_root, create=True)
    # the prompts ship beside the spec: pull copies them and the record names their digest
    spec_dir = mirror_root.parent / f"spec-{doc['metadata']['name']}"
    (spec_dir / PROMPTS_FILE).parent.mkdir(parents=True, exist_ok=True)
    (spec_dir / PROMPTS_FILE).write_bytes(SHORT_PROMPTS.encode())
    pull_bundle(parse_spec(doc), mirror, spec_dir=spec_dir)
    return mirror


@pytest.fixture(scope="session")
def bench_pairs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, SynthPair]:
    root = tmp_path_factory.mktemp("bench-synth")
    return {q: make_pair(root / q, quality=q, seed=7) for q in ("good", "bad")}  # type: ignore[misc]
