"""The tamper matrix: every row must fail verification, with the right reason."""

from __future__ import annotations

import base64
import json
import os
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from specbundle import attest
from specbundle.mirror import versions
from specbundle.sign import sign_bundle
from specbundle.verify import BundleVerificationFailed, Problem, verify_bundle
from tests.lib.bundles import Signed, make_signed
from tests.lib.policy import policy_doc, write_policy


def _fail(s: Signed, **kw: object) -> list[Problem]:
    with pytest.raises(BundleVerificationFailed) as err:
        verify_bundle(s.mirror, s.record.name, s.policy, **kw)  # type: ignore[arg-type]
    assert err.value.exit_code == 3
    return list(err.value.report.problems)


def _snap(s: Signed, role: str = "target") -> Path:
    art = s.record.artifact(role)  # type: ignore[arg-type]
    return s.mirror.snapshot_dir(art.repo, art.commit)


def _sig_rel(s: Signed, role: str) -> str:
    """Where the current version keeps an artifact's model.sig."""
    v = versions.current_version(s.mirror, s.record.name)
    assert v is not None
    return versions.version_rel(v, versions.model_sig_rel(role))


def _writable_object(s: Signed, rel: str) -> Path:
    obj = (_snap(s) / rel).resolve()
    obj.chmod(0o644)
    return obj


def test_untouched_bundle_verifies(signed: Signed) -> None:
    vb = verify_bundle(signed.mirror, signed.record.name, signed.policy)
    assert vb.report.ok and set(vb.roots) == {"target", "draft"}
    assert vb.report.files_checked == 10
    assert vb.report.statement_signers["pair-binding"]["draft"] == [signed.key.fingerprint]


def test_flip_one_byte_in_a_weight_file(signed: Signed) -> None:
    obj = _writable_object(signed, "model.safetensors")
    want = obj.name
    data = bytearray(obj.read_bytes())
    data[len(data) // 2] ^= 0x01
    obj.write_bytes(bytes(data))
    (p,) = _fail(signed)
    assert (p.kind, p.subject, p.expected) == ("changed-file", "target:model.safetensors", want)
    assert p.actual and p.actual != want


def test_truncate_a_file(signed: Signed) -> None:
    obj = _writable_object(signed, "generation_config.json")  # unique to the target
    with obj.open("r+b") as fh:
        fh.truncate(3)
    (p,) = _fail(signed)
    assert (p.kind, p.subject) == ("changed-file", "target:generation_config.json")


def test_add_a_file(signed: Signed) -> None:
    sha = signed.mirror.put_bytes(b"an extra file")
    blob = signed.mirror.model_dir("org/target") / "blobs" / sha
    blob.symlink_to(os.path.relpath(signed.mirror.object_path(sha), blob.parent))
    (_snap(signed) / "extra.bin").symlink_to(f"../../blobs/{sha}")
    (p,) = _fail(signed)
    assert (p.kind, p.subject, p.actual) == ("extra-file", "target:extra.bin", sha)


def test_remove_a_file(signed: Signed) -> None:
    (_snap(signed, "draft") / "tokenizer.json").unlink()
    (p,) = _fail(signed)
    assert (p.kind, p.subject) == ("missing-file", "draft:tokenizer.json")


def test_rename_a_file(signed: Signed) -> None:
    snap = _snap(signed)
    (snap / "config.json").rename(snap / "config.json.bak")
    kinds = {(p.kind, p.subject) for p in _fail(signed)}
    assert kinds == {("missing-file", "target:config.json"),
                     ("extra-file", "target:config.json.bak")}


def test_symlink_to_identical_content_outside_the_store(signed: Signed) -> None:
    link = _snap(signed) / "model.safetensors"
    copy = signed.tmp / "elsewhere.safetensors"
    copy.write_bytes(link.read_bytes())
    link.unlink()
    link.symlink_to(copy)
    (p,) = _fail(signed)
    assert (p.kind, p.subject) == ("unsafe-file", "target:model.safetensors")
    assert "outside the mirror object store" in p.message and p.actual == str(copy)


def test_swap_the_draft_for_another_signed_draft(signed: Signed) -> None:
    other = make_signed(signed.tmp / "b", name="other", seed=7, mirror=signed.mirror,
                        key=signed.key, draft_repo="org/draft2")
    assert other.record.draft is not None
    # The unsigned record and the model.sig now name the other bundle's draft ...
    signed.mirror.save_bundle(replace(signed.record, draft=other.record.draft))
    sig = signed.mirror.read_bundle_file("other", _sig_rel(other, "draft"))
    assert sig is not None
    signed.mirror.write_bundle_file(signed.record.name, _sig_rel(signed, "draft"), sig)
    # ... and the other bundle's pair binding is replayed into this bundle's log.
    log = attest.attestations_path(signed.mirror, "other").read_bytes().splitlines()
    with attest.attestations_path(signed.mirror, signed.record.name).open("ab") as fh:
        fh.write(b"\n".join(log) + b"\n")
    problems = _fail(signed)
    # The signed manifest still names the original draft: the swapped model.sig is refused,
    # and the bundle keeps its own draft (render/bench only ever see the manifest's).
    assert ("record-mismatch", "draft model.sig") in {(p.kind, p.subject) for p in problems}
    assert {p.kind for p in problems} <= {"record-mismatch", "binding-mismatch"}


def test_sign_with_a_key_not_in_the_policy(tmp_path: Path) -> None:
    s = make_signed(tmp_path)
    stranger = attest.generate_key("ecdsa-p256")
    sign_bundle(s.mirror, s.record.name, [stranger])  # replaces model.sig, appends statements
    (p,) = _fail(s)  # the new version's manifest is signed by nobody the policy knows
    assert (p.kind, p.subject) == ("unknown-signature", "manifest")


def test_k_minus_one_of_k_approvals(tmp_path: Path) -> None:
    s = make_signed(tmp_path)
    ml = attest.generate_key("ed25519")
    write_policy(s.policy_path, policy_doc(
        {"release": s.key, "ml-lead": ml},
        require={"pair-binding": {"threshold": 2, "signers": ["release", "ml-lead"]},
                 "scan-result": {"threshold": 1}}))
    (p,) = _fail(s)  # the manifest binds every requirement: it needs the highest k
    assert (p.kind, p.subject, p.expected, p.actual) == (
        "unmet-threshold", "manifest", "2 eligible signer(s)", "1")
    sign_bundle(s.mirror, s.record.name, [s.key, ml])  # the second approver signs too
    assert verify_bundle(s.mirror, s.record.name, s.policy).report.ok


def test_expired_statement(signed: Signed) -> None:
    write_policy(signed.policy_path, policy_doc({"release": signed.key}, max_age="1d"))
    assert verify_bundle(signed.mirror, signed.record.name, signed.policy).report.ok
    later = datetime.now(UTC) + timedelta(days=2)
    problems = _fail(signed, now=later)
    assert {p.kind for p in problems} == {"expired"}
    assert {p.subject for p in problems} >= {"pair-binding for target (org/target)",
                                             "fetch-provenance for draft (org/draft)"}


def test_corrupted_signature_base64(signed: Signed) -> None:
    raw = json.loads(signed.mirror.read_bundle_file(signed.record.name,
                                                    _sig_rel(signed, "target")) or b"")
    raw["dsseEnvelope"]["signatures"][0]["sig"] = "@@not-base64@@"
    signed.mirror.write_bundle_file(signed.record.name, _sig_rel(signed, "target"),
                                    json.dumps(raw).encode())
    log = attest.attestations_path(signed.mirror, signed.record.name)
    lines = log.read_bytes().splitlines()
    env = json.loads(lines[3])
    env["signatures"][0]["sig"] = env["signatures"][0]["sig"][:-8] + "%%%%%%%%"
    log.write_bytes(b"\n".join([*lines[:3], json.dumps(env).encode()]) + b"\n")
    problems = _fail(signed)
    assert ("malformed", "target model.sig") in {(p.kind, p.subject) for p in problems}
    assert any(p.kind == "malformed" and "line 4" in p.message and "base64" in p.message
               for p in problems)


def test_wrong_predicate_type(signed: Signed) -> None:
    art = signed.record.target
    sig = signed.mirror.read_bundle_file(signed.record.name, _sig_rel(signed, "target")) or b""
    manifest = attest.open_model_sig(sig, signed.key.public)
    st = manifest.to_statement()
    wrong = attest.Statement(st.subjects, "https://model_signing/signature/v0.9", st.predicate)
    env = attest.sign_envelope(wrong.to_bytes(), attest.INTOTO_PAYLOAD_TYPE, [signed.key],
                               keyid=False)
    bundle = json.loads(sig)
    bundle["dsseEnvelope"] = env.to_json()
    signed.mirror.write_bundle_file(signed.record.name, _sig_rel(signed, "target"),
                                    json.dumps(bundle).encode())
    problems = _fail(signed)
    assert ("wrong-predicate-type", "target model.sig") in {(p.kind, p.subject)
                                                             for p in problems}
    assert art.repo == "org/target"
    assert base64.b64decode(env.to_json()["payload"]) == wrong.to_bytes()


def test_an_attestation_of_unknown_predicate_type_fails_closed(signed: Signed) -> None:
    subjects = attest.artifact_subjects("org/target", "ab" * 32, signed.record.target.commit)
    # built by hand: the builder refuses a type without a model (a forger does not use it)
    st = attest.Statement(tuple(subjects), "https://example.com/unknown/v1", {"x": 1})
    with signed.mirror.lock():
        attest.append_attestation(signed.mirror, signed.record.name,
                                  attest.sign_statement(st, [signed.key]))
    (p,) = _fail(signed)
    assert p.kind == "wrong-predicate-type" and p.actual == "https://example.com/unknown/v1"


def test_missing_signature_and_unscoped_key(signed: Signed) -> None:
    (signed.mirror.bundle_dir(signed.record.name) / _sig_rel(signed, "draft")).unlink()
    problems = _fail(signed)
    assert ("missing-signature", "draft model.sig") in {(p.kind, p.subject) for p in problems}
    write_policy(signed.policy_path, policy_doc({"release": signed.key},
                                                repos=("org/target",)))
    problems = _fail(signed)  # the key may not sign a bundle with an org/draft artifact
    assert ("out-of-scope", "manifest") in {(p.kind, p.subject) for p in problems}


def test_target_only_bundle_signs_and_verifies(tmp_path: Path) -> None:
    """MTP and n-gram bundles have no draft: sign, bind and verify the target alone."""
    from specbundle.mirror import Mirror
    from specbundle.pull import pull_bundle
    from specbundle.spec import load_spec
    from tests.lib.bundles import write_scan_report
    from tests.lib.models import make_model

    t = make_model(tmp_path / "src" / "target")
    spec = tmp_path / "mtp.yaml"
    spec.write_text(f"""apiVersion: specbundle/v1
metadata: {{name: mtp}}
target: {{repo: org/target, source: "dir:{t}"}}
speculative: {{method: mtp, num_speculative_tokens: 1}}
engines: {{vllm: {{}}}}
deployment: {{p95_concurrency: 8}}
""")
    mirror = Mirror.open(tmp_path / "m", create=True)
    pull_bundle(load_spec(spec), mirror)
    write_scan_report(mirror, "mtp")
    key = attest.generate_key("ecdsa-p384")
    res = sign_bundle(mirror, "mtp", [key])
    assert set(res.roots) == {"target"}
    pol = tmp_path / "trust.yaml"
    write_policy(pol, policy_doc({"k": key}))
    from specbundle.verify import load_policy

    vb = verify_bundle(mirror, "mtp", load_policy(pol))
    assert vb.report.ok and vb.record.draft is None
