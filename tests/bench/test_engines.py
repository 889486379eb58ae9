"""Engine adapters: draft-alone command lines, per-request figures, KV capacity."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbundle.bench.engines import adapter_for
from specbundle.bench.prometheus import READERS, parse_scrape
from specbundle.bench.servers import launch
from specbundle.errors import BenchError

DATA = Path(__file__).parent / "data"


def test_draft_alone_swaps_only_the_model_argument() -> None:
    base = ["--model", "/m/target/model.gguf", "--alias", "b", "--parallel", "2"]
    assert adapter_for("llamacpp").draft_only_argv(base, "/m/draft/d.gguf") == [
        "--model", "/m/draft/d.gguf", "--alias", "b", "--parallel", "2"]
    assert adapter_for("vllm").draft_only_argv(["vllm", "serve", "/m/t", "--port", "1"],
                                               "/m/d") == ["vllm", "serve", "/m/d", "--port", "1"]
    assert adapter_for("sglang").draft_only_argv(["--model-path", "/m/t", "--tp", "1"],
                                                 "/m/d") == ["--model-path", "/m/d", "--tp", "1"]
    with pytest.raises(BenchError, match="draft alone"):
        adapter_for("llamacpp").draft_only_argv(["--alias", "x"], "/d")


def test_per_request_speculation_figures() -> None:
    ll = adapter_for("llamacpp")
    assert ll.request_spec({"timings": {"predicted_n": 9, "draft_n": 12, "draft_n_accepted": 7}}
                           ) == (12.0, 7.0)
    assert ll.request_spec({"timings": {"predicted_n": 9}}) == (0.0, 0.0)  # nothing drafted
    assert ll.request_spec({}) is None
    assert ll.step_ms({"timings": {"predicted_n": 4, "predicted_ms": 10.0}}) == 2.5
    v = adapter_for("vllm")
    assert v.request_spec({"metrics": {"speculative_decoding": {
        "num_draft_tokens": 30, "num_accepted_draft_tokens": 21}}}) == (30.0, 21.0)
    assert v.request_spec({}) is None
    assert adapter_for("sglang").request_spec({"sglext": {}}) is None


def test_kv_capacity_per_engine() -> None:
    props = {"total_slots": 4, "default_generation_settings": {"n_ctx": 1024}}
    reading = READERS["vllm"].read(parse_scrape((DATA / "vllm_metrics.prom").read_text()))
    assert adapter_for("llamacpp").kv_capacity(props, reading) == 4096.0
    assert adapter_for("llamacpp").max_sequences(props) == 4
    assert adapter_for("vllm").kv_capacity(None, reading) == 27189 * 16
    assert adapter_for("sglang").kv_capacity({"max_total_num_tokens": 90000}, reading) == 90000
    assert adapter_for("sglang").kv_capacity(None, reading) is None


def test_unknown_engine_and_non_loopback_hosts_are_refused(tmp_path: Path) -> None:
    with pytest.raises(BenchError, match="unknown engine"):
        adapter_for("tgi")
    with (pytest.raises(BenchError, match="loopback"),
          launch(["true"], env={}, host="10.0.0.1", port=1, log=tmp_path / "x.log")):
        pass
