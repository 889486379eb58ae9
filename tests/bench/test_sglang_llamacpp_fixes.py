"""SGLang/llama.cpp parsing fixes held to the pinned releases' own output.

Decode-log lines are stored with the release in the file name (built from the f-strings of
SGLang 0.5.4 and 0.5.23); /metrics series are built with prometheus_client exactly as
SGLang 0.5.23's ``observability/metrics_collector.py`` declares them.
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from specbundle.bench.client import LevelRun, RequestResult
from specbundle.bench.logs import parse_log_line
from specbundle.bench.prometheus import READERS, parse_scrape, window_delta
from specbundle.bench.sglang_meta import ADAPTIVE_NOTE, meta_acceptance

DATA = Path(__file__).parent / "data"


def _lines(name: str) -> list[str]:
    return [x for x in (DATA / name).read_text().splitlines() if not x.startswith("#")]


def test_decode_log_lines_of_both_releases_parse() -> None:
    for name, n in (("sglang-0.5.4-decode-log.txt", 1), ("sglang-0.5.23-decode-log.txt", 2)):
        got = [parse_log_line(x) for x in _lines(name)]
        assert len(got) == n
        for g in got:
            assert g is not None and g.engine == "sglang"
            assert (g.mean_length, g.rate) == (2.84, 0.61)


def test_preemptions_come_from_the_retraction_counter() -> None:
    def scrape(retracted: int, last: int) -> str:
        reg = CollectorRegistry()
        labels = ["model_name", "engine_type", "tp_rank", "pp_rank"]
        g = Gauge("sglang:num_retracted_reqs", "The number of retracted requests.", labels,
                  registry=reg)
        c = Counter("sglang:num_retracted_requests_total",
                    "Total number of retracted requests due to kvcache full.", labels,
                    registry=reg)
        g.labels("m", "unified", "0", "0").set(last)
        c.labels("m", "unified", "0", "0").inc(retracted)
        return generate_latest(reg).decode()

    before = READERS["sglang"].read(parse_scrape(scrape(3, 3)))
    after = READERS["sglang"].read(parse_scrape(scrape(10, 0)))  # gauge reset by now
    assert window_delta(before, after).preemptions == 7.0


def test_sglang_0_5_4_without_the_counter_leaves_preemptions_unmeasured() -> None:
    text = "# TYPE sglang:num_retracted_reqs gauge\nsglang:num_retracted_reqs 2.0\n"
    r = READERS["sglang"].read(parse_scrape(text))
    assert window_delta(r, r).preemptions is None


def test_llamacpp_kv_usage_is_reported_unmeasured_with_the_reason() -> None:
    text = ("# TYPE llamacpp:n_tokens_max counter\nllamacpp:n_tokens_max 96\n"
            "# TYPE llamacpp:kv_cache_usage_ratio gauge\nllamacpp:kv_cache_usage_ratio 0.5\n")
    r = READERS["llamacpp"].read(parse_scrape(text))
    assert r.kv_usage is None  # b11434 has no such series: never read a name it lacks
    assert "KV usage unmeasured" in r.note
    assert r.gauges["llamacpp:n_tokens_max"] == 96.0


def _run(metas: list[dict[str, object]]) -> LevelRun:
    ok = tuple(RequestResult(
        prompt_id=str(i), ok=True, error=None, start_ns=0, ttft=0.1, e2e=1.0, tpot=0.01,
        itl_chunk=(), itl_token=(), chunks=1, prompt_tokens=8,
        completion_tokens=int(str(m["completion_tokens"])), token_source="meta_info", text="",
        finish_reason="length", server={"meta_info": m}) for i, m in enumerate(metas))
    return LevelRun(concurrency=1, duration_s=1.0, results=ok)


def _meta(verify: int, correct: int, width: int, completion: int) -> dict[str, object]:
    """One request's final meta_info as 0.5.23's tokenizer_manager writes it."""
    proposed = verify * (width - 1)
    return {"completion_tokens": completion, "spec_verify_ct": verify,
            "spec_num_correct_drafts": correct, "spec_num_proposed_drafts": proposed,
            "spec_accept_rate": correct / proposed, "spec_accept_length": completion / verify}


def _gauges(draft_tokens: float) -> object:
    reg = CollectorRegistry()
    Gauge("sglang:spec_num_draft_tokens", "active draft tokens", registry=reg).set(draft_tokens)
    r = READERS["sglang"].read(parse_scrape(generate_latest(reg).decode()))
    return window_delta(r, r)


def test_static_width_reports_the_k_in_force() -> None:
    runs = [_run([_meta(10, 20, 4, 31), _meta(10, 15, 4, 26)])]
    acc = meta_acceptance([_gauges(4)], runs)  # type: ignore[list-item]
    assert acc.acceptance_rate == 35 / 60 and acc.mean_draft_length == 3.0
    assert "K in force: 3 draft tokens per verify step" in acc.note
    assert ADAPTIVE_NOTE not in acc.note


def test_adaptive_width_drops_the_wrong_denominator() -> None:
    """The active tier ran 2 draft tokens but meta_info counted the static 4: approximate."""
    runs = [_run([_meta(10, 8, 4, 19)])]
    acc = meta_acceptance([_gauges(2)], runs)  # type: ignore[list-item]
    assert acc.note.startswith(ADAPTIVE_NOTE)
    assert acc.acceptance_rate is None and acc.alpha is None and acc.draft_tokens is None
    assert acc.mean_acceptance_length == 1.9 and acc.accepted == 8.0
    forced = meta_acceptance([], runs, adaptive=True)
    assert forced.acceptance_rate is None and ADAPTIVE_NOTE in forced.note
