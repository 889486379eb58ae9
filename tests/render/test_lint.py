"""One test per lint rule: it fires on the bad case and stays silent on the good one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specbundle.bundle import read_unsigned
from specbundle.errors import RenderError
from specbundle.mirror import Mirror
from specbundle.render import RULES, lint_bundle, lint_spec, render_bundle
from specbundle.render.lint import LintReport
from specbundle.spec import parse_spec
from tests.lib.bundles import BundleFactory
from tests.lib.specs import spec_dict

VLLM_ONLY = {"engines.sglang": None, "engines.llamacpp": None, "target.gguf_file": None,
             "draft.gguf_file": None}
SGLANG_ONLY = {"engines.vllm": None, "engines.llamacpp": None, "target.gguf_file": None,
               "draft.gguf_file": None}
LLAMA_ONLY = {"engines.vllm": None, "engines.sglang": None}
EAGLE3 = {"speculative.method": "eagle3"}
SCHED = {"speculative.schedule": [[1, 16, 4], [17, 512, 1]]}
EAGLE3_DRAFT = {"architectures": ["LlamaForCausalLMEagle3"]}

# rule -> (bad changes, good changes, extra lint kwargs)
CASES: dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = {
    "schedule-k-exceeds-max": (
        {**VLLM_ONLY, **EAGLE3, "speculative.schedule": [[1, 16, 6], [17, 512, 1]]},
        {**VLLM_ONLY, **EAGLE3, **SCHED}, {}),
    "schedule-ranges": (
        {**VLLM_ONLY, **EAGLE3, "speculative.schedule": [[1, 16, 4], [10, 512, 1]]},
        {**VLLM_ONLY, **EAGLE3, **SCHED}, {}),
    "schedule-data-parallel": (
        {**VLLM_ONLY, **EAGLE3, **SCHED, "engines.vllm.data_parallel_size": 2,
         "deployment.gpus": 2},
        {**VLLM_ONLY, **EAGLE3, **SCHED, "deployment.gpus": 2}, {}),
    "schedule-untested-method": (
        {**VLLM_ONLY, **SCHED}, {**VLLM_ONLY, **EAGLE3, **SCHED}, {}),
    "schedule-engine-unsupported": ({**SCHED, **EAGLE3, "engines.llamacpp": None}, {}, {}),
    "pipeline-parallel-speculation": (  # SGLang only: vLLM composes PP with speculation
        {**SGLANG_ONLY, "engines.sglang.pp_size": 2, "deployment.gpus": 2},
        {**VLLM_ONLY, "engines.vllm.pipeline_parallel_size": 2, "deployment.gpus": 2}, {}),
    "sglang-dflash-pipeline-parallel": (
        {**SGLANG_ONLY, "speculative.method": "dflash", "engines.sglang.pp_size": 2,
         "deployment.gpus": 2},
        {**SGLANG_ONLY, "speculative.method": "dflash", "deployment.gpus": 2}, {}),
    "gpu-count": (
        {**VLLM_ONLY, "engines.vllm.tensor_parallel_size": 2},
        {**VLLM_ONLY, "engines.vllm.tensor_parallel_size": 2, "deployment.gpus": 2}, {}),
    "vllm-speculative-tensor-parallel": (
        {**VLLM_ONLY, "engines.vllm.speculative_extra": {"tensor_parallel_size": 2}},
        {**VLLM_ONLY, "speculative.draft_tensor_parallel_size": 1}, {}),
    "vllm-speculative-extra": (
        {**VLLM_ONLY, "engines.vllm.speculative_extra": {"num_speculative_token": 3}},
        {**VLLM_ONLY, "engines.vllm.speculative_extra": {"enforce_eager": True}}, {}),
    "heterogeneous-vocab": (
        {**VLLM_ONLY, "engines.vllm.speculative_extra": {"use_heterogeneous_vocab": True}},
        VLLM_ONLY, {}),
    "vllm-mtp-k": (
        {**VLLM_ONLY, "draft": None, "speculative.method": "mtp",
         "speculative.num_speculative_tokens": 3},
        {**VLLM_ONLY, "draft": None, "speculative.method": "mtp",
         "speculative.num_speculative_tokens": 1}, {}),
    "vllm-method-removed": (
        {**VLLM_ONLY, "speculative.method": "medusa", "draft.gguf_file": None}, VLLM_ONLY, {}),
    "vllm-flag-choice": (
        {**VLLM_ONLY, "engines.vllm.extra_args": ["--kv-cache-dtype", "fp9"]},
        {**VLLM_ONLY, "engines.vllm.extra_args": ["--kv-cache-dtype", "fp8_per_token_head"]},
        {}),
    "vllm-async-scheduling": (
        {**VLLM_ONLY, "draft": None, "speculative.method": "ngram",
         "engines.vllm.extra_args": ["--async-scheduling"]},
        {**VLLM_ONLY, **EAGLE3, "engines.vllm.extra_args": ["--async-scheduling"]}, {}),
    "sglang-partial-tree": (
        {**SGLANG_ONLY, "engines.sglang.speculative_num_steps": 3},
        {**SGLANG_ONLY, "engines.sglang.speculative_num_steps": 3,
         "engines.sglang.speculative_eagle_topk": 1,
         "engines.sglang.speculative_num_draft_tokens": 4}, {}),
    "sglang-adaptive-unsupported": (
        {**SGLANG_ONLY, "engines.sglang.speculative_adaptive": True},
        {**SGLANG_ONLY, **EAGLE3, "engines.sglang.speculative_adaptive": True}, {}),
    "sglang-dp-attention": (
        {**SGLANG_ONLY, "engines.sglang.enable_dp_attention": True,
         "engines.sglang.dp_size": 2, "deployment.gpus": 2},
        {**SGLANG_ONLY, **EAGLE3, "engines.sglang.enable_dp_attention": True,
         "engines.sglang.dp_size": 2, "deployment.gpus": 2}, {}),
    "sglang-max-running-requests": (
        {**SGLANG_ONLY, "engines.sglang.max_running_requests": None}, SGLANG_ONLY, {}),
    "sglang-image-version": (
        {**SGLANG_ONLY, "speculative.method": "dflash",
         "engines.sglang.image": "lmsysorg/sglang:v0.5.4"},
        {**SGLANG_ONLY, "speculative.method": "dflash"}, {}),
    "sglang-ngram-forced-tree": (
        {**SGLANG_ONLY, "draft": None, "speculative.method": "ngram"}, SGLANG_ONLY, {}),
    "sglang-adaptive-disabled": (
        {**SGLANG_ONLY, **EAGLE3, "engines.sglang.speculative_adaptive": True,
         "engines.sglang.extra_args": ["--enable-multi-layer-eagle"]},
        {**SGLANG_ONLY, **EAGLE3, "engines.sglang.speculative_adaptive": True}, {}),
    "sglang-removed-flag": (
        {**SGLANG_ONLY, "engines.sglang.extra_args": ["--cuda-graph-max-bs", "8"]},
        {**SGLANG_ONLY, "engines.sglang.extra_args": ["--cuda-graph-max-bs-decode", "8"]}, {}),
    "sglang-method-unsupported": (
        {**SGLANG_ONLY, "speculative.method": "medusa"},
        {**SGLANG_ONLY, "speculative.method": "eagle"}, {}),
    "sglang-frozen-kv-mtp": (
        {**SGLANG_ONLY, **EAGLE3}, SGLANG_ONLY,
        {"draft_config": {"architectures": ["Gemma4AssistantForCausalLM"]}}),
    "eagle-given-eagle3-draft": (
        {**VLLM_ONLY, "speculative.method": "eagle"}, {**VLLM_ONLY, **EAGLE3},
        {"draft_config": EAGLE3_DRAFT}),
    "llamacpp-draft-without-spec-type": (
        {**LLAMA_ONLY, "engines.llamacpp.spec_type": "none"}, LLAMA_ONLY, {}),
    "llamacpp-spec-type-method": (
        {**LLAMA_ONLY, **EAGLE3}, {**LLAMA_ONLY, **EAGLE3,
                                   "engines.llamacpp.spec_type": "draft-eagle3"}, {}),
    "llamacpp-p-min-zero": (
        {**LLAMA_ONLY, "engines.llamacpp.draft_p_min": 0.0, "engines.llamacpp.draft_n_max": 16},
        {**LLAMA_ONLY, "engines.llamacpp.draft_n_max": 16}, {}),
    "llamacpp-removed-flag": (
        {**LLAMA_ONLY, "engines.llamacpp.extra_args": ["--draft-max", "16"]},
        {**LLAMA_ONLY, "engines.llamacpp.extra_args": ["--spec-draft-type-v", "q8_0"]}, {}),
    "model-path-method-word": (
        {"metadata.name": "llama-eagle3"}, {"metadata.name": "llama-pair"}, {}),
    "hub-reference": (
        {**VLLM_ONLY, "engines.vllm.extra_args": ["--tokenizer", "meta-llama/Llama-3.1-8B"]},
        {**VLLM_ONLY, "engines.vllm.extra_args": ["--tokenizer", "/srv/tokenizers/llama"]}, {}),
    "image-unpinned": (
        VLLM_ONLY, {**VLLM_ONLY, "engines.vllm.image": "vllm/vllm-openai@sha256:" + "0" * 64},
        {"target": "compose"}),
    "unknown-engine-flag": (
        {**VLLM_ONLY, "engines.vllm.extra_args": ["--max-num-seq", "8"]},
        {**VLLM_ONLY, "engines.vllm.extra_args": ["--max-num-batched-tokens", "8192"]}, {}),
    "extra-args-override": (
        {**LLAMA_ONLY, "engines.llamacpp.extra_args": ["--spec-draft-p-min", "0.0"]},
        {**LLAMA_ONLY, "engines.llamacpp.extra_args": ["--spec-draft-type-k", "q8_0"]}, {}),
    "metrics-disabled": (
        {**VLLM_ONLY, "engines.vllm.extra_args": ["--disable-log-stats"]}, VLLM_ONLY, {}),
    "sglang-adaptive-steps": (
        {**SGLANG_ONLY, **EAGLE3, "engines.sglang.speculative_adaptive": True,
         "engines.sglang.speculative_num_steps": 4, "engines.sglang.speculative_eagle_topk": 1,
         "engines.sglang.speculative_num_draft_tokens": 5},
        {**SGLANG_ONLY, **EAGLE3, "engines.sglang.speculative_adaptive": True,
         "engines.sglang.speculative_num_steps": 3, "engines.sglang.speculative_eagle_topk": 1,
         "engines.sglang.speculative_num_draft_tokens": 4}, {}),
    "sglang-dflash-width": (
        {**SGLANG_ONLY, "speculative.method": "dflash"},
        {**SGLANG_ONLY, "speculative.method": "dflash", "speculative.num_speculative_tokens": 15},
        {"draft_config": {"dflash_config": {"block_size": 16}}}),
    "sglang-flag-choice": (
        {**SGLANG_ONLY, "engines.sglang.extra_args": ["--attention-backend", "flashattn"]},
        {**SGLANG_ONLY, "engines.sglang.extra_args": ["--attention-backend", "fa3"]}, {}),
    "llamacpp-slot-context": (
        {**LLAMA_ONLY, "engines.llamacpp.parallel": None, "engines.llamacpp.ctx_size": 4096},
        {**LLAMA_ONLY, "engines.llamacpp.parallel": None}, {}),
    "image-cpu-build": (
        {**LLAMA_ONLY, "engines.llamacpp.image": "ghcr.io/ggml-org/llama.cpp:server"},
        LLAMA_ONLY, {"target": "compose", "allow_unpinned_image": True}),
    "vllm-image-version": (
        {**VLLM_ONLY, "engines.vllm.speculative_extra": {"use_heterogeneous_vocab": True},
         "engines.vllm.image": "vllm/vllm-openai:v0.34.0"},
        {**VLLM_ONLY, "engines.vllm.image": "vllm/vllm-openai:v0.34.0"}, {}),
    "llamacpp-image-version": (
        {**LLAMA_ONLY, "engines.llamacpp.image": "ghcr.io/ggml-org/llama.cpp:server-cuda"},
        LLAMA_ONLY, {}),
}


def _lint(tmp_path: Path, changes: dict[str, Any], **kw: Any) -> LintReport:
    return lint_spec(parse_spec(spec_dict(**changes)), mirror_root=tmp_path / "mirror", **kw)


def test_every_rule_has_a_case() -> None:
    assert set(CASES) | {"model-files-missing"} == set(RULES)


def test_model_files_missing(mirror: Mirror, bundle: BundleFactory) -> None:
    """Needs a pulled bundle (the rule reads the record's file list), so it is tested here."""
    bundle(**{"draft.gguf_file": "draft-q4.gguf"})
    report = lint_bundle(read_unsigned(mirror, "llama-pair"))
    hits = [(f.engine, f.where) for f in report.errors if f.rule == "model-files-missing"]
    assert hits == [("llamacpp", "draft: draft-q4.gguf")]
    with pytest.raises(RenderError, match="model-files-missing"):
        render_bundle(read_unsigned(mirror, "llama-pair"), "llamacpp", "shell")
    assert render_bundle(read_unsigned(mirror, "llama-pair"), "vllm", "shell").lint.ok
    clean = lint_bundle(read_unsigned(mirror, "llama-pair"), engine="vllm")
    assert not [f for f in clean.findings if f.rule == "model-files-missing"]


@pytest.mark.parametrize("rule", sorted(CASES))
def test_rule_fires_on_bad_and_is_silent_on_good(tmp_path: Path, rule: str) -> None:
    bad, good, kw = CASES[rule]
    hits = [f for f in _lint(tmp_path, bad, **kw).findings if f.rule == rule]
    assert hits, f"{rule} did not fire"
    for f in hits:
        assert f.where and f.message and f.fix, f
        assert f.severity in ("error", "warning")
    assert not [f for f in _lint(tmp_path, good, **kw).findings if f.rule == rule]


def test_base_spec_is_clean(tmp_path: Path) -> None:
    report = _lint(tmp_path, {}, target="shell")
    assert report.ok and not report.findings, report.findings
    assert set(report.rules_run) == set(RULES)
    # Without a target, unpinned images are explained (they would block compose/kubernetes).
    untargeted = _lint(tmp_path, {})
    assert untargeted.ok
    assert {(f.rule, f.severity) for f in untargeted.findings} == {("image-unpinned", "warning")}


def test_schedule_gap_and_start_are_reported(tmp_path: Path) -> None:
    gap = _lint(tmp_path, {**VLLM_ONLY, **EAGLE3,
                           "speculative.schedule": [[1, 16, 4], [33, 512, 1]]})
    assert [(f.severity, "17-32" in f.message) for f in gap.findings
            if f.rule == "schedule-ranges"] == [("warning", True)]
    late = _lint(tmp_path, {**VLLM_ONLY, **EAGLE3, "speculative.schedule": [[2, 16, 4]]})
    assert [f.severity for f in late.findings if f.rule == "schedule-ranges"] == ["error"]


def test_method_word_in_mirror_root_is_an_error(tmp_path: Path) -> None:
    report = lint_spec(parse_spec(spec_dict(**VLLM_ONLY)), mirror_root=tmp_path / "dflash-m")
    assert {f.rule for f in report.errors} == {"model-path-method-word"}


def test_hub_reference_catches_urls_in_speculative_config(tmp_path: Path) -> None:
    report = _lint(tmp_path, {**VLLM_ONLY, "engines.vllm.speculative_extra": {
        "quantization": "https://example.com/q"}})
    assert any(f.rule == "hub-reference" and "URL" in f.message for f in report.errors)


def test_unpinned_image_blocks_container_render(mirror: Mirror, bundle: BundleFactory) -> None:
    bundle(**VLLM_ONLY)
    with pytest.raises(RenderError, match="image-unpinned") as err:
        render_bundle(read_unsigned(mirror, "llama-pair"), "vllm", "kubernetes")
    assert err.value.exit_code == 2
    assert not (mirror.bundle_dir("llama-pair") / "render" / "vllm" / "kubernetes").exists()
    ok = render_bundle(read_unsigned(mirror, "llama-pair"), "vllm", "kubernetes", allow_unpinned_image=True)
    assert [f.rule for f in ok.lint.warnings] == ["image-unpinned"]
    assert render_bundle(read_unsigned(mirror, "llama-pair"), "vllm", "shell").lint.ok


def test_lint_errors_block_render(mirror: Mirror, bundle: BundleFactory) -> None:
    bundle(**{"engines.llamacpp.spec_type": "none"})
    with pytest.raises(RenderError, match="llamacpp-draft-without-spec-type"):
        render_bundle(read_unsigned(mirror, "llama-pair"), "llamacpp", "shell")
    assert not (mirror.bundle_dir("llama-pair") / "render" / "llamacpp").exists()


def test_lint_bundle_reads_the_draft_config(mirror: Mirror, bundle: BundleFactory) -> None:
    bundle(draft_config=EAGLE3_DRAFT, **{**VLLM_ONLY, "speculative.method": "eagle"})
    report = lint_bundle(read_unsigned(mirror, "llama-pair"))
    assert [f.rule for f in report.errors] == ["eagle-given-eagle3-draft"]


def test_lint_bundle_does_not_write_to_the_mirror(mirror: Mirror, bundle: BundleFactory) -> None:
    bundle()
    before = sorted(p.relative_to(mirror.root) for p in mirror.root.rglob("*"))
    assert lint_bundle(read_unsigned(mirror, "llama-pair"), target="shell").ok
    assert sorted(p.relative_to(mirror.root) for p in mirror.root.rglob("*")) == before
