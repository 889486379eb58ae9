"""OMS ``model.sig`` signed with Sigstore (Fulcio certificate + Rekor entry), verified offline.

Verification is the ``sigstore`` library's (certificate chain to the trusted root's Fulcio CA,
the transparency-log inclusion proof and signed timestamp, SCTs, the identity policy), with a
trusted root that is either a pinned ``trusted_root.json`` file (a private instance, or a
public-good root the site froze) or the library's embedded public-good root. Nothing is
fetched: the library runs in offline mode and never refreshes its TUF metadata here.

``sigstore`` is an optional dependency (``specbundle[sigstore]``), imported on first use.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specbundle.attest.dsse import INTOTO_PAYLOAD_TYPE, MalformedEnvelope
from specbundle.attest.oms import OmsManifest
from specbundle.attest.statement import parse_statement
from specbundle.errors import EnvironmentProblem, VerificationError
from specbundle.strict import loads_json

__all__ = ["SigstoreIdentity", "SigstoreTrust", "is_sigstore_signed", "open_model_sig_sigstore"]


@dataclass(frozen=True)
class SigstoreTrust:
    """Who must have signed (certificate SAN and OIDC issuer) and which instance to trust."""

    identity: str
    issuer: str
    trusted_root: Path | None = None  # None: the library's embedded public-good root


@dataclass(frozen=True)
class SigstoreIdentity:
    """A verified Sigstore signer."""

    identity: str
    issuer: str
    trusted_root: str  # "public-good (embedded)" or the pinned file's name
    log_index: int | None

    @property
    def name(self) -> str:
        """The identity shown to people."""
        return self.identity

    def to_json(self) -> dict[str, object]:
        """JSON form for reports and provenance."""
        return {"method": "sigstore", "identity": self.identity, "issuer": self.issuer,
                "trusted_root": self.trusted_root, "log_index": self.log_index}


def _material(data: bytes) -> dict[str, Any]:
    try:
        doc = loads_json(data, what="model.sig")
    except ValueError:
        return {}
    material = doc.get("verificationMaterial") if isinstance(doc, dict) else None
    return material if isinstance(material, dict) else {}


def is_sigstore_signed(data: bytes) -> bool:
    """True when a ``model.sig`` carries a Fulcio certificate (the OMS sigstore method)."""
    return "certificate" in _material(data)


def _log_index(data: bytes) -> int | None:
    """The Rekor log index (read after verification, which checked the inclusion proof)."""
    entries = _material(data).get("tlogEntries")
    try:
        return int(entries[0]["logIndex"]) if isinstance(entries, list) and entries else None
    except (KeyError, TypeError, ValueError):
        return None


def _verifier(trust: SigstoreTrust) -> Any:
    try:
        from sigstore.models import TrustedRoot
        from sigstore.verify import Verifier
    except ImportError as err:
        raise EnvironmentProblem("Sigstore signatures need the sigstore package",
                                 hint="pip install 'specbundle[sigstore]'") from err
    if trust.trusted_root is None:
        return Verifier.production(offline=True)
    try:
        return Verifier(trusted_root=TrustedRoot.from_file(str(trust.trusted_root)))
    except (OSError, ValueError) as err:
        raise EnvironmentProblem(f"cannot load the Sigstore trusted root "
                                 f"{trust.trusted_root}: {err}") from err


def open_model_sig_sigstore(data: bytes, trust: SigstoreTrust
                            ) -> tuple[OmsManifest, SigstoreIdentity]:
    """Verify a Sigstore-signed ``model.sig`` offline and return the manifest it signs.

    Raises:
        VerificationError: malformed bundle, another identity or issuer, a certificate or log
            entry the trusted root does not vouch for, a bad signature, or a statement that
            is not an OMS signature.
        EnvironmentProblem: the sigstore package or the trusted-root file is missing.
    """
    verifier = _verifier(trust)
    from sigstore.errors import Error as SigstoreError
    from sigstore.models import Bundle
    from sigstore.verify import policy

    try:
        bundle = Bundle.from_json(data)
    except (SigstoreError, ValueError) as err:
        raise MalformedEnvelope(f"model.sig is not a readable Sigstore bundle: {err}") from err
    try:
        payload_type, payload = verifier.verify_dsse(
            bundle, policy.Identity(identity=trust.identity, issuer=trust.issuer))
    except (SigstoreError, ValueError) as err:
        raise VerificationError(
            f"Sigstore signature does not verify for identity {trust.identity!r} issued by "
            f"{trust.issuer!r}: {err}") from err
    if payload_type != INTOTO_PAYLOAD_TYPE:
        raise VerificationError(f"model.sig payloadType {payload_type!r} is not in-toto")
    manifest = OmsManifest.from_statement(parse_statement(payload))
    root = trust.trusted_root.name if trust.trusted_root else "public-good (embedded)"
    return manifest, SigstoreIdentity(trust.identity, trust.issuer, root, _log_index(data))
