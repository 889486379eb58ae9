"""Metric and log parsers on the engines' real output formats."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from specbundle.bench.logs import parse_log_line, sum_llamacpp_slots
from specbundle.bench.prometheus import (
    NOT_COMPARABLE,
    READERS,
    SpecCounters,
    parse_scrape,
    window_delta,
)
from specbundle.errors import BenchError

DATA = Path(__file__).parent / "data"


def test_vllm_counters_sum_engines_and_skip_created_samples() -> None:
    r = READERS["vllm"].read(parse_scrape((DATA / "vllm_metrics.prom").read_text()))
    assert r.spec == SpecCounters(1500.0, 4500.0, 2490.0, (1065.0, 795.0, 630.0))
    assert r.preemptions == 4.0
    assert r.generation_tokens == 100000.0
    assert r.kv_usage == 0.125
    assert r.kv_capacity_tokens == 27189 * 16


def test_kv_usage_is_the_fullest_rank_never_a_sum_past_one() -> None:
    """With DP (vLLM engines) or several ranks (SGLang) each label set is a ratio: the sum
    could exceed 1; the fullest rank is the one that preempts."""
    text = ('vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.75\n'
            'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.5\n')
    assert READERS["vllm"].read(parse_scrape(text)).kv_usage == 0.75
    text = ('sglang:token_usage{dp_rank="0",pp_rank="0"} 0.5\n'
            'sglang:token_usage{dp_rank="1",pp_rank="0"} 0.625\n')
    assert READERS["sglang"].read(parse_scrape(text)).kv_usage == 0.625


def test_vllm_wire_format_from_prometheus_client_itself() -> None:
    """vLLM exports through prometheus_client: the same library produces the same text."""
    reg = CollectorRegistry()
    labels = ["model_name", "engine"]
    drafts = Counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", labels,
                     registry=reg)
    tokens = Counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", labels,
                     registry=reg)
    acc = Counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", labels,
                  registry=reg)
    per = Counter("vllm:spec_decode_num_accepted_tokens_per_pos",
                  "Accepted tokens per draft position.", [*labels, "position"], registry=reg)
    before = READERS["vllm"].read(parse_scrape(generate_latest(reg).decode()))
    drafts.labels("m", "0").inc(10)
    tokens.labels("m", "0").inc(30)
    acc.labels("m", "0").inc(17)
    for pos, n in enumerate((8, 6, 3)):
        per.labels("m", "0", str(pos)).inc(n)
    text = generate_latest(reg).decode()
    assert "_created" in text  # the parser must not count these
    after = READERS["vllm"].read(parse_scrape(text))
    d = window_delta(before, after)
    assert d.spec == SpecCounters(10.0, 30.0, 17.0, (8.0, 6.0, 3.0))
    assert d.preemptions is None  # not exported in this registry: unknown, not zero


def test_llamacpp_counters_as_llama_server_renders_them() -> None:
    r = READERS["llamacpp"].read(parse_scrape((DATA / "llamacpp_metrics.prom").read_text()))
    assert r.spec == SpecCounters(14.0, 56.0, 48.0, (12.0, 12.0, 12.0, 12.0))
    assert r.generation_tokens == 64.0
    assert r.preemptions == 0.0


def test_llamacpp_build_without_spec_counters_reads_as_none() -> None:
    text = "# TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total 5\n"
    assert READERS["llamacpp"].read(parse_scrape(text)).spec is None


def test_sglang_gauges_are_labelled_not_comparable() -> None:
    r = READERS["sglang"].read(parse_scrape((DATA / "sglang_metrics.prom").read_text()))
    assert r.spec is None
    assert not r.counters_comparable
    assert NOT_COMPARABLE in r.note
    assert r.gauges["sglang:spec_accept_length"] == 3.12
    assert r.gauges["sglang:spec_accept_rate"] == 0.53
    assert r.generation_tokens == 64000.0
    d = window_delta(r, r)
    assert not d.counters_comparable and d.spec is None
    # only the gauge of the last retraction (0.5.4-style page): preemptions unmeasured
    assert d.preemptions is None


def test_sglang_gauges_from_prometheus_client_mostrecent() -> None:
    reg = CollectorRegistry()
    g = Gauge("sglang:spec_accept_length", "The average acceptance length of speculative "
              "decoding.", ["model_name", "tp_rank"], registry=reg)
    g.labels("m", "0").set(2.5)
    r = READERS["sglang"].read(parse_scrape(generate_latest(reg).decode()))
    assert r.gauges == {"sglang:spec_accept_length": 2.5}


def test_counter_going_backwards_is_a_restart() -> None:
    a = SpecCounters(10, 30, 20, (5, 5))
    b = SpecCounters(2, 6, 4, (1, 1))
    with pytest.raises(BenchError, match="backwards"):
        b.minus(a)


def test_malformed_metrics_text_is_a_bench_error() -> None:
    with pytest.raises(BenchError, match="unparseable"):
        parse_scrape('vllm:x{engine="0" 1.0\n')


def test_log_lines_of_all_three_engines() -> None:
    lines = (DATA / "engine_logs.txt").read_text().splitlines()
    parsed = [parse_log_line(ln) for ln in lines]
    assert parsed[0] is None  # the companion throughput line
    v = parsed[1]
    assert v is not None and v.engine == "vllm"
    assert (v.accepted, v.drafted, v.mean_length) == (11254, 20341, 2.66)
    assert v.per_position == (0.71, 0.53, 0.42)
    assert v.rate == pytest.approx(0.553)
    old = parsed[2]
    assert old is not None and (old.accepted, old.drafted) == (612, 1000)
    assert old.rate == pytest.approx(0.612) and old.mean_length is None
    s = parsed[3]
    assert s is not None and s.engine == "sglang" and (s.mean_length, s.rate) == (3.12, 0.53)
    s_old = parsed[4]  # 0.5.4's line: "Decode batch [N]," (0.5.23: "Decode batch,")
    assert s_old is not None and s_old.mean_length == 2.4 and s_old.rate == 0.47
    ll = parsed[5]
    assert ll is not None and (ll.accepted, ll.drafted, ll.mean_length) == (48, 56, 4.43)
    real = parsed[7]  # as this llama-server build prints it (timestamp + level prefix)
    assert real is not None and (real.accepted, real.drafted, real.mean_length) == (40, 41, 7.67)
    assert sum_llamacpp_slots(lines) == (98, 117)
