"""Divergence vs numerics: the target's own margin at speculation's first divergence.

The probe's parsing runs against a loopback stub that answers as llama-server does
(``/tokenize``, ``/completion`` with ``n_probs``); the engine test holds it on the real one.
"""

from __future__ import annotations

from aiohttp import web

from specbundle.bench.checks import agreement
from specbundle.bench.client import CompletionRequest, LevelRun, RequestResult
from specbundle.bench.numerics import (
    TIE_MARGIN,
    Divergence,
    TieProbe,
    divergences,
    first_divergence,
    probe_margins,
)
from specbundle.bench.runner import ArmData, RawRun
from tests.lib.stub import serve_app


def _res(pid: str, ids: tuple[int, ...]) -> RequestResult:
    return RequestResult(prompt_id=pid, ok=True, error=None, start_ns=0, ttft=0.01, e2e=0.1,
                         tpot=0.01, itl_chunk=(), itl_token=(), chunks=len(ids),
                         prompt_tokens=3, completion_tokens=len(ids), token_source="usage",
                         text=" ".join(map(str, ids)), finish_reason="length", token_ids=ids)


def _runs(*outs: dict[str, tuple[int, ...]]) -> dict[int, list[LevelRun]]:
    return {1: [LevelRun(1, 1.0, tuple(_res(p, ids) for p, ids in o.items())) for o in outs]}


SAME = (1, 2, 3, 4, 5, 6, 7, 8)
FLIP = (1, 2, 3, 9, 9, 9, 9, 9)  # parts at position 3: the target said 4, speculation 9


def test_first_divergences_are_found_once_per_prompt_and_flip() -> None:
    base = _runs({"a#0": SAME, "b#1": SAME}, {"a#0": SAME, "b#1": SAME})
    spec = _runs({"a#0": FLIP, "b#1": SAME}, {"a#0": FLIP, "b#1": SAME})
    got = divergences(base, spec, {"a#0": "alpha", "b#1": "beta"})
    assert got == [Divergence("alpha", (1, 2, 3), 4, 9)]
    assert divergences(base, spec, {"a#0": "alpha"}, set(got)) == []
    assert first_divergence("p", SAME, SAME[:5]) is None  # a prefix is no divergence


def test_a_near_tie_is_a_close_runner_up_either_way() -> None:
    d = Divergence("p", (), 1, 2)
    assert TieProbe(d, TIE_MARGIN / 2).near_tie and TieProbe(d, -TIE_MARGIN / 2).near_tie
    assert not TieProbe(d, 2.0).near_tie and not TieProbe(d, None).near_tie


def _llama_like(logprobs: dict[int, float]) -> web.Application:
    async def tokenize(request: web.Request) -> web.Response:
        body = await request.json()
        assert body["add_special"] is True
        return web.json_response({"tokens": [100, 101, 102]})

    async def completion(request: web.Request) -> web.Response:
        body = await request.json()
        assert body["prompt"][:3] == [100, 101, 102] and body["n_probs"] == 2
        top = sorted(logprobs.items(), key=lambda kv: -kv[1])[:2]
        return web.json_response({"content": "x", "completion_probabilities": [
            {"id": top[0][0], "token": "x", "logprob": top[0][1], "bytes": [120],
             "top_logprobs": [{"id": i, "token": str(i), "logprob": lp, "bytes": []}
                              for i, lp in top]}]})

    app = web.Application()
    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/completion", completion)
    return app


def test_the_probe_reads_the_targets_margin() -> None:
    d = Divergence("alpha", (1, 2, 3), 4, 9)
    with serve_app(_llama_like({4: -0.70, 9: -0.72, 5: -3.0})) as url:
        (tie,) = probe_margins(url, [d])
    assert tie.near_tie and abs(tie.margin - 0.02) < 1e-9  # type: ignore[operator]
    with serve_app(_llama_like({4: -0.1, 5: -2.5, 9: -9.0})) as url:
        (real,) = probe_margins(url, [d])
    assert real.margin is None and not real.near_tie  # not even the runner-up


def _raw(spec: dict[int, list[LevelRun]], ties: tuple[TieProbe, ...]) -> RawRun:
    base = _runs({"a#0": SAME}, {"a#0": SAME})
    reqs = {1: [CompletionRequest("a#0", "alpha", 8)]}
    return RawRun(run_id="r", engine="llamacpp", levels=(1,), requests=reqs,
                  base=ArmData(runs=base), spec=ArmData(runs=spec), draft=None, aa=None,
                  round_order=("base", "spec", "spec", "base"), settings_equal=True,
                  settings_note="", server={}, notes=[], ties=ties)


def test_agreement_forgives_near_ties_only() -> None:
    spec = _runs({"a#0": FLIP}, {"a#0": FLIP})
    d = Divergence("alpha", (1, 2, 3), 4, 9)
    plain = agreement(_raw(spec, ()), 8)
    assert plain.relative is not None and plain.relative < 0.5  # prefix 3 of the A/A 8
    assert plain.relative_numerics is None and plain.probed == 0
    tie = agreement(_raw(spec, (TieProbe(d, 0.02),)), 8)
    assert (tie.probed, tie.near_ties, tie.relative_numerics) == (1, 1, 1.0)
    real = agreement(_raw(spec, (TieProbe(d, None),)), 8)
    assert (real.probed, real.near_ties) == (1, 0) and real.relative_numerics == plain.relative


def test_the_gate_fails_only_beyond_numerics() -> None:
    from dataclasses import replace

    from specbundle.admit import evaluate
    from specbundle.spec import AdmissionThresholds
    from tests.lib.reports import bench_report

    spec = _runs({"a#0": FLIP}, {"a#0": FLIP})
    d = Divergence("alpha", (1, 2, 3), 4, 9)
    for ties, passed in (((TieProbe(d, 0.02),), True), ((TieProbe(d, 4.0),), False)):
        fl = agreement(_raw(spec, ties), 8)
        r = bench_report()
        r = replace(r, validity=replace(r.validity, agreement=fl))
        crit = next(c for c in evaluate(r, AdmissionThresholds()).criteria
                    if c.name == "token_agreement")
        assert crit.passed is passed, crit.detail
        assert "close runner-up" in crit.detail
        assert passed or "beyond numerics" in crit.detail
