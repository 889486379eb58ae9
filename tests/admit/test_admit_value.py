"""admit takes the verified bundle value; a bundle that did not verify is refused, signed too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specbundle.admit import STATUS_FILE, Rejected, admit_bundle, read_status, reject_unverified
from specbundle.attest import SLSA_VSA_V1, parse_statement, read_attestations
from specbundle.verify import BundleVerificationFailed, verify_bundle
from tests.lib.bundles import make_signed


def _last_vsa(mirror: object, name: str) -> dict[str, object]:
    st = parse_statement(read_attestations(mirror, name, problems=[])[-1].payload)  # type: ignore[arg-type]
    assert st.predicate_type == SLSA_VSA_V1
    return {"subjects": [s.name for s in st.subjects], **st.predicate}


def test_a_verified_bundle_that_cannot_be_measured_is_rejected_for_its_version(
        tmp_path: Path) -> None:
    s = make_signed(tmp_path)  # vLLM only: the llama.cpp bench cannot even render
    v = verify_bundle(s.mirror, "pair", s.policy)
    with pytest.raises(Rejected) as err:
        admit_bundle(v, keys=[s.key], engine="llamacpp")
    d = err.value.decision
    assert d.result == "FAILED" and d.reasons[0].startswith("bench: could not measure")
    vsa = _last_vsa(s.mirror, "pair")
    assert vsa["subjects"][0] == "specbundle:bundle/pair/manifest"  # type: ignore[index]
    assert vsa["specbundle"]["manifestSha256"] == v.manifest_digest  # type: ignore[index]
    assert vsa["specbundle"]["version"] == v.version  # type: ignore[index]
    status = read_status(s.mirror, "pair")
    assert status is not None and status["manifest_sha256"] == v.manifest_digest


def test_a_bundle_that_does_not_verify_is_refused_with_a_signed_decision(
        tmp_path: Path) -> None:
    s = make_signed(tmp_path)
    s.mirror.write_bundle_file("pair", "current", b"999\n")
    with pytest.raises(BundleVerificationFailed) as failed:
        verify_bundle(s.mirror, "pair", s.policy)
    rejected = reject_unverified(s.mirror, "pair", failed.value, policy=s.policy, keys=[s.key])
    assert rejected.decision.reasons[0].startswith("verification:")
    vsa = _last_vsa(s.mirror, "pair")
    assert vsa["verificationResult"] == "FAILED"
    assert vsa["specbundle"]["manifestSha256"] is None  # type: ignore[index]
    doc = json.loads(s.mirror.read_bundle_file("pair", STATUS_FILE) or b"{}")
    assert doc["admitted"] is False
