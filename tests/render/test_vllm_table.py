"""vLLM without vLLM installed: the table dumped from the pinned release, and the #14 leftovers.

With vLLM installed, ``test_engine_vllm.py`` asks the engine itself and checks that this table
is its dump; these run everywhere, against the shipped table.
"""

from __future__ import annotations

import pytest

from specbundle.bundle import read_unsigned
from specbundle.mirror import Mirror
from specbundle.render import build_serve_command, lint_bundle
from specbundle.render.argrules import (
    VLLM_FLAGS,
    VLLM_METHODS,
    VLLM_SPEC_KEYS,
    VLLM_TABLE_VERSION,
    canonical_flag,
)
from specbundle.render.vllm import split_extra_args
from specbundle.render.vllm_oracle import PINNED_VLLM
from specbundle.spec import VLLMSettings
from tests.lib.bundles import BundleFactory

VLLM_ONLY = {"engines.sglang": None, "engines.llamacpp": None, "target.gguf_file": None,
             "draft.gguf_file": None}


def test_table_names_the_pinned_version_and_default_image_matches() -> None:
    assert VLLM_TABLE_VERSION.split("+")[0] == PINNED_VLLM
    assert VLLMSettings().image == f"vllm/vllm-openai:v{PINNED_VLLM}"


def test_leftovers_of_issue_14_in_the_table() -> None:
    assert canonical_flag("--swap-space", VLLM_FLAGS) is None  # gone: vLLM refuses it
    assert canonical_flag("--no-disable-log-stats", VLLM_FLAGS) is None  # store_true only
    assert canonical_flag("--no-enforce-eager", VLLM_FLAGS) == "--enforce-eager"
    assert canonical_flag("-O", VLLM_FLAGS) == "--optimization-level"
    assert canonical_flag("-cc", VLLM_FLAGS) == "--compilation-config"
    assert VLLM_FLAGS["--tokenizer-mode"].kind == "str"  # auto, hf, mistral, model-specific
    assert {"fp8_per_token_head", "nvfp4", "turboquant_k8v4"} <= set(
        VLLM_FLAGS["--kv-cache-dtype"].choices)
    assert VLLM_FLAGS["--gpu-memory-utilization"].exclusive_minimum
    for key in ("parallel_drafting", "disable_eagle_block_drop", "draft_sample_method",
                "rejection_sample_method", "use_local_argmax_reduction", "dspark_draft_topk"):
        assert key in VLLM_SPEC_KEYS
    assert "speculative_token_tree" not in VLLM_SPEC_KEYS
    assert {"draft_model", "eagle", "eagle3", "ngram", "mtp", "dflash"} <= set(VLLM_METHODS)


@pytest.mark.parametrize(("extra", "common", "spec_only"), [
    (("--per-request-spec-decode-metrics", "summary", "--enforce-eager"),
     ["--enforce-eager"], ["--per-request-spec-decode-metrics", "summary"]),
    (("--per-request-spec-decode-metrics=detailed",), [],
     ["--per-request-spec-decode-metrics=detailed"]),
    (("--dtype", "bfloat16"), ["--dtype", "bfloat16"], []),
])
def test_speculation_only_flags_are_split(extra: tuple[str, ...], common: list[str],
                                          spec_only: list[str]) -> None:
    assert split_extra_args(extra) == (common, spec_only)


def test_per_request_metrics_reach_the_speculative_arm_only(mirror: Mirror,
                                                            bundle: BundleFactory) -> None:
    rec = bundle(**VLLM_ONLY, **{"engines.vllm.extra_args": [
        "--per-request-spec-decode-metrics", "summary", "--enforce-eager"]})
    spec = build_serve_command(rec, "vllm", mirror=mirror).args
    base = build_serve_command(rec, "vllm", mirror=mirror, speculation=False).args
    assert "--per-request-spec-decode-metrics" in spec and "summary" in spec
    assert "--per-request-spec-decode-metrics" not in base and "--enforce-eager" in base
    assert lint_bundle(read_unsigned(mirror, rec.name), engine="vllm").ok


@pytest.mark.parametrize(("extra", "rule"), [
    (["--swap-space", "4"], "unknown-engine-flag"),
    (["--no-disable-log-stats"], "unknown-engine-flag"),
    (["--kv-cache-dtype", "fp9"], "vllm-flag-choice"),
])
def test_flags_vllm_refuses_are_lint_errors(mirror: Mirror, bundle: BundleFactory,
                                            extra: list[str], rule: str) -> None:
    rec = bundle(**VLLM_ONLY, **{"engines.vllm.extra_args": extra})
    report = lint_bundle(read_unsigned(mirror, rec.name), engine="vllm")
    assert [f.rule for f in report.errors] == [rule]
    assert VLLM_TABLE_VERSION in report.errors[0].message


@pytest.mark.parametrize("extra", [["-O", "3"], ["--tokenizer-mode", "hf"],
                                   ["--kv-cache-dtype", "fp8_per_token_head"],
                                   ["--no-enforce-eager"]])
def test_flags_vllm_accepts_pass_lint(mirror: Mirror, bundle: BundleFactory,
                                      extra: list[str]) -> None:
    rec = bundle(**VLLM_ONLY, **{"engines.vllm.extra_args": extra})
    assert lint_bundle(read_unsigned(mirror, rec.name), engine="vllm").ok


def test_pipeline_parallel_with_speculation_is_allowed(mirror: Mirror,
                                                       bundle: BundleFactory) -> None:
    rec = bundle(**VLLM_ONLY, **{"engines.vllm.pipeline_parallel_size": 2,
                                 "deployment.gpus": 2})
    report = lint_bundle(read_unsigned(mirror, rec.name), engine="vllm")
    assert report.ok and not [f for f in report.findings
                              if f.rule == "pipeline-parallel-speculation"]
