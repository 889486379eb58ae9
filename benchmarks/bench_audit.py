"""Audit cost vs the hashing floor: `audit` re-hashes every object it shows, nothing more.

Builds a multi-file model pair in a mirror (``dir:`` pull, then scan and sign with a throwaway
key), then times in the same run, best of ``--rounds``:

* ``audit(..., rehash=True)``: every object re-hashed, every signature verified, the log checked;
* ``openssl dgst -sha256`` over the same object files one after another (the single-core
  read-and-hash floor), and the same with one openssl per core (the parallel floor).

The ratio audit / openssl-sequential shows what auditing costs beyond reading the bytes; the
target is <= 1.05 on one core and below 1.0 with several cores (files hash in parallel). The
ratio audit / openssl-parallel should stay close to 1.0.

    python benchmarks/bench_audit.py --size-gb 1 --files 4 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import yaml

from specbundle.attest import generate_key
from specbundle.audit import audit
from specbundle.mirror import Mirror
from specbundle.pull import pull_bundle
from specbundle.scan import scan_bundle
from specbundle.sign import sign_bundle
from specbundle.spec import parse_spec
from specbundle.synth import make_model
from specbundle.verify import parse_policy


def _model(path: Path, size_gb: float, files: int, seed: int) -> None:
    # tokenizer and config from the synthetic generator (the scan checks draft/target
    # compatibility), then large shards of random bytes: hashing cost is what is measured
    make_model(path, seed=seed, hidden_size=64, num_hidden_layers=1)
    (path / "model.safetensors").unlink()
    (path / "model.gguf").unlink()
    per = int(size_gb * (1 << 30) / files)
    for i in range(files):
        block = np.random.default_rng([seed, i]).integers(0, 255, 1 << 24, np.uint8).tobytes()
        header = b'{"w":{"dtype":"U8","shape":[%d],"data_offsets":[0,%d]}}' % (per, per)
        header += b" " * ((8 - len(header) % 8) % 8)
        with (path / f"model-{i:05d}-of-{files:05d}.safetensors").open("wb") as fh:
            fh.write(len(header).to_bytes(8, "little") + header)
            left = per
            while left:
                n = min(left, len(block))
                fh.write(block[:n])
                left -= n


def _best(fn: Callable[[], None], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-gb", type=float, default=1.0, help="total size of target + draft")
    ap.add_argument("--files", type=int, default=4, help="files per model")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-audit-"))
    try:
        _model(work / "target", args.size_gb * 0.8, args.files, 1)
        _model(work / "draft", args.size_gb * 0.2, args.files, 2)
        spec = parse_spec({
            "apiVersion": "specbundle/v1", "metadata": {"name": "bench"},
            "target": {"repo": "bench/target", "source": f"dir:{work / 'target'}"},
            "draft": {"repo": "bench/draft", "source": f"dir:{work / 'draft'}"},
            "speculative": {"method": "draft_model", "num_speculative_tokens": 4},
            "engines": {"vllm": {}}, "deployment": {"p95_concurrency": 8}})
        mirror = Mirror.open(work / "mirror", create=True)
        record = pull_bundle(spec, mirror).record
        scan_bundle(mirror, record, spec)
        key = generate_key("ecdsa-p256")
        sign_bundle(mirror, "bench", [key])
        policy = parse_policy(yaml.safe_dump({
            "apiVersion": "specbundle/v1", "kind": "TrustPolicy", "keys": [{
                "name": "k", "fingerprint": key.fingerprint, "public_key": key.public.pem.decode(),
                "repos": ["*"], "bundles": ["*"]}]}).encode())
        objects = sorted({str(mirror.object_path(f.sha256)) for a in record.artifacts
                          for f in a.files})
        total = sum(Path(o).stat().st_size for o in objects)

        def run_audit() -> None:
            rep = audit(mirror, "bench", policy=policy)
            if rep.broken:
                raise SystemExit("benchmark bundle does not verify")

        def openssl_seq() -> None:
            subprocess.run(["openssl", "dgst", "-sha256", *objects], check=True,
                           stdout=subprocess.DEVNULL)

        def openssl_par() -> None:
            with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
                list(pool.map(lambda o: subprocess.run(
                    ["openssl", "dgst", "-sha256", o], check=True, stdout=subprocess.DEVNULL),
                    objects))

        run_audit()  # warm the page cache for every contender alike
        t_seq = _best(openssl_seq, args.rounds)
        t_par = _best(openssl_par, args.rounds)
        t_audit = _best(run_audit, args.rounds)
        gib = total / (1 << 30)
        print(f"objects: {len(objects)} files, {gib:.2f} GiB, {os.cpu_count()} cores")
        print(f"openssl sequential : {t_seq:7.3f} s  ({gib / t_seq:.2f} GiB/s)")
        print(f"openssl parallel   : {t_par:7.3f} s  ({gib / t_par:.2f} GiB/s)")
        print(f"specbundle audit   : {t_audit:7.3f} s  ({gib / t_audit:.2f} GiB/s)")
        print(f"ratio audit / openssl-sequential = {t_audit / t_seq:.3f}  (target <= 1.05)")
        print(f"ratio audit / openssl-parallel   = {t_audit / t_par:.3f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
