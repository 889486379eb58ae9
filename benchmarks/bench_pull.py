"""Pull overhead: `specbundle pull` vs a plain `hf download` of the same repo, same hub, same run.

specbundle hashes every byte while it streams in and records digests; a plain download does
neither. The ratio (pull time / hf download time) shows what verification costs; the target is
<= 1.10, i.e. hashing hides under the transfer and nothing is read back a second time.

    python benchmarks/bench_pull.py --size-gb 2 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from specbundle.localhub import publish_repo, serve_hub


def _make_repo(src: Path, size_gb: float, files: int) -> None:
    src.mkdir(parents=True)
    per = int(size_gb * (1 << 30) / files)
    for i in range(files):
        # distinct bytes per file: identical files would be deduplicated by both tools
        block = np.random.default_rng(i).integers(0, 255, size=1 << 24, dtype=np.uint8).tobytes()
        header = json.dumps({"w": {"dtype": "U8", "shape": [per], "data_offsets": [0, per]}})
        hb = (header + " " * ((8 - len(header) % 8) % 8)).encode()
        with (src / f"model-{i:05d}-of-{files:05d}.safetensors").open("wb") as fh:
            fh.write(len(hb).to_bytes(8, "little") + hb)
            left = per
            while left:
                n = min(left, len(block))
                fh.write(block[:n])
                left -= n
    (src / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')


def _timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-gb", type=float, default=1.0)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-pull-"))
    try:
        _make_repo(work / "src", args.size_gb, args.files)
        publish_repo(work / "hub", "bench/big", work / "src")
        spec = work / "bundle.yaml"
        spec.write_text(
            "apiVersion: specbundle/v1\nmetadata: {name: bench}\n"
            "target: {repo: bench/big}\nspeculative: {method: ngram, num_speculative_tokens: 4}\n"
            "engines: {vllm: {}}\ndeployment: {p95_concurrency: 1}\n")
        hf = shutil.which("hf") or str(Path(sys.executable).parent / "hf")
        pulls, hfs = [], []
        with serve_hub(work / "hub") as hub:
            env = {**os.environ, "HF_ENDPOINT": hub.endpoint, "HF_HUB_DISABLE_XET": "1"}
            for _ in range(args.rounds):  # interleaved so drift hits both alike
                shutil.rmtree(work / "hf-cache", ignore_errors=True)
                hfs.append(_timed([hf, "download", "bench/big", "--cache-dir",
                                   str(work / "hf-cache")], env))
                shutil.rmtree(work / "mirror", ignore_errors=True)
                pulls.append(_timed([sys.executable, "-m", "specbundle", "pull", str(spec),
                                     "--mirror", str(work / "mirror"), "--json"], env))
        size = args.size_gb
        p, h = statistics.median(pulls), statistics.median(hfs)
        print(json.dumps({
            "benchmark": "pull-overhead", "size_gb": size, "files": args.files,
            "rounds": args.rounds, "specbundle_pull_s": pulls, "hf_download_s": hfs,
            "median_ratio_pull_over_hf": round(p / h, 3),
            "pull_gb_per_s": round(size / p, 3), "hf_gb_per_s": round(size / h, 3),
            "target": "<= 1.10",
        }, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
