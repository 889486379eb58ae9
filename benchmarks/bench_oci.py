"""OCI push and pull throughput against a real registry, as ratios to ``skopeo copy``.

One loopback CNCF distribution registry (Debian ``docker-registry``) per run. Arms, interleaved
round-robin and repeated (best of), over the same generated bundle (target 90 %, draft 10 %):

* ``specbundle_push``: ``push_bundle`` into a fresh repository each round (nothing deduped:
  every blob is really sent, chunked, each byte hashed once as it streams);
* ``skopeo_push``: ``skopeo copy --all oci:LAYOUT docker://REG/fresh`` of the same bundle
  exported as an OCI layout (index, manifests and the same blobs; skopeo sends each blob in
  one request);
* ``specbundle_pull``: ``pull_bundle`` into an empty mirror: fetch, hash while writing, verify
  against the trust policy, commit (single pass: verify reuses the write-time digests);
* ``skopeo_pull``: ``skopeo copy --all docker://REG/repo oci:DIR`` of the same index.

Target: both ratios <= 1.10. Prints a table (or ``--json``); never asserts. Example::

    python benchmarks/bench_oci.py --size 512M --repeat 3
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench_sign import run  # same folder: shared helpers
from bench_transfer import build_bundle  # same folder: the same generated bundle

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' registry launcher
from tests.lib.registry import run_registry

from specbundle.mirror import Mirror
from specbundle.oci import (
    LayoutBackend,
    RegistryBackend,
    RegistryOptions,
    parse_reference,
    pull_bundle,
    push_bundle,
)
from specbundle.transfer import parse_size
from specbundle.verify import parse_policy


def main() -> None:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="512M", help="total bundle size (default 512M)")
    ap.add_argument("--files", type=int, default=4, help="target weight shards")
    ap.add_argument("--repeat", type=int, default=3, help="rounds (best of, per arm)")
    ap.add_argument("--dir", type=Path, default=None, help="work folder (default: a temp dir)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args()
    work = args.dir or Path(tempfile.mkdtemp(prefix="bench-oci-"))
    try:
        mirror, policy_bytes, _ = build_bundle(work, parse_size(args.size), args.files)
        policy = parse_policy(policy_bytes, source="bench")
        layout = work / "layout"
        push_bundle(mirror, "bench", LayoutBackend(layout), "bench")
        total = sum(a.total_size for a in mirror.load_bundle("bench").artifacts)
        counter = itertools.count()

        def store(host: str, repo: str) -> RegistryBackend:
            return RegistryBackend(parse_reference(f"{host}/{repo}:bench"),
                                   RegistryOptions(plain_http=True))

        def fresh(fn: Callable[[str], object]) -> Callable[[], float]:
            """Run ``fn`` against a registry of its own, started and stopped off the clock:
            skopeo's blob-info cache would otherwise mount blobs it saw in earlier rounds."""
            def arm() -> float:
                with run_registry(work / f"reg-{next(counter)}") as reg:
                    t0 = time.perf_counter()
                    fn(reg.host)
                    took = time.perf_counter() - t0
                shutil.rmtree(work / f"reg-{next(counter) - 1}", ignore_errors=True)
                return took
            return arm

        with run_registry(work / "registry") as reg:
            push_bundle(mirror, "bench", store(reg.host, "bench/pulled"), "bench")
            scratch = work / "scratch"

            def timed(fn: Callable[[], object]) -> Callable[[], float]:
                def arm() -> float:
                    shutil.rmtree(scratch, ignore_errors=True)
                    t0 = time.perf_counter()
                    fn()
                    return time.perf_counter() - t0
                return arm

            sb_pull = timed(lambda: pull_bundle(store(reg.host, "bench/pulled"), "bench",
                                                Mirror.open(scratch, create=True), policy))
            sk_pull = timed(lambda: run([
                "skopeo", "copy", "--all", "--quiet", "--src-tls-verify=false",
                f"docker://{reg.host}/bench/pulled:bench", f"oci:{scratch}:bench"]))

            arms: dict[str, Callable[[], float]] = {
                "skopeo_push": fresh(lambda h: run([
                    "skopeo", "copy", "--all", "--quiet", "--dest-tls-verify=false",
                    f"oci:{layout}:bench", f"docker://{h}/bench/sk:bench"])),
                "specbundle_push": fresh(lambda h: push_bundle(
                    mirror, "bench", store(h, "bench/sb"), "bench")),
                "skopeo_pull": sk_pull, "specbundle_pull": sb_pull,
            }
            best = dict.fromkeys(arms, float("inf"))
            for _ in range(args.repeat):  # interleaved: load spikes hit every arm alike
                for name, arm in arms.items():
                    best[name] = min(best[name], arm())
            shutil.rmtree(scratch, ignore_errors=True)
        ratios = {"push_vs_skopeo": best["specbundle_push"] / best["skopeo_push"],
                  "pull_vs_skopeo": best["specbundle_pull"] / best["skopeo_pull"]}
        out = {"bytes": total, "cpus": os.cpu_count(), "seconds": best, "ratios": ratios}
        if args.json:
            print(json.dumps(out, indent=2))
            return
        print(f"bundle: {total / 2**20:.0f} MiB, {os.cpu_count()} CPUs, loopback registry")
        for k, v in best.items():
            print(f"  {k:<18} {v:8.3f} s  {total / v / 2**20:8.0f} MiB/s")
        for k, v in ratios.items():
            print(f"  {k:<18} {v:8.3f}x")
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
