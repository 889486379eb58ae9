"""DSSE envelopes (secure-systems-lab/dsse v1): PAE, sign, verify, JSON form.

Hand-written on ``cryptography`` because the protocol is a dozen lines and the libraries
that ship it either match signatures by ``keyid`` (securesystemslib, not DSSE-compliant) or
pull in the protobuf/sigstore stack. ``keyid`` is a hint only: every signature is tried
against every trusted key, and what a caller gets back are the *verified* payload bytes.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from specbundle._fsutil import canonical_json
from specbundle.attest.keys import PublicKey, SigningKey
from specbundle.errors import VerificationError

__all__ = [
    "INTOTO_PAYLOAD_TYPE",
    "Envelope",
    "EnvelopeCheck",
    "MalformedEnvelope",
    "Signature",
    "b64decode",
    "check_envelope",
    "pae",
    "sign_envelope",
    "verify_envelope",
]

INTOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"


class MalformedEnvelope(VerificationError):
    """An envelope (or a signature in it) that cannot even be parsed: not JSON, bad base64."""


def pae(payload_type: str, body: bytes) -> bytes:
    """Pre-Authentication Encoding: the exact bytes every DSSE signature covers."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(body), body)


def b64decode(value: str, *, what: str) -> bytes:
    """Strict base64 decoding; DSSE requires accepting both standard and URL-safe alphabets."""
    try:
        if "-" in value or "_" in value:
            return base64.b64decode(value.replace("-", "+").replace("_", "/"), validate=True)
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as err:
        raise MalformedEnvelope(f"{what} is not valid base64") from err


@dataclass(frozen=True)
class Signature:
    """One DSSE signature; ``keyid`` is an unauthenticated hint (may be empty or absent)."""

    sig: bytes
    keyid: str | None = None


@dataclass(frozen=True)
class Envelope:
    """A DSSE envelope as stored: payload bytes exactly as signed."""

    payload: bytes
    payload_type: str
    signatures: tuple[Signature, ...]

    def to_json(self) -> dict[str, Any]:
        """The standard JSON shape (``payload``/``payloadType``/``signatures``)."""
        sigs: list[dict[str, str]] = []
        for s in self.signatures:
            entry = {"sig": base64.b64encode(s.sig).decode()}
            if s.keyid is not None:
                entry["keyid"] = s.keyid
            sigs.append(entry)
        return {"payload": base64.b64encode(self.payload).decode(),
                "payloadType": self.payload_type, "signatures": sigs}

    def to_line(self) -> bytes:
        """Canonical JSON, one line (the attestation log's record form)."""
        return canonical_json(self.to_json())

    @classmethod
    def from_json(cls, obj: object) -> Envelope:
        """Parse the JSON shape strictly; any defect raises :class:`VerificationError`."""
        if not isinstance(obj, dict):
            raise MalformedEnvelope("DSSE envelope is not a JSON object")
        payload, ptype, sigs = obj.get("payload"), obj.get("payloadType"), obj.get("signatures")
        if not isinstance(payload, str) or not isinstance(ptype, str) or not ptype:
            raise MalformedEnvelope("DSSE envelope lacks payload or payloadType")
        if not isinstance(sigs, list) or not sigs:
            raise MalformedEnvelope("DSSE envelope has no signatures")
        parsed: list[Signature] = []
        for i, s in enumerate(sigs):
            if not isinstance(s, dict) or not isinstance(s.get("sig"), str):
                raise MalformedEnvelope(f"DSSE signature #{i} is malformed")
            keyid = s.get("keyid")
            if keyid is not None and not isinstance(keyid, str):
                raise MalformedEnvelope(f"DSSE signature #{i} has a non-string keyid")
            parsed.append(Signature(b64decode(s["sig"], what=f"DSSE signature #{i}"), keyid))
        return cls(b64decode(payload, what="DSSE payload"), ptype, tuple(parsed))


@dataclass(frozen=True)
class EnvelopeCheck:
    """Outcome of checking every signature of an envelope against a set of trusted keys.

    ``signers`` are fingerprints of trusted keys with a valid signature (each counted once);
    ``problems`` describe signatures that verify under no trusted key: ``unknown`` when the
    keyid names no trusted key, ``bad`` when it names one whose check failed.
    """

    payload: bytes
    payload_type: str
    signers: frozenset[str]
    problems: tuple[str, ...]


def sign_envelope(
    payload: bytes, payload_type: str, keys: Sequence[SigningKey], *, keyid: bool = True
) -> Envelope:
    """Sign ``payload`` with each key; ``keyid`` carries the fingerprint unless disabled."""
    if not keys:
        raise VerificationError("refusing to build an envelope without a signing key")
    to_sign = pae(payload_type, payload)
    sigs = tuple(Signature(k.sign(to_sign), k.fingerprint if keyid else "") for k in keys)
    return Envelope(payload, payload_type, sigs)


def check_envelope(env: Envelope, trusted: Iterable[PublicKey]) -> EnvelopeCheck:
    """Try every signature against every trusted key; never raises for a bad signature."""
    keys = list(trusted)
    by_fp = {k.fingerprint: k for k in keys}
    to_verify = pae(env.payload_type, env.payload)
    signers: set[str] = set()
    problems: list[str] = []
    for i, s in enumerate(env.signatures):
        hinted = by_fp.get(s.keyid or "")
        order = [hinted, *[k for k in keys if k is not hinted]] if hinted else keys
        good = next((k for k in order if k.verify(s.sig, to_verify)), None)
        if good is not None:
            signers.add(good.fingerprint)
        elif hinted is not None:
            problems.append(f"bad signature #{i}: does not verify with key {s.keyid}")
        else:
            problems.append(f"unknown signature #{i} (keyid {s.keyid or '-'}): "
                            "no trusted key verifies it")
    return EnvelopeCheck(env.payload, env.payload_type, frozenset(signers), tuple(problems))


def verify_envelope(env: Envelope, trusted: Iterable[PublicKey]) -> EnvelopeCheck:
    """Like :func:`check_envelope`, but raise unless at least one trusted key signed it."""
    res = check_envelope(env, trusted)
    if not res.signers:
        raise VerificationError("; ".join(res.problems) or "no signature verifies")
    return res
