"""Target/draft pairs whose speculative-decoding outcome is known in advance.

"good": the draft is the target's first layer(s) with the same embedding, final norm and LM head;
the target's remaining layers add only a small residual (``drift``), so its next-token choice
almost always equals the draft's (high acceptance) while it costs several times more per token.
"bad": the draft is an unrelated random model over the same tokenizer: acceptance near zero,
so speculation only adds draft and verification work.
"costly": the draft is 3/4 of the target: acceptance stays high, yet drafting costs more than
verification saves, so speculation loses with good-looking acceptance numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import numpy as np

from specbundle.synth.files import write_model_dir
from specbundle.synth.tokenizer import build_tokenizer
from specbundle.synth.weights import Layer, Shape, Tensors, random_head, random_layer

__all__ = ["Quality", "SynthModel", "SynthPair", "make_model", "make_pair"]

Quality = Literal["good", "bad", "costly"]


@dataclass(frozen=True)
class SynthModel:
    """One generated model directory and the facts it was written from."""

    path: Path
    name: str
    shape: Shape

    @property
    def gguf(self) -> Path:
        return self.path / "model.gguf"

    @property
    def safetensors(self) -> Path:
        return self.path / "model.safetensors"


@dataclass(frozen=True)
class SynthPair:
    """A target and a draft over one shared tokenizer."""

    target: SynthModel
    draft: SynthModel
    quality: Quality
    seed: int

    @property
    def target_dir(self) -> Path:
        return self.target.path

    @property
    def draft_dir(self) -> Path:
        return self.draft.path

    @property
    def vocab_size(self) -> int:
        return self.target.shape.vocab_size

    @property
    def target_layers(self) -> int:
        return self.target.shape.num_hidden_layers

    @property
    def draft_layers(self) -> int:
        return self.draft.shape.num_hidden_layers

    @property
    def cost_ratio(self) -> float:
        """Draft/target parameter ratio: the ``c`` of the speculative-decoding speed-up model."""
        return self.draft.shape.n_params() / self.target.shape.n_params()


def _assemble(head: Tensors, layers: list[Layer]) -> Tensors:
    tensors = dict(head)
    for i, layer in enumerate(layers):
        tensors.update({f"model.layers.{i}.{k}": v for k, v in layer.items()})
    return tensors


def make_model(out_dir: Path, *, seed: int = 0, name: str = "synth-llama",
               vocab_size: int = 512, hidden_size: int = 256, num_hidden_layers: int = 2,
               intermediate_size: int | None = None, num_attention_heads: int = 4) -> SynthModel:
    """One standalone random llama model directory (small defaults: for file-level tests)."""
    shape = Shape(vocab_size=vocab_size, hidden_size=hidden_size,
                  intermediate_size=intermediate_size or hidden_size * 11 // 4,
                  num_hidden_layers=num_hidden_layers, num_attention_heads=num_attention_heads,
                  num_key_value_heads=num_attention_heads)
    tok = build_tokenizer(vocab_size)
    rng = np.random.default_rng(seed)
    head = random_head(rng, shape, silent_ids=tok.special_ids)
    layers = [random_layer(rng, shape) for _ in range(num_hidden_layers)]
    write_model_dir(out_dir, name=name, shape=shape, tensors=_assemble(head, layers), tok=tok,
                    description=f"A {num_hidden_layers}-layer random llama (seed {seed}).")
    return SynthModel(path=out_dir, name=name, shape=shape)


def make_pair(out_dir: Path, *, quality: Quality = "good", seed: int = 0,
              vocab_size: int = 512, hidden_size: int = 512, intermediate_size: int = 1408,
              num_attention_heads: int = 8, target_layers: int = 12,
              draft_layers: int | None = None, drift: float = 0.003) -> SynthPair:
    """Write ``out_dir/target`` and ``out_dir/draft`` and describe them.

    The target depends only on ``seed``, the shape and ``drift``, never on ``quality`` or
    ``draft_layers``: pairs made with one seed share their target, hence one baseline.
    ``draft_layers`` defaults to 1 ("good", "bad") or 3/4 of the target ("costly").
    ``drift`` scales what the target's layers after the first add to the residual stream:
    0 makes a prefix draft agree exactly, larger values lower acceptance gradually.
    """
    if quality not in ("good", "bad", "costly"):
        raise ValueError(f"quality must be 'good', 'bad' or 'costly', not {quality!r}")
    n_draft = draft_layers or (target_layers * 3 // 4 if quality == "costly" else 1)
    if not 0 < n_draft < target_layers:
        raise ValueError("need 0 < draft_layers < target_layers")
    t_shape = Shape(vocab_size=vocab_size, hidden_size=hidden_size,
                    intermediate_size=intermediate_size, num_hidden_layers=target_layers,
                    num_attention_heads=num_attention_heads,
                    num_key_value_heads=num_attention_heads)
    d_shape = replace(t_shape, num_hidden_layers=n_draft)
    tok = build_tokenizer(vocab_size)
    rng = np.random.default_rng(seed)
    head = random_head(rng, t_shape, silent_ids=tok.special_ids)
    layers = [random_layer(rng, t_shape, residual_scale=1.0 if i == 0 else drift)
              for i in range(target_layers)]
    if quality == "bad":
        d_rng = np.random.default_rng([seed, 1])
        d_head = random_head(d_rng, d_shape, silent_ids=tok.special_ids)
        d_layers = [random_layer(d_rng, d_shape) for _ in range(n_draft)]
    else:
        d_head, d_layers = head, layers[:n_draft]
    t_name, d_name = f"synth-target-s{seed}", f"synth-draft-{quality}-s{seed}"
    write_model_dir(out_dir / "target", name=t_name, shape=t_shape, tok=tok,
                    tensors=_assemble(head, layers),
                    description=f"Synthetic {target_layers}-layer target (seed {seed}).")
    write_model_dir(out_dir / "draft", name=d_name, shape=d_shape, tok=tok,
                    tensors=_assemble(d_head, d_layers),
                    description=f"Synthetic {n_draft}-layer {quality} draft (seed {seed}).")
    return SynthPair(target=SynthModel(out_dir / "target", t_name, t_shape),
                     draft=SynthModel(out_dir / "draft", d_name, d_shape),
                     quality=quality, seed=seed)
