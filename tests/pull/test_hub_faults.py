"""Hub faults on a real loopback socket: a stalled metadata call, a trickling body, HTTP 429
with credentials in the endpoint URL, and Ctrl-C during a stalled download."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.lib.cli import run_cli
from tests.pull.fakehub import Behaviour, fault_hub

pytestmark = pytest.mark.integration

SECRET = "hf_TopSecretValue1234567890"


def _spec(tmp_path: Path) -> Path:
    p = tmp_path / "bundle.yaml"
    p.write_text("apiVersion: specbundle/v1\nmetadata: {name: faulty}\n"
                 "target: {repo: org/faulty}\ndraft: {repo: org/faulty}\n"
                 "speculative: {method: draft_model, num_speculative_tokens: 2}\n"
                 "engines: {vllm: {}}\ndeployment: {p95_concurrency: 1}\n")
    return p


def _pull(tmp_path: Path, endpoint: str, **env: str) -> subprocess.Popen[bytes]:
    full = {**os.environ, "SPECBUNDLE_HUB_READ_TIMEOUT": "2", **env}
    full.pop("HF_TOKEN", None)
    return subprocess.Popen(
        [sys.executable, "-m", "specbundle", "pull", str(_spec(tmp_path)), "--mirror",
         str(tmp_path / "m"), "--endpoint", endpoint, "--workers", "1"],
        env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _files() -> dict[str, bytes]:
    return {"config.json": b'{"architectures": ["LlamaForCausalLM"]}',
            "tokenizer.json": b"{" + b'"x": 1, ' * 30_000 + b'"y": 2}'}


def test_stalled_model_info_times_out(tmp_path: Path) -> None:
    with fault_hub(Behaviour(files=_files(), stall_info=True)) as url:
        t0 = time.monotonic()
        proc = _pull(tmp_path, url)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 6, err
    assert time.monotonic() - t0 < 30
    assert b"timed out" in err.lower() and b"Traceback" not in err


def test_trickling_download_is_abandoned_and_resumable(tmp_path: Path) -> None:
    with fault_hub(Behaviour(files=_files(), trickle=True)) as url:
        proc = _pull(tmp_path, url, SPECBUNDLE_HUB_MIN_RATE="1000",
                     SPECBUNDLE_HUB_RATE_WINDOW="1")
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 6, err
    assert b"abandoned" in err and b"B/s" in err
    assert not (tmp_path / "m" / "bundles" / "faulty" / "bundle.json").exists()


@pytest.mark.parametrize("where", ["info", "tree"])
def test_rate_limited_hub_never_prints_the_credentials(tmp_path: Path, where: str) -> None:
    behaviour = Behaviour(files=_files(), rate_limit_info=where == "info",
                          rate_limit_tree=where == "tree")
    with fault_hub(behaviour) as url:
        cred = url.replace("http://", f"http://mirror-user:{SECRET}@")
        proc = _pull(tmp_path, cred)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 6, err
    assert b"429" in err or b"rate" in err.lower()
    # one line of ours (plus its hint), none of huggingface_hub's retry narration
    lines = [ln for ln in err.decode().splitlines() if ln.strip()]
    assert not [ln for ln in lines if "Retry" in ln or "thrown while" in ln], lines
    assert len([ln for ln in lines if not ln.startswith("  hint:")]) == 1, lines
    for text in (out, err):
        assert SECRET.encode() not in text and b"mirror-user" not in text
    # the credentials still reached the hub, as a header
    assert any(a.startswith("Basic ") for a in behaviour.auth)
    for p in (tmp_path / "m").rglob("*"):
        if p.is_file():
            assert SECRET.encode() not in p.read_bytes(), p


def test_first_ctrl_c_stops_a_stalled_download(tmp_path: Path) -> None:
    with fault_hub(Behaviour(files=_files(), stall_body_after=1000)) as url:
        proc = _pull(tmp_path, url, SPECBUNDLE_HUB_READ_TIMEOUT="600")
        partial = tmp_path / "m" / "tmp" / "partial"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if partial.is_dir() and any(partial.glob("*.part")):
                break
            time.sleep(0.05)
        time.sleep(0.3)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        stopped = time.monotonic() - t0
    assert proc.returncode == 130, err
    assert stopped < 5, stopped
    assert b"Traceback" not in err


@pytest.mark.parametrize("bad", ["http://[::1", "http://host:99999", "ftp://host", "https://",
                                 "http://h:ab", "http://a b"])
def test_malformed_endpoints_are_usage_errors(
    tmp_path: Path, bad: str, capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run_cli(capsys, "pull", str(_spec(tmp_path)), "--mirror",
                           str(tmp_path / "m"), "--endpoint", bad)
    assert code == 2, (bad, err)
    assert len(err.strip().splitlines()) <= 2 and "Traceback" not in err
