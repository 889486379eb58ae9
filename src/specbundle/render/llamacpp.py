"""llama.cpp: ``llama-server`` on the GGUF pair, offline, with speculation switched on for real.

``--spec-type`` defaults to ``none`` (a draft loaded with ``-md`` alone never speculates,
llama.cpp #25345) and ``--spec-draft-p-min`` defaults to 0.00 (the drafter always fills the
whole window), so both are always emitted, together with ``--metrics``, ``--offline`` and
``-fa``. The baseline arm is the same server without the draft and the ``--spec-*`` flags.
"""

from __future__ import annotations

from specbundle.render._command import assemble, settings_of
from specbundle.render.interface import EngineContext, ServeCommand
from specbundle.spec import EngineName, LlamaCppSettings

__all__ = ["LlamaCppEngine", "parallel_slots"]


def parallel_slots(ctx: EngineContext, s: LlamaCppSettings) -> int:
    """Server slots: explicit, else twice the P95 concurrency."""
    return s.parallel or 2 * ctx.spec.deployment.p95_concurrency


def _fmt(x: float) -> str:
    return f"{x:g}"


class LlamaCppEngine:
    """Builds ``llama-server`` commands."""

    name = EngineName.LLAMACPP
    default_port = 8080

    def build(self, ctx: EngineContext, *, speculation: bool) -> ServeCommand:
        """The serve command for either arm."""
        s = settings_of(ctx, self.name, LlamaCppSettings)
        target_gguf = ctx.spec.target.gguf_file or ""
        args: list[str] = [
            "--model", str(ctx.target_dir / target_gguf),
            "--alias", ctx.name,
            "--ctx-size", str(s.ctx_size),
            "--parallel", str(parallel_slots(ctx, s)),
            "--n-gpu-layers", s.n_gpu_layers,
            "--flash-attn", s.flash_attn,
        ]
        if s.threads is not None:
            args += ["--threads", str(s.threads)]
        args += ["--metrics", "--offline"]
        if speculation:
            args += ["--spec-type", s.spec_type]
            draft_gguf = ctx.spec.draft.gguf_file if ctx.spec.draft is not None else None
            if ctx.draft_dir is not None and draft_gguf is not None:
                n_max = s.draft_n_max or ctx.spec.speculative.num_speculative_tokens
                args += [
                    "--spec-draft-model", str(ctx.draft_dir / draft_gguf),
                    "--spec-draft-n-max", str(n_max),
                    "--spec-draft-n-min", str(s.draft_n_min),
                    "--spec-draft-p-min", _fmt(s.draft_p_min),
                    "--spec-draft-ngl", s.draft_n_gpu_layers,
                ]
        args += list(s.extra_args)
        port = s.port
        return assemble(
            ctx, engine=self.name, speculation=speculation, program=("llama-server",),
            container_program=("/app/llama-server",), binary_env="LLAMA_SERVER", args=args,
            port=port, image=s.image, health_path="/health",
            container_healthcheck=("curl", "-fsS", f"http://127.0.0.1:{port}/health"),
        )
