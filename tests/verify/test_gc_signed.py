"""gc and presence follow the signed ``current`` version, not the unsigned ``bundle.json``.

A re-pull moves the working copy to a new commit; an import killed between the ``current``
flip and the working-copy update leaves the old working copy (or none). In both, gc must keep
every byte the current signed version names, so verify still passes afterwards.
"""

from __future__ import annotations

import pytest

from specbundle.mirror import Mirror, versions
from specbundle.sign import sign_bundle
from specbundle.transfer import export_bundle, import_bundle
from specbundle.verify import verify_bundle
from tests.lib.bundles import Signed, pulled_bundle, write_scan_report
from tests.lib.cli import run_cli
from tests.verify.test_faults import _run, _tmp_empty


def _repull(s: Signed) -> None:
    """Pull the same bundle again from changed source folders: a new commit per artifact."""
    pulled_bundle(s.tmp, s.mirror, "pair", seed=7)
    write_scan_report(s.mirror, "pair")


def test_gc_keeps_the_signed_version_after_a_repull(signed: Signed) -> None:
    sign_bundle(signed.mirror, "pair", [signed.key])  # two signed versions
    v2 = verify_bundle(signed.mirror, "pair", signed.policy)
    assert v2.version == 2
    _repull(signed)
    work = signed.mirror.load_bundle("pair")
    assert work.target.commit != v2.record.target.commit  # the working copy moved
    signed.mirror.gc()
    again = verify_bundle(signed.mirror, "pair", signed.policy)
    assert again.version == 2 and again.record == v2.record
    # the working copy's new objects stay too (scan and sign read them next)
    assert all(signed.mirror.has_object(sha) for sha in work.referenced_blobs())
    sign_bundle(signed.mirror, "pair", [signed.key])  # signing the moved copy converges
    v3 = verify_bundle(signed.mirror, "pair", signed.policy)
    assert v3.version == 3 and v3.record.target.commit == work.target.commit
    signed.mirror.gc()  # the superseded commit's objects may go now; v3 still verifies
    assert verify_bundle(signed.mirror, "pair", signed.policy).version == 3


def test_an_admitted_version_stays_after_a_newer_one(signed: Signed) -> None:
    v1 = verify_bundle(signed.mirror, "pair", signed.policy)
    signed.mirror.write_bundle_file("pair", "admit/status.json",
                                    b'{"manifest_sha256": "%s"}\n' % v1.manifest_digest.encode())
    _repull(signed)
    sign_bundle(signed.mirror, "pair", [signed.key])
    signed.mirror.gc()
    assert all(signed.mirror.has_object(sha) for sha in v1.record.referenced_blobs())


@pytest.mark.parametrize("update", [False, True])
def test_import_killed_after_the_flip_then_gc(signed: Signed, tmp_path: pytest.TempPathFactory,
                                              update: bool,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = signed.tmp / "sets"
    export_bundle(signed.mirror, "pair", out / "v1", [signed.key])
    _repull(signed)
    sign_bundle(signed.mirror, "pair", [signed.key])  # version 2 names other commits
    export_bundle(signed.mirror, "pair", out / "v2", [signed.key])
    iso = Mirror.open(signed.tmp / "iso", create=True)
    if update:
        import_bundle(out / "v1", iso, signed.policy)
    res = _run("import", signed, mirror=iso.root, src=out / "v2", crash="versions.ref-flipped")
    assert res.returncode == 137, res.stderr
    assert versions.current_version(iso, "pair") == 2
    assert iso.bundle_names() == ["pair"]  # present: the signed version decides
    iso.gc()
    vb = verify_bundle(iso, "pair", signed.policy)
    assert vb.version == 2
    code, text, _ = run_cli(capsys, "mirror", "ls", "--mirror", str(iso.root), "--json")
    assert code == 0 and '"pair"' in text
    res = _run("import", signed, mirror=iso.root, src=out / "v2")
    assert res.returncode == 0, res.stderr
    assert iso.load_bundle("pair") == vb.record
    assert verify_bundle(iso, "pair", signed.policy).version == 2
    _tmp_empty(iso)
