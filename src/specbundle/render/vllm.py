"""vLLM: ``vllm serve`` with one explicit ``--speculative-config`` JSON.

The config always carries ``method`` (vLLM otherwise infers or overrides it from the draft
path), the local draft path as ``model``, ``num_speculative_tokens`` and, when given, the
Dynamic-SD schedule and ``draft_tensor_parallel_size``. Parallelism is always explicit so the
baseline arm runs on the same GPUs. ``/metrics`` is on by default in vLLM's server.
"""

from __future__ import annotations

import json
from typing import Any

from specbundle.render._command import assemble, python_probe, settings_of
from specbundle.render.interface import EngineContext, ServeCommand
from specbundle.spec import EngineName, VLLMSettings

__all__ = ["SPECULATION_ONLY_FLAGS", "VLLMEngine", "speculative_config", "split_extra_args"]

#: Flags vLLM accepts only with a speculative config: with none it refuses to start
#: ("--per-request-spec-decode-metrics requires speculative decoding to be enabled"), so they
#: are rendered into the speculative arm only (value included).
SPECULATION_ONLY_FLAGS: frozenset[str] = frozenset({"--per-request-spec-decode-metrics"})


def split_extra_args(extra: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """``extra_args`` as (both arms, speculative arm only)."""
    common: list[str] = []
    spec_only: list[str] = []
    i = 0
    while i < len(extra):
        a = extra[i]
        if a.split("=", 1)[0] in SPECULATION_ONLY_FLAGS:
            takes_next = "=" not in a and i + 1 < len(extra) and not extra[i + 1].startswith("-")
            spec_only += list(extra[i:i + (2 if takes_next else 1)])
            i += 2 if takes_next else 1
            continue
        common.append(a)
        i += 1
    return common, spec_only


def speculative_config(ctx: EngineContext, settings: VLLMSettings) -> dict[str, Any]:
    """The ``--speculative-config`` object; extra keys never override the core ones."""
    sp = ctx.spec.speculative
    cfg: dict[str, Any] = dict(settings.speculative_extra)
    cfg["method"] = sp.method.value
    cfg["num_speculative_tokens"] = sp.num_speculative_tokens
    if ctx.draft_dir is not None:
        cfg["model"] = str(ctx.draft_dir)
    if sp.draft_tensor_parallel_size is not None:
        cfg["draft_tensor_parallel_size"] = sp.draft_tensor_parallel_size
    if sp.schedule is not None:
        cfg["num_speculative_tokens_per_batch_size"] = [list(t) for t in sp.schedule]
    return cfg


class VLLMEngine:
    """Builds ``vllm serve`` commands."""

    name = EngineName.VLLM
    default_port = 8000

    def build(self, ctx: EngineContext, *, speculation: bool) -> ServeCommand:
        """The serve command; the baseline arm drops ``--speculative-config`` and the
        speculation-only extra flags, nothing else."""
        s = settings_of(ctx, self.name, VLLMSettings)
        args: list[str] = [
            str(ctx.target_dir),
            "--served-model-name", ctx.name,
            "--tensor-parallel-size", str(s.tensor_parallel_size),
            "--pipeline-parallel-size", str(s.pipeline_parallel_size),
            "--data-parallel-size", str(s.data_parallel_size),
        ]
        if s.max_num_seqs is not None:
            args += ["--max-num-seqs", str(s.max_num_seqs)]
        if s.max_model_len is not None:
            args += ["--max-model-len", str(s.max_model_len)]
        if s.gpu_memory_utilization is not None:
            args += ["--gpu-memory-utilization", str(s.gpu_memory_utilization)]
        common, spec_only = split_extra_args(s.extra_args)
        if speculation:
            cfg = speculative_config(ctx, s)
            args += ["--speculative-config",
                     json.dumps(cfg, sort_keys=True, separators=(",", ":"))]
        args += common
        if speculation:
            args += spec_only
        return assemble(
            ctx, engine=self.name, speculation=speculation, program=("vllm", "serve"),
            container_program=("vllm", "serve"), binary_env="VLLM_BIN", args=args,
            port=s.port, image=s.image, health_path="/health",
            container_healthcheck=python_probe(s.port, "/health"),
        )
