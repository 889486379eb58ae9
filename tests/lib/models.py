"""Model folders to pull from: tiny safetensors folders and synthetic GGUF pairs.

Synthetic pairs whose bytes tests only read (a ``dir:`` pull copies them) are built once per
session by :class:`PairStore`; a test that edits a model folder builds its own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import save_file

from specbundle.synth import SynthPair, make_pair

#: The small pair's shape: fast to write and hash, still a real llama.cpp-loadable GGUF pair.
SMALL = {"hidden_size": 64, "intermediate_size": 176, "num_attention_heads": 4,
         "target_layers": 2, "draft_layers": 1}


def make_model(path: Path, *, seed: int = 0, vocab: int = 64) -> Path:
    """A tiny model folder with weights, a nested file and a shared tokenizer."""
    path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    save_file({"embed.weight": rng.standard_normal((vocab, 16)).astype(np.float16)},
              str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"],
                                                  "vocab_size": vocab, "hidden_size": 16}))
    (path / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 0}}}))
    (path / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 128}))
    (path / "generation_config.json").write_text(json.dumps({"seed": seed}))
    return path


def make_model_dir(path: Path, *, seed: int = 0, vocab: int = 64, big: int = 0) -> Path:
    """A small model folder with weights, configs, a pickle and a .py file (what a hub repo
    holds, engine files and others); ``big``: one more safetensors file of that many bytes."""
    path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    save_file({"embed.weight": rng.standard_normal((vocab, 16)).astype(np.float16)},
              str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"],
                                                   "vocab_size": vocab, "hidden_size": 16}))
    (path / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 128}))
    (path / "README.md").write_text("---\nlicense: apache-2.0\n---\n# tiny\n")
    (path / "pytorch_model.bin").write_bytes(b"\x80\x04K\x01.")
    (path / "modeling_tiny.py").write_text("print('remote code')\n")
    (path / "notes.txt").write_text("not for engines\n")
    if big:
        with (path / "model-big.safetensors").open("wb") as fh:
            header = json.dumps({"big": {"dtype": "U8", "shape": [big], "data_offsets": [0, big]}})
            pad = (8 - len(header) % 8) % 8
            hb = (header + " " * pad).encode()
            fh.write(len(hb).to_bytes(8, "little") + hb)
            block = rng.integers(0, 255, size=1 << 20, dtype=np.uint8).tobytes()
            left = big
            while left:
                n = min(left, len(block))
                fh.write(block[:n])
                left -= n
    return path


def small_pair(out: Path, seed: int = 0) -> SynthPair:
    """A tiny target/draft pair (fast to write and hash)."""
    return make_pair(out, seed=seed, **SMALL)


class PairStore:
    """Synthetic pairs built once per session under one folder, keyed by their arguments.

    Callers only read the folders (pull copies them): a test that changes a model file must
    build its own pair instead.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._pairs: dict[str, SynthPair] = {}

    def get(self, **kwargs: Any) -> SynthPair:
        """The pair ``make_pair(**kwargs)`` builds, made on first use."""
        key = "-".join(f"{k}={kwargs[k]}" for k in sorted(kwargs)) or "default"
        if key not in self._pairs:
            self._pairs[key] = make_pair(self.root / f"pair{len(self._pairs)}", **kwargs)
        return self._pairs[key]

    def small(self, seed: int = 0) -> SynthPair:
        """:func:`small_pair` with this seed, shared."""
        return self.get(seed=seed, **SMALL)


@pytest.fixture(scope="session")
def synth_pairs(tmp_path_factory: pytest.TempPathFactory) -> PairStore:
    """The session's read-only synthetic pairs."""
    return PairStore(tmp_path_factory.mktemp("synth-pairs"))


@pytest.fixture(scope="session")
def bench_pairs(synth_pairs: PairStore) -> dict[str, SynthPair]:
    """The good and the bad draft over one target (seed 7), as the bench and admit tests use."""
    return {q: synth_pairs.get(quality=q, seed=7) for q in ("good", "bad")}
