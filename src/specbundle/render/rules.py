"""The lint rules, one function each; :data:`RULES` lists them explicitly, by id.

Facts behind every rule are in reference/engines.md (vLLM ``SpeculativeConfig`` and Dynamic-SD
schedule checks, SGLang ``speculative_hook``, llama.cpp ``common/arg.cpp``). A rule reads the
spec and the commands render would emit; it never changes them.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise

from specbundle.render.argrules import VLLM_SPEC_KEYS
from specbundle.render.lint import Finding, LintInput, Rule, finding
from specbundle.render.rules_images import IMAGE_RULES, vllm_removed_in_image
from specbundle.render.rules_sglang import SGLANG_RULES
from specbundle.render.sglang import ADAPTIVE_ALGORITHMS, ALGORITHMS
from specbundle.spec import EngineName, SpecMethod

__all__ = ["ENGINE_RULES"]

V, S, L = EngineName.VLLM, EngineName.SGLANG, EngineName.LLAMACPP
_SCHEDULE_TESTED = (SpecMethod.EAGLE, SpecMethod.EAGLE3, SpecMethod.DFLASH)
#: SGLang algorithms that refuse pipeline parallelism in an ordinary server.
_PP_REFUSED = (SpecMethod.DFLASH, SpecMethod.DSPARK)


# -- vLLM Dynamic-SD schedule -----------------------------------------------------------------
def _schedule_k_exceeds(inp: LintInput) -> Iterator[Finding]:
    """vLLM stores min(num_speculative_tokens, K) per batch size: a larger K is silently capped."""
    sp = inp.spec.speculative
    for i, (start, end, k) in enumerate(sp.schedule or ()):
        if k > sp.num_speculative_tokens:
            yield finding(
                "schedule-k-exceeds-max",
                "error",
                f"speculative.schedule[{i}]",
                f"K={k} for batch sizes {start}-{end} exceeds num_speculative_tokens="
                f"{sp.num_speculative_tokens}; vLLM silently caps it, so that range never "
                f"drafts {k} tokens.",
                "set speculative.num_speculative_tokens to the largest K in the schedule",
                V,
            )


def _schedule_ranges(inp: LintInput) -> Iterator[Finding]:
    """Overlaps and a first range not at 1 are rejected by vLLM; gaps inherit the previous K."""
    sched = sorted(inp.spec.speculative.schedule or (), key=lambda t: t[0])
    if sched and sched[0][0] != 1:
        yield finding(
            "schedule-ranges",
            "error",
            "speculative.schedule",
            f"the first range starts at batch size {sched[0][0]}; vLLM refuses a schedule "
            "that leaves batch sizes below it undefined.",
            "start the first range at 1",
            V,
        )
    for (s0, e0, _), (s1, e1, _) in pairwise(sched):
        if s1 <= e0:
            yield finding(
                "schedule-ranges",
                "error",
                "speculative.schedule",
                f"ranges [{s0}, {e0}] and [{s1}, {e1}] overlap; vLLM refuses to start "
                "(ranges must be non-overlapping).",
                "make every range start after the previous one ends",
                V,
            )
        elif s1 > e0 + 1:
            yield finding(
                "schedule-ranges",
                "warning",
                "speculative.schedule",
                f"batch sizes {e0 + 1}-{s1 - 1} fall in a gap; vLLM silently reuses the "
                "previous range's K there.",
                f"add a range [{e0 + 1}, {s1 - 1}, K] or extend a neighbour",
                V,
            )


def _schedule_data_parallel(inp: LintInput) -> Iterator[Finding]:
    """With data parallelism vLLM drops the schedule (a warning, not a refusal)."""
    s = inp.spec.engines.vllm
    if inp.spec.speculative.schedule and s is not None and s.data_parallel_size > 1:
        yield finding(
            "schedule-data-parallel",
            "error",
            "engines.vllm.data_parallel_size",
            f"data_parallel_size={s.data_parallel_size} makes vLLM drop the per-batch "
            "schedule and run the static num_speculative_tokens everywhere.",
            "use data_parallel_size 1 (run replicas instead) or remove the schedule",
            V,
        )


def _schedule_method(inp: LintInput) -> Iterator[Finding]:
    """Dynamic SD is tested only with EAGLE, EAGLE-3 and DFlash (vLLM docs, Limitations)."""
    sp = inp.spec.speculative
    if sp.schedule and inp.spec.engines.vllm is not None and sp.method not in _SCHEDULE_TESTED:
        yield finding(
            "schedule-untested-method",
            "warning",
            "speculative.schedule",
            f"vLLM's per-batch schedule is tested only with eagle/eagle3/dflash, not "
            f"{sp.method.value}; MTP with a schedule has known throughput collapse and "
            "CUDA-graph capture failures (vLLM #49548, #48494).",
            "benchmark at your P95 concurrency before admitting, or drop the schedule",
            V,
        )


def _schedule_engine(inp: LintInput) -> Iterator[Finding]:
    """SGLang and llama.cpp have no per-batch schedule: it is ignored there."""
    if not inp.spec.speculative.schedule:
        return
    for eng, alt in (
        (S, "--speculative-adaptive (EAGLE/EAGLE3, topk 1)"),
        (L, "--spec-draft-p-min (a confidence gate)"),
    ):
        if eng in inp.commands:
            yield finding(
                "schedule-engine-unsupported",
                "warning",
                "speculative.schedule",
                f"{eng.value} has no per-batch-size schedule; it runs the static "
                "num_speculative_tokens at every batch size.",
                f"use {alt} instead",
                eng,
            )


# -- parallelism ------------------------------------------------------------------------------
def _pipeline_parallel(inp: LintInput) -> Iterator[Finding]:
    """SGLang's pipeline parallelism with speculation depends on the release.

    vLLM composes it with speculative decoding (its config builder accepts PP > 1 with a
    speculative config since 0.32; the old docs' incompatibility note is stale), so only
    SGLang is warned about.
    """
    s = inp.spec.engines.sglang
    if s is not None and s.pp_size > 1 and inp.spec.speculative.method not in _PP_REFUSED:
        yield finding(
            "pipeline-parallel-speculation",
            "warning",
            "engines.sglang.pp_size",
            "SGLang releases up to 0.5.6 reject pipeline parallelism with speculation; "
            "newer ones support it only for some algorithms.",
            "prefer tp_size, or check the pinned SGLang version",
            S,
        )


def _sglang_dflash_pp(inp: LintInput) -> Iterator[Finding]:
    """SGLang DFLASH/DSPARK require pp_size == 1."""
    s = inp.spec.engines.sglang
    if s is not None and s.pp_size > 1 and inp.spec.speculative.method in _PP_REFUSED:
        yield finding(
            "sglang-dflash-pipeline-parallel",
            "error",
            "engines.sglang.pp_size",
            f"{ALGORITHMS[inp.spec.speculative.method]} refuses pp_size={s.pp_size} at startup"
            " (DSPARK takes it only on a PD prefill node).",
            "set pp_size to 1",
            S,
        )


def _gpu_count(inp: LintInput) -> Iterator[Finding]:
    """The deployment must reserve as many GPUs as the parallel layout uses."""
    need = {}
    if (v := inp.spec.engines.vllm) is not None:
        need[V] = v.tensor_parallel_size * v.pipeline_parallel_size * v.data_parallel_size
    if (s := inp.spec.engines.sglang) is not None:
        need[S] = s.tp_size * s.pp_size * s.dp_size // (s.dp_size if s.enable_dp_attention else 1)
    for eng, n in need.items():
        if eng in inp.commands and inp.spec.deployment.gpus < n:
            yield finding(
                "gpu-count",
                "error",
                "deployment.gpus",
                f"{eng.value}'s parallel layout needs {n} GPUs but the deployment reserves "
                f"{inp.spec.deployment.gpus}; the engine fails at startup.",
                f"set deployment.gpus to {n} or shrink the parallel sizes",
                eng,
            )


# -- vLLM speculative config ------------------------------------------------------------------
def _vllm_spec_tp(inp: LintInput) -> Iterator[Finding]:
    """``tensor_parallel_size`` inside the speculative config is a hard error in vLLM."""
    s = inp.spec.engines.vllm
    if s is not None and "tensor_parallel_size" in s.speculative_extra:
        yield finding(
            "vllm-speculative-tensor-parallel",
            "error",
            "engines.vllm.speculative_extra.tensor_parallel_size",
            "'tensor_parallel_size' is not a valid speculative-config key; vLLM refuses to start.",
            "use speculative.draft_tensor_parallel_size (1 or the target TP)",
            V,
        )
    dtp = inp.spec.speculative.draft_tensor_parallel_size
    if s is not None and dtp is not None and dtp not in (1, s.tensor_parallel_size):
        yield finding(
            "vllm-speculative-tensor-parallel",
            "error",
            "speculative.draft_tensor_parallel_size",
            f"draft_tensor_parallel_size={dtp} must be 1 or the target's "
            f"tensor_parallel_size={s.tensor_parallel_size}; vLLM refuses anything else.",
            "set it to 1 or to engines.vllm.tensor_parallel_size",
            V,
        )


def _vllm_spec_extra(inp: LintInput) -> Iterator[Finding]:
    """Extra speculative-config keys must exist and must not shadow the ones specbundle sets."""
    s = inp.spec.engines.vllm
    owned = {
        "method",
        "model",
        "num_speculative_tokens",
        "draft_tensor_parallel_size",
        "num_speculative_tokens_per_batch_size",
    }
    for key in sorted(s.speculative_extra if s is not None else {}):
        where = f"engines.vllm.speculative_extra.{key}"
        if key in owned:
            yield finding(
                "vllm-speculative-extra",
                "error",
                where,
                f"'{key}' is set from the spec's speculative section; a second value here "
                "would be silently ignored.",
                "remove it and use the speculative section",
                V,
            )
        elif key not in VLLM_SPEC_KEYS and key != "tensor_parallel_size":
            yield finding(
                "vllm-speculative-extra",
                "error",
                where,
                f"'{key}' is not a SpeculativeConfig field; vLLM rejects unknown keys.",
                "check the spelling against vLLM's SpeculativeConfig",
                V,
            )


def _heterogeneous_vocab(inp: LintInput) -> Iterator[Finding]:
    """Cross-vocabulary drafting restricts drafts to the shared tokens: acceptance suffers."""
    s = inp.spec.engines.vllm
    if s is None or not s.speculative_extra.get("use_heterogeneous_vocab"):
        return
    where = "engines.vllm.speculative_extra.use_heterogeneous_vocab"
    if inp.spec.speculative.method != SpecMethod.DRAFT_MODEL:
        yield finding(
            "heterogeneous-vocab",
            "error",
            where,
            "use_heterogeneous_vocab works only with method draft_model; vLLM refuses it.",
            "use method draft_model or a draft with the target's tokenizer",
            V,
        )
    else:
        yield finding(
            "heterogeneous-vocab",
            "warning",
            where,
            "cross-vocabulary drafting constrains draft logits to the shared tokens and "
            "costs acceptance by construction.",
            "prefer a draft that shares the target's tokenizer",
            V,
        )


def _vllm_mtp_k(inp: LintInput) -> Iterator[Finding]:
    """MTP with K > 1 reruns the same MTP layer and lowers acceptance."""
    sp = inp.spec.speculative
    if V in inp.commands and sp.method == SpecMethod.MTP and sp.num_speculative_tokens > 1:
        yield finding(
            "vllm-mtp-k",
            "warning",
            "speculative.num_speculative_tokens",
            f"MTP with K={sp.num_speculative_tokens} runs the same MTP layer repeatedly, "
            "which vLLM warns lowers acceptance.",
            "benchmark K=1 against this K before admitting",
            V,
        )


def _vllm_async(inp: LintInput) -> Iterator[Finding]:
    """Explicit async scheduling fails with CPU n-gram and medusa speculation."""
    bad = {SpecMethod.NGRAM, SpecMethod.MEDUSA}
    if "--async-scheduling" in inp.argv(V) and inp.spec.speculative.method in bad:
        yield finding(
            "vllm-async-scheduling",
            "error",
            "engines.vllm.extra_args: --async-scheduling",
            f"vLLM refuses explicit async scheduling with {inp.spec.speculative.method.value}"
            " speculation.",
            "remove --async-scheduling",
            V,
        )


def _vllm_method_removed(inp: LintInput) -> Iterator[Finding]:
    """vLLM 0.33 removed the medusa and mlp_speculator methods (0.32, the pinned one, has them);
    with an image of 0.33 or later ``vllm-image-version`` reports the refusal instead."""
    if V in inp.commands and inp.spec.speculative.method == SpecMethod.MEDUSA \
            and not vllm_removed_in_image(inp)[1]:
        yield finding(
            "vllm-method-removed",
            "warning",
            "speculative.method",
            "medusa is accepted by vLLM 0.32 (the pinned release) but removed in 0.33, "
            "which refuses the speculative config; this bundle cannot move to a newer image.",
            "use eagle3 or draft_model, or pin the image to vLLM 0.32",
            V,
        )


# -- SGLang -----------------------------------------------------------------------------------
def _sg_tree(inp: LintInput) -> dict[str, int]:
    argv, out = inp.argv(S), {}
    for i, a in enumerate(argv[:-1]):
        if a in (
            "--speculative-num-steps",
            "--speculative-eagle-topk",
            "--speculative-num-draft-tokens",
        ):
            out[a] = int(argv[i + 1])
    return out


def _sglang_partial_tree(inp: LintInput) -> Iterator[Finding]:
    """Steps/topk/draft-tokens go together or not at all (auto-tuning may pick topk > 1)."""
    s = inp.spec.engines.sglang
    if s is None:
        return
    given = {
        "speculative_num_steps": s.speculative_num_steps,
        "speculative_eagle_topk": s.speculative_eagle_topk,
        "speculative_num_draft_tokens": s.speculative_num_draft_tokens,
    }
    missing = [k for k, v in given.items() if v is None]
    if 0 < len(missing) < 3:
        yield finding(
            "sglang-partial-tree",
            "error",
            "engines.sglang." + ", ".join(missing),
            "only some of the three tree parameters are set; SGLang then auto-chooses or "
            "silently rewrites the others (num_draft_tokens := steps+1 when topk is 1).",
            "set all three of speculative_num_steps/_eagle_topk/_num_draft_tokens, or none",
            S,
        )
    t = (s.speculative_num_steps, s.speculative_eagle_topk, s.speculative_num_draft_tokens)
    if t[0] is not None and t[1] == 1 and t[2] is not None and t[2] != t[0] + 1:
        yield finding(
            "sglang-partial-tree",
            "error",
            "engines.sglang.speculative_num_draft_tokens",
            f"with topk 1 SGLang silently replaces num_draft_tokens={t[2]} by steps+1={t[0] + 1}.",
            f"set speculative_num_draft_tokens to {t[0] + 1}",
            S,
        )


def _sglang_adaptive(inp: LintInput) -> Iterator[Finding]:
    """Adaptive mode silently falls back to static params outside EAGLE/EAGLE3/NEXTN + topk 1."""
    s = inp.spec.engines.sglang
    if s is None or not s.speculative_adaptive:
        return
    algo = ALGORITHMS.get(inp.spec.speculative.method)
    topk = _sg_tree(inp).get("--speculative-eagle-topk")
    reason = None
    if algo not in ADAPTIVE_ALGORITHMS:  # NEXTN is fine: 0.5.23 turns it into EAGLE first
        reason = f"algorithm {algo} is not EAGLE/EAGLE3/NEXTN"
    elif topk is not None and topk != 1:
        reason = f"topk={topk} is not 1"
    if reason:
        yield finding(
            "sglang-adaptive-unsupported",
            "error",
            "engines.sglang.speculative_adaptive",
            f"--speculative-adaptive is silently disabled because {reason}.",
            "use EAGLE/EAGLE3/MTP with topk 1, or turn speculative_adaptive off",
            S,
        )


def _sglang_dp_attention(inp: LintInput) -> Iterator[Finding]:
    """NGRAM and STANDALONE reject DP attention (DFLASH takes it on CUDA with
    ``--enable-dp-lm-head``, which render adds)."""
    s = inp.spec.engines.sglang
    algo = ALGORITHMS.get(inp.spec.speculative.method)
    if s is not None and s.enable_dp_attention and algo in ("NGRAM", "STANDALONE"):
        yield finding(
            "sglang-dp-attention",
            "error",
            "engines.sglang.enable_dp_attention",
            f"{algo} refuses --enable-dp-attention at startup.",
            "turn enable_dp_attention off for this method",
            S,
        )


def _sglang_max_running(inp: LintInput) -> Iterator[Finding]:
    """SGLang resets max_running_requests to 48 under speculation unless it is explicit."""
    s = inp.spec.engines.sglang
    if s is not None and s.max_running_requests is None:
        n = 2 * inp.spec.deployment.p95_concurrency
        yield finding(
            "sglang-max-running-requests",
            "warning",
            "engines.sglang.max_running_requests",
            f"unset, so render pins --max-running-requests {n} (2x P95 concurrency) in "
            "both arms; left out, SGLang would silently use 48 with speculation.",
            "set max_running_requests explicitly to the value you sized the KV cache for",
            S,
        )


def _sglang_method(inp: LintInput) -> Iterator[Finding]:
    """SGLang has no MEDUSA algorithm."""
    if inp.spec.engines.sglang is not None and inp.spec.speculative.method not in ALGORITHMS:
        yield finding(
            "sglang-method-unsupported",
            "error",
            "speculative.method",
            f"SGLang has no algorithm for {inp.spec.speculative.method.value}.",
            "drop engines.sglang or choose another method",
            S,
        )


def _eagle_with_eagle3(inp: LintInput) -> Iterator[Finding]:
    """EAGLE given an EAGLE-3 draft runs with acceptance length exactly 1.0 (SGLang #21272)."""
    archs = (inp.draft_config or {}).get("architectures") or []
    if inp.spec.speculative.method != SpecMethod.EAGLE:
        return
    if any("eagle3" in str(a).lower() for a in archs):
        for eng in (e for e in (V, S) if e in inp.commands):
            yield finding(
                "eagle-given-eagle3-draft",
                "error",
                "speculative.method",
                f"the draft's architectures {archs} are EAGLE-3 but the method is eagle; "
                "it loads but accepts nothing (acceptance length 1.0).",
                "set speculative.method: eagle3",
                eng,
            )


ENGINE_RULES: dict[str, Rule] = {
    "schedule-k-exceeds-max": _schedule_k_exceeds,
    "schedule-ranges": _schedule_ranges,
    "schedule-data-parallel": _schedule_data_parallel,
    "schedule-untested-method": _schedule_method,
    "schedule-engine-unsupported": _schedule_engine,
    "pipeline-parallel-speculation": _pipeline_parallel,
    "sglang-dflash-pipeline-parallel": _sglang_dflash_pp,
    "gpu-count": _gpu_count,
    "vllm-speculative-tensor-parallel": _vllm_spec_tp,
    "vllm-speculative-extra": _vllm_spec_extra,
    "heterogeneous-vocab": _heterogeneous_vocab,
    "vllm-mtp-k": _vllm_mtp_k,
    "vllm-async-scheduling": _vllm_async,
    "vllm-method-removed": _vllm_method_removed,
    "sglang-partial-tree": _sglang_partial_tree,
    "sglang-adaptive-unsupported": _sglang_adaptive,
    "sglang-dp-attention": _sglang_dp_attention,
    "sglang-max-running-requests": _sglang_max_running,
    "sglang-method-unsupported": _sglang_method,
    "eagle-given-eagle3-draft": _eagle_with_eagle3,
    **SGLANG_RULES,
    **IMAGE_RULES,
}
