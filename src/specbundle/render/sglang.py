"""SGLang: ``python3 -m sglang.launch_server`` with every silently-rewritten setting pinned.

SGLang resets ``max_running_requests`` to 48 under any speculative algorithm and auto-picks
the three tree parameters (possibly topk > 1) when they are unset, so the command always
carries an explicit ``--max-running-requests`` and, for the EAGLE family and STANDALONE, the
tree ``(steps=K, topk=1, draft_tokens=K+1)`` unless the spec gives all three. The baseline
arm keeps the same ``--max-running-requests`` so both arms admit the same load.

``--speculative-adaptive`` (0.5.23, EAGLE/EAGLE3 and NEXTN, which SGLang turns into EAGLE)
chooses its own steps among the adaptive config's candidates, so no tree is pinned then,
unless SGLang will drop adaptive (:func:`adaptive_dropped`): it would then auto-choose a tree
(topk 4 for Llama), so the spec's chain is pinned instead. DFLASH gets its verify width
(``--speculative-num-draft-tokens K+1``) stated rather than taken silently from the draft's
block size, and ``--enable-dp-lm-head`` with attention DP (its CUDA requirement). DSPARK
gets ``--speculative-dspark-block-size K`` (its gamma: SGLang otherwise reads it from the draft's
config or defaults it, and verifies gamma + 1 tokens; steps and topk are forced to 1).
"""

from __future__ import annotations

from specbundle.errors import RenderError
from specbundle.render._command import assemble, python_probe, settings_of
from specbundle.render.interface import EngineContext, ServeCommand
from specbundle.render.sglang_versions import DEFAULT_VERSION, has_feature, image_version
from specbundle.spec import BundleSpec, EngineName, SGLangSettings, SpecMethod

__all__ = ["ADAPTIVE_ALGORITHMS", "ADAPTIVE_CANDIDATE_STEPS", "ALGORITHMS", "SGLangEngine",
           "adaptive_dropped", "max_running_requests", "tree_params"]

#: specbundle method -> ``--speculative-algorithm`` (MTP is SGLang's NEXTN; no MEDUSA).
ALGORITHMS: dict[SpecMethod, str] = {
    SpecMethod.DRAFT_MODEL: "STANDALONE",
    SpecMethod.EAGLE: "EAGLE",
    SpecMethod.EAGLE3: "EAGLE3",
    SpecMethod.MTP: "NEXTN",
    SpecMethod.NGRAM: "NGRAM",
    SpecMethod.DFLASH: "DFLASH",
    SpecMethod.DSPARK: "DSPARK",
}
#: Algorithms that need ``--enable-dp-lm-head`` with attention DP (``_handle_dflash``,
#: ``_handle_dspark``: refused at startup without it).
_DP_LM_HEAD = frozenset({"DFLASH", "DSPARK"})
_PINNED_TREE = frozenset({"STANDALONE", "EAGLE", "EAGLE3", "NEXTN"})
#: Algorithms adaptive runs with (``adaptive_unsupported_reason``; NEXTN resolves to EAGLE).
ADAPTIVE_ALGORITHMS = frozenset({"EAGLE", "EAGLE3", "NEXTN"})
#: The union of ``DEFAULT_ADAPTIVE_CONFIG``'s candidate_steps (0.5.23): an explicit
#: ``--speculative-num-steps`` outside it is refused at startup.
ADAPTIVE_CANDIDATE_STEPS: tuple[int, ...] = (0, 1, 3, 5, 7)


def _extra_value(extra: tuple[str, ...], flag: str) -> str | None:
    for i, a in enumerate(extra):
        if a == flag and i + 1 < len(extra):
            return extra[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def adaptive_dropped(spec: BundleSpec, s: SGLangSettings) -> list[str]:
    """Why SGLang 0.5.23 would silently drop ``--speculative-adaptive`` (empty: it runs).

    Mirrors ``adaptive_unsupported_reason``: the algorithm, topk, attention DP, multi-layer
    EAGLE, two-batch overlap and PD multiplexing.
    """
    if not s.speculative_adaptive:
        return []
    extra = s.extra_args
    algo = ALGORITHMS.get(spec.speculative.method)
    out = []
    if algo not in ADAPTIVE_ALGORITHMS:
        out.append(f"algorithm {algo} is not EAGLE/EAGLE3/NEXTN")
    if s.speculative_eagle_topk not in (None, 1):
        out.append(f"topk={s.speculative_eagle_topk} is not 1")
    attn_dp = _extra_value(extra, "--attn-dp-size")
    if (s.enable_dp_attention and s.dp_size > 1) or "--enable-dp-attention" in extra \
            or (attn_dp is not None and attn_dp.isdigit() and int(attn_dp) > 1):
        out.append("attention DP (tier decisions are not synchronised across DP ranks)")
    if "--enable-multi-layer-eagle" in extra:
        out.append("--enable-multi-layer-eagle (MultiLayerEagleWorkerV2 has no adaptive)")
    if "--enable-two-batch-overlap" in extra:
        out.append("--enable-two-batch-overlap (the state swap drops the TBO backend)")
    if "--enable-pdmux" in extra:
        out.append("--enable-pdmux (the state swap does not update the decode backend)")
    return out


def max_running_requests(ctx: EngineContext, s: SGLangSettings) -> int:
    """Explicit value, else twice the P95 concurrency (headroom without the silent 48)."""
    return s.max_running_requests or 2 * ctx.spec.deployment.p95_concurrency


def tree_params(ctx: EngineContext, s: SGLangSettings) -> tuple[int, int, int] | None:
    """(num_steps, eagle_topk, num_draft_tokens) to emit, or None to emit none of them."""
    given = (s.speculative_num_steps, s.speculative_eagle_topk, s.speculative_num_draft_tokens)
    if all(v is not None for v in given):
        return (given[0] or 0, given[1] or 0, given[2] or 0)
    if any(v is not None for v in given):
        return None  # partial: lint blocks it; emitting a guess would hide the mistake
    algo = ALGORITHMS.get(ctx.spec.speculative.method)
    if algo in _PINNED_TREE and (not s.speculative_adaptive or adaptive_dropped(ctx.spec, s)):
        k = ctx.spec.speculative.num_speculative_tokens
        return (k, 1, k + 1)
    return None


class SGLangEngine:
    """Builds ``sglang.launch_server`` commands."""

    name = EngineName.SGLANG
    default_port = 30000

    def build(self, ctx: EngineContext, *, speculation: bool) -> ServeCommand:
        """The serve command; the baseline arm drops only the ``--speculative-*`` flags."""
        s = settings_of(ctx, self.name, SGLangSettings)
        # 0.5.23 deprecates `--dp-size N --enable-dp-attention` for `--attn-dp-size N`
        # (dp_size then counts replicas); an image of an older release keeps the old spelling
        version = image_version(ctx.image or s.image) or image_version(s.image)
        new_dp = s.enable_dp_attention and has_feature(version or DEFAULT_VERSION,
                                                       "attn-dp-size") is not False
        dp = ["--dp-size", "1", "--attn-dp-size", str(s.dp_size)] if new_dp \
            else ["--dp-size", str(s.dp_size)]
        args: list[str] = [
            "--model-path", str(ctx.target_dir),
            "--served-model-name", ctx.name,
            "--tp-size", str(s.tp_size), "--pp-size", str(s.pp_size), *dp,
            "--max-running-requests", str(max_running_requests(ctx, s)),
        ]
        if s.enable_dp_attention:
            if not new_dp:
                args.append("--enable-dp-attention")
            if ALGORITHMS.get(ctx.spec.speculative.method) in _DP_LM_HEAD \
                    and "--enable-dp-lm-head" not in s.extra_args:  # both arms: same lm head
                args.append("--enable-dp-lm-head")  # DFLASH/DSPARK + attention DP refuse without
        if s.mem_fraction_static is not None:
            args += ["--mem-fraction-static", str(s.mem_fraction_static)]
        if s.disable_overlap_schedule:
            args.append("--disable-overlap-schedule")
        args.append("--enable-metrics")
        if speculation:
            args += self._speculative_args(ctx, s)
        args += list(s.extra_args)
        return assemble(
            ctx, engine=self.name, speculation=speculation,
            program=("python3", "-m", "sglang.launch_server"),
            container_program=("python3", "-m", "sglang.launch_server"),
            binary_env="SGLANG_PYTHON", args=args, port=s.port, image=s.image,
            health_path="/health", container_healthcheck=python_probe(s.port, "/health"),
        )

    def _speculative_args(self, ctx: EngineContext, s: SGLangSettings) -> list[str]:
        method = ctx.spec.speculative.method
        algo = ALGORITHMS.get(method)
        if algo is None:
            raise RenderError(
                f"SGLang has no speculative algorithm for method {method.value!r}",
                hint="render this bundle for vLLM, or choose eagle/eagle3/draft_model/mtp",
            )
        out = ["--speculative-algorithm", algo]
        if ctx.draft_dir is not None:
            out += ["--speculative-draft-model-path", str(ctx.draft_dir)]
        tree = tree_params(ctx, s)
        if tree is not None:
            out += ["--speculative-num-steps", str(tree[0]),
                    "--speculative-eagle-topk", str(tree[1]),
                    "--speculative-num-draft-tokens", str(tree[2])]
        elif algo == "DFLASH" and _extra_value(s.extra_args, "--speculative-dflash-block-size") \
                is None and s.speculative_num_draft_tokens is None:
            out += ["--speculative-num-draft-tokens",
                    str(ctx.spec.speculative.num_speculative_tokens + 1)]
        elif algo == "DSPARK" and _extra_value(s.extra_args, "--speculative-dspark-block-size") \
                is None:
            out += ["--speculative-dspark-block-size",
                    str(ctx.spec.speculative.num_speculative_tokens)]
        if s.speculative_adaptive:
            out.append("--speculative-adaptive")
        return out
