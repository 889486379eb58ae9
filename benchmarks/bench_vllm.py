"""vLLM (CPU build) boot time and A/B cycle time per method; bench client vs ``vllm bench serve``.

    python benchmarks/bench_vllm.py [--methods draft_model,eagle3,eagle,ngram] [--repeats 2]

Per method, the rendered ``serve.sh`` boots the speculative arm (timed from launch to a
healthy ``/health``) and the 4-prompt workload runs at concurrency 1 and 2; the baseline arm
is booted and measured once. A/B cycle = baseline boot + measure + speculative boot + measure,
what one ABBA half-round of ``specbundle bench`` costs. Then, on the draft_model server, the
bench client (``run_level``) and ``vllm bench serve`` alternate on the same prompts, length,
concurrency and greedy sampling; the ratio of their measured output throughputs is the
client's overhead (1.0 = none). Needs vLLM (``ci/install-vllm.sh``); one server at a time
besides the baseline. Results go to ``benchmarks/results/vllm.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from tests._vllm import (  # noqa: E402
    client_throughput,
    find_test_vllm,
    vllm_bench_serve,
    vllm_server,
)
from tests._vllm_bundles import PROMPTS, make_models, pull, vllm_doc  # noqa: E402

from specbundle.bundle import read_unsigned  # noqa: E402
from specbundle.mirror import Mirror  # noqa: E402
from specbundle.render import render_bundle  # noqa: E402

MAX_TOKENS = 32


def _measure(url: str, model: str, c: int, n: int) -> float:
    """Output tokens/s of the bench client at concurrency ``c`` over ``n`` requests."""
    return client_throughput(url, model, [PROMPTS[i % len(PROMPTS)] for i in range(n)],
                             MAX_TOKENS, c)


def _vllm_bench(vllm: Path, url: str, model: str, tokenizer: Path, c: int, n: int,
                tmp: Path) -> float:
    res = vllm_bench_serve(vllm, url, model, tokenizer,
                           [PROMPTS[i % len(PROMPTS)] for i in range(n)], MAX_TOKENS, c, tmp)
    return float(res["output_throughput"])


@contextlib.contextmanager
def _timed(script: Path, vllm: Path, tmp: Path, spec: bool, log: str,
           times: list[float]) -> Iterator[str]:
    t0 = time.perf_counter()
    with vllm_server(script, vllm, tmp=tmp, speculation=spec, log=tmp / log) as url:
        times.append(time.perf_counter() - t0)
        yield url


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--methods", default="draft_model,eagle3,eagle,ngram")
    ap.add_argument("--repeats", type=int, default=2, help="client/reference alternations")
    ap.add_argument("--requests", type=int, default=8)
    args = ap.parse_args()
    vllm = find_test_vllm()
    if vllm is None:
        print("vLLM not installed: bash ci/install-vllm.sh")
        return 6
    results: dict[str, object] = {"machine_note": "2 shared cores; timings are noisy"}
    with tempfile.TemporaryDirectory(prefix="bench-vllm-") as d:
        tmp = Path(d)
        m = make_models(tmp / "models")
        mirror = Mirror.open(tmp / "mirror", create=True)
        drafts = {"draft_model": m.good.draft_dir, "eagle3": m.eagle3, "eagle": m.eagle1,
                  "ngram": None}
        ks = {"draft_model": 3, "eagle3": 3, "eagle": 2, "ngram": 3}
        scripts = {}
        for i, method in enumerate(args.methods.split(",")):
            extra = {"prompt_lookup_max": 4, "prompt_lookup_min": 2} if method == "ngram" else None
            name = pull(mirror, vllm_doc(f"bench{i}", m.target, drafts[method],
                                         method=method, k=ks[method], speculative_extra=extra))
            res = render_bundle(read_unsigned(mirror, name), "vllm", "shell")
            scripts[method] = (name, next(f for f in res.files if f.suffix == ".sh"))
        first_name, first_script = next(iter(scripts.values()))
        base_boot: list[float] = []
        t0 = time.perf_counter()
        with _timed(first_script, vllm, tmp, False, "base.log", base_boot) as base:
            base_tp = {c: _measure(base, first_name, c, args.requests) for c in (1, 2)}
            base_cycle_half = time.perf_counter() - t0
            per_method: dict[str, object] = {}
            for method, (name, script) in scripts.items():
                boot: list[float] = []
                t1 = time.perf_counter()
                with _timed(script, vllm, tmp, True, f"{method}.log", boot) as url:
                    tp = {c: _measure(url, name, c, args.requests) for c in (1, 2)}
                    overhead = None
                    if method == "draft_model":
                        pairs = [(_measure(url, name, 2, args.requests),
                                  _vllm_bench(vllm, url, name, m.target, 2, args.requests, tmp))
                                 for _ in range(args.repeats)]
                        overhead = statistics.median(a / b for a, b in pairs)
                    spent = time.perf_counter() - t1
                per_method[method] = {
                    "boot_s": round(boot[0], 1), "ab_cycle_s": round(base_cycle_half + spent, 1),
                    "speedup_c1": round(tp[1] / base_tp[1], 3),
                    "speedup_c2": round(tp[2] / base_tp[2], 3),
                    **({"client_vs_vllm_bench_serve": round(overhead, 3)} if overhead else {})}
                print(method, per_method[method], flush=True)
        results.update(baseline_boot_s=round(base_boot[0], 1), methods=per_method)
    out = ROOT / "benchmarks" / "results" / "vllm.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
