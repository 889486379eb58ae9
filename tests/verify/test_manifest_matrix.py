"""Tamper matrix over the signed bundle manifest: every row is refused with its exact reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specbundle import attest
from specbundle.attest.manifest import build_manifest, parse_manifest_unverified
from specbundle.mirror import versions
from specbundle.record import BundleRecord
from specbundle.render import render_bundle
from specbundle.verify import BundleVerificationFailed, Problem, verify_bundle
from tests.lib.bundles import Signed, make_signed
from tests.lib.policy import policy_doc, write_policy


def _fail(s: Signed) -> list[Problem]:
    with pytest.raises(BundleVerificationFailed) as err:
        verify_bundle(s.mirror, s.record.name, s.policy)
    assert err.value.exit_code == 3
    return list(err.value.report.problems)


def _manifest_path(s: Signed) -> Path:
    v = versions.current_version(s.mirror, s.record.name)
    assert v is not None
    return s.mirror.bundle_dir(s.record.name) / versions.manifest_rel(v)


def _resign(s: Signed, key: attest.SigningKey, edit: dict[str, object]) -> None:
    """Rewrite the current manifest with ``edit`` applied, signed by ``key``."""
    path = _manifest_path(s)
    env = attest.Envelope.from_json(json.loads(path.read_bytes()))
    st = attest.parse_statement(env.payload)
    pred = {**st.predicate, **edit}
    new = attest.Statement(st.subjects, st.predicate_type, pred)
    path.chmod(0o644)
    path.write_bytes(json.dumps(attest.sign_statement(new, [key]).to_json()).encode())


def _edit_payload(s: Signed, edit: dict[str, object]) -> None:
    """Edit the manifest payload but keep the old signature (a forged edit)."""
    path = _manifest_path(s)
    raw = json.loads(path.read_bytes())
    env = attest.Envelope.from_json(raw)
    st = attest.parse_statement(env.payload)
    new = attest.Statement(st.subjects, st.predicate_type, {**st.predicate, **edit})
    import base64

    raw["payload"] = base64.b64encode(new.to_bytes()).decode()
    path.write_bytes(json.dumps(raw).encode())


def _spec_with(s: Signed, **speculative: object) -> str:
    man = parse_manifest_unverified(_manifest_path(s).read_bytes())
    spec = dict(man.record.spec)
    spec["speculative"] = {**spec.get("speculative", {}), **speculative}
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


def test_edited_bundle_json_never_reaches_render(signed: Signed) -> None:
    """Item 2: the unsigned record is edited; the verified bundle still carries the signed one."""
    rec = signed.mirror.load_bundle("pair")
    spec = dict(rec.spec)
    spec["speculative"] = {**spec["speculative"], "num_speculative_tokens": 64}
    signed.mirror.save_bundle(BundleRecord(rec.name, spec, rec.target, rec.draft, rec.created,
                                           rec.tool_version, rec.extra_blobs))
    vb = verify_bundle(signed.mirror, "pair", signed.policy)
    assert vb.spec.speculative.num_speculative_tokens != 64
    assert vb.record.spec["speculative"]["num_speculative_tokens"] != 64
    res = render_bundle(vb, "vllm", "shell", signed.tmp / "out")
    assert "64" not in json.dumps(res.command.to_json())


@pytest.mark.parametrize(("field", "value"), [
    ("spec", "NUM_TOKENS"), ("version", 7), ("bundle", "other"), ("roots", {"target": "0" * 64}),
    ("scanReport", {"sha256": "1" * 64}), ("images", {"vllm": "2" * 64}),
    ("previousManifest", "3" * 64), ("method", "ngram"),
])
def test_every_manifest_field_edited_under_the_old_signature(signed: Signed, field: str,
                                                             value: object) -> None:
    if value == "NUM_TOKENS":
        value = _spec_with(signed, num_speculative_tokens=64)
    _edit_payload(signed, {field: value})
    (p,) = _fail(signed)
    assert (p.kind, p.subject) == ("unknown-signature", "manifest")
    assert "does not verify with key" in p.message


def test_manifest_replayed_from_another_bundle(signed: Signed) -> None:
    other = make_signed(signed.tmp / "b", name="other", seed=7, mirror=signed.mirror,
                        key=signed.key, draft_repo="org/draft2")
    _manifest_path(signed).chmod(0o644)
    _manifest_path(signed).write_bytes(_manifest_path(other).read_bytes())
    problems = _fail(signed)
    assert ("wrong-bundle", "manifest") in {(p.kind, p.subject) for p in problems}


def test_a_narrow_repo_key_cannot_replace_a_bundle_by_name(signed: Signed) -> None:
    """Item 3: scope is bundle name AND repos, from the policy, not from what is claimed."""
    narrow = attest.generate_key("ecdsa-p256")
    doc = policy_doc({"release": signed.key})
    doc["keys"].append({"name": "narrow", "fingerprint": narrow.fingerprint,  # type: ignore
                        "public_key": narrow.public.pem.decode(), "repos": ["narrow/*"],
                        "bundles": ["*"]})
    write_policy(signed.policy_path, doc)
    _resign(signed, narrow, {"spec": _spec_with(signed, num_speculative_tokens=64)})
    p, unmet = _fail(signed)
    assert (p.kind, p.subject, unmet.kind) == ("out-of-scope", "manifest", "unmet-threshold")
    assert "may not sign bundle 'pair' with repos org/target, org/draft" in p.message


def test_a_key_scoped_to_another_bundle_name_is_refused(signed: Signed) -> None:
    write_policy(signed.policy_path, {**policy_doc({"release": signed.key}), "keys": [
        {"name": "release", "fingerprint": signed.key.fingerprint,
         "public_key": signed.key.public.pem.decode(), "repos": ["org/*"],
         "bundles": ["prod-*"]}]})
    problems = _fail(signed)
    assert ("out-of-scope", "manifest") in {(p.kind, p.subject) for p in problems}


def test_revoked_in_the_policy(signed: Signed) -> None:
    doc = policy_doc({"release": signed.key})
    doc["revoked"] = [{"fingerprint": signed.key.fingerprint, "reason": "laptop stolen"}]
    write_policy(signed.policy_path, doc)
    p = _fail(signed)[0]
    assert (p.kind, p.subject) == ("revoked-key", "manifest")
    assert "revoked by the trust policy: laptop stolen" in p.message


def test_revoked_in_the_event_log(signed: Signed) -> None:
    from specbundle.audit.revocation import revoke_key

    revoke_key(signed.mirror, signed.key.fingerprint, signer=signed.key, reason="compromised")
    p = _fail(signed)[0]
    assert (p.kind, p.subject) == ("revoked-key", "manifest")
    assert "compromised" in p.message


def test_a_missing_manifest_says_re_sign(signed: Signed) -> None:
    (signed.mirror.bundle_dir("pair") / versions.CURRENT_REF).unlink()
    (p,) = _fail(signed)
    assert p.kind == "unsigned-manifest" and "re-sign" in p.message


def test_a_corrupt_current_ref_is_exit_3(signed: Signed) -> None:
    (signed.mirror.bundle_dir("pair") / versions.CURRENT_REF).write_text("../../etc\n")
    (p,) = _fail(signed)
    assert p.kind == "malformed" and "corrupt" in p.message


def test_deeply_nested_manifest_is_malformed_not_a_crash(signed: Signed) -> None:
    path = _manifest_path(signed)
    path.chmod(0o644)
    path.write_bytes(b"[" * 100_000)
    (p,) = _fail(signed)
    assert p.kind == "malformed" and "nested deeper than" in p.message


def test_a_new_version_chains_to_the_previous(signed: Signed) -> None:
    from specbundle.sign import sign_bundle

    first = _manifest_path(signed).read_bytes()
    sign_bundle(signed.mirror, "pair", [signed.key])
    vb = verify_bundle(signed.mirror, "pair", signed.policy)
    assert vb.version == 2
    env = attest.Envelope.from_json(json.loads(first))
    from specbundle.digest import sha256_bytes

    assert vb.manifest.previous == sha256_bytes(env.payload)
    # a forged v1 under v2 breaks the chain
    v1 = signed.mirror.bundle_dir("pair") / versions.manifest_rel(1)
    v1.chmod(0o644)
    rec = vb.record
    st = build_manifest(rec, vb.roots, version=1, previous=None, scan_report_sha256=None,
                        images={}, now="2020-01-01T00:00:00Z")
    v1.write_bytes(json.dumps(attest.sign_statement(st, [signed.key]).to_json()).encode())
    problems = _fail(signed)
    assert ("chain-mismatch", "manifest") in {(p.kind, p.subject) for p in problems}
