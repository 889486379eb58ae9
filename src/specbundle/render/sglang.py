"""SGLang: ``python3 -m sglang.launch_server`` with every silently-rewritten setting pinned.

SGLang resets ``max_running_requests`` to 48 under any speculative algorithm and auto-picks
the three tree parameters (possibly topk > 1) when they are unset, so the command always
carries an explicit ``--max-running-requests`` and, for the EAGLE family and STANDALONE, the
tree ``(steps=K, topk=1, draft_tokens=K+1)`` unless the spec gives all three. The baseline
arm keeps the same ``--max-running-requests`` so both arms admit the same load.
"""

from __future__ import annotations

from specbundle.errors import RenderError
from specbundle.render._command import assemble, python_probe, settings_of
from specbundle.render.interface import EngineContext, ServeCommand
from specbundle.spec import EngineName, SGLangSettings, SpecMethod

__all__ = ["ALGORITHMS", "SGLangEngine", "max_running_requests", "tree_params"]

#: specbundle method -> ``--speculative-algorithm`` (MTP is SGLang's NEXTN; no MEDUSA).
ALGORITHMS: dict[SpecMethod, str] = {
    SpecMethod.DRAFT_MODEL: "STANDALONE",
    SpecMethod.EAGLE: "EAGLE",
    SpecMethod.EAGLE3: "EAGLE3",
    SpecMethod.MTP: "NEXTN",
    SpecMethod.NGRAM: "NGRAM",
    SpecMethod.DFLASH: "DFLASH",
}
_PINNED_TREE = frozenset({"STANDALONE", "EAGLE", "EAGLE3", "NEXTN"})


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
    if algo in _PINNED_TREE and not s.speculative_adaptive:
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
        args: list[str] = [
            "--model-path", str(ctx.target_dir),
            "--served-model-name", ctx.name,
            "--tp-size", str(s.tp_size), "--pp-size", str(s.pp_size), "--dp-size", str(s.dp_size),
            "--max-running-requests", str(max_running_requests(ctx, s)),
        ]
        if s.enable_dp_attention:
            args.append("--enable-dp-attention")
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
        if s.speculative_adaptive:
            out.append("--speculative-adaptive")
        return out
