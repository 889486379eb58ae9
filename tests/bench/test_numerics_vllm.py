"""The near-tie probe on the real vLLM CPU build (issue 24: numerics on vLLM too).

One baseline vLLM server (the synthetic target, no speculation). The bench client now asks
vLLM for the generated token ids (``return_token_ids``), so outputs compare by id; at a first
divergence the probe asks the same server for its top-2 log-probabilities on the token
prompt (``/tokenize`` + ``/v1/completions`` with ``logprobs`` as token ids): a flip to the
target's runner-up gets its margin, a token outside the top two gets none (beyond numerics).
The gate's use of the margins is engine-agnostic and held both ways in
test_numerics_engine.py on llama-server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from specbundle.bench.client import AiohttpTransport, CompletionRequest, LevelRun, run_level
from specbundle.bench.engines import VllmAdapter
from specbundle.bench.numerics import TIE_MARGIN, Divergence, collect, probe_margins
from specbundle.bench.servers import served_model
from specbundle.bundle import read_unsigned
from specbundle.mirror import Mirror
from specbundle.render import render_bundle
from specbundle.synth import make_pair
from tests._vllm import vllm_server
from tests._vllm_bundles import pull, vllm_doc

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(1800)]

PROMPT = "def add(a, b):"


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory, vllm_bin: Path) -> Iterator[str]:
    root = tmp_path_factory.mktemp("vnum")
    pair = make_pair(root / "pair", quality="good", seed=5, target_layers=4)
    mirror = Mirror.open(root / "mirror", create=True)
    name = pull(mirror, vllm_doc("vnum", pair.target_dir, pair.draft_dir, levels=(1,), p95=1))
    res = render_bundle(read_unsigned(mirror, name), "vllm", "shell")
    script = next(f for f in res.files if f.suffix == ".sh")
    with vllm_server(script, vllm_bin, tmp=root, speculation=False) as url:
        yield url


def _level(url: str, n: int = 2) -> LevelRun:
    reqs = [CompletionRequest(f"p#{i}", PROMPT, 12, temperature=0.0, ignore_eos=True,
                              extras=dict(VllmAdapter().request_extras())) for i in range(n)]

    async def go() -> LevelRun:
        transport = AiohttpTransport(limit=1, timeout_s=600.0)
        try:
            return await run_level(transport, url, reqs, 1, endpoint="completions",
                                   model=served_model(url))
        finally:
            await transport.aclose()
    return asyncio.run(go())


def _top2(url: str, prompt: list[int]) -> dict[int, float]:
    """The target's own top-2 for the next token, asked independently of the probe."""
    r = httpx.post(url + "/v1/completions", json={
        "model": served_model(url), "prompt": prompt, "max_tokens": 1, "temperature": 0.0,
        "logprobs": 2, "return_tokens_as_token_ids": True}, timeout=300.0, trust_env=False)
    r.raise_for_status()
    top = r.json()["choices"][0]["logprobs"]["top_logprobs"][0]
    return {int(k.removeprefix("token_id:")): float(v) for k, v in top.items()}


def test_the_bench_client_reads_vllm_token_ids_and_the_probe_reads_its_margins(
        base_url: str) -> None:
    run = _level(base_url)
    assert len(run.ok) == 2
    ids = run.ok[0].token_ids
    assert ids is not None and len(ids) == 12 and run.ok[1].token_ids == ids  # greedy: same
    tok = httpx.post(base_url + "/tokenize", json={"model": served_model(base_url),
                                                   "prompt": PROMPT, "add_special_tokens": True},
                     timeout=60.0, trust_env=False).json()["tokens"]
    n = 3
    top = _top2(base_url, [*tok, *ids[:n]])
    assert max(top, key=lambda t: top[t]) == ids[n]  # the greedy token is the top-1 there
    runner_up = max((t for t in top if t != ids[n]), key=lambda t: top[t])
    outside = next(t for t in range(1, 512) if t not in top)
    flip = Divergence(PROMPT, tuple(ids[:n]), ids[n], runner_up)
    far = Divergence(PROMPT, tuple(ids[:n]), ids[n], outside)
    got = probe_margins(base_url, [flip, far], engine="vllm")
    assert [t.divergence for t in got] == [flip, far]
    assert got[0].margin == pytest.approx(top[ids[n]] - top[runner_up], abs=1e-3)
    assert got[0].near_tie == (got[0].margin is not None and got[0].margin <= TIE_MARGIN)
    assert got[1].margin is None and not got[1].near_tie  # not even the runner-up: the draft

    # the runner's path: a speculative output that flips to the runner-up at position n
    changed = (*ids[:n], runner_up, *ids[n + 1:])
    spec = LevelRun(1, run.duration_s, (replace(run.ok[0], token_ids=changed),))
    probes, note = collect(base_url, "vllm", {1: [run]}, {1: [spec]}, {"p#0": PROMPT}, (),
                           timeout=300.0)
    assert note == "" and [p.divergence for p in probes] == [flip]
    assert probes[0].margin == pytest.approx(got[0].margin)
    _, chat_note = collect(base_url, "vllm", {1: [run]}, {1: [spec]}, {"p#0": PROMPT}, (),
                           timeout=300.0, endpoint="chat")
    assert "templated" in chat_note
