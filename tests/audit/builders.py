"""Build real mirrors for the audit and images tests: synthetic pair -> dir: pull -> record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specbundle.mirror import Mirror
from specbundle.pull import pull_bundle
from specbundle.record import BundleRecord
from specbundle.spec import BundleSpec, parse_spec
from specbundle.synth import SynthPair, make_pair


def small_pair(out: Path, seed: int = 0) -> SynthPair:
    """A tiny target/draft pair (fast to write and hash)."""
    return make_pair(out, seed=seed, hidden_size=64, intermediate_size=176,
                     num_attention_heads=4, target_layers=2, draft_layers=1)


def bundle_spec(pair: SynthPair, name: str = "pair", *, image: str | None = None,
                org: str = "synth", llamacpp: dict[str, Any] | None = None) -> BundleSpec:
    """A draft_model bundle over the pair's directories, llama.cpp engine."""
    engine: dict[str, Any] = {**({"image": image} if image else {}), **(llamacpp or {})}
    return parse_spec({
        "apiVersion": "specbundle/v1", "metadata": {"name": name},
        "target": {"repo": f"{org}/target-{name}", "source": f"dir:{pair.target_dir}",
                   "gguf_file": "model.gguf"},
        "draft": {"repo": f"{org}/draft-{name}", "source": f"dir:{pair.draft_dir}",
                  "gguf_file": "model.gguf"},
        "speculative": {"method": "draft_model", "num_speculative_tokens": 4},
        "engines": {"llamacpp": engine},
        "deployment": {"p95_concurrency": 2, "gpus": 0},
    })


def pulled_bundle(root: Path, work: Path, name: str = "pair", *, image: str | None = None,
                  seed: int = 0) -> tuple[Mirror, BundleRecord]:
    """A mirror at ``root`` holding one pulled bundle named ``name``."""
    pair = small_pair(work / f"models-{name}", seed=seed)
    mirror = Mirror.open(root, create=True)
    result = pull_bundle(bundle_spec(pair, name, image=image), mirror, workers=2)
    return mirror, result.record
