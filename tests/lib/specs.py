"""Bundle specs: spec files with ``dir:``/hub sources, and spec documents to edit per test."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from specbundle.spec import BundleSpec, parse_spec
from specbundle.synth import SynthPair


def spec_file(tmp: Path, name: str, target: Path, draft: Path, *,
              target_repo: str = "org/target", draft_repo: str = "org/draft") -> Path:
    """A bundle.yaml with ``dir:`` sources."""
    p = tmp / f"{name}.yaml"
    p.write_text(f"""apiVersion: specbundle/v1
metadata: {{name: {name}}}
target: {{repo: {target_repo}, source: "dir:{target}"}}
draft: {{repo: {draft_repo}, source: "dir:{draft}"}}
speculative: {{method: draft_model, num_speculative_tokens: 4, temperature: 0.0}}
engines: {{vllm: {{}}}}
deployment: {{p95_concurrency: 8}}
""")
    return p


def spec_text(name: str, target: str, draft: str, *, target_rev: str = "main",
              draft_rev: str = "main", source: str = "hf", extra: str = "") -> str:
    """bundle.yaml text pulling both repos from a hub (``source``) at these revisions."""
    return f"""apiVersion: specbundle/v1
metadata: {{name: {name}}}
target: {{repo: {target}, revision: {target_rev}, source: "{source}"}}
draft: {{repo: {draft}, revision: {draft_rev}, source: "{source}"}}
speculative: {{method: draft_model, num_speculative_tokens: 4}}
engines: {{vllm: {{}}}}
deployment: {{p95_concurrency: 8}}
{extra}"""


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


# -- a hub-sourced spec document for the render tests ----------------------------------------

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


# -- a llama.cpp bench bundle over a synthetic pair -------------------------------------------

#: Small enough for 2 shared cores: 2 rounds (ABBA), 4 requests of 32 tokens per level. One
#: engine thread: two spinning threads on a shared 2-core box stall each other for tens of ms.
BENCH = {"max_tokens": 32, "requests_per_level": 4, "rounds": 2, "warmup_requests": 2}


#: Short prompts: prefill is the same in both arms and would dilute the decode speed-up.
SHORT_PROMPTS = "\n".join(json.dumps({"id": f"s{i}", "category": c, "prompt": t}) for i, (c, t) in
                          enumerate((("chat", "Hello there"), ("code", "def add(a, b):"),
                                     ("summarisation", "Summary: the meeting moved."),
                                     ("chat", "Why is the sky blue?")))) + "\n"
PROMPTS_FILE = "prompts/bench.jsonl"


def bundle_doc(name: str, pair: SynthPair, *, levels: list[int],
               admission: dict[str, Any] | None = None) -> dict[str, Any]:
    """A llama.cpp bundle spec over a synthetic pair (both served from ``dir:`` sources)."""
    return {
        "apiVersion": "specbundle/v1", "metadata": {"name": name},
        "target": {"repo": "synth/target", "source": f"dir:{pair.target_dir}",
                   "gguf_file": "model.gguf"},
        "draft": {"repo": f"synth/draft-{pair.quality}", "source": f"dir:{pair.draft_dir}",
                  "gguf_file": "model.gguf"},
        "speculative": {"method": "draft_model", "num_speculative_tokens": 8},
        # flash attention on CPU makes the 9-token verification batch slower than the plain
        # kernels here (measured: ratio ~0.9-1.2 with it, ~1.3-1.7 without)
        # --prio 2: the shared test box's other load should not decide the measurement
        "engines": {"llamacpp": {"draft_p_min": 0.0, "ctx_size": 1024, "threads": 1,
                                 "flash_attn": "off", "extra_args": ["--prio", "2"]}},
        "deployment": {"p95_concurrency": 1},
        "admission": admission or {},
        "bench": {**BENCH, "concurrency_levels": levels, "prompts_file": PROMPTS_FILE},
    }
