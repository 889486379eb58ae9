"""The benchmark against running llama-servers given by URL (``--base-url`` mode).

The test starts the three servers itself (speculative, baseline, draft alone) and scrapes
their ``/metrics`` around the whole benchmark: with no warm-up, the acceptance the report
states must equal the llama-server counter deltas exactly.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from specbundle.bench import BenchOptions, run_bench
from specbundle.bundle import read_unsigned
from specbundle.errors import BenchError
from specbundle.synth import SynthPair
from tests._engine import llama_server, metrics, spec_args
from tests.lib.bundles import pull_synth
from tests.lib.specs import bundle_doc

# A statistical verdict on a shared 2-core box: a failure is re-measured (twice) before it counts.
MEASURED = pytest.mark.flaky(reruns=2, reruns_delay=2)
pytestmark = [pytest.mark.engine, pytest.mark.slow, MEASURED, pytest.mark.measures]

COUNTERS = ("llamacpp:spec_decode_num_drafts_total", "llamacpp:spec_decode_num_draft_tokens_total",
            "llamacpp:spec_decode_num_accepted_tokens_total")


def test_acceptance_equals_llama_server_counter_deltas(
        tmp_path: Path, bench_pairs: dict[str, SynthPair], llama_server_bin: Path) -> None:
    pair = bench_pairs["good"]
    mirror = pull_synth(tmp_path / "mirror", bundle_doc("url", pair, levels=[1, 2]))
    common = ["-np", "2", "--metrics", "-fa", "off"]
    with contextlib.ExitStack() as stack:
        def start(model: Path, extra: list[str], log: str) -> str:
            return stack.enter_context(llama_server(llama_server_bin, model, [*common, *extra],
                                                    log=tmp_path / log, threads=1))
        spec_url = start(pair.target.gguf, spec_args(pair.draft.gguf, n_max=8), "spec.log")
        base_url = start(pair.target.gguf, [], "base.log")
        draft_url = start(pair.draft.gguf, [], "draft.log")
        before = metrics(spec_url)
        base_before = metrics(base_url)
        report = run_bench(read_unsigned(mirror, "url"), options=BenchOptions(
            base_url=spec_url, baseline_url=base_url, draft_url=draft_url, warmup_requests=0,
            aa_rounds=2, max_rounds=2))
        after = metrics(spec_url)
        base_after = metrics(base_url)

    assert report.settings.mode == "base-url" and report.settings.levels == (1, 2)
    assert report.validity.settings_equal is None  # servers by URL: not compared
    delta = {k: after[k] - before.get(k, 0.0) for k in COUNTERS}
    accs = [lv.acceptance for lv in report.levels]
    assert sum(a.drafts or 0 for a in accs) == delta[COUNTERS[0]]
    assert sum(a.draft_tokens or 0 for a in accs) == delta[COUNTERS[1]]
    assert sum(a.accepted or 0 for a in accs) == delta[COUNTERS[2]]
    width = max(len(a.per_position) for a in accs)
    for i in range(width):
        key = f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}}'
        got = sum(a.per_position[i] * (a.drafts or 0) for a in accs if i < len(a.per_position))
        assert got == pytest.approx(after[key] - before.get(key, 0.0))
    # the baseline server never speculated
    assert base_after.get(COUNTERS[1], 0.0) - base_before.get(COUNTERS[1], 0.0) == 0
    assert report.validity.base_counters_flat is True
    for lv in report.levels:
        assert lv.acceptance.request_cross_check is True
        assert lv.draft is not None and lv.c_measured is not None and 0 < lv.c_measured < 1
        assert lv.base.completed == lv.spec.completed == 8  # 4 requests x 2 rounds
    assert report.ceiling.kv_capacity_base == report.ceiling.kv_capacity_spec
    assert report.validity.slots_cover_concurrency is True
    aa = report.aa_noise  # the baseline measured twice more at P95: the noise floor
    assert aa is not None and aa.n_spec == 2 and aa.low <= aa.ratio <= aa.high
    stored = mirror.read_bundle_file("url", f"bench/{report.run_id}/report.json")
    assert stored == report.to_bytes()


def test_base_url_without_baseline_cannot_compare(
        tmp_path: Path, bench_pairs: dict[str, SynthPair]) -> None:
    mirror = pull_synth(tmp_path / "mirror", bundle_doc("one", bench_pairs["good"], levels=[1]))
    with pytest.raises(BenchError, match="baseline-url"):
        run_bench(read_unsigned(mirror, "one"), options=BenchOptions(base_url="http://127.0.0.1:9",
                                                      startup_timeout_s=1))


def test_unknown_engine_is_refused(tmp_path: Path, bench_pairs: dict[str, SynthPair]) -> None:
    mirror = pull_synth(tmp_path / "mirror", bundle_doc("eng", bench_pairs["good"], levels=[1]))
    with pytest.raises(BenchError, match="no vllm settings"):
        run_bench(read_unsigned(mirror, "eng"), engine="vllm")
