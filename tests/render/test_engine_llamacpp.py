"""The rendered llama.cpp shell script starts the real llama-server, offline, and speculates.

A tiny generated pair is pulled into a mirror through the ``dir:`` source, rendered for the
shell target, and the script is run inside a network namespace with only loopback up
(``unshare -rn``): ``/health`` answers, a completion reports ``timings.draft_n > 0``, and the
same script with ``SPECBUNDLE_SPECULATION=0`` starts the baseline arm, which drafts nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from specbundle.bundle import read_unsigned
from specbundle.mirror import Mirror
from specbundle.pull import pull_bundle
from specbundle.render import render_bundle
from specbundle.spec import parse_spec
from specbundle.synth import make_pair
from tests._engine import free_port

pytestmark = [pytest.mark.engine, pytest.mark.slow]

# Runs inside the namespace: start serve.sh, wait for /health, complete once, stop.
DRIVER = r"""
import json, os, signal, subprocess, sys, time, urllib.request
script, out_path, log_path = sys.argv[1:4]
port = os.environ["SPECBUNDLE_PORT"]
url = f"http://127.0.0.1:{port}"
log = open(log_path, "wb")
proc = subprocess.Popen(["sh", script], stdout=log, stderr=subprocess.STDOUT,
                        start_new_session=True)
result = {"health": None}
try:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                result["health"] = [r.status, json.loads(r.read())]
                break
        except OSError:
            time.sleep(0.2)
    if result["health"]:
        body = json.dumps({"prompt": "The draft model proposes", "n_predict": 48,
                           "temperature": 0.0, "top_k": 1, "ignore_eos": True,
                           "cache_prompt": False}).encode()
        req = urllib.request.Request(url + "/completion", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            result["completion"] = json.loads(r.read())
        with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
            result["metrics"] = r.read().decode()
    result["exited"] = proc.poll()
finally:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    json.dump(result, open(out_path, "w"))
"""


def _netns_prefix() -> list[str]:
    """``unshare -rn`` with loopback up, when this kernel lets us; else plain loopback."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return []
    probe = subprocess.run(["unshare", "-rn", "sh", "-c", "ip link set lo up"],
                           capture_output=True, check=False, timeout=30)
    return ["unshare", "-rn"] if probe.returncode == 0 else []


@pytest.fixture(scope="module")
def rendered(module_tmp: Path, llama_server_bin: Path) -> Path:
    root = module_tmp
    pair = make_pair(root / "pair", seed=3, hidden_size=128, intermediate_size=352,
                     target_layers=4, draft_layers=1)
    spec = parse_spec({
        "apiVersion": "specbundle/v1", "metadata": {"name": "synth-pair"},
        "target": {"repo": "synth/target", "source": f"dir:{pair.target_dir}",
                   "gguf_file": "model.gguf"},
        "draft": {"repo": "synth/draft", "source": f"dir:{pair.draft_dir}",
                  "gguf_file": "model.gguf"},
        "speculative": {"method": "draft_model", "num_speculative_tokens": 4},
        "engines": {"llamacpp": {"parallel": 1, "ctx_size": 1024, "threads": 2,
                                 "draft_p_min": 0.0, "n_gpu_layers": "0",
                                 "draft_n_gpu_layers": "0"}},
        "deployment": {"p95_concurrency": 1, "gpus": 0},
    })
    mirror = Mirror.open(root / "mirror", create=True)
    pull_bundle(spec, mirror)
    shutil.rmtree(root / "pair")  # the engine must serve from the mirror alone
    res = render_bundle(read_unsigned(mirror, "synth-pair"), "llamacpp", "shell")
    assert res.lint.ok
    return res.files[0]


def _serve(script: Path, binary: Path, tmp: Path, **env: str) -> dict[str, Any]:
    out, log = tmp / "result.json", tmp / "server.log"
    prefix = _netns_prefix()
    port = "18080" if prefix else str(free_port())  # a fresh namespace has every port free
    run_env = {"PATH": os.environ["PATH"], "HOME": str(tmp), "LLAMA_SERVER": str(binary),
               "SPECBUNDLE_HOST": "127.0.0.1", "SPECBUNDLE_PORT": port, **env}
    driver = f"ip link set lo up 2>/dev/null; exec {sys.executable} -c \"$0\" \"$@\""
    subprocess.run([*prefix, "sh", "-c", driver, DRIVER, str(script), str(out), str(log)],
                   env=run_env, check=True, timeout=300)
    result: dict[str, Any] = json.loads(out.read_text())
    result["log"] = log.read_text(errors="replace")
    result["isolated"] = bool(prefix)
    return result


def test_rendered_script_serves_with_speculation(rendered: Path, llama_server_bin: Path,
                                                 tmp_path: Path) -> None:
    got = _serve(rendered, llama_server_bin, tmp_path)
    assert got["health"] == [200, {"status": "ok"}], got["log"][-3000:]
    timings = got["completion"]["timings"]
    assert timings["predicted_n"] == 48
    assert timings["draft_n"] > 0, got["log"][-3000:]
    assert 0 <= timings["draft_n_accepted"] <= timings["draft_n"]
    assert "llamacpp:prompt_tokens_total" in got["metrics"]


def test_same_script_starts_the_baseline_arm(rendered: Path, llama_server_bin: Path,
                                             tmp_path: Path) -> None:
    got = _serve(rendered, llama_server_bin, tmp_path, SPECBUNDLE_SPECULATION="0")
    assert got["health"] == [200, {"status": "ok"}], got["log"][-3000:]
    timings = got["completion"]["timings"]
    assert timings["predicted_n"] == 48
    assert timings.get("draft_n", 0) == 0
