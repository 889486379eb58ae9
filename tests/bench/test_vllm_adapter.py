"""The vLLM bench adapter on the argument lists render really builds (no engine needed)."""

from __future__ import annotations

from specbundle.bench.engines import adapter_for
from specbundle.bench.prometheus import READERS, parse_scrape

#: vllm:cache_config_info as vLLM 0.32 (CPU build) exports it, label set abridged
CACHE_INFO = ('vllm:cache_config_info{block_size="128",engine="0",kv_cache_size_tokens="40320",'
              'num_gpu_blocks="315",num_gpu_blocks_override="None"} 1.0\n')


def test_draft_alone_swaps_the_positional_model_of_render_args() -> None:
    """``ServeCommand.args`` starts with the target (``vllm serve`` is the program)."""
    args = ["/m/render/models/target", "--served-model-name", "b", "--max-num-seqs", "8"]
    assert adapter_for("vllm").draft_only_argv(args, "/m/render/models/draft") == [
        "/m/render/models/draft", "--served-model-name", "b", "--max-num-seqs", "8"]


def test_kv_capacity_prefers_kv_cache_size_tokens() -> None:
    reading = READERS["vllm"].read(parse_scrape(CACHE_INFO))
    assert reading.kv_capacity_tokens == 40320.0
    other = CACHE_INFO.replace('kv_cache_size_tokens="40320"', 'kv_cache_size_tokens="34560"')
    assert READERS["vllm"].read(parse_scrape(other)).kv_capacity_tokens == 34560.0
    legacy = CACHE_INFO.replace('kv_cache_size_tokens="40320",', "")
    assert READERS["vllm"].read(parse_scrape(legacy)).kv_capacity_tokens == 315 * 128
