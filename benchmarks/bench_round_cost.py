"""Where a benchmark round's time goes, and how long a verdict takes (issue 24).

``specbundle bench`` in manifest mode (one llama-server launch per arm, as admission runs it)
on two synthetic pairs: ``good`` (a draft that agrees with its target) and ``self`` (the target
drafting for itself: α ≈ 1, c ≈ 1, so speculation cannot pay). Optionally under a second
process that loads a core on and off (``--load``, bench_measurement's spinner). Per run the
report's ``server.phase_seconds`` gives each phase (server launches by arm, warm-ups, the
measured levels by arm, the v probe, the near-tie probe, the draft probe) as a share of the
elapsed time, beside the decision, the stopping reason and the rounds.

    python benchmarks/bench_round_cost.py [--pairs good,self] [--load] [--rounds 4]
        [--tokens 32] [--requests 4] [--budget 600]
        [--size 640,18,2048,131072]   # hidden, layers, ff, vocab (f16): ~270M parameters

``--size`` builds the pair at a realistic scale instead of the tests' tiny one: the issue's
target is a 270M self-drafting pair rejected within 10 minutes on 2 cores under load and
within 3 quiet (no such model is available offline, so a synthetic one of that shape).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_measurement import _binary, spinner  # type: ignore[import-not-found]

from specbundle.bench import BenchOptions, run_bench
from specbundle.bench.verdict import bench_decision
from specbundle.bundle import read_unsigned
from specbundle.mirror import Mirror
from specbundle.pull import pull_bundle
from specbundle.spec import parse_spec
from specbundle.synth import make_pair


def _doc(name: str, target: Path, draft: Path, a: argparse.Namespace) -> dict[str, Any]:
    return {"apiVersion": "specbundle/v1", "metadata": {"name": name},
            "target": {"repo": "synth/t", "source": f"dir:{target}", "gguf_file": "model.gguf"},
            "draft": {"repo": f"synth/d-{name}", "source": f"dir:{draft}",
                      "gguf_file": "model.gguf"},
            "speculative": {"method": "draft_model", "num_speculative_tokens": 8},
            "engines": {"llamacpp": {"draft_p_min": 0.0, "ctx_size": 1024, "threads": 1,
                                     "flash_attn": "off"}},
            "deployment": {"p95_concurrency": 1},
            "admission": {"min_throughput_ratio_lower_bound": 1.05},
            "bench": {"max_tokens": a.tokens, "requests_per_level": a.requests,
                      "rounds": a.rounds, "warmup_requests": 2, "concurrency_levels": [1, 2]}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", default="good,self")
    ap.add_argument("--load", action="store_true")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--budget", type=float, default=600.0)
    ap.add_argument("--size", default="", help="hidden,layers,ff,vocab of the target (f16)")
    ap.add_argument("--pair", type=Path, default=None,
                    help="reuse a pair built before (its target/ and draft/ folders)")
    a = ap.parse_args()
    shape: dict[str, int] = {}
    if a.size:
        h, n, ff, v = (int(x) for x in a.size.split(","))
        shape = {"hidden_size": h, "target_layers": n, "intermediate_size": ff,
                 "vocab_size": v, "num_attention_heads": max(1, h // 64)}
    binary = Path(_binary())
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        t0 = time.monotonic()
        if a.pair is None:
            built = make_pair(root / "pair", quality="good", seed=7, **shape)
            target, draft = built.target_dir, built.draft_dir
        else:
            target, draft = a.pair / "target", a.pair / "draft"
        size = (target / "model.gguf").stat().st_size
        print(f"pair ready in {time.monotonic() - t0:.0f} s; target GGUF {size / 1e6:.0f} MB",
              flush=True)
        mirror = Mirror.open(root / "mirror", create=True)
        drafts = {"good": draft, "self": target}
        for name in a.pairs.split(","):
            pull_bundle(parse_spec(_doc(name, target, drafts[name], a)), mirror)
            load = spinner(seed=1) if a.load else contextlib.nullcontext()
            t0 = time.monotonic()
            with load:
                report = run_bench(read_unsigned(mirror, name), options=BenchOptions(
                    binary=binary, time_budget_s=a.budget))
            total = time.monotonic() - t0
            phases: dict[str, float] = report.server.get("phase_seconds", {})
            st = report.stopping
            word, why = bench_decision(report)
            print(f"{name}{' (loaded)' if a.load else ''}: {word} after {total:.0f} s, "
                  f"{st.rounds if st else '?'} rounds, stopped {st.reason if st else '?'}: "
                  f"{why}", flush=True)
            for note in report.notes:  # where the draft probe stopped early, and why
                if note.startswith("draft probe stopped"):
                    print(f"  {note}")
            rounds = max(1, st.rounds if st else 1)
            for phase, s in sorted(phases.items(), key=lambda kv: -kv[1]):
                print(f"  {phase:16s} {s:7.1f} s  {s / total:5.1%} of the run, "
                      f"{s / rounds:6.1f} s per round")
            rest = total - sum(phases.values())
            print(f"  {'other':16s} {rest:7.1f} s  {rest / total:5.1%} (looks, analysis, "
                  "storing the report)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
