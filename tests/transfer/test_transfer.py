"""Across the air gap: export -> import (verify first, then commit) -> verify, offline."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specbundle import attest
from specbundle.errors import VerificationError
from specbundle.mirror import Mirror
from specbundle.sign import sign_bundle
from specbundle.transfer import export_bundle, import_bundle, parse_size, read_index
from specbundle.verify import verify_bundle
from tests.lib.bundles import Signed


def _unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-rn", "true"], capture_output=True,
                          check=False).returncode == 0


_OFFLINE_SCRIPT = """
import json, sys
from specbundle.cli import main
codes = []
for args in json.loads(sys.argv[1]):
    try:
        main(args)
    except SystemExit as ex:
        codes.append(ex.code)
    print("\\n---8<---")
print(json.dumps(codes))
"""


def _offline_cli(*commands: list[str]) -> tuple[list[int], list[dict[str, object]]]:
    """Run CLI commands in ONE process inside a fresh user+network namespace (no network)."""
    res = subprocess.run(["unshare", "-rn", sys.executable, "-c", _OFFLINE_SCRIPT,
                          json.dumps(list(commands))], capture_output=True, text=True,
                         check=False)
    assert res.returncode == 0, res.stderr
    *outs, codes = res.stdout.split("---8<---")
    return json.loads(codes), [json.loads(o) for o in outs]


@pytest.mark.integration
@pytest.mark.parametrize("chunk", [None, "3K"])
def test_sign_export_import_verify_offline(signed: Signed, tmp_path: Path,
                                           chunk: str | None) -> None:
    if not _unshare_works():
        pytest.skip("unshare -rn (user + network namespaces) is not available here")
    s = signed
    (s.mirror.bundle_dir(s.record.name) / "render" / "vllm").mkdir(parents=True)
    (s.mirror.bundle_dir(s.record.name) / "render" / "vllm" / "serve.sh").write_text("vllm\n")
    out = tmp_path / "transfer"
    exported = export_bundle(s.mirror, s.record.name, out, [s.key],
                             chunk_size=parse_size(chunk) if chunk else None)
    assert exported.version == 1 and (exported.chunks > 1) == bool(chunk)
    assert not (out / "objects").exists() if chunk else (out / "objects").is_dir()
    dest = tmp_path / "isolated"
    trust = ["--trust", str(s.policy_path), "--mirror", str(dest), "--json"]
    codes, (imported, verified) = _offline_cli(["import", str(out), *trust],
                                               ["verify", s.record.name, *trust])
    assert codes == [0, 0]
    assert imported["status"] == "imported" and verified["ok"] is True
    m = Mirror.open(dest)
    assert m.read_bundle_file(s.record.name, "render/vllm/serve.sh") == b"vllm\n"
    events = m.read_events()
    assert [e["type"] for e in events] == ["import", "verify"]  # the CLI logs who verified
    assert events[1]["bundle"] == s.record.name and events[1]["data"]["result"] == "verified"
    assert events[1]["data"]["policy_sha256"] == verified["policy_sha256"]
    assert events[1]["data"]["problems"] == 0 and "@" in events[1]["data"]["by"]
    # one pass: every weight byte was hashed as it was written, none read again by verify
    report = imported["verification"]
    assert isinstance(report, dict)
    assert report["bytes_hashed_on_write"] == report["bytes_checked"] > 0
    assert not any((dest / "tmp").glob("import-*"))  # staging cleaned up
    again = import_bundle(out, m, s.policy)
    assert again.status == "unchanged" and again.version == 1  # idempotent


def test_replayed_old_index_is_refused(signed: Signed, tmp_path: Path) -> None:
    s = signed
    v1 = export_bundle(s.mirror, s.record.name, tmp_path / "v1", [s.key])
    sign_bundle(s.mirror, s.record.name, [s.key])  # later: new attestations, new export
    v2 = export_bundle(s.mirror, s.record.name, tmp_path / "v2", [s.key])
    assert (v1.version, v2.version) == (1, 2)
    dest = Mirror.open(tmp_path / "dest", create=True)
    assert import_bundle(tmp_path / "v2", dest, s.policy).status == "imported"
    with pytest.raises(VerificationError, match="rollback refused.*version 2.*version 1"):
        import_bundle(tmp_path / "v1", dest, s.policy)
    assert len(dest.read_events()) == 1


def test_a_missing_chunk_fails_and_nothing_becomes_visible(signed: Signed,
                                                           tmp_path: Path) -> None:
    res = export_bundle(signed.mirror, signed.record.name, tmp_path / "t", [signed.key],
                        chunk_size=2048)
    assert res.chunks > 3
    (tmp_path / "t" / "chunks" / "chunk-00002").unlink()
    dest = Mirror.open(tmp_path / "dest", create=True)
    with pytest.raises(VerificationError, match=r"chunk chunks/chunk-00002 is missing"):
        import_bundle(tmp_path / "t", dest, signed.policy)
    assert dest.bundle_names() == [] and not list(dest.root.glob("models--*"))


def test_altered_part_or_untrusted_index_is_refused(signed: Signed, tmp_path: Path) -> None:
    export_bundle(signed.mirror, signed.record.name, tmp_path / "t", [signed.key])
    obj = tmp_path / "t" / "objects" / signed.record.target.files[0].sha256
    obj.write_bytes(obj.read_bytes() + b"!")
    dest = Mirror.open(tmp_path / "dest", create=True)
    with pytest.raises(VerificationError, match="differs from the index"):
        import_bundle(tmp_path / "t", dest, signed.policy)
    assert dest.bundle_names() == []
    export_bundle(signed.mirror, signed.record.name, tmp_path / "u", [attest.generate_key()])
    with pytest.raises(VerificationError, match="not signed by a key the policy trusts"):
        import_bundle(tmp_path / "u", dest, signed.policy)


def test_interrupted_import_resumes(signed: Signed, tmp_path: Path) -> None:
    export_bundle(signed.mirror, signed.record.name, tmp_path / "t", [signed.key])
    dest = Mirror.open(tmp_path / "dest", create=True)
    seen = 0

    def stop(n: int) -> None:
        nonlocal seen
        seen += n
        if seen > 3000:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        import_bundle(tmp_path / "t", dest, signed.policy, progress=stop)
    assert dest.bundle_names() == []
    (staging,) = (dest.root / "tmp").glob("import-*")
    staged = sorted(p.name for p in (staging / "objects").rglob("*") if p.is_file())
    assert staged  # work survived the interruption
    calls: list[int] = []
    res = import_bundle(tmp_path / "t", dest, signed.policy, progress=calls.append)
    assert res.status == "imported" and dest.bundle_names() == [signed.record.name]
    assert res.verification is not None
    rep = res.verification
    # the rerun did not copy what was already staged, but verify re-hashed it (once)
    assert 0 < rep.bytes_hashed_on_write < rep.bytes_checked
    full: list[int] = []
    fresh = import_bundle(tmp_path / "t", Mirror.open(tmp_path / "fresh", create=True),
                          signed.policy, progress=full.append)
    assert fresh.verification is not None
    assert fresh.verification.bytes_hashed_on_write == fresh.verification.bytes_checked
    parts = read_index(tmp_path / "t", signed.policy)[0].parts
    assert sum(full) == sum(p.size for p in parts)  # a fresh import reads each byte once
    assert sum(calls) <= sum(full)  # and so does a resumed one
    assert verify_bundle(dest, signed.record.name, signed.policy).report.ok


def test_parse_size() -> None:
    assert parse_size("4G") == 4 << 30 and parse_size("700MiB") == 700 << 20
    assert parse_size("1024") == 1024
    with pytest.raises(ValueError, match="not a size"):
        parse_size("lots")


def test_a_damaged_chunk_is_named(signed: Signed, tmp_path: Path) -> None:
    export_bundle(signed.mirror, signed.record.name, tmp_path / "t", [signed.key],
                  chunk_size=2048)
    chunk = tmp_path / "t" / "chunks" / "chunk-00001"
    data = bytearray(chunk.read_bytes())
    data[100] ^= 0xFF
    chunk.write_bytes(bytes(data))
    dest = Mirror.open(tmp_path / "dest", create=True)
    with pytest.raises(VerificationError, match="chunk chunk-00001 content differs"):
        import_bundle(tmp_path / "t", dest, signed.policy)
    assert dest.bundle_names() == []
