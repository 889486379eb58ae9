"""Argument rules of the engines, captured from their sources (see reference/engines.md).

vLLM (``vllm/engine/arg_utils.py``, ``vllm/config/speculative.py`` @ 002e77c1, v0.28-0.31
era) and SGLang (``python/sglang/srt/arg_groups/fields/*.py`` after the arg_groups refactor)
cannot run here, so these tables are what a rendered command is checked against: lint warns
on an extra flag outside them, and the test-suite validator fails on any rendered flag or
``--speculative-config`` key outside them. llama.cpp is checked against the real binary's
``--help`` in the tests; only its removed and hub-download flags are listed here.
Hand-written because the engines are not installable here; keep them in step with the
engine versions you ship (the image digest pins which).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "LLAMACPP_HUB_FLAGS",
    "LLAMACPP_REMOVED_FLAGS",
    "SGLANG_ALGORITHMS",
    "SGLANG_FLAGS",
    "SGLANG_HUB_FLAGS",
    "VLLM_FLAGS",
    "VLLM_HUB_FLAGS",
    "VLLM_METHODS",
    "VLLM_SPEC_KEYS",
    "ArgRule",
    "canonical_flag",
]

Kind = Literal["int", "float", "str", "bool", "json", "choice", "schedule"]


@dataclass(frozen=True)
class ArgRule:
    """One flag or config key: its value kind, allowed choices and lower bound."""

    kind: Kind
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    aliases: tuple[str, ...] = ()
    exclusive_minimum: bool = False


def _r(kind: Kind, *choices: str, minimum: float | None = None,
       aliases: tuple[str, ...] = (), gt: bool = False) -> ArgRule:
    return ArgRule(kind, tuple(choices), minimum, aliases, gt)


VLLM_METHODS: tuple[str, ...] = (
    "ngram", "medusa", "mlp_speculator", "draft_model", "suffix", "custom_class", "eagle",
    "eagle3", "extract_hidden_states", "mtp", "dflash", "ngram_gpu", "dspark",
)

#: ``vllm serve`` flags (positional model first). Booleans also accept ``--no-<flag>``.
VLLM_FLAGS: dict[str, ArgRule] = {
    "--served-model-name": _r("str"),
    "--tokenizer": _r("str"),
    "--tokenizer-mode": _r("choice", "auto", "slow", "mistral", "custom"),
    "--trust-remote-code": _r("bool"),
    "--dtype": _r("choice", "auto", "half", "float16", "bfloat16", "float", "float32"),
    "--seed": _r("int", minimum=0),
    "--max-model-len": _r("int", minimum=1),
    "--tensor-parallel-size": _r("int", minimum=1, aliases=("-tp",)),
    "--pipeline-parallel-size": _r("int", minimum=1, aliases=("-pp",)),
    "--data-parallel-size": _r("int", minimum=1, aliases=("-dp",)),
    "--enable-expert-parallel": _r("bool"),
    "--distributed-executor-backend": _r("choice", "ray", "mp", "uni", "external_launcher"),
    "--max-num-seqs": _r("int", minimum=1),
    "--max-num-batched-tokens": _r("int", minimum=1),
    "--gpu-memory-utilization": _r("float", minimum=0, gt=True),
    "--kv-cache-dtype": _r("choice", "auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2",
                           "fp8_inc", "fp8_ds_mla"),
    "--block-size": _r("int", minimum=1),
    "--swap-space": _r("float", minimum=0),
    "--cpu-offload-gb": _r("float", minimum=0),
    "--enable-prefix-caching": _r("bool"),
    "--enable-chunked-prefill": _r("bool"),
    "--async-scheduling": _r("bool"),
    "--enforce-eager": _r("bool"),
    "--quantization": _r("str", aliases=("-q",)),
    "--load-format": _r("str"),
    "--generation-config": _r("str"),
    "--override-generation-config": _r("json"),
    "--hf-overrides": _r("json"),
    "--compilation-config": _r("json", aliases=("-O",)),
    "--max-logprobs": _r("int", minimum=-1),
    "--disable-log-stats": _r("bool"),
    "--enable-log-requests": _r("bool"),
    "--speculative-config": _r("json", aliases=("-sc",)),
    "--per-request-spec-decode-metrics": _r("choice", "none", "summary", "detailed"),
    "--chat-template": _r("str"),
    "--enable-auto-tool-choice": _r("bool"),
    "--tool-call-parser": _r("str"),
    "--reasoning-parser": _r("str"),
    "--api-key": _r("str"),
    "--uvicorn-log-level": _r("choice", "critical", "error", "warning", "info", "debug",
                              "trace"),
    "--disable-uvicorn-access-log": _r("bool"),
    "--host": _r("str"),
    "--port": _r("int", minimum=1),
}

#: ``--speculative-config`` keys (``SpeculativeConfig`` fields a user may set).
VLLM_SPEC_KEYS: dict[str, ArgRule] = {
    "method": _r("choice", *VLLM_METHODS),
    "model": _r("str"),
    "num_speculative_tokens": _r("int", minimum=0, gt=True),
    "draft_tensor_parallel_size": _r("int", minimum=1),
    "num_speculative_tokens_per_batch_size": _r("schedule"),
    "enforce_eager": _r("bool"),
    "quantization": _r("str"),
    "moe_backend": _r("str"),
    "attention_backend": _r("str"),
    "kv_cache_dtype": _r("str"),
    "max_model_len": _r("int", minimum=1),
    "revision": _r("str"),
    "code_revision": _r("str"),
    "index_share_for_mtp_iteration": _r("bool"),
    "disable_padded_drafter_batch": _r("bool"),
    "disable_eagle_block_drop": _r("bool"),
    "use_local_argmax_reduction": _r("bool"),
    "use_heterogeneous_vocab": _r("bool"),
    "prompt_lookup_max": _r("int", minimum=1),
    "prompt_lookup_min": _r("int", minimum=1),
    "parallel_drafting": _r("bool"),
    "suffix_decoding_max_tree_depth": _r("int", minimum=1),
    "suffix_decoding_max_cached_requests": _r("int", minimum=0),
    "suffix_decoding_max_spec_factor": _r("float", minimum=0),
    "suffix_decoding_min_token_prob": _r("float", minimum=0),
    "draft_load_config": _r("json"),
    "rejection_sample_method": _r("choice", "standard", "synthetic", "block"),
    "synthetic_acceptance_rates": _r("json"),
    "synthetic_acceptance_length": _r("float", minimum=1),
    "enable_adaptive_verification": _r("bool"),
    "draft_sample_method": _r("choice", "greedy", "probabilistic"),
    "dspark_draft_topk": _r("int", minimum=1),
}

#: vLLM flags that fetch from a hub or carry its credentials.
VLLM_HUB_FLAGS: frozenset[str] = frozenset({"--hf-token", "--download-dir", "--revision",
                                             "--code-revision", "--tokenizer-revision"})

SGLANG_ALGORITHMS: tuple[str, ...] = (
    "EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO",
)

#: ``python -m sglang.launch_server`` flags.
SGLANG_FLAGS: dict[str, ArgRule] = {
    "--model-path": _r("str", aliases=("--model",)),
    "--tokenizer-path": _r("str"),
    "--served-model-name": _r("str"),
    "--trust-remote-code": _r("bool"),
    "--context-length": _r("int", minimum=1),
    "--dtype": _r("choice", "auto", "half", "float16", "bfloat16", "float", "float32"),
    "--kv-cache-dtype": _r("str"),
    "--quantization": _r("str"),
    "--load-format": _r("str"),
    "--tp-size": _r("int", minimum=1, aliases=("--tensor-parallel-size",)),
    "--pp-size": _r("int", minimum=1, aliases=("--pipeline-parallel-size",)),
    "--dp-size": _r("int", minimum=1, aliases=("--data-parallel-size",)),
    "--enable-dp-attention": _r("bool"),
    "--enable-dp-lm-head": _r("bool"),
    "--max-running-requests": _r("int", minimum=1),
    "--mem-fraction-static": _r("float", minimum=0, gt=True),
    "--chunked-prefill-size": _r("int"),
    "--enable-mixed-chunk": _r("bool"),
    "--schedule-policy": _r("str"),
    "--page-size": _r("int", minimum=1),
    "--attention-backend": _r("str"),
    "--cuda-graph-max-bs-decode": _r("int", minimum=1),  # 0.5.23 split --cuda-graph-max-bs
    "--cuda-graph-max-bs-prefill": _r("int", minimum=1),
    "--disable-cuda-graph": _r("bool"),
    "--enable-torch-compile": _r("bool"),
    "--disable-overlap-schedule": _r("bool"),
    "--enable-deterministic-inference": _r("bool"),
    "--random-seed": _r("int", minimum=0),
    "--enable-metrics": _r("bool"),
    "--decode-log-interval": _r("int", minimum=1),
    "--log-level": _r("str"),
    "--skip-server-warmup": _r("bool"),
    "--watchdog-timeout": _r("float", minimum=0),
    "--api-key": _r("str"),
    "--host": _r("str"),
    "--port": _r("int", minimum=1),
    "--speculative-algorithm": _r("choice", *SGLANG_ALGORITHMS),
    "--speculative-draft-model-path": _r("str", aliases=("--speculative-draft-model",)),
    "--speculative-draft-load-format": _r("str"),
    "--speculative-num-steps": _r("int", minimum=1),
    "--speculative-eagle-topk": _r("int", minimum=1),
    "--speculative-num-draft-tokens": _r("int", minimum=1),
    "--speculative-dflash-block-size": _r("int", minimum=1),
    "--speculative-dspark-block-size": _r("int", minimum=1),
    "--speculative-accept-threshold-single": _r("float", minimum=0),
    "--speculative-accept-threshold-acc": _r("float", minimum=0),
    "--speculative-use-rejection-sampling": _r("bool"),
    "--speculative-token-map": _r("str"),
    "--speculative-attention-mode": _r("choice", "prefill", "decode"),
    "--speculative-draft-attention-backend": _r("str"),
    "--speculative-draft-kv-cache-dtype": _r("str"),
    "--speculative-draft-window-size": _r("int", minimum=1),
    "--speculative-moe-runner-backend": _r("str"),
    "--speculative-draft-model-quantization": _r("str"),
    "--enable-multi-layer-eagle": _r("bool"),
    "--speculative-adaptive": _r("bool"),
    "--speculative-adaptive-config": _r("str"),
    "--speculative-ngram-min-bfs-breadth": _r("int", minimum=1),
    "--speculative-ngram-max-bfs-breadth": _r("int", minimum=1),
    "--speculative-ngram-match-type": _r("choice", "BFS", "PROB"),
    "--speculative-ngram-max-trie-depth": _r("int", minimum=1),
    "--speculative-ngram-capacity": _r("int", minimum=1),
}

#: SGLang flags that name hub revisions or download locations.
SGLANG_HUB_FLAGS: frozenset[str] = frozenset({"--revision", "--download-dir",
                                               "--speculative-draft-model-revision"})

#: llama-server flags that were removed (fatal at start; see ``llama-server --help``).
LLAMACPP_REMOVED_FLAGS: dict[str, str] = {
    "--draft": "--spec-draft-n-max", "--draft-n": "--spec-draft-n-max",
    "--draft-max": "--spec-draft-n-max", "--draft-min": "--spec-draft-n-min",
    "--draft-n-min": "--spec-draft-n-min",
    "--spec-ngram-size-n": "--spec-ngram-<type>-size-n",
    "--spec-ngram-size-m": "--spec-ngram-<type>-size-m",
    "--spec-ngram-min-hits": "--spec-ngram-<type>-min-hits",
}

#: llama-server flags that download from a hub, a URL or a registry.
LLAMACPP_HUB_FLAGS: frozenset[str] = frozenset({
    "-hf", "-hfr", "--hf-repo", "-hff", "--hf-file", "-hft", "--hf-token",
    "-hfd", "-hfrd", "--hf-repo-draft", "--spec-draft-hf", "-mu", "--model-url",
    "-mmu", "--mmproj-url", "-dr", "--docker-repo",
})


def canonical_flag(flag: str, table: dict[str, ArgRule]) -> str | None:
    """The table's name for a flag or alias (``--no-x`` maps to boolean ``--x``), else None."""
    name = flag.split("=", 1)[0]
    if name in table:
        return name
    for key, rule in table.items():
        if name in rule.aliases:
            return key
    if name.startswith("--no-"):
        pos = "--" + name[5:]
        if pos in table and table[pos].kind == "bool":
            return pos
    return None
