"""Argument rules of the engines, captured from their sources (see reference/engines.md).

vLLM's table is dumped from the pinned release by ``ci/vllm-table.py`` into
``vllm_args.json`` (it names its version; with vLLM installed, vLLM itself judges commands
instead, see :mod:`specbundle.render.vllm_oracle`). SGLang
(``python/sglang/srt/arg_groups/fields/*.py`` after the arg_groups refactor) cannot run here,
so these tables are what a rendered command is checked against: lint warns
on an extra flag outside them, and the test-suite validator fails on any rendered flag or
``--speculative-config`` key outside them. llama.cpp is checked against the real binary's
``--help`` in the tests; only its removed and hub-download flags are listed here.
Hand-written because the engines are not installable here; keep them in step with the
engine versions you ship (the image digest pins which).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal

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
    "VLLM_TABLE_VERSION",
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
    #: Booleans only: whether ``--no-<flag>`` exists (argparse BooleanOptionalAction).
    negatable: bool = True


def _r(kind: Kind, *choices: str, minimum: float | None = None,
       aliases: tuple[str, ...] = (), gt: bool = False) -> ArgRule:
    """An SGLang rule: its booleans are ``store_true`` (0.5.23 has no ``--no-<flag>``)."""
    return ArgRule(kind, tuple(choices), minimum, aliases, gt, negatable=False)


def _vllm_table() -> tuple[str, tuple[str, ...], dict[str, ArgRule], dict[str, ArgRule]]:
    """The table dumped from the pinned vLLM by ``ci/vllm-table.py`` (not hand-written)."""
    doc = json.loads(resources.files("specbundle.render").joinpath("vllm_args.json")
                     .read_text(encoding="utf-8"))

    def rule(r: dict[str, Any], aliases: tuple[str, ...] = (), negatable: bool = True) -> ArgRule:
        return ArgRule(r["kind"], tuple(r.get("choices") or ()), r.get("minimum"), aliases,
                       bool(r.get("exclusive_minimum")), negatable)

    flags = {k: rule(r, tuple(r.get("aliases") or ()), bool(r.get("negatable")))
             for k, r in doc["flags"].items()}
    keys = {k: rule(r) for k, r in doc["speculative_keys"].items()}
    return str(doc["vllm_version"]), tuple(doc["methods"]), flags, keys


#: The vLLM version the table below describes; with vLLM installed its own parser and config
#: builder are the oracle instead (:mod:`specbundle.render.vllm_oracle`).
VLLM_TABLE_VERSION: str
#: ``method`` values of ``SpeculativeConfig`` (MTP aliases included).
VLLM_METHODS: tuple[str, ...]
#: ``vllm serve`` flags (positional model first); ``negatable`` booleans accept ``--no-<flag>``.
VLLM_FLAGS: dict[str, ArgRule]
#: ``--speculative-config`` keys (``SpeculativeConfig`` fields a user may set).
VLLM_SPEC_KEYS: dict[str, ArgRule]
VLLM_TABLE_VERSION, VLLM_METHODS, VLLM_FLAGS, VLLM_SPEC_KEYS = _vllm_table()

#: vLLM flags that fetch from a hub or carry its credentials.
VLLM_HUB_FLAGS: frozenset[str] = frozenset({"--hf-token", "--download-dir", "--revision",
                                             "--code-revision", "--tokenizer-revision"})

#: 0.5.23's builtin ``--speculative-algorithm`` names (``SpeculativeAlgorithm`` and the NEXTN
#: alias; the parser takes any string, ``from_string`` refuses the rest).
SGLANG_ALGORITHMS: tuple[str, ...] = (
    "EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO", "FROZEN_KV_MTP",
)

#: SGLang 0.5.23 ``--quantization`` choices (also the draft's).
_SG_QUANT: tuple[str, ...] = (
    "awq", "fp8", "mxfp8", "gptq", "gptq_marlin", "awq_marlin", "bitsandbytes", "gguf",
    "modelopt", "modelopt_fp8", "modelopt_fp4", "nvfp4_online", "modelopt_mixed",
    "petit_nvfp4", "w8a8_int8", "w8a8_fp8", "moe_wna16", "w4afp8", "mxfp4", "auto-round",
    "auto-round-int8", "compressed-tensors", "modelslim", "mxfp_w4a8", "quark",
    "quark_int4fp8_moe", "quark_mxfp4", "mlx_q4", "mlx_q8", "unquant", "humming",
)
#: SGLang 0.5.23 ``--load-format`` choices (also the draft's).
_SG_LOAD: tuple[str, ...] = (
    "auto", "pt", "safetensors", "instanttensor", "npcache", "dummy", "sharded_state",
    "presharded", "gguf", "expert_pack", "bitsandbytes", "mistral", "layered", "flash_rl",
    "remote", "remote_instance", "fastsafetensors", "private", "runai_streamer",
)
#: SGLang 0.5.23 ``--speculative-moe-runner-backend`` choices.
_SG_MOE: tuple[str, ...] = (
    "auto", "deep_gemm", "triton", "triton_kernel", "flashinfer_trtllm",
    "experimental_sgl_trtllm", "flashinfer_trtllm_routed", "flashinfer_cutlass",
    "flashinfer_mxfp4", "flashinfer_cutedsl", "flashinfer_megamoe", "cutlass", "aiter",
    "marlin", "humming", "experimental_sgl_marlin", "lora_cutedsl", "lora_triton",
    "lora_marlin", "hpc_ops", "megamoe", "intel_xpu",
)
#: SGLang 0.5.23 ``--attention-backend`` choices.
_SG_ATTN: tuple[str, ...] = (
    "triton", "torch_native", "flex_attention", "dsa", "nsa", "qsa", "dsv4", "compressed",
    "fa3", "fa4", "flashinfer", "llada2_cfg_flashinfer", "flashmla", "trtllm_mla",
    "cutedsl_mla", "tokenspeed_mla", "trtllm_mha", "hpc_ops", "minicpm_flashattn",
    "minicpm_flashinfer", "aiter", "wave", "intel_amx", "ascend", "intel_xpu",
)

#: ``python -m sglang.launch_server`` flags.
SGLANG_FLAGS: dict[str, ArgRule] = {
    "--model-path": _r("str", aliases=("--model",)),
    "--tokenizer-path": _r("str"),
    "--served-model-name": _r("str"),
    "--trust-remote-code": _r("bool"),
    "--context-length": _r("int", minimum=1),
    "--dtype": _r("choice", "auto", "half", "float16", "bfloat16", "float", "float32"),
    "--kv-cache-dtype": _r("choice", "auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16",
                           "bfloat16", "nvfp4", "fp4_mx_block16"),
    "--quantization": _r("choice", *_SG_QUANT),
    "--load-format": _r("choice", *_SG_LOAD),
    "--tp-size": _r("int", minimum=1, aliases=("--tensor-parallel-size",)),
    "--pp-size": _r("int", minimum=1, aliases=("--pipeline-parallel-size",)),
    "--dp-size": _r("int", minimum=1, aliases=("--data-parallel-size",)),
    "--enable-dp-attention": _r("bool"),  # deprecated in 0.5.23 for --attn-dp-size
    "--attn-dp-size": _r("int", minimum=1, aliases=("--attention-data-parallel-size",)),
    "--enable-dp-lm-head": _r("bool"),
    "--max-running-requests": _r("int", minimum=1),
    "--mem-fraction-static": _r("float", minimum=0, gt=True),
    "--chunked-prefill-size": _r("int"),
    "--enable-mixed-chunk": _r("bool"),
    "--schedule-policy": _r("choice", "lpm", "random", "fcfs", "dfs-weight", "lof", "priority",
                            "routing-key", "hrrn", "shortest-prefill-first"),
    "--page-size": _r("int", minimum=1),
    "--attention-backend": _r("choice", *_SG_ATTN),
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
    "--speculative-draft-load-format": _r("choice", *_SG_LOAD),
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
    "--speculative-draft-kv-cache-dtype": _r("choice", "auto", "fp8_e5m2", "fp8_e4m3", "bf16",
                                             "bfloat16"),
    "--speculative-draft-window-size": _r("int", minimum=1),
    "--speculative-moe-runner-backend": _r("choice", *_SG_MOE),
    "--speculative-draft-model-quantization": _r("choice", *_SG_QUANT),
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
        if pos in table and table[pos].kind == "bool" and table[pos].negatable:
            return pos
    return None
