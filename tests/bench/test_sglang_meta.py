"""SGLang acceptance from per-request ``meta_info`` on the native ``/generate`` stream.

A loopback aiohttp stub speaks SGLang's format: ``data: {"text", "output_ids", "meta_info"}``
events (completion_tokens cumulative in each, the spec fields only in the last) ending in
``data: [DONE]``, with the current, alias-only and older field names, cumulative or
incremental text, gauges on ``/metrics`` and a cumulative-since-start average on
``/get_server_info`` that must never be used. Every request's figures come from a small
simulation of speculative steps, so the window sums are known exactly.
"""

from __future__ import annotations

import asyncio
import json
import random
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from aiohttp import web

from specbundle.bench.analysis import AnalysisInputs, acceptance, analyse_levels, validity
from specbundle.bench.client import (
    AiohttpTransport,
    CompletionRequest,
    LevelRun,
    build_body,
    run_level,
)
from specbundle.bench.engines import adapter_for
from specbundle.bench.prometheus import NOT_COMPARABLE, parse_scrape, window_delta
from specbundle.bench.runner import BenchOptions, run_raw
from specbundle.bench.sglang_meta import read_meta, sum_window
from specbundle.bench.workload import WARMUP_PROMPTS, default_workload
from specbundle.errors import BenchError
from specbundle.spec import parse_spec
from tests.lib.stub import serve_app

K = 3  # drafts per verify step: speculative_num_draft_tokens = K + 1
CUMULATIVE_AVG = 9.75  # /get_server_info's since-start average: must never appear

NAMES: dict[str, tuple[str, ...]] = {
    # what tokenizer_manager writes today: counts, aliases, histogram and its alias
    "current": ("spec_verify_ct", "spec_accept_length", "spec_accept_rate",
                "spec_num_correct_drafts", "spec_num_proposed_drafts", "spec_accepted_drafts",
                "spec_proposed_drafts", "spec_correct_drafts_histogram",
                "spec_accept_histogram"),
    "alias": ("spec_verify_ct", "spec_accept_length", "spec_accept_rate",
              "spec_accepted_drafts", "spec_proposed_drafts", "spec_accept_histogram"),
    "legacy": ("spec_verify_ct", "spec_accept_length", "spec_accept_token_num",
               "spec_draft_token_num"),
    "off": (),  # the baseline arm: speculation off, SGLang writes no spec field
}


@dataclass
class Served:
    """One request the stub answered, with the figures its meta_info carried."""

    prompt: str
    completion: int
    verify: int
    correct: int
    proposed: int
    histogram: list[int]


@dataclass
class SGLangStub:
    """How the stub behaves; mutate per test."""

    names: str = "current"
    incremental: bool = False
    drop: frozenset[str] = frozenset()
    served: list[Served] = field(default_factory=list)
    verify_calls: int = 0  # sglang:spec_verify_calls_total, grown as SGLang grows it
    counter_skew: int = 0  # added to the exported counter: an engine that disagrees


STUB = web.AppKey("stub", SGLangStub)


def _simulate(prompt: str, n: int) -> tuple[list[int], Served]:
    """Tokens per chunk (prefill token, then j+1 per verify step) and the true figures."""
    rng = random.Random(zlib.crc32(prompt.encode()))
    chunks, hist = [1], [0] * (K + 1)
    while sum(chunks) < n:
        j = rng.randint(0, K)
        hist[j] += 1
        chunks.append(min(j + 1, n - sum(chunks)))
    verify = sum(hist)
    return chunks, Served(prompt, n, verify, sum(j * h for j, h in enumerate(hist)),
                          verify * K, hist)


def _spec_fields(s: Served) -> dict[str, Any]:
    return {"spec_verify_ct": s.verify, "spec_accept_length": s.completion / s.verify,
            "spec_accept_rate": s.correct / s.proposed,
            "spec_num_correct_drafts": s.correct, "spec_accepted_drafts": s.correct,
            "spec_accept_token_num": s.correct, "spec_num_proposed_drafts": s.proposed,
            "spec_proposed_drafts": s.proposed, "spec_draft_token_num": s.proposed,
            "spec_correct_drafts_histogram": s.histogram, "spec_accept_histogram": s.histogram}


async def _generate(request: web.Request) -> web.StreamResponse:
    stub = request.app[STUB]
    body = await request.json()
    sp = body["sampling_params"]
    assert body["stream"] is True and sp["temperature"] == 0.0 and sp["ignore_eos"] is True
    chunks, served = _simulate(body["text"], sp["max_new_tokens"])
    stub.served.append(served)
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    ids: list[int] = []
    for i, k in enumerate(chunks):
        new = list(range(len(ids), len(ids) + k))
        ids += new
        meta: dict[str, Any] = {"id": "r", "prompt_tokens": 5, "completion_tokens": len(ids),
                                "finish_reason": None}
        if i == len(chunks) - 1:  # SGLang fills the spec fields when the request finishes
            meta["finish_reason"] = {"type": "length", "length": len(ids)}
            meta.update({k: v for k, v in _spec_fields(served).items()
                         if k in NAMES[stub.names] and k not in stub.drop})
        piece = "".join(f"w{t} " for t in (new if stub.incremental else ids))
        out = {"text": piece, "output_ids": new if stub.incremental else ids, "meta_info": meta}
        await resp.write(b"data: " + json.dumps(out).encode() + b"\n\n")
    if stub.names != "off":  # observe_one_finished_request: += spec_verify_ct when > 0
        stub.verify_calls += served.verify
    await resp.write(b"data: [DONE]\n\n")
    return resp


async def _metrics(request: web.Request) -> web.Response:
    text = ("# TYPE sglang:spec_accept_length gauge\nsglang:spec_accept_length{model_name=\"m\"} "
            "3.25\n# TYPE sglang:spec_accept_rate gauge\n"
            "sglang:spec_accept_rate{model_name=\"m\"} 0.5\n")
    stub = request.app[STUB]
    if stub.names != "off":
        text += ("# TYPE sglang:spec_verify_calls_total counter\n"
                 "sglang:spec_verify_calls_total{model_name=\"m\"} "
                 f"{stub.verify_calls + stub.counter_skew}\n")
    return web.Response(text=text)


def _app(stub: SGLangStub) -> web.Application:
    app = web.Application()
    app[STUB] = stub
    app.router.add_post("/generate", _generate)
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/health", _health)
    app.router.add_get("/server_info", _server_info)  # 0.5.23 (get_server_info: deprecated)
    return app


async def _health(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _server_info(request: web.Request) -> web.Response:
    return web.json_response({"max_total_num_tokens": 65536, "max_running_requests": 8,
                              "internal_states": [{"avg_spec_accept_length": CUMULATIVE_AVG}]})


@pytest.fixture
def sglang() -> Iterator[tuple[str, SGLangStub]]:
    """A running SGLang-format stub; yields (base_url, behaviour)."""
    stub = SGLangStub()
    with serve_app(_app(stub)) as url:
        yield url, stub


def _level(url: str, n: int = 4, max_tokens: int = 24) -> LevelRun:
    reqs = [CompletionRequest(f"p{i}", f"prompt number {i}", max_tokens) for i in range(n)]

    async def go() -> LevelRun:
        t = AiohttpTransport(limit=4)
        try:
            return await run_level(t, url, reqs, 2, endpoint="generate", model="m")
        finally:
            await t.aclose()
    return asyncio.run(go())


def test_generate_body_is_native_greedy_and_fixed_length() -> None:
    body = json.loads(build_body(CompletionRequest("a", "hi", 32), "generate", "m"))
    assert body == {"text": "hi", "stream": True, "sampling_params": {
        "max_new_tokens": 32, "temperature": 0.0, "ignore_eos": True}}


@pytest.mark.parametrize("incremental", [False, True])
def test_stream_timings_tokens_and_text_in_both_streaming_modes(
        sglang: tuple[str, SGLangStub], incremental: bool) -> None:
    url, stub = sglang
    stub.incremental = incremental
    run = _level(url, n=1)
    r = run.results[0]
    assert r.ok, r.error
    chunks, served = _simulate("prompt number 0", 24)
    assert r.completion_tokens == 24 and r.token_source == "usage" and r.prompt_tokens == 5
    assert r.chunks == len(chunks) and len(r.itl_chunk) == len(chunks) - 1
    assert len(r.itl_token) == 24 - 1  # several tokens per verify chunk: per-token ITL spread
    assert r.server["itl_token_basis"] == "per-chunk"
    assert r.ttft is not None and r.e2e is not None and r.e2e >= r.ttft
    assert r.text == "".join(f"w{t} " for t in range(24))
    assert r.finish_reason == "length"
    assert r.server["meta_info"]["spec_verify_ct"] == served.verify


@pytest.mark.parametrize("names", ["current", "alias", "legacy"])
def test_window_sums_equal_the_servers_figures(sglang: tuple[str, SGLangStub],
                                               names: str) -> None:
    url, stub = sglang
    stub.names = names
    run = _level(url, n=6)
    acc = acceptance("sglang", [], [run])
    verify = sum(s.verify for s in stub.served)
    correct = sum(s.correct for s in stub.served)
    proposed = sum(s.proposed for s in stub.served)
    assert acc.source == "meta_info" and acc.comparable_as_counters
    assert (acc.drafts, acc.accepted, acc.draft_tokens) == (verify, correct, proposed)
    assert acc.acceptance_rate == correct / proposed
    assert acc.mean_acceptance_length == sum(s.completion for s in stub.served) / verify
    assert acc.mean_draft_length == K
    assert acc.alpha is not None and 0.0 < acc.alpha < 1.0
    assert acc.request_cross_check is True  # each request's own rate/length match its counts
    if names == "legacy":  # older releases carry no histogram: no per-position vector
        assert acc.per_position == ()
    else:
        hist = [sum(s.histogram[j] for s in stub.served) for j in range(K + 1)]
        assert acc.per_position == tuple(sum(hist[i + 1:]) / verify for i in range(K))
    assert f"{names} field names" in acc.note


def test_a_resolved_tree_gets_no_chain_alpha(sglang: tuple[str, SGLangStub]) -> None:
    """α from τ assumes a chain: with the tree SGLang reports it resolved (``/server_info``,
    e.g. its auto-chosen (5, 4, 8) or NGRAM's breadth 10) it is not reported."""
    url, _ = sglang
    run = _level(url, n=4)
    tree = acceptance("sglang", [], [run], {"speculative_eagle_topk": 4,
                                            "speculative_num_draft_tokens": 8})
    assert tree.alpha is None and "tree in force (topk 4, 8 draft tokens" in tree.note
    assert tree.mean_acceptance_length is not None  # τ stays: it is exact for a tree too
    chain = acceptance("sglang", [], [run], {"speculative_eagle_topk": 1})
    assert chain.alpha is not None and "tree in force" not in chain.note


@pytest.mark.parametrize(("drop", "named"), [
    ({"spec_verify_ct"}, "lacks spec_verify_ct"),
    ({"spec_num_correct_drafts", "spec_accepted_drafts"}, "spec_num_correct_drafts / "
                                                          "spec_accepted_drafts"),
    ({"spec_num_proposed_drafts", "spec_proposed_drafts"}, "spec_num_proposed_drafts"),
])
def test_missing_fields_fail_closed_with_the_reason(sglang: tuple[str, SGLangStub],
                                                    drop: set[str], named: str) -> None:
    url, stub = sglang
    stub.drop = frozenset(drop)
    acc = acceptance("sglang", [], [_level(url, n=3)])
    assert acc.source == "none" and acc.alpha is None and acc.acceptance_rate is None
    assert acc.drafts is None and acc.mean_acceptance_length is None
    assert "unusable in 3 of 3 request(s)" in acc.note and named in acc.note


def test_speculation_off_is_unmeasured_not_zero(sglang: tuple[str, SGLangStub]) -> None:
    url, stub = sglang
    stub.names = "off"
    acc = acceptance("sglang", [], [_level(url, n=2)])
    assert acc.alpha is None and "speculation off" in acc.note


def test_read_meta_rejects_contradictions_and_allows_one_token_outputs() -> None:
    with pytest.raises(BenchError, match="inconsistently"):
        read_meta({"completion_tokens": 9, "spec_verify_ct": 3, "spec_num_correct_drafts": 4,
                   "spec_accepted_drafts": 5, "spec_num_proposed_drafts": 9})
    with pytest.raises(BenchError, match="more accepted"):
        read_meta({"completion_tokens": 9, "spec_verify_ct": 3, "spec_accept_token_num": 10,
                   "spec_draft_token_num": 9})
    with pytest.raises(BenchError, match="not a non-negative integer"):
        read_meta({"completion_tokens": 9, "spec_verify_ct": -1})
    with pytest.raises(BenchError, match="no meta_info"):
        read_meta(None)
    one = read_meta({"completion_tokens": 1})  # SGLang omits spec fields without a verify step
    assert one.verify_ct == 0 and one.names == "none"
    w = sum_window([{"completion_tokens": 1}])
    assert not w.measured and "no request ran a speculative verify step" in (w.reason or "")


def test_inconsistent_histogram_drops_per_position_only() -> None:
    good = {"completion_tokens": 7, "spec_verify_ct": 3, "spec_num_correct_drafts": 4,
            "spec_num_proposed_drafts": 9, "spec_correct_drafts_histogram": [1, 1, 0, 1]}
    bad = {**good, "spec_correct_drafts_histogram": [3, 0, 0, 0]}  # sums to 3 steps, 0 drafts
    w = sum_window([good, bad])
    assert w.measured and w.correct == 8 and w.verify_ct == 6 and w.histogram is None
    assert "per-position acceptance not reported" in w.notes[0]
    assert sum_window([good, good]).accepted_per_position() == (4, 2, 2)


def test_bench_run_sums_only_the_measured_window_and_keeps_gauges_labelled() -> None:
    """Base-URL mode end to end: warm-up requests and the since-start average never count."""
    spec_stub, base_stub = SGLangStub(names="current"), SGLangStub(names="off")
    doc = {"apiVersion": "specbundle/v1", "metadata": {"name": "sg"},
           "target": {"repo": "o/t", "source": "dir:/nonexistent/t"},
           "draft": {"repo": "o/d", "source": "dir:/nonexistent/d"},
           "speculative": {"method": "draft_model", "num_speculative_tokens": K},
           "engines": {"sglang": {}}, "deployment": {"p95_concurrency": 2},
           "bench": {"max_tokens": 12, "requests_per_level": 3, "rounds": 2,
                     "warmup_requests": 2, "concurrency_levels": [2]}}
    spec = parse_spec(doc)
    with serve_app(_app(spec_stub)) as s_url, serve_app(_app(base_stub)) as b_url:
        raw = run_raw(spec, "sglang", default_workload(), BenchOptions(
            base_url=s_url, baseline_url=b_url, measure_draft=False, startup_timeout_s=10,
            max_rounds=2),  # fixed 2 rounds: the sequential rule would extend on a tie
            launcher=None)
    warm = {p.text for p in WARMUP_PROMPTS}
    assert sum(s.prompt in warm for s in spec_stub.served) == 2 * 2  # warm-up ran, per round
    measured = [s for s in spec_stub.served if s.prompt not in warm]
    assert len(measured) == 2 * 3
    inp = AnalysisInputs(max_tokens=12, confidence=0.9, min_ratio_lower_bound=1.05,
                         min_token_agreement=0.99)
    (lv,) = analyse_levels(raw, inp)
    acc = lv.acceptance
    verify = sum(s.verify for s in measured)
    assert acc.drafts == verify and acc.accepted == sum(s.correct for s in measured)
    assert acc.mean_acceptance_length == 12 * len(measured) / verify != CUMULATIVE_AVG
    assert acc.gauges == {"sglang:spec_accept_length": 3.25, "sglang:spec_accept_rate": 0.5}
    assert NOT_COMPARABLE in acc.note
    assert f"summed spec_verify_ct ({verify}) matches SGLang's counter" in acc.note
    assert acc.request_cross_check is True
    assert any("/generate" in n for n in raw.notes)
    assert validity(raw, inp).token_agreement == 1.0  # same text through /generate in both arms


def test_gauges_alone_never_stand_in_for_the_window() -> None:
    reading = parse_scrape('# TYPE sglang:spec_accept_length gauge\n'
                           'sglang:spec_accept_length 4.0\n')
    r = adapter_for("sglang").read_metrics(reading)
    acc = acceptance("sglang", [window_delta(r, r)], [])
    assert acc.source == "gauges" and acc.alpha is None and not acc.comparable_as_counters
    assert acc.gauges == {"sglang:spec_accept_length": 4.0} and NOT_COMPARABLE in acc.note


def test_the_engine_counter_holds_the_summed_verify_steps(sglang: tuple[str, SGLangStub]) -> None:
    """``sglang:spec_verify_calls_total`` grows by each finished request's spec_verify_ct: over
    a window it must equal the requests' sum, and a disagreement fails the cross-check."""
    url, stub = sglang
    reader = adapter_for("sglang")

    def scrape() -> str:
        return httpx.get(f"{url}/metrics", timeout=10).text

    for skew, agrees in ((0, True), (3, False)):
        stub.counter_skew = 0
        before = reader.read_metrics(parse_scrape(scrape()))
        run = _level(url, n=5)
        stub.counter_skew = skew
        after = reader.read_metrics(parse_scrape(scrape()))
        acc = acceptance("sglang", [window_delta(before, after)], [run])
        verify = sum(s.verify for s in stub.served[-5:])
        assert acc.drafts == verify
        word = "matches" if agrees else "disagrees with"
        assert (f"summed spec_verify_ct ({verify}) {word} SGLang's counter "
                f"sglang:spec_verify_calls_total over the window ({verify + skew})") in acc.note
        assert acc.request_cross_check is agrees
