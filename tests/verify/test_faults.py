"""kill -9 at every commit point of sign, export and import; two imports at once.

Each case runs the real library in a subprocess with ``SPECBUNDLE_CRASH_AT`` set, so the
process dies exactly as ``kill -9`` would. After each: the old or the new version is visible
and verifies, a rerun converges, and nothing is left in ``tmp/``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specbundle import _faults, attest
from specbundle.mirror import Mirror, versions
from specbundle.sign import sign_bundle
from specbundle.transfer import export_bundle, import_bundle
from specbundle.verify import verify_bundle
from tests.lib.bundles import Signed

_SCRIPT = """
import json, sys
from pathlib import Path
from specbundle import attest
from specbundle.mirror import Mirror
from specbundle.sign import sign_bundle
from specbundle.transfer import export_bundle, import_bundle
from specbundle.verify import load_policy
op, mirror, key, policy, src, out = json.loads(sys.argv[1])
m = Mirror.open(Path(mirror), create=True)
if op == "sign":
    sign_bundle(m, "pair", [attest.load_signing_key(Path(key))])
elif op == "export":
    export_bundle(m, "pair", Path(out), [attest.load_signing_key(Path(key))])
else:
    print(import_bundle(Path(src), m, load_policy(Path(policy))).status)
"""

SIGN_POINTS = ("sign.model-sig-written", "sign.attestations-appended", "sign.manifest-written",
               "versions.ref-staged")
EXPORT_POINTS = ("export.parts-written", "export.version-claimed", "export.index-written")
IMPORT_POINTS = ("import.staged", "import.objects-moved", "import.files-written",
                 "import.attestations-appended", "import.logged", "log.half-written",
                 "versions.ref-staged",
                 "versions.ref-flipped", "import.state-written")


def _run(op: str, s: Signed, *, mirror: Path | None = None, src: Path | None = None,
         out: Path | None = None, crash: str | None = None) -> subprocess.CompletedProcess[str]:
    key = s.tmp / "key.pem"
    if not key.exists():
        attest.write_private_key(s.key, key)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop(_faults.ENV, None)
    if crash:
        env[_faults.ENV] = crash
    args = [op, str(mirror or s.mirror.root), str(key), str(s.policy_path), str(src or ""),
            str(out or "")]
    return subprocess.run([sys.executable, "-c", _SCRIPT, json.dumps(args)], env=env,
                          capture_output=True, text=True, check=False, timeout=120)


def _tmp_empty(m: Mirror) -> None:
    assert sorted(p.name for p in m.tmp_dir.iterdir()) == []


def test_every_point_is_registered() -> None:
    import specbundle.transfer  # noqa: F401  (registers export/import points)

    assert set(SIGN_POINTS + EXPORT_POINTS + IMPORT_POINTS) <= _faults.REGISTERED


@pytest.mark.parametrize("point", SIGN_POINTS)
def test_sign_killed_at_a_commit_point(signed: Signed, point: str) -> None:
    res = _run("sign", signed, crash=point)
    assert res.returncode == 137, res.stderr
    vb = verify_bundle(signed.mirror, "pair", signed.policy)  # the old version still verifies
    assert vb.version == 1
    assert _run("sign", signed).returncode == 0
    vb = verify_bundle(signed.mirror, "pair", signed.policy)
    assert vb.version > 1 and vb.manifest.previous is not None


@pytest.mark.parametrize("point", EXPORT_POINTS)
def test_export_killed_at_a_commit_point(signed: Signed, tmp_path: Path, point: str) -> None:
    res = _run("export", signed, out=tmp_path / "set", crash=point)
    assert res.returncode == 137, res.stderr
    assert _run("export", signed, out=tmp_path / "set").returncode == 0
    assert not list((tmp_path / "set").rglob("*.part"))
    dest = Mirror.open(tmp_path / "iso", create=True)
    got = import_bundle(tmp_path / "set", dest, signed.policy)
    # a version claimed by the killed run is never handed out again
    assert got.version == (2 if point != "export.parts-written" else 1)
    verify_bundle(dest, "pair", signed.policy)


@pytest.mark.parametrize("point", IMPORT_POINTS)
def test_import_of_an_update_killed_at_a_commit_point(signed: Signed, tmp_path: Path,
                                                      point: str) -> None:
    export_bundle(signed.mirror, "pair", tmp_path / "v1", [signed.key])
    sign_bundle(signed.mirror, "pair", [signed.key])  # bundle version 2
    export_bundle(signed.mirror, "pair", tmp_path / "v2", [signed.key])
    iso = Mirror.open(tmp_path / "iso", create=True)
    import_bundle(tmp_path / "v1", iso, signed.policy)
    res = _run("import", signed, mirror=iso.root, src=tmp_path / "v2", crash=point)
    assert res.returncode == 137, res.stderr
    vb = verify_bundle(iso, "pair", signed.policy)  # v1 or v2, never a mixture
    assert vb.version in (1, 2)
    assert _imports(iso).count(vb.manifest_digest) == 1  # logged before it became visible
    res = _run("import", signed, mirror=iso.root, src=tmp_path / "v2")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == ("unchanged" if point == "import.state-written"
                                  else "imported")
    vb = verify_bundle(iso, "pair", signed.policy)
    assert vb.version == 2 and iso.load_bundle("pair") == vb.record
    assert _imports(iso).count(vb.manifest_digest) == 1  # the rerun logs it exactly once
    _tmp_empty(iso)


def _imports(m: Mirror) -> list[str]:
    return [e["data"]["manifest_sha256"] for e in m.read_events() if e["type"] == "import"]


def test_two_imports_at_once(signed: Signed, tmp_path: Path) -> None:
    export_bundle(signed.mirror, "pair", tmp_path / "set", [signed.key])
    iso = tmp_path / "iso"
    Mirror.open(iso, create=True)
    key = signed.tmp / "key.pem"
    attest.write_private_key(signed.key, key)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    args = json.dumps(["import", str(iso), str(key), str(signed.policy_path),
                       str(tmp_path / "set"), ""])
    procs = [subprocess.Popen([sys.executable, "-c", _SCRIPT, args], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert sorted(o.strip() for o, _ in outs) in (["imported", "unchanged"],
                                                  ["imported", "imported"])
    m = Mirror.open(iso)
    assert verify_bundle(m, "pair", signed.policy).version == 1
    assert versions.current_version(m, "pair") == 1
    _tmp_empty(m)
