"""Fixtures for render tests: a mirror holding a bundle, built with the Mirror API (no hub).

Files and commits are fixed, so rendered manifests are byte-stable across runs once the
mirror root is replaced by :data:`GOLDEN_ROOT`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from specbundle.digest import sha256_bytes
from specbundle.mirror import Mirror
from specbundle.record import ArtifactRecord, BundleRecord, FileEntry
from specbundle.spec import dump_spec, parse_spec

GOLDEN_ROOT = "/srv/specbundle/mirror"
DIGEST = "sha256:" + "ab" * 32
TARGET_COMMIT = "1" * 40
DRAFT_COMMIT = "2" * 40

BASE_SPEC: dict[str, Any] = {
    "apiVersion": "specbundle/v1",
    "metadata": {"name": "llama-pair"},
    "target": {"repo": "acme/llama-target", "revision": "main", "gguf_file": "model.gguf"},
    "draft": {"repo": "acme/llama-draft", "revision": "main", "gguf_file": "model.gguf"},
    "speculative": {"method": "draft_model", "num_speculative_tokens": 4},
    "engines": {
        "vllm": {"max_num_seqs": 64, "max_model_len": 4096, "gpu_memory_utilization": 0.9},
        "sglang": {"max_running_requests": 64, "mem_fraction_static": 0.85},
        "llamacpp": {"draft_p_min": 0.75, "parallel": 4},
    },
    "deployment": {"p95_concurrency": 32, "gpus": 1},
}


def spec_dict(**changes: Any) -> dict[str, Any]:
    """BASE_SPEC with nested changes: ``spec_dict(**{"engines.vllm.data_parallel_size": 2})``;
    a value of None deletes the key."""
    doc = copy.deepcopy(BASE_SPEC)
    for dotted, value in changes.items():
        *parents, leaf = dotted.split(".")
        node = doc
        for p in parents:
            node = node.setdefault(p, {})
        if value is None:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return doc


def _artifact(mirror: Mirror, role: str, repo: str, commit: str,
              files: dict[str, bytes]) -> ArtifactRecord:
    entries = []
    for path, data in sorted(files.items()):
        entries.append(FileEntry(path, len(data), mirror.put_bytes(data)))
        assert entries[-1].sha256 == sha256_bytes(data)
    art = ArtifactRecord(role=role, repo=repo, source="hf",  # type: ignore[arg-type]
                         endpoint="https://hub.example", requested_revision="main",
                         commit=commit, commit_kind="git", files=tuple(entries),
                         pulled_at="2026-11-29T00:00:00Z")
    mirror.link_snapshot(art)
    return art


def make_bundle(mirror: Mirror, doc: dict[str, Any],
                draft_config: dict[str, Any] | None = None) -> BundleRecord:
    """Store a bundle whose artifacts are tiny placeholder files."""
    spec = parse_spec(doc)
    target = _artifact(mirror, "target", spec.target.repo, TARGET_COMMIT, {
        "config.json": json.dumps({"architectures": ["LlamaForCausalLM"]}).encode(),
        "model.gguf": b"GGUF-target", "model.safetensors": b"target-weights",
    })
    draft = None
    if spec.draft is not None:
        cfg = draft_config or {"architectures": ["LlamaForCausalLM"]}
        draft = _artifact(mirror, "draft", spec.draft.repo, DRAFT_COMMIT, {
            "config.json": json.dumps(cfg).encode(),
            "model.gguf": b"GGUF-draft", "model.safetensors": b"draft-weights",
        })
    rec = BundleRecord(name=spec.name, spec=dump_spec(spec), target=target, draft=draft,
                       created="2026-11-29T00:00:00Z", tool_version="0.1.0")
    with mirror.lock():
        mirror.save_bundle(rec)
    return rec


@pytest.fixture
def mirror(tmp_path: Path) -> Mirror:
    """An empty mirror."""
    return Mirror.open(tmp_path / "mirror", create=True)


BundleFactory = Callable[..., BundleRecord]


@pytest.fixture
def bundle(mirror: Mirror) -> BundleFactory:
    """Factory: ``bundle(**spec_changes)`` stores a bundle and returns its record."""
    def make(draft_config: dict[str, Any] | None = None, **changes: Any) -> BundleRecord:
        return make_bundle(mirror, spec_dict(**changes), draft_config)
    return make
