"""A real loopback hub (olah serving local git repos) and tiny model repos to pull from."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from specbundle.localhub import LocalHub, publish_repo, serve_hub

_counter = itertools.count()


@pytest.fixture(scope="session")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalHub]:
    root = tmp_path_factory.mktemp("hub")
    with serve_hub(root) as h:
        yield h


def make_model_dir(path: Path, *, seed: int = 0, vocab: int = 64, big: int = 0) -> Path:
    """A small model folder with weights, configs, a pickle and a .py file."""
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


@pytest.fixture
def repo_name() -> str:
    return f"org/model-{next(_counter)}"


@pytest.fixture
def published(hub: LocalHub, tmp_path: Path, repo_name: str) -> tuple[str, str]:
    """A repo on the hub with one commit on main and tag v1; returns (repo, sha)."""
    src = make_model_dir(tmp_path / "src")
    sha = publish_repo(hub.root, repo_name, src, tags=("v1",))
    return repo_name, sha


def spec_text(name: str, target: str, draft: str, *, target_rev: str = "main",
              draft_rev: str = "main", source: str = "hf", extra: str = "") -> str:
    return f"""apiVersion: specbundle/v1
metadata: {{name: {name}}}
target: {{repo: {target}, revision: {target_rev}, source: "{source}"}}
draft: {{repo: {draft}, revision: {draft_rev}, source: "{source}"}}
speculative: {{method: draft_model, num_speculative_tokens: 4}}
engines: {{vllm: {{}}}}
deployment: {{p95_concurrency: 8}}
{extra}"""
