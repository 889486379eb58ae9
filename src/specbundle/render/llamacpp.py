"""llama.cpp: ``llama-server`` on the GGUF pair, offline, with speculation switched on for real.

``--spec-type`` defaults to ``none`` (a draft loaded with ``-md`` alone never speculates,
llama.cpp #25345) and ``--spec-draft-p-min`` defaults to 0.00 (the drafter always fills the
whole window), so both are always emitted, together with ``--metrics``, ``--offline`` and
``-fa``. The baseline arm is the same server without the draft and the ``--spec-*`` flags.

Without ``--kv-unified`` llama.cpp b11434 splits ``--ctx-size`` evenly over ``--parallel``
slots (``llama-context.cpp``: ``n_ctx_seq = pad256(n_ctx / n_seq_max)``), so 4096 over 32 slots
leaves each request 256 tokens and longer generations stop as truncated. Render therefore
sizes the context from the workload (slots x (prompt allowance + ``bench.max_tokens``)) unless
the spec gives one, and lint says what each slot gets (:func:`slot_context`).
"""

from __future__ import annotations

from dataclasses import dataclass

from specbundle.render._command import assemble, settings_of
from specbundle.render.interface import EngineContext, ServeCommand
from specbundle.spec import BundleSpec, EngineName, LlamaCppSettings

__all__ = ["NGRAM_DRAFT_FLAGS", "PROMPT_ALLOWANCE", "LlamaCppEngine", "SlotContext", "context_size",
           "k_args", "ngram_mod_n_min", "parallel_slots", "slot_context", "slot_need"]

#: ngram type -> the b11434 flag that bounds its draft length (``common/arg.cpp``:
#: ``size-m`` is the drafted length of simple/map-k/map-k4v, ``n-max`` that of ngram-mod).
#: ngram-cache has none: lint warns that K is not passed.
NGRAM_DRAFT_FLAGS: dict[str, str] = {
    "ngram-simple": "--spec-ngram-simple-size-m", "ngram-map-k": "--spec-ngram-map-k-size-m",
    "ngram-map-k4v": "--spec-ngram-map-k4v-size-m", "ngram-mod": "--spec-ngram-mod-n-max",
}
#: llama.cpp's defaults for ngram-mod: n_min 48 of n_max 64 (a match may stop at 3/4 of the window).
_NGRAM_MOD_N_MIN, _NGRAM_MOD_N_MAX = 48, 64
#: Tokens a slot keeps for the prompt (the built-in workload's prompts and chat template fit in
#: it; a bundle with longer prompts sets ``ctx_size``).
PROMPT_ALLOWANCE = 256
_PAD = 256  # llama.cpp pads n_ctx and the per-slot n_ctx_seq up to a multiple of 256


def ngram_mod_n_min(n_max: int, draft_n_min: int) -> int:
    """ngram-mod's shortest draft: the spec's ``draft_n_min`` if set, else llama.cpp's 48/64
    proportion of ``n_max``, below ``n_max`` (n_min = n_max drafts only full-length matches)."""
    if draft_n_min > 0:
        return min(draft_n_min, n_max)
    return max(1, min(n_max - 1, n_max * _NGRAM_MOD_N_MIN // _NGRAM_MOD_N_MAX))


def k_args(spec_type: str, k: int, s: LlamaCppSettings, *, has_draft: bool) -> list[str]:
    """The spec's K for draftless types, so llama.cpp's defaults (n_max 3, 48/64) never run.

    ``draft-mtp`` drafts from the target's nextn tensors (no ``-md`` in b11434) and reads
    ``--spec-draft-n-max``/``-n-min``/``-p-min`` (its drafter stops below p_min, whose default
    0.00 always fills the window); each ngram type has its own length flag.
    """
    n = s.draft_n_max or k
    out: list[str] = []
    types = spec_type.split(",")
    if "draft-mtp" in types and not has_draft:
        out += ["--spec-draft-n-max", str(n), "--spec-draft-n-min", str(s.draft_n_min),
                "--spec-draft-p-min", _fmt(s.draft_p_min)]
    for t in types:
        flag = NGRAM_DRAFT_FLAGS.get(t)
        if flag is not None:
            out += [flag, str(n)]
            if t == "ngram-mod":
                out += ["--spec-ngram-mod-n-min", str(ngram_mod_n_min(n, s.draft_n_min))]
    return out


def parallel_slots(ctx: EngineContext, s: LlamaCppSettings) -> int:
    """Server slots: explicit, else twice the P95 concurrency."""
    return s.parallel or 2 * ctx.spec.deployment.p95_concurrency


def slot_need(spec: BundleSpec) -> int:
    """Tokens one request occupies: the prompt allowance plus the benchmark's output length."""
    return PROMPT_ALLOWANCE + spec.bench.max_tokens


def _pad(n: int) -> int:
    return -(-n // _PAD) * _PAD


@dataclass(frozen=True)
class SlotContext:
    """What llama-server b11434 gives each slot for a ``--ctx-size``/``--parallel`` pair."""

    ctx_size: int
    slots: int
    unified: bool
    #: Tokens one request may reach (the whole pool when unified), before the model's
    #: training-context cap the server also applies.
    per_slot: int
    #: The KV pool llama.cpp allocates (it rounds n_ctx up to slots x per_slot).
    pool: int


def slot_context(ctx_size: int, slots: int, *, unified: bool) -> SlotContext:
    """llama-context.cpp b11434: n_ctx = pad256(c); per slot = pad256(n_ctx / slots) unless
    unified (then every slot may use the whole pool)."""
    n_ctx = _pad(max(ctx_size, 1))
    if unified:
        return SlotContext(ctx_size, slots, True, n_ctx, n_ctx)
    per = _pad(n_ctx // max(slots, 1))
    return SlotContext(ctx_size, slots, False, per, per * max(slots, 1))


def context_size(ctx: EngineContext, s: LlamaCppSettings) -> int:
    """``--ctx-size``: the spec's, else enough for every slot to hold a whole request."""
    if s.ctx_size is not None:
        return s.ctx_size
    return _pad(slot_need(ctx.spec)) * parallel_slots(ctx, s)


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
            "--ctx-size", str(context_size(ctx, s)),
            "--parallel", str(parallel_slots(ctx, s)),
            "--n-gpu-layers", s.n_gpu_layers,
            "--flash-attn", s.flash_attn,
        ]
        if s.kv_unified:
            args.append("--kv-unified")
        if s.threads is not None:
            args += ["--threads", str(s.threads)]
        args += ["--metrics", "--offline"]
        if speculation:
            args += ["--spec-type", s.spec_type]
            args += self._draft_args(ctx, s)
            args += k_args(s.spec_type, ctx.spec.speculative.num_speculative_tokens, s,
                           has_draft="--spec-draft-model" in args)
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
