"""Hostile transfer sets: paths, scopes, revocations and parser bombs, refused before use."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from specbundle import attest
from specbundle.audit.revocation import revoke_key
from specbundle.digest import sha256_bytes
from specbundle.errors import CorruptMirror, SpecError, VerificationError
from specbundle.mirror import Mirror
from specbundle.transfer import export_bundle, import_bundle
from specbundle.verify import BundleVerificationFailed, load_policy, verify_bundle
from tests.lib.bundles import Signed
from tests.lib.policy import policy_doc, write_policy


def _set(s: Signed, tmp: Path, name: str = "t") -> Path:
    export_bundle(s.mirror, s.record.name, tmp / name, [s.key])
    return tmp / name


def test_a_traversing_commit_in_the_carried_record_touches_nothing(signed: Signed,
                                                                   tmp_path: Path) -> None:
    """Item 1: the unsigned bundle.json in the set names ``../`` commits; import never uses it."""
    src = _set(signed, tmp_path)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("precious")
    rec_path = src / "bundle" / "bundle.json"
    rec = json.loads(rec_path.read_text())
    rec["artifacts"]["target"]["commit"] = "../../../../victim"
    rec_path.write_text(json.dumps(rec))
    dest = Mirror.open(tmp_path / "iso", create=True)
    with pytest.raises(VerificationError, match="differs from the index"):
        import_bundle(src, dest, signed.policy)  # the part no longer matches its signed digest
    assert (victim / "keep").read_text() == "precious"
    assert dest.bundle_names() == []


def test_a_signed_index_naming_a_traversing_part_is_refused(signed: Signed,
                                                            tmp_path: Path) -> None:
    src = _set(signed, tmp_path)
    env = attest.Envelope.from_json(json.loads((src / "index.json").read_bytes()))
    st = attest.parse_statement(env.payload)
    parts = [*st.predicate["parts"], {"path": "bundle/../../../escape", "size": 1,
                                      "sha256": "0" * 64}]
    bad = attest.Statement(st.subjects, st.predicate_type, {**st.predicate, "parts": parts})
    (src / "index.json").write_text(json.dumps(attest.sign_statement(bad, [signed.key])
                                               .to_json()))
    dest = Mirror.open(tmp_path / "iso", create=True)
    with pytest.raises(VerificationError, match="unsafe part path"):
        import_bundle(src, dest, signed.policy)
    assert not (tmp_path / "escape").exists() and dest.bundle_names() == []


def test_index_signed_by_a_key_scoped_to_other_repos_is_refused(signed: Signed,
                                                                tmp_path: Path) -> None:
    src = _set(signed, tmp_path)
    write_policy(signed.policy_path, policy_doc({"release": signed.key}, repos=("narrow/*",)))
    with pytest.raises(VerificationError, match="no signer may sign bundle 'pair'"):
        import_bundle(src, Mirror.open(tmp_path / "iso", create=True), signed.policy)


def test_a_key_revoked_on_the_connected_side_travels_with_the_set(signed: Signed,
                                                                   tmp_path: Path) -> None:
    """Revocations ride in the signed index and are honoured by import, then by verify."""
    other = attest.generate_key("ecdsa-p256")
    doc = policy_doc({"release": signed.key, "ops": other})
    write_policy(signed.policy_path, doc)
    src = _set(signed, tmp_path, "before")
    dest = Mirror.open(tmp_path / "iso", create=True)
    import_bundle(src, dest, signed.policy)
    revoke_key(signed.mirror, signed.key.fingerprint, signer=other, reason="key leaked")
    later = _set(signed, tmp_path, "after")  # exported with the old key, carries the revocation
    with pytest.raises(VerificationError, match="key leaked"):
        import_bundle(later, Mirror.open(tmp_path / "iso2", create=True), signed.policy)


def test_import_honours_a_revocation_in_the_policy(signed: Signed, tmp_path: Path) -> None:
    src = _set(signed, tmp_path)
    doc = policy_doc({"release": signed.key})
    doc["revoked"] = [{"fingerprint": signed.key.fingerprint, "reason": "retired"}]
    write_policy(signed.policy_path, doc)
    with pytest.raises(VerificationError, match="retired"):
        import_bundle(src, Mirror.open(tmp_path / "iso", create=True), signed.policy)


def test_a_deeply_nested_index_is_exit_3_not_a_crash(signed: Signed, tmp_path: Path) -> None:
    src = _set(signed, tmp_path)
    (src / "index.json").write_bytes(b"[" * 100_000)
    with pytest.raises(VerificationError, match="nested") as err:
        import_bundle(src, Mirror.open(tmp_path / "iso", create=True), signed.policy)
    assert err.value.exit_code == 3


def test_a_deeply_nested_attestation_line_is_exit_3(signed: Signed) -> None:
    log = attest.attestations_path(signed.mirror, "pair")
    with log.open("ab") as fh:
        fh.write(b"[" * 100_000 + b"\n")
    with pytest.raises(BundleVerificationFailed) as err:
        verify_bundle(signed.mirror, "pair", signed.policy)
    assert any(p.kind == "malformed" and "nested" in p.message
               for p in err.value.report.problems)


def test_a_duplicate_require_in_trust_yaml_is_refused(signed: Signed) -> None:
    text = signed.policy_path.read_text()
    signed.policy_path.write_text(text + "require:\n  scan-result: {threshold: 1}\n"
                                  "require:\n  scan-result: {threshold: 1}\n")
    with pytest.raises(SpecError, match="duplicate") as err:
        load_policy(signed.policy_path)
    assert err.value.exit_code == 2


def test_garbage_in_import_and_export_state_is_a_clear_error(signed: Signed,
                                                             tmp_path: Path) -> None:
    src = _set(signed, tmp_path)
    dest = Mirror.open(tmp_path / "iso", create=True)
    import_bundle(src, dest, signed.policy)
    (dest.bundle_dir("pair") / "import" / "state.json").write_text("{not json")
    with pytest.raises(VerificationError, match="import/state.json is corrupt") as err:
        import_bundle(src, dest, signed.policy)
    assert err.value.exit_code == 3
    (signed.mirror.bundle_dir("pair") / "export" / "state.json").write_text('{"version": "x"}')
    with pytest.raises(VerificationError, match="export/state.json is corrupt") as err:
        export_bundle(signed.mirror, "pair", tmp_path / "again", [signed.key])
    assert err.value.exit_code == 3


def test_import_refuses_an_isolated_log_shorter_than_it_has_seen(signed: Signed,
                                                                 tmp_path: Path) -> None:
    src = _set(signed, tmp_path)
    dest = Mirror.open(tmp_path / "iso", create=True)
    import_bundle(src, dest, signed.policy)
    from specbundle.sign import sign_bundle

    sign_bundle(signed.mirror, "pair", [signed.key])
    later = _set(signed, tmp_path, "later")
    dest.events_path.write_bytes(b"")  # the isolated log's tail (everything) is cut
    with pytest.raises(VerificationError, match="the log was truncated"):
        import_bundle(later, dest, signed.policy)


def test_never_already_imported_on_a_broken_bundle(signed: Signed, tmp_path: Path) -> None:
    """Item 8: a rerun of the same set repairs a bundle whose current version went missing."""
    src = _set(signed, tmp_path)
    dest = Mirror.open(tmp_path / "iso", create=True)
    import_bundle(src, dest, signed.policy)
    (dest.bundle_dir("pair") / "current").unlink()
    with pytest.raises(BundleVerificationFailed):
        verify_bundle(dest, "pair", signed.policy)
    assert import_bundle(src, dest, signed.policy).status == "imported"
    assert verify_bundle(dest, "pair", signed.policy).version == 1


@pytest.mark.parametrize(("field", "value"), [
    ("commit", "../../../../victim"), ("repo", "../evil"), ("path", "../../x"),
    ("path", "/etc/passwd"), ("path", "a\x00b"),
])
def test_a_record_naming_unsafe_identifiers_is_malformed(signed: Signed, field: str,
                                                         value: str) -> None:
    from specbundle.errors import MirrorError

    path = signed.mirror.bundle_dir("pair") / "bundle.json"
    rec = json.loads(path.read_text())
    if field == "path":
        rec["artifacts"]["target"]["files"][0]["path"] = value
    else:
        rec["artifacts"]["target"][field] = value
    path.write_text(json.dumps(rec))
    with pytest.raises(MirrorError, match="malformed"):
        signed.mirror.load_bundle("pair")


def _victim(tmp: Path) -> Path:
    victim = tmp / "victim"
    victim.mkdir()
    (victim / "keep").write_text("precious")
    return victim


def _staging(src: Path, dest: Mirror) -> Path:
    """Where import stages this set: ``tmp/import-<index digest>``."""
    return dest.root / "tmp" / f"import-{sha256_bytes((src / 'index.json').read_bytes())[:24]}"


def test_a_link_planted_as_the_import_staging_folder_is_refused(signed: Signed,
                                                                tmp_path: Path) -> None:
    """Item 1: the staging folder under the mirror's tmp/ is opened no-follow; a link there
    would have made import write (and, on a disk error, delete) the folder it names."""
    src = _set(signed, tmp_path)
    victim = _victim(tmp_path)
    dest = Mirror.open(tmp_path / "iso", create=True)
    _staging(src, dest).symlink_to(victim, target_is_directory=True)
    with pytest.raises(CorruptMirror, match="symbolic link") as err:
        import_bundle(src, dest, signed.policy)
    assert err.value.exit_code == 3 and "\n" not in err.value.message
    assert sorted(p.name for p in victim.iterdir()) == ["keep"]
    assert dest.bundle_names() == []


@pytest.mark.parametrize("what", ["link", "fifo", "folder"])
def test_a_staged_part_planted_as_a_link_fifo_or_folder_is_refused(
        signed: Signed, tmp_path: Path, what: str) -> None:
    """A part's staging file is written and renamed through its folder's fd: what stands on
    its name must be a regular file (a FIFO would hang the hash, a link would be read)."""
    src = _set(signed, tmp_path)
    victim = _victim(tmp_path)
    dest = Mirror.open(tmp_path / "iso", create=True)
    env = attest.Envelope.from_json(json.loads((src / "index.json").read_bytes()))
    sha = next(p["sha256"] for p in attest.parse_statement(env.payload).predicate["parts"]
               if p["path"].startswith("objects/"))
    staged = _staging(src, dest) / "tmp" / f"{sha}.staged"
    staged.parent.mkdir(parents=True)
    if what == "link":
        staged.symlink_to(victim / "keep")
    elif what == "fifo":
        os.mkfifo(staged)
    else:
        staged.mkdir()
    with pytest.raises(CorruptMirror) as err:
        import_bundle(src, dest, signed.policy)
    assert err.value.exit_code == 3
    assert ("symbolic link" if what == "link" else "not a regular file") in err.value.message
    assert (victim / "keep").read_text() == "precious" and dest.bundle_names() == []
    import_bundle(src, Mirror.open(tmp_path / "twin", create=True), signed.policy)  # twin
