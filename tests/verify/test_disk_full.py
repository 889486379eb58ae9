"""A full disk during import and export: exit 6 naming the path and the bytes needed, no
temp file or ``.part`` left behind, and the rerun after space is freed converges."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbundle import attest
from specbundle.mirror import Mirror
from specbundle.transfer import export_bundle
from specbundle.verify import verify_bundle
from tests.lib.bundles import Signed
from tests.lib.cli import run_cli
from tests.lib.fs import fill


def _disk_message(err: str, where: Path) -> None:
    assert "no space left" in err and "bytes needed" in err, err
    assert str(where) in err
    assert "Traceback" not in err and "[Errno" not in err


def test_export_to_a_full_medium(signed: Signed, small_fs: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    key = signed.tmp / "key.pem"
    attest.write_private_key(signed.key, key)
    out = small_fs / "set"
    out.mkdir()
    filler = fill(small_fs)
    code, _, err = run_cli(capsys, "export", "pair", "--mirror", str(signed.mirror.root),
                           "--to", str(out), "--key", str(key))
    assert code == 6, err
    _disk_message(err, out)
    assert not list(out.rglob("*.part")) and not (out / "index.json").exists()
    filler.unlink()
    code, _, err = run_cli(capsys, "export", "pair", "--mirror", str(signed.mirror.root),
                           "--to", str(out), "--key", str(key))
    assert code == 0, err
    assert not list(out.rglob("*.part"))


def test_import_into_a_full_mirror(signed: Signed, small_fs: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    export_bundle(signed.mirror, "pair", signed.tmp / "set", [signed.key])
    iso = Mirror.open(small_fs / "iso", create=True)
    filler = fill(small_fs)
    args = ("import", str(signed.tmp / "set"), "--mirror", str(iso.root),
            "--trust", str(signed.policy_path))
    code, _, err = run_cli(capsys, *args)
    assert code == 6, err
    _disk_message(err, iso.root / "tmp")
    assert list(iso.tmp_dir.iterdir()) == []  # its own staging is gone
    assert iso.bundle_names() == []
    filler.unlink()
    code, _, err = run_cli(capsys, *args)
    assert code == 0, err
    assert verify_bundle(iso, "pair", signed.policy).version == 1
    assert list(iso.tmp_dir.iterdir()) == []


def test_gc_reclaims_a_killed_importers_staging_at_once(signed: Signed) -> None:
    m = signed.mirror
    stale = m.tmp_dir / "import-0123456789abcdef01234567"
    (stale / "objects").mkdir(parents=True)
    (stale / "objects" / "x").write_bytes(b"x" * 1000)
    upload = m.tmp_dir / "oci-uploads"
    upload.mkdir()
    res = m.gc()
    assert "tmp/import-0123456789abcdef01234567" in res.removed_tmp
    assert not stale.exists() and upload.exists()  # push's resumable uploads are not staging
    verify_bundle(m, "pair", signed.policy)
