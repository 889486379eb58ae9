"""Floors a mirror writer cannot roll back (issue 22 items 4, 5): each tamper with its twin.

The operator's trust state beside the policy keeps the highest accepted version, the log head
and every revocation per mirror; the mirror's own files can be rewritten at will.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from specbundle import attest
from specbundle.audit import verify_events
from specbundle.audit.revocation import revoke_key
from specbundle.errors import CorruptMirror, EnvironmentProblem, VerificationError
from specbundle.mirror import Mirror, versions
from specbundle.sign import sign_bundle
from specbundle.transfer import export_bundle, import_bundle
from specbundle.verify import BundleVerificationFailed, load_policy, verify_bundle
from specbundle.verify.floors import log_floor
from tests.lib.bundles import Signed
from tests.lib.policy import policy_doc, write_policy


def _state(s: Signed) -> dict[str, object]:
    data = json.loads((s.tmp / "trust.state.json").read_text())
    assert isinstance(data, dict)
    return data


def _rolled(s: Signed) -> str:
    with pytest.raises(BundleVerificationFailed) as err:
        verify_bundle(s.mirror, "pair", s.policy)
    assert err.value.exit_code == 3
    (p,) = [p for p in err.value.report.problems if p.kind == "rolled-back"]
    return p.message


def test_a_verification_records_version_and_log_head_beside_the_policy(signed: Signed) -> None:
    verify_bundle(signed.mirror, "pair", signed.policy)
    floors = _state(signed)["mirrors"][str(signed.mirror.root)]  # type: ignore[index]
    assert floors["bundles"]["pair"]["version"] == 1
    assert floors["log_head"]["seq"] >= 0
    verify_bundle(signed.mirror, "pair", signed.policy)  # twin: the same version again is fine


@pytest.mark.parametrize("delete_newer", [False, True])
def test_current_written_back_to_an_older_version_is_refused(signed: Signed,
                                                             delete_newer: bool) -> None:
    sign_bundle(signed.mirror, "pair", [signed.key])
    assert verify_bundle(signed.mirror, "pair", signed.policy).version == 2  # benign twin
    (signed.mirror.bundle_dir("pair") / "current").write_text("1\n")
    if delete_newer:
        shutil.rmtree(signed.mirror.bundle_dir("pair") / versions.version_rel(2))
    assert "rolled back: version 1 < 2 seen on" in _rolled(signed)


def test_an_older_version_verifies_in_another_mirror_and_with_another_state(
        signed: Signed, tmp_path: Path) -> None:
    """Floors are per mirror and per operator state: nothing leaks to an unrelated mirror."""
    sign_bundle(signed.mirror, "pair", [signed.key])
    verify_bundle(signed.mirror, "pair", signed.policy)
    (signed.mirror.bundle_dir("pair") / "current").write_text("1\n")
    fresh = load_policy(signed.policy_path, state=tmp_path / "other.state.json")
    assert verify_bundle(signed.mirror, "pair", fresh).version == 1


def test_the_same_version_number_with_another_manifest_is_refused(signed: Signed) -> None:
    verify_bundle(signed.mirror, "pair", signed.policy)
    bdir = signed.mirror.bundle_dir("pair")
    shutil.rmtree(bdir / "versions")
    (bdir / "current").unlink()
    time.sleep(1.1)  # another timeCreated: another manifest
    sign_bundle(signed.mirror, "pair", [signed.key])  # a second, different "version 1"
    assert "versions are immutable" in _rolled(signed)


def test_a_deleted_revocation_line_is_a_broken_chain_not_an_unrevoked_key(
        signed: Signed) -> None:
    other = attest.generate_key("ecdsa-p256")
    write_policy(signed.policy_path, policy_doc({"release": signed.key, "ops": other}))
    revoke_key(signed.mirror, signed.key.fingerprint, signer=other, reason="laptop stolen")
    signed.mirror.append_event("note", None, {})  # the revocation is not the last line
    with pytest.raises(BundleVerificationFailed, match="laptop stolen"):
        verify_bundle(signed.mirror, "pair", signed.policy)
    lines = signed.mirror.events_path.read_bytes().splitlines(keepends=True)
    kept = [ln for ln in lines if b'"type":"revocation"' not in ln]
    assert len(kept) == len(lines) - 1
    signed.mirror.events_path.write_bytes(b"".join(kept))
    with pytest.raises(CorruptMirror, match="does not chain"):
        verify_bundle(signed.mirror, "pair", signed.policy)


def test_a_cut_log_tail_with_the_revocation_and_checkpoint_is_refused(signed: Signed) -> None:
    other = attest.generate_key("ecdsa-p256")
    write_policy(signed.policy_path, policy_doc({"release": signed.key, "ops": other}))
    verify_bundle(signed.mirror, "pair", signed.policy)  # records the head before the cut
    before = signed.mirror.events_path.read_bytes()
    revoke_key(signed.mirror, signed.key.fingerprint, signer=other, reason="laptop stolen")
    with pytest.raises(BundleVerificationFailed, match="laptop stolen"):
        verify_bundle(signed.mirror, "pair", signed.policy)  # the revocation is recorded
    signed.mirror.events_path.write_bytes(before)  # the tail (revocation) is cut
    with pytest.raises(VerificationError, match="the log was truncated"):
        verify_bundle(signed.mirror, "pair", signed.policy)
    assert signed.key.fingerprint in _state(signed)["revocations"]  # type: ignore[operator]


def test_a_revocation_seen_once_survives_a_rewritten_log(signed: Signed, tmp_path: Path) -> None:
    """Even a whole new, well-chained log cannot un-revoke: the state remembers the key."""
    other = attest.generate_key("ecdsa-p256")
    write_policy(signed.policy_path, policy_doc({"release": signed.key, "ops": other}))
    revoke_key(signed.mirror, signed.key.fingerprint, signer=other, reason="laptop stolen")
    with pytest.raises(BundleVerificationFailed):
        verify_bundle(signed.mirror, "pair", signed.policy)
    # a different mirror (new identity, clean log) still refuses the key
    copy = Mirror(tmp_path / "copy")
    shutil.copytree(signed.mirror.root, copy.root, symlinks=True)
    copy.events_path.unlink()
    with pytest.raises(BundleVerificationFailed, match="laptop stolen"):
        verify_bundle(copy, "pair", signed.policy)


def test_a_rewritten_log_of_the_same_length_is_refused(signed: Signed) -> None:
    verify_bundle(signed.mirror, "pair", signed.policy)
    events = signed.mirror.read_events()
    signed.mirror.events_path.write_bytes(b"")
    for ev in events:  # a fresh chain with the same number of entries
        signed.mirror.append_event(ev["type"] + "-forged", ev.get("bundle"), {})
    with pytest.raises(VerificationError, match="was rewritten"):
        verify_bundle(signed.mirror, "pair", signed.policy)


def test_an_unwritable_trust_state_fails_closed_only_when_a_floor_must_rise(
        signed: Signed) -> None:
    verify_bundle(signed.mirror, "pair", signed.policy)
    lock = signed.tmp / ".trust.state.json.lock"
    lock.unlink(missing_ok=True)
    lock.mkdir()  # no write can happen (even as root, for whom chmod does not stop writes)
    verify_bundle(signed.mirror, "pair", signed.policy)  # nothing new: read-only is fine
    sign_bundle(signed.mirror, "pair", [signed.key])
    with pytest.raises(EnvironmentProblem, match="cannot record the verified floors"):
        verify_bundle(signed.mirror, "pair", signed.policy)


def test_a_corrupt_state_file_is_an_error_not_an_empty_floor(signed: Signed) -> None:
    (signed.tmp / "trust.state.json").write_text('{"mirrors": 1}')
    with pytest.raises(VerificationError, match="trust state .* is corrupt"):
        verify_bundle(signed.mirror, "pair", signed.policy)


def test_audit_log_verify_checks_the_recorded_head(signed: Signed) -> None:
    verify_bundle(signed.mirror, "pair", signed.policy)
    floor = log_floor(signed.policy, signed.mirror)
    assert verify_events(signed.mirror, signed.policy.public_keys, floor).ok  # twin
    lines = signed.mirror.events_path.read_bytes().splitlines(keepends=True)
    signed.mirror.events_path.write_bytes(b"".join(lines[:-1]))
    res = verify_events(signed.mirror, signed.policy.public_keys, floor)
    assert not res.ok


# -- import: floors of the destination, and history is never rewritten ----------------------

def _set(s: Signed, tmp: Path, name: str) -> Path:
    export_bundle(s.mirror, s.record.name, tmp / name, [s.key])
    return tmp / name


def test_import_of_an_older_version_after_current_was_rolled_back(signed: Signed,
                                                                  tmp_path: Path) -> None:
    old = _set(signed, tmp_path, "v1")
    sign_bundle(signed.mirror, "pair", [signed.key])
    new = _set(signed, tmp_path, "v2")
    dest = Mirror.open(tmp_path / "iso", create=True)
    assert import_bundle(new, dest, signed.policy).status == "imported"
    assert verify_bundle(dest, "pair", signed.policy).version == 2
    # the mirror writer rolls back current and every import bookkeeping file
    (dest.bundle_dir("pair") / "current").write_text("1\n")
    shutil.rmtree(dest.bundle_dir("pair") / "import")
    with pytest.raises(BundleVerificationFailed, match="rolled back"):
        import_bundle(old, dest, signed.policy)


def test_a_forked_set_never_replaces_an_existing_version(signed: Signed, tmp_path: Path) -> None:
    good = _set(signed, tmp_path, "good")
    dest = Mirror.open(tmp_path / "iso", create=True)
    import_bundle(good, dest, signed.policy)
    keep = versions.read_manifest(dest, "pair", 1)
    # a fork of the connected mirror (same key) re-signs version 1 differently
    fork = make_fork(signed, tmp_path)
    forked = _set(fork, tmp_path, "forked")
    with pytest.raises(VerificationError, match="immutable"):
        import_bundle(forked, dest, signed.policy)
    assert versions.read_manifest(dest, "pair", 1) == keep
    assert verify_bundle(dest, "pair", signed.policy).version == 1


def test_a_set_carrying_a_rewritten_older_version_leaves_it_alone(signed: Signed,
                                                                  tmp_path: Path) -> None:
    dest = Mirror.open(tmp_path / "iso", create=True)
    import_bundle(_set(signed, tmp_path, "v1"), dest, signed.policy)
    rel = versions.version_rel(1, versions.SCAN_REPORT)
    keep = dest.read_bundle_file("pair", rel)
    sign_bundle(signed.mirror, "pair", [signed.key])
    # the exporting mirror's version 1 folder was tampered with: only version 2 is committed
    (signed.mirror.bundle_dir("pair") / rel).write_bytes(b"{}")
    assert import_bundle(_set(signed, tmp_path, "v2"), dest, signed.policy).version == 2
    assert dest.read_bundle_file("pair", rel) == keep
    assert verify_bundle(dest, "pair", signed.policy).version == 2


def make_fork(s: Signed, tmp: Path) -> Signed:
    """A copy of the connected mirror whose version 1 is signed again (other bytes)."""
    root = tmp / "fork"
    shutil.copytree(s.mirror.root, root, symlinks=True)
    m = Mirror(root)
    shutil.rmtree(m.bundle_dir("pair") / "versions")
    (m.bundle_dir("pair") / "current").unlink()
    time.sleep(1.1)
    sign_bundle(m, "pair", [s.key])
    return Signed(tmp, m, s.record, s.key, s.policy_path)


def test_audit_log_verify_checks_the_seq_an_import_recorded(signed: Signed,
                                                            tmp_path: Path) -> None:
    dest = Mirror.open(tmp_path / "iso", create=True)
    import_bundle(_set(signed, tmp_path, "v1"), dest, signed.policy)
    assert verify_events(dest, signed.policy.public_keys).ok  # twin
    lines = dest.events_path.read_bytes().splitlines(keepends=True)
    dest.events_path.write_bytes(b"".join(lines[:-1]))  # the import event is cut
    res = verify_events(dest, signed.policy.public_keys)
    assert any("an import recorded seq" in p for p in res.problems)
