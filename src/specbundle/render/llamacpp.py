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

__all__ = ["NGRAM_DRAFT_FLAGS", "LlamaCppEngine", "k_args", "parallel_slots"]

#: ngram type -> the b11434 flag that bounds its draft length (``common/arg.cpp``:
#: ``size-m`` is the drafted length of simple/map-k/map-k4v, ``n-max`` that of ngram-mod).
#: ngram-cache has none: lint warns that K is not passed.
NGRAM_DRAFT_FLAGS: dict[str, str] = {
    "ngram-simple": "--spec-ngram-simple-size-m", "ngram-map-k": "--spec-ngram-map-k-size-m",
    "ngram-map-k4v": "--spec-ngram-map-k4v-size-m", "ngram-mod": "--spec-ngram-mod-n-max",
}
_NGRAM_MOD_N_MIN = 48  # llama.cpp's default --spec-ngram-mod-n-min


def k_args(spec_type: str, k: int, draft_n_max: int | None, *, has_draft: bool) -> list[str]:
    """The spec's K for draftless types, so llama.cpp's defaults (n_max 3, 48/64) never run.

    ``draft-mtp`` drafts from the target's nextn tensors (no ``-md`` in b11434) and reads
    ``--spec-draft-n-max``; each ngram type has its own length flag.
    """
    n = draft_n_max or k
    out: list[str] = []
    types = spec_type.split(",")
    if "draft-mtp" in types and not has_draft:
        out += ["--spec-draft-n-max", str(n)]
    for t in types:
        flag = NGRAM_DRAFT_FLAGS.get(t)
        if flag is not None:
            out += [flag, str(n)]
            if t == "ngram-mod":
                out += ["--spec-ngram-mod-n-min", str(min(_NGRAM_MOD_N_MIN, n))]
    return out


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
            args += self._draft_args(ctx, s)
            args += k_args(s.spec_type, ctx.spec.speculative.num_speculative_tokens,
                           s.draft_n_max, has_draft="--spec-draft-model" in args)
        args += list(s.extra_args)
        port = s.port
        return assemble(
            ctx, engine=self.name, speculation=speculation, program=("llama-server",),
            container_program=("/app/llama-server",), binary_env="LLAMA_SERVER", args=args,
            port=port, image=s.image, health_path="/health",
            container_healthcheck=("curl", "-fsS", f"http://127.0.0.1:{port}/health"),
        )

    def _draft_args(self, ctx: EngineContext, s: LlamaCppSettings) -> list[str]:
        draft_gguf = ctx.spec.draft.gguf_file if ctx.spec.draft is not None else None
        if ctx.draft_dir is None or draft_gguf is None:
            return []
        n_max = s.draft_n_max or ctx.spec.speculative.num_speculative_tokens
        return [
            "--spec-draft-model", str(ctx.draft_dir / draft_gguf),
            "--spec-draft-n-max", str(n_max),
            "--spec-draft-n-min", str(s.draft_n_min),
            "--spec-draft-p-min", _fmt(s.draft_p_min),
            "--spec-draft-ngl", s.draft_n_gpu_layers,
        ]
