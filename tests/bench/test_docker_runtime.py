"""``runtime="docker"``: both arms and the draft run from the bundle's engine image.

Uses the images tests' Docker fixtures (a llama-server image built with ``docker import``);
skips with the reason when no Docker daemon answers (start one with ci/start-dockerd.sh).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from specbundle.bench import BenchOptions, run_bench
from specbundle.bundle import read_unsigned
from specbundle.images import save_images
from specbundle.synth import SynthPair
from tests.lib.bundles import pull_synth
from tests.lib.specs import bundle_doc

pytestmark = [pytest.mark.docker, pytest.mark.engine, pytest.mark.slow]


def _host_network() -> bool:
    """Engine containers use the daemon's host network: only that loopback reaches them."""
    pids = subprocess.run(["pgrep", "-x", "dockerd"], capture_output=True, text=True,
                          check=False).stdout.split()
    try:
        mine = Path("/proc/self/ns/net").readlink()
        return bool(pids) and all(Path(f"/proc/{p}/ns/net").readlink() == mine for p in pids)
    except OSError:
        return False


def test_bench_runs_the_rendered_commands_in_the_loaded_image(
        tmp_path: Path, bench_pairs: dict[str, SynthPair], llama_image: str) -> None:
    if not _host_network():
        pytest.skip("in an isolated network namespace: the containers' host loopback is "
                    "out of reach")
    doc = bundle_doc("dock", bench_pairs["good"], levels=[1])
    doc["engines"]["llamacpp"].update(image=llama_image, n_gpu_layers="0",
                                      draft_n_gpu_layers="0")
    doc["deployment"]["gpus"] = 0  # a CPU container: no GPU device request
    # a fixed design: this test is about the runtime, not the stopping rule (which may add
    # rounds while the ratio's CI straddles the threshold)
    doc["bench"] = {**doc["bench"], "max_rounds": doc["bench"]["rounds"]}
    mirror = pull_synth(tmp_path / "mirror", doc)
    save_images(mirror, "dock")
    report = run_bench(read_unsigned(mirror, "dock"), options=BenchOptions(runtime="docker",
                                                            startup_timeout_s=120))
    assert report.server["runtime"] == "docker"
    lv = report.at_p95
    assert lv is not None and lv.base.completed == lv.spec.completed == 8
    assert report.validity.spec_counters_moved and report.validity.base_counters_flat
    assert lv.acceptance.request_cross_check is True
    assert lv.draft is not None and lv.c_measured is not None  # draft alone, in the image too
    logs = mirror.bundle_dir("dock") / "bench" / report.run_id / "logs"
    assert {p.name for p in logs.iterdir()} == {"base.log", "spec.log", "draft.log"}
