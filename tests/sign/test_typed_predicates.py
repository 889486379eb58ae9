"""Typed predicates: the committed goldens read back through their models byte for byte, and
an unknown predicate type or a predicate that does not fit its model fails closed."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from specbundle import attest
from specbundle._fsutil import canonical_json
from specbundle.attest.models import MODEL_BY_PREDICATE, PairBindingV1, RevocationV1
from specbundle.errors import VerificationError

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "sign-v1"


def _payloads() -> list[bytes]:
    out = []
    for line in (GOLDEN / "mirror/bundles/golden/attestations.jsonl").read_bytes().splitlines():
        out.append(base64.b64decode(json.loads(line)["payload"]))
    for sig in sorted(GOLDEN.rglob("*.sig")):
        out.append(base64.b64decode(json.loads(sig.read_bytes())["dsseEnvelope"]["payload"]))
    return out


@pytest.mark.parametrize("payload", _payloads(), ids=lambda p: str(len(p)))
def test_golden_predicates_round_trip_through_their_models(payload: bytes) -> None:
    st = attest.parse_statement(payload)
    typed = st.typed
    assert type(typed) is MODEL_BY_PREDICATE[st.predicate_type]
    again = attest.Statement(st.subjects, st.predicate_type, typed.to_predicate())
    # what the models write is what was signed (canonical JSON; model.sig keeps its own)
    assert canonical_json(again.to_json()) == canonical_json(json.loads(payload))
    if payload.startswith(b'{"_type"'):
        assert again.to_bytes() == payload


def test_every_golden_predicate_type_is_typed() -> None:
    kinds = {attest.parse_statement(p).predicate_type for p in _payloads()}
    assert kinds == {attest.SLSA_PROVENANCE_V1, attest.SCAN_RESULT, attest.PAIR_BINDING_V1,
                     attest.OMS_SIGNATURE_V1}


def test_unknown_type_and_extra_fields_fail_closed() -> None:
    subj = [attest.Subject("key:x", {"sha256": "ab" * 32})]
    with pytest.raises(attest.WrongPredicateType, match="unknown predicate type") as err:
        attest.Statement.build(subj, attest.REVOCATION_V1.replace("/v1", "/v2"), {})
    assert err.value.exit_code == 3
    ok = RevocationV1(fingerprint="ab" * 32, reason="lost", time_created="2026-01-01T00:00:00Z",
                      mirror="m")
    st = attest.Statement.of(subj, ok)
    assert st.typed_as(RevocationV1) == ok
    with pytest.raises(attest.WrongPredicateType, match="expected"):
        st.typed_as(PairBindingV1)
    payload = attest.Statement(subj, st.predicate_type,
                               {**st.predicate, "extra": "x"}).to_bytes()
    with pytest.raises(VerificationError, match="extra"):
        attest.parse_statement(payload)
    wrong_type = attest.Statement(subj, st.predicate_type, {**st.predicate, "reason": 7})
    with pytest.raises(VerificationError, match="reason"):
        attest.parse_statement(wrong_type.to_bytes())
