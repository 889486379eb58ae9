"""Import hashes each byte once; the digests it hands verify can never vouch for other bytes."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbundle.errors import VerificationError
from specbundle.mirror import Mirror
from specbundle.record import FileEntry
from specbundle.transfer import export_bundle, import_bundle, read_index
from specbundle.verify import (
    BundleVerificationFailed,
    HashedFile,
    hash_existing,
    verify_bundle,
    write_hashed,
)
from specbundle.verify.hashed import proven_digest
from tests.lib.bundles import Signed


def _weight(s: Signed) -> FileEntry:
    return max(s.record.target.files, key=lambda f: f.size)


def _flipped(data: bytes) -> bytes:
    b = bytearray(data)
    b[len(b) // 2] ^= 0x01
    return bytes(b)


def _swap(path: Path, data: bytes) -> None:
    """Put ``data`` at ``path`` as a new file (a new inode), as an attacker's rename would."""
    tmp = path.with_name(path.name + ".evil")
    tmp.write_bytes(data)
    tmp.replace(path)


def test_a_staged_object_whose_bytes_differ_from_the_index_is_refused(signed: Signed) -> None:
    """The digest verify uses is that of the bytes written, never the name they were put under."""
    f = _weight(signed)
    obj = signed.mirror.object_path(f.sha256)
    bad = _flipped(obj.read_bytes())
    obj.chmod(0o644)
    rec = write_hashed([bad[:100], bad[100:]], obj)  # staged under the index's digest
    assert rec.sha256 != f.sha256 and rec.size == f.size
    events = len(signed.mirror.read_events())
    with pytest.raises(BundleVerificationFailed) as err:
        verify_bundle(signed.mirror, signed.record.name, signed.policy, hashed=[rec])
    (p,) = err.value.report.problems
    assert (p.kind, p.subject, p.expected, p.actual) == (
        "changed-file", f"target:{f.path}", f.sha256, rec.sha256)
    assert err.value.report.bytes_hashed_on_write == f.size  # refused from the record alone
    assert len(signed.mirror.read_events()) == events  # verify_bundle itself logs nothing


def test_a_record_does_not_vouch_for_a_file_swapped_or_rewritten_after_hashing(
        signed: Signed) -> None:
    f = _weight(signed)
    obj = signed.mirror.object_path(f.sha256)
    good = obj.read_bytes()
    rec = hash_existing(obj)
    assert rec.sha256 == f.sha256 and proven_digest(obj, {rec.file_id: rec}) == f.sha256
    ok = verify_bundle(signed.mirror, signed.record.name, signed.policy, hashed=[rec])
    assert ok.report.bytes_hashed_on_write == f.size < ok.report.bytes_checked
    _swap(obj, _flipped(good))  # same size, new inode
    assert proven_digest(obj, {rec.file_id: rec}) is None
    with pytest.raises(BundleVerificationFailed) as err:
        verify_bundle(signed.mirror, signed.record.name, signed.policy, hashed=[rec])
    assert [p.kind for p in err.value.report.problems] == ["changed-file"]
    assert err.value.report.bytes_hashed_on_write == 0  # re-read, not taken on trust
    rec2 = hash_existing(obj)
    obj.chmod(0o644)
    with obj.open("ab") as fh:  # rewritten in place: the size (and mtime) no longer match
        fh.write(b"\0")
    with pytest.raises(BundleVerificationFailed) as err:
        verify_bundle(signed.mirror, signed.record.name, signed.policy, hashed=[rec2])
    assert [p.kind for p in err.value.report.problems] == ["changed-file"]


def test_hash_records_cannot_be_forged() -> None:
    with pytest.raises(TypeError, match="only created by specbundle.verify.hashed"):
        HashedFile("0" * 64, 1, 0, 0, 0, object())


def test_import_refuses_an_object_altered_in_staging_before_verify(signed: Signed,
                                                                  tmp_path: Path) -> None:
    """Between staging and verify an object is swapped for other bytes: nothing becomes visible."""
    export_bundle(signed.mirror, signed.record.name, tmp_path / "t", [signed.key])
    idx = read_index(tmp_path / "t", signed.policy)[0]
    object_bytes = sum(p.size for p in idx.parts if p.path.startswith("objects/"))
    dest = Mirror.open(tmp_path / "dest", create=True)
    f = _weight(signed)
    seen, swapped = 0, list[Path]()

    def tamper(n: int) -> None:  # called while the bundle/ parts stage, after every object
        nonlocal seen
        seen += n
        if seen > object_bytes and not swapped:
            (staged,) = (dest.root / "tmp").glob(f"import-*/objects/sha256/*/{f.sha256}")
            _swap(staged, _flipped(staged.read_bytes()))
            swapped.append(staged)

    with pytest.raises(BundleVerificationFailed) as err:
        import_bundle(tmp_path / "t", dest, signed.policy, progress=tamper)
    assert swapped
    assert [(p.kind, p.subject) for p in err.value.report.problems] == [
        ("changed-file", f"target:{f.path}")]
    assert dest.bundle_names() == [] and not list(dest.root.glob("models--*"))
    assert not dest.has_object(f.sha256) and dest.read_events() == []


def test_resumed_import_rehashes_a_damaged_staged_object(signed: Signed, tmp_path: Path) -> None:
    """Objects left by an interrupted run are not trusted: verify re-reads them."""
    export_bundle(signed.mirror, signed.record.name, tmp_path / "t", [signed.key])
    dest = Mirror.open(tmp_path / "dest", create=True)
    f = _weight(signed)

    def stop(n: int) -> None:
        if list((dest.root / "tmp").glob(f"import-*/objects/sha256/*/{f.sha256}")):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        import_bundle(tmp_path / "t", dest, signed.policy, progress=stop)
    (staged,) = (dest.root / "tmp").glob(f"import-*/objects/sha256/*/{f.sha256}")
    staged.chmod(0o644)
    with staged.open("r+b") as fh:  # same size, so staging's size check keeps it
        fh.seek(f.size // 2)
        byte = fh.read(1)
        fh.seek(f.size // 2)
        fh.write(bytes([byte[0] ^ 0x01]))
    with pytest.raises(VerificationError) as err:
        import_bundle(tmp_path / "t", dest, signed.policy)
    assert isinstance(err.value, BundleVerificationFailed)
    assert [p.kind for p in err.value.report.problems] == ["changed-file"]
    assert dest.bundle_names() == []
