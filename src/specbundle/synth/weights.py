"""Random llama weights with HF tensor names, and the HF -> GGUF name/layout mapping.

Weights are drawn in float32 and stored as float16: llama.cpp runs f32 ~30x slower on CPU,
and real checkpoints ship in half precision anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["RESIDUAL_OUTPUTS", "Layer", "Shape", "Tensors", "gguf_name", "gguf_tensor", "normal",
           "random_head", "random_layer"]

Tensors = dict[str, npt.NDArray[np.float32]]
Layer = dict[str, npt.NDArray[np.float32]]

# Per-layer HF tensor suffix -> GGUF name (convert_hf_to_gguf's llama mapping).
_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
_GLOBAL_NAMES = {"model.embed_tokens.weight": "token_embd.weight",
                 "model.norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}
# Residual-branch outputs: scaling these scales what a layer adds to the residual stream.
RESIDUAL_OUTPUTS = ("self_attn.o_proj.weight", "mlp.down_proj.weight")


@dataclass(frozen=True)
class Shape:
    """The llama hyper-parameters both files (config.json and GGUF metadata) are written from."""

    vocab_size: int = 512
    hidden_size: int = 512
    intermediate_size: int = 1408
    num_hidden_layers: int = 12
    num_attention_heads: int = 8
    num_key_value_heads: int = 8
    max_position_embeddings: int = 4096
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def n_params(self) -> int:
        h, i, kv = self.hidden_size, self.intermediate_size, self.num_key_value_heads
        attn = 2 * h * h + 2 * h * kv * self.head_dim
        per_layer = attn + 3 * h * i + 2 * h
        return self.num_hidden_layers * per_layer + 2 * self.vocab_size * h + h


def normal(rng: np.random.Generator, shape: tuple[int, ...], std: float
            ) -> npt.NDArray[np.float32]:
    return rng.standard_normal(shape, dtype=np.float32) * np.float32(std)


def random_layer(rng: np.random.Generator, shape: Shape, *, residual_scale: float = 1.0) -> Layer:
    """One decoder layer, keyed by the HF suffix after ``model.layers.N.``."""
    h, i = shape.hidden_size, shape.intermediate_size
    kv = shape.num_key_value_heads * shape.head_dim
    layer: Layer = {
        "input_layernorm.weight": np.ones(h, dtype=np.float32),
        "self_attn.q_proj.weight": normal(rng, (h, h), h ** -0.5),
        "self_attn.k_proj.weight": normal(rng, (kv, h), h ** -0.5),
        "self_attn.v_proj.weight": normal(rng, (kv, h), h ** -0.5),
        "self_attn.o_proj.weight": normal(rng, (h, h), h ** -0.5),
        "post_attention_layernorm.weight": np.ones(h, dtype=np.float32),
        "mlp.gate_proj.weight": normal(rng, (i, h), h ** -0.5),
        "mlp.up_proj.weight": normal(rng, (i, h), h ** -0.5),
        "mlp.down_proj.weight": normal(rng, (h, i), i ** -0.5),
    }
    for name in RESIDUAL_OUTPUTS:
        layer[name] = layer[name] * np.float32(residual_scale)
    return layer


def random_head(rng: np.random.Generator, shape: Shape, *, silent_ids: tuple[int, ...] = (),
                logit_std: float = 3.0) -> Tensors:
    """Embedding, final norm and LM head. ``silent_ids`` rows of the head are zero, so those
    tokens (the specials) score 0 and a random model practically never emits them."""
    h = shape.hidden_size
    head = normal(rng, (shape.vocab_size, h), logit_std * h ** -0.5)
    head[list(silent_ids)] = 0.0
    return {
        "model.embed_tokens.weight": normal(rng, (shape.vocab_size, h), 1.0),
        "model.norm.weight": np.ones(h, dtype=np.float32),
        "lm_head.weight": head,
    }


def gguf_name(hf_name: str) -> str:
    """The GGUF tensor name for an HF llama tensor name."""
    if hf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[hf_name]
    parts = hf_name.split(".", 3)
    if len(parts) != 4 or parts[:2] != ["model", "layers"] or parts[3] not in _LAYER_NAMES:
        raise ValueError(f"not a llama tensor name: {hf_name}")
    return f"blk.{parts[2]}.{_LAYER_NAMES[parts[3]]}"


def _permute(w: npt.NDArray[np.float32], n_head: int) -> npt.NDArray[np.float32]:
    # convert_hf_to_gguf LlamaModel.permute: HF rotates halves, GGUF rotates interleaved pairs.
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def gguf_tensor(hf_name: str, w: npt.NDArray[np.float32], shape: Shape
                ) -> npt.NDArray[np.float32] | npt.NDArray[np.float16]:
    """The GGUF payload for one HF tensor: q/k permuted for rope, 1-D norms kept in f32."""
    if hf_name.endswith("self_attn.q_proj.weight"):
        w = _permute(w, shape.num_attention_heads)
    elif hf_name.endswith("self_attn.k_proj.weight"):
        w = _permute(w, shape.num_key_value_heads)
    return w if w.ndim == 1 else w.astype(np.float16)
