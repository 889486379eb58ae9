"""Registry I/O is as hardened as hub I/O: a faulty proxy in front of the real registry.

A body cut mid-blob is resumed (and, when it keeps failing, is a network failure, exit 6, not
tampering); a stalled blob, a manifest dripped a byte at a time and an endless referrers list
end the pull within their limits; Ctrl-C stops a stalled pull within a second or two. After
each, a rerun converges and leaves no staging in ``tmp/``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from specbundle import attest
from specbundle.errors import UsageError
from specbundle.mirror import Mirror
from specbundle.oci import RegistryOptions, push_bundle
from tests.lib.bundles import signed_pair
from tests.lib.cli import run_cli
from tests.lib.fs import fill
from tests.lib.policy import trust_file
from tests.lib.registry import Registry
from tests.oci.conftest import backend
from tests.oci.proxy import fault_proxy

pytestmark = pytest.mark.integration

_REPO = "faults/pair"


@dataclass(frozen=True)
class Pushed:
    src: Mirror
    trust: Path
    registry: Registry


@pytest.fixture(scope="module")
def pushed(module_tmp: Path, registry: Registry) -> Pushed:
    key = attest.generate_key()
    src = Mirror.open(module_tmp / "m", create=True)
    signed_pair(module_tmp, src, key, "pair", target_seed=21)
    store = backend(f"{registry.host}/{_REPO}:v1", plain_http=True)
    push_bundle(src, "pair", store, "v1")
    store.close()
    return Pushed(src, trust_file(module_tmp, key), registry)


@pytest.fixture
def fast_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in {"READ_TIMEOUT": "2", "RATE_WINDOW": "2", "DEADLINE": "3"}.items():
        monkeypatch.setenv(f"SPECBUNDLE_OCI_{k}", v)


def _pull(capsys: pytest.CaptureFixture[str], host: str, dst: Path, p: Pushed
          ) -> tuple[int, str, str]:
    return run_cli(capsys, "oci", "pull", f"{host}/{_REPO}:v1", "--mirror", str(dst),
                   "--trust", str(p.trust), "--plain-http", "--json")


def _converges(capsys: pytest.CaptureFixture[str], dst: Path, p: Pushed) -> None:
    """A clean rerun verifies, holds the pushed bundle and leaves nothing staged."""
    code, out, err = _pull(capsys, p.registry.host, dst, p)
    assert code == 0, err
    assert json.loads(out)["verification"]["ok"]
    assert Mirror.open(dst).load_bundle("pair") == p.src.load_bundle("pair")
    assert not list((dst / "tmp").glob("oci-*"))


def test_a_cut_blob_is_resumed(tmp_path: Path, pushed: Pushed,
                               capsys: pytest.CaptureFixture[str]) -> None:
    with fault_proxy(pushed.registry.host, "cut", cuts=4) as proxy:
        code, out, err = _pull(capsys, proxy.host, tmp_path / "iso", pushed)
    assert proxy.faults == 4
    assert code == 0, err
    assert json.loads(out)["verification"]["ok"]
    assert not list((tmp_path / "iso" / "tmp").glob("oci-*"))


def test_a_connection_that_keeps_closing_is_a_network_failure(
        tmp_path: Path, pushed: Pushed, capsys: pytest.CaptureFixture[str]) -> None:
    with fault_proxy(pushed.registry.host, "cut-all") as proxy:
        code, _, err = _pull(capsys, proxy.host, tmp_path / "iso", pushed)
    assert code == 6, err  # not 3: nothing was tampered with
    assert "ended at 0 of" in err
    assert Mirror.open(tmp_path / "iso").bundle_names() == []
    _converges(capsys, tmp_path / "iso", pushed)


def test_a_stalled_blob_ends_the_pull(tmp_path: Path, pushed: Pushed, fast_limits: None,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    with fault_proxy(pushed.registry.host, "stall") as proxy:
        t0 = time.monotonic()
        code, _, err = _pull(capsys, proxy.host, tmp_path / "iso", pushed)
        took = time.monotonic() - t0
    assert code == 6, err
    assert took < 30, took
    _converges(capsys, tmp_path / "iso", pushed)


def test_a_dripped_manifest_meets_the_deadline(tmp_path: Path, pushed: Pushed,
                                               fast_limits: None,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    with fault_proxy(pushed.registry.host, "drip", drip_s=0.5) as proxy:
        t0 = time.monotonic()
        code, _, err = _pull(capsys, proxy.host, tmp_path / "iso", pushed)
        took = time.monotonic() - t0
    assert code == 6, err
    assert "abandoned" in err and took < 15, (took, err)
    _converges(capsys, tmp_path / "iso", pushed)


def test_an_endless_referrers_list_is_refused_unread(
        tmp_path: Path, pushed: Pushed, capsys: pytest.CaptureFixture[str]) -> None:
    with fault_proxy(pushed.registry.host, "huge-referrers") as proxy:
        code, _, err = _pull(capsys, proxy.host, tmp_path / "iso", pushed)
    assert proxy.faults >= 1
    assert code == 3, err
    assert "over the" in err and "limit" in err
    _converges(capsys, tmp_path / "iso", pushed)


def test_ctrl_c_stops_a_stalled_pull_at_once(tmp_path: Path, pushed: Pushed) -> None:
    dst = tmp_path / "iso"
    with fault_proxy(pushed.registry.host, "stall") as proxy:
        cmd = [sys.executable, "-m", "specbundle", "oci", "pull", f"{proxy.host}/{_REPO}:v1",
               "--mirror", str(dst), "--trust", str(pushed.trust), "--plain-http", "--json"]
        proc = subprocess.Popen(cmd, env={**os.environ}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            assert proxy.stalled.wait(60), "the pull never reached a blob"
            time.sleep(0.3)
            t0 = time.monotonic()
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=30)
            took = time.monotonic() - t0
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 130, err
    assert took < 2.5, took
    cmd[5] = f"{pushed.registry.host}/{_REPO}:v1"
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert not list((dst / "tmp").glob("oci-*"))


@pytest.mark.parametrize("chunk", [1, 1024, 8 << 30])
def test_chunk_sizes_outside_the_bounds_are_refused(chunk: int) -> None:
    with pytest.raises(UsageError, match="chunk size"):
        RegistryOptions(plain_http=True, chunk_size=chunk)


def test_oci_push_chunk_size_1_is_a_usage_error(tmp_path: Path, pushed: Pushed,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "oci", "push", "pair", f"{pushed.registry.host}/x/y:z",
                           "--mirror", str(pushed.src.root), "--plain-http",
                           "--chunk-size", "1")
    assert code == 2 and "chunk size" in err


def test_oci_pull_into_a_full_mirror(small_fs: Path, pushed: Pushed,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    dst = small_fs / "iso"
    Mirror.open(dst, create=True)
    filler = fill(small_fs)
    code, _, err = _pull(capsys, pushed.registry.host, dst, pushed)
    assert code == 6, err
    assert "no space left" in err and "bytes needed" in err and str(dst / "tmp") in err
    assert list((dst / "tmp").iterdir()) == []  # its own staging is gone
    filler.unlink()
    _converges(capsys, dst, pushed)


def test_bad_registry_inputs_are_refused(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    digest = "sha256:" + "ab" * 32
    auth = tmp_path / "auth.json"
    auth.write_text('[{"auths": {}}]')
    report = tmp_path / "r.json"
    report.write_text("{}")
    cases = [
        (["oci", "push", "pair", f"127.0.0.1:9/x/y@{digest}", "--mirror", str(tmp_path),
          "--plain-http"], 2, "not a digest"),
        (["oci", "attach", "127.0.0.1:9/x/y:v1", str(report), "--plain-http"], 2,
         "by digest, not by tag"),
        (["oci", "attach", f"127.0.0.1:9/x/y@{digest}", str(report), "--plain-http",
          "--auth-file", str(auth)], 6, "not a JSON object"),
    ]
    for args, want, why in cases:
        code, _, err = run_cli(capsys, *args)
        assert code == want, (args, err)
        assert why in err and "Traceback" not in err and "internal" not in err, err
