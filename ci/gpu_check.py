"""Helper of ci/gpu-check.sh: the two synthetic pairs, their specs, a key and trust policy
(``setup``), and the per-pair figures of the bench and admit reports (``summary``).

Run with specbundle importable (``PYTHONPATH=src``). ``setup WORK MODE`` writes
``WORK/{good,self}/bundle.yaml`` (MODE ``gpu``: all layers on the GPU, a larger pair, the
spec's own bench settings; ``cpu``: the tiny pair, a short bench), ``WORK/key.pem`` and
``WORK/trust.yaml``. ``summary OUT`` reads ``OUT/{bench,admit}-<pair>.json`` and writes
``OUT/summary.json`` and ``OUT/summary.md`` (alpha, c, ratio with its CI, the decision).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

from specbundle.attest.keys import generate_key, write_private_key
from specbundle.synth import make_pair
from specbundle.synth.known import make_self_pair

PAIRS = ("good", "self")


def _spec(name: str, target: Path, draft: Path, mode: str) -> dict[str, Any]:
    gpu = mode == "gpu"
    ngl = "99" if gpu else "0"
    return {
        "apiVersion": "specbundle/v1", "metadata": {"name": name},
        "target": {"repo": f"gpucheck/{name}-target", "source": f"dir:{target}",
                   "gguf_file": "model.gguf"},
        "draft": {"repo": f"gpucheck/{name}-draft", "source": f"dir:{draft}",
                  "gguf_file": "model.gguf"},
        "speculative": {"method": "draft_model", "num_speculative_tokens": 8},
        # p_min 0: the synthetic drafts are never confident (see cli/demo.py)
        "engines": {"llamacpp": {"draft_p_min": 0.0, "n_gpu_layers": ngl,
                                 "draft_n_gpu_layers": ngl,
                                 **({} if gpu else {"threads": 1, "flash_attn": "off"})}},
        "deployment": {"p95_concurrency": 4 if gpu else 1, "gpus": 1 if gpu else 0},
        "admission": {"min_throughput_ratio_lower_bound": 1.0},
        "bench": ({"max_tokens": 128, "requests_per_level": 8, "rounds": 4,
                   "warmup_requests": 2, "concurrency_levels": [1, 4]} if gpu else
                  {"max_tokens": 24, "requests_per_level": 2, "rounds": 2,
                   "warmup_requests": 1, "concurrency_levels": [1]}),
    }


def setup(work: Path, mode: str) -> None:
    """Pairs, specs, key and trust policy under ``work``."""
    big = mode == "gpu"
    pairs = {
        "good": make_pair(work / "good" / "pair", quality="good", seed=7,
                          **({} if big else {"hidden_size": 128, "intermediate_size": 352,
                                             "target_layers": 4})),
        "self": make_self_pair(work / "self" / "pair", seed=7, target_layers=12 if big else 4),
    }
    for name, pair in pairs.items():
        doc = _spec(f"gpucheck-{name}", pair.target_dir, pair.draft_dir, mode)
        (work / name / "bundle.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    key = generate_key("ecdsa-p256")
    write_private_key(key, work / "key.pem")
    pem = key.public.pem.decode().strip().replace("\n", "\n      ")
    (work / "trust.yaml").write_text(
        "apiVersion: specbundle/v1\nkind: TrustPolicy\nmax_age: 30d\nkeys:\n"
        f"  - name: gpu-check\n    fingerprint: {key.public.fingerprint}\n"
        f"    public_key: |\n      {pem}\n"
        '    repos: ["gpucheck/*"]\n    bundles: ["gpucheck-*"]\n'
        "require:\n  fetch-provenance: {threshold: 1}\n  scan-result: {threshold: 1}\n"
        "  pair-binding: {threshold: 1}\n")


def _level(report: dict[str, Any]) -> dict[str, Any]:
    """The P95 level of a bench report (the one admission judges), else the last."""
    levels = report.get("levels") or []
    p95 = (report.get("settings") or {}).get("p95_concurrency")
    for lv in levels:
        if lv.get("concurrency") == p95:
            return dict(lv)
    return dict(levels[-1]) if levels else {}


def _figures(bench: dict[str, Any], admit: dict[str, Any]) -> dict[str, Any]:
    lv = _level(bench)
    acc = lv.get("acceptance") or {}
    ratio = lv.get("ratio") or {}
    return {
        "concurrency": lv.get("concurrency"), "alpha": acc.get("alpha"),
        "mean_acceptance_length": acc.get("mean_acceptance_length"),
        "c": lv.get("c_measured"), "alpha_above_c": lv.get("alpha_above_c"),
        "ratio": ratio.get("ratio"), "ratio_ci": [ratio.get("low"), ratio.get("high")],
        "admitted": admit.get("admitted"), "reasons": admit.get("reasons"),
    }


def summary(out: Path) -> None:
    """``summary.json`` and ``summary.md`` from the reports in ``out``."""
    rows = {}
    for name in PAIRS:
        b, a = out / f"bench-{name}.json", out / f"admit-{name}.json"
        bench = json.loads(b.read_text()) if b.is_file() else {}
        admit = json.loads(a.read_text()) if a.is_file() else {}
        rows[name] = _figures(bench, admit)
    (out / "summary.json").write_text(json.dumps(rows, indent=2, sort_keys=True) + "\n")
    lines = ["| pair | level | α | τ | c | ratio [CI] | decision |",
             "|---|---|---|---|---|---|---|"]
    for name, r in rows.items():
        def f(x: Any) -> str:
            return f"{x:.3g}" if isinstance(x, (int, float)) else "-"
        ci = r["ratio_ci"]
        lines.append(f"| {name} | {r['concurrency']} | {f(r['alpha'])} | "
                     f"{f(r['mean_acceptance_length'])} | {f(r['c'])} | {f(r['ratio'])} "
                     f"[{f(ci[0])}, {f(ci[1])}] | "
                     f"{'admitted' if r['admitted'] else 'rejected'} |")
    (out / "summary.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    if sys.argv[1] == "setup":
        setup(Path(sys.argv[2]), sys.argv[3])
    else:
        summary(Path(sys.argv[2]))
