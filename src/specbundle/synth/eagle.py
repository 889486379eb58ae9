"""An EAGLE-3 draft head shaped like the published ones, for scan/compatibility tests.

Not runnable by llama.cpp (no GGUF): it exists so scanners see the real config keys and
tensors (``midlayer.*``, ``fc`` over three aux hidden states, a reduced ``lm_head``, and the
``d2t``/``t2d`` draft<->target vocabulary maps) with values the tests control.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

from specbundle._fsutil import atomic_write_bytes
from specbundle.synth.files import LICENSE
from specbundle.synth.weights import Shape, normal

__all__ = ["make_eagle3_head"]


def _config(target: Shape, draft_vocab_size: int) -> dict[str, Any]:
    n = target.num_hidden_layers
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "vocab_size": target.vocab_size,
        "draft_vocab_size": draft_vocab_size,
        "hidden_size": target.hidden_size,
        "target_hidden_size": target.hidden_size,
        "intermediate_size": target.intermediate_size,
        "num_hidden_layers": 1,
        "num_attention_heads": target.num_attention_heads,
        "num_key_value_heads": target.num_key_value_heads,
        "head_dim": target.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": target.max_position_embeddings,
        "rms_norm_eps": target.rms_norm_eps,
        "rope_theta": target.rope_theta,
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
        "eagle_config": {"use_aux_hidden_state": True,
                         "eagle_aux_hidden_state_layer_ids": sorted({1, n // 2, max(n - 4, 0)})},
    }


def make_eagle3_head(out_dir: Path, target: Shape, *, draft_vocab_size: int = 256,
                     hot_ids: Sequence[int] | None = None, seed: int = 0) -> Path:
    """Write ``config.json``, ``model.safetensors`` and ``README.md`` of an EAGLE-3 head.

    ``hot_ids`` are the target ids the draft vocabulary covers, in draft order (default: the
    first ``draft_vocab_size`` ids). ``d2t[i] = hot_ids[i] - i``, as vLLM and SGLang read it;
    pass unsorted or out-of-range ids to build the malformed heads a scanner must reject.
    """
    hot = np.asarray(list(hot_ids) if hot_ids is not None else range(draft_vocab_size),
                     dtype=np.int64)
    if hot.shape != (draft_vocab_size,):
        raise ValueError("hot_ids must list exactly draft_vocab_size ids")
    rng = np.random.default_rng([seed, 3])
    h, i = target.hidden_size, target.intermediate_size
    kv = target.num_key_value_heads * target.head_dim
    ones = np.ones(h, dtype=np.float32)
    tensors = {
        "midlayer.input_layernorm.weight": ones,
        "midlayer.hidden_norm.weight": ones,
        "midlayer.post_attention_layernorm.weight": ones,
        # q/k/v read the concatenation [token embedding; fused target hidden state].
        "midlayer.self_attn.q_proj.weight": normal(rng, (h, 2 * h), (2 * h) ** -0.5),
        "midlayer.self_attn.k_proj.weight": normal(rng, (kv, 2 * h), (2 * h) ** -0.5),
        "midlayer.self_attn.v_proj.weight": normal(rng, (kv, 2 * h), (2 * h) ** -0.5),
        "midlayer.self_attn.o_proj.weight": normal(rng, (h, h), h ** -0.5),
        "midlayer.mlp.gate_proj.weight": normal(rng, (i, h), h ** -0.5),
        "midlayer.mlp.up_proj.weight": normal(rng, (i, h), h ** -0.5),
        "midlayer.mlp.down_proj.weight": normal(rng, (h, i), i ** -0.5),
        "fc.weight": normal(rng, (h, 3 * h), (3 * h) ** -0.5),
        "norm.weight": ones,
        "lm_head.weight": normal(rng, (draft_vocab_size, h), h ** -0.5),
    }
    t2d = np.zeros(target.vocab_size, dtype=np.bool_)
    t2d[hot[(hot >= 0) & (hot < target.vocab_size)]] = True
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out_dir / "config.json",
                       (json.dumps(_config(target, draft_vocab_size), indent=2) + "\n").encode())
    atomic_write_bytes(out_dir / "README.md", (
        f"---\nlicense: {LICENSE}\ntags:\n- eagle3\n- synthetic\n---\n\n"
        "# Synthetic EAGLE-3 head\n\nRandom weights from `specbundle.synth`, for tests.\n"
    ).encode())
    payload: dict[str, np.ndarray[Any, Any]] = {k: v.astype(np.float16) for k, v in tensors.items()}
    payload["d2t"] = hot - np.arange(draft_vocab_size, dtype=np.int64)
    payload["t2d"] = t2d
    tmp = out_dir / "model.safetensors.tmp"
    save_file(payload, str(tmp), metadata={"format": "pt"})
    tmp.chmod(0o644)
    tmp.replace(out_dir / "model.safetensors")
    return out_dir
