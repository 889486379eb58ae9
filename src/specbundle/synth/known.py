"""Pairs whose right measurement is known by construction, to test the measurement itself.

"self": the draft *is* the target (byte-identical copy), so the true draft cost c is 1 and
speculation must lose: a bench that measures c far from 1 is wrong.

"cyclic": both models are bigram machines, next token = a fixed function of the current one
(every layer adds exactly zero to the residual stream, so only embedding → norm → head
decides; the layers still cost their compute). The target walks a cycle of ``agree + 1``
tokens c_0 → c_1 → … → c_agree → c_0; the draft walks the same cycle except that after
c_agree it proposes a token outside it. From the target's correction c_0 on, the draft
agrees for exactly ``agree`` tokens and then diverges, every step: a draft length K above
``agree`` only adds draft and verification work, one below it leaves accepted tokens on the
table, so the best K is ``agree`` at low concurrency, by construction.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from specbundle.synth.files import write_model_dir
from specbundle.synth.pair import SynthModel, SynthPair, make_pair
from specbundle.synth.tokenizer import build_tokenizer
from specbundle.synth.weights import Shape, Tensors, random_layer

__all__ = ["CyclicPair", "make_cyclic_pair", "make_self_pair"]

_FIRST = 97  # byte token "a": the cycle is readable text ("abcde" repeated)


def make_self_pair(out_dir: Path, *, seed: int = 0, target_layers: int = 4) -> SynthPair:
    """A target and a draft that is a byte-identical copy of it (true c = 1)."""
    pair = make_pair(out_dir / "made", quality="good", seed=seed, target_layers=target_layers)
    shutil.copytree(pair.target_dir, out_dir / "target")
    shutil.copytree(pair.target_dir, out_dir / "draft")
    shutil.rmtree(out_dir / "made")
    t = replace(pair.target, path=out_dir / "target")
    d = replace(pair.target, path=out_dir / "draft", name=f"{pair.target.name}-as-draft")
    return SynthPair(target=t, draft=d, quality="good", seed=seed)


@dataclass(frozen=True)
class CyclicPair:
    """A cyclic pair and the facts it was built from."""

    pair: SynthPair
    agree: int  # tokens the draft agrees for after each correction: the best K
    cycle: tuple[int, ...]  # token ids of the target's cycle
    off_cycle: int  # the draft's wrong token after the last cycle token


def _bigram(shape: Shape, successor: dict[int, int], default: int, seed: int,
            special: tuple[int, ...]) -> Tensors:
    """One-hot embeddings and a head that scores ``successor[i]`` (else ``default``) after i.

    RMSNorm turns a one-hot row into sqrt(h)·e_i, so the chosen token leads by sqrt(h) ≈ 22
    logits: no float16 rounding or batch-shape numerics can flip it.
    """
    v, h = shape.vocab_size, shape.hidden_size
    embed = np.zeros((v, h), dtype=np.float32)
    embed[np.arange(v), np.arange(v)] = 1.0
    head = np.zeros((v, h), dtype=np.float32)
    for i in range(v):
        head[successor.get(i, default), i] = 1.0
    head[list(special)] = 0.0
    rng = np.random.default_rng(seed)
    tensors: Tensors = {"model.embed_tokens.weight": embed,
                        "model.norm.weight": np.ones(h, dtype=np.float32),
                        "lm_head.weight": head}
    for n in range(shape.num_hidden_layers):
        layer = random_layer(rng, shape, residual_scale=0.0)  # computes, adds exactly 0
        tensors.update({f"model.layers.{n}.{k}": w for k, w in layer.items()})
    return tensors


def make_cyclic_pair(out_dir: Path, *, agree: int, seed: int = 0, vocab_size: int = 512,
                     target_layers: int = 12, draft_layers: int = 1,
                     intermediate_size: int = 1408, num_attention_heads: int = 8) -> CyclicPair:
    """Write ``out_dir/target`` and ``out_dir/draft``: the draft agrees for exactly ``agree``."""
    if not 1 <= agree <= 60:
        raise ValueError("agree must be between 1 and 60")
    if not 0 < draft_layers < target_layers:
        raise ValueError("need 0 < draft_layers < target_layers")
    tok = build_tokenizer(vocab_size)
    shape = Shape(vocab_size=vocab_size, hidden_size=vocab_size,  # one-hot needs h >= vocab
                  intermediate_size=intermediate_size, num_hidden_layers=target_layers,
                  num_attention_heads=num_attention_heads,
                  num_key_value_heads=num_attention_heads)
    cycle = tuple(range(_FIRST, _FIRST + agree + 1))
    off = _FIRST - 32  # "A": outside the cycle; its successor is the cycle start, as for all
    succ_t = dict(zip(cycle, cycle[1:] + cycle[:1], strict=True))
    succ_d = {**succ_t, cycle[-1]: off}
    d_shape = replace(shape, num_hidden_layers=draft_layers)
    t_name, d_name = f"synth-cyclic-target-s{seed}", f"synth-cyclic-draft-a{agree}-s{seed}"
    write_model_dir(out_dir / "target", name=t_name, shape=shape, tok=tok,
                    tensors=_bigram(shape, succ_t, cycle[0], seed, tok.special_ids),
                    description=f"Synthetic cyclic target: a {agree + 1}-token cycle.")
    write_model_dir(out_dir / "draft", name=d_name, shape=d_shape, tok=tok,
                    tensors=_bigram(d_shape, succ_d, cycle[0], seed + 1, tok.special_ids),
                    description=f"Synthetic cyclic draft: agrees for exactly {agree} tokens.")
    pair = SynthPair(target=SynthModel(out_dir / "target", t_name, shape),
                     draft=SynthModel(out_dir / "draft", d_name, d_shape),
                     quality="good", seed=seed)
    return CyclicPair(pair=pair, agree=agree, cycle=cycle, off_cycle=off)
