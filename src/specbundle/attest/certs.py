"""X.509 signers (OMS *certificate* method): load chains, validate them offline, name the signer.

Path building and validation are ``cryptography.x509.verification``'s (RFC 5280 / CA-B
profile for the CAs); this module adds only what that verifier leaves to the caller:

* the leaf must carry the code-signing EKU (the verifier's default wants TLS client auth);
* revocation from CRL files the site carries (offline: no OCSP, no CRL distribution points
  fetched); a CRL must be signed by the issuer it names and still be current;
* the signer's identity (subject, SAN values) matched against the policy's patterns;
* the validation time: the signature's own time when it has one, else now, with
  :data:`CLOCK_SKEW` of tolerance on either side of the leaf's validity.

It never reads the network and never trusts the system store: anchors are exactly the
certificates the caller passes.
"""

from __future__ import annotations

import fnmatch
import hashlib
import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID
from cryptography.x509.verification import (
    Criticality,
    ExtensionPolicy,
    PolicyBuilder,
    Store,
)
from cryptography.x509.verification import VerificationError as _PathError

from specbundle.attest.keys import PublicKey
from specbundle.errors import EnvironmentProblem, UsageError, VerificationError
from specbundle.strict import MalformedDocument, read_bounded

__all__ = [
    "CLOCK_SKEW",
    "CertIdentity",
    "ChainTrust",
    "IdentityRule",
    "UntrustedCertificate",
    "certificate_fingerprint",
    "load_certificates",
    "load_crls",
    "parse_certificates",
    "parse_crls",
    "verify_chain",
]

#: How far clocks may disagree: a leaf is still good this long after it expired (or before it
#: starts) relative to the signature's time. The same bound everywhere a time is compared.
CLOCK_SKEW = timedelta(minutes=5)
_MAX_DEPTH = 8
_MAX_PKI_FILE = 64 * 1024 * 1024  # a CRL of a large CA is tens of MB
_MAX_PEM = 4 << 20


class UntrustedCertificate(VerificationError):
    """The signer's certificate chain, its revocation status or its identity is not trusted."""


def certificate_fingerprint(cert: x509.Certificate) -> str:
    """sha256 hex of the certificate DER (how policies and logs name a certificate)."""
    return hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()


def parse_certificates(data: bytes, *, source: str) -> tuple[x509.Certificate, ...]:
    """Every certificate in PEM ``data`` (DER accepted for a single one).

    Raises:
        UsageError: not a certificate file, or empty.
    """
    if len(data) > _MAX_PEM:
        raise UsageError(f"{source}: certificate file larger than {_MAX_PEM} bytes")
    try:
        certs = (tuple(x509.load_pem_x509_certificates(data)) if b"-----BEGIN" in data
                 else (x509.load_der_x509_certificate(data),))
    except ValueError as err:
        raise UsageError(f"{source} is not a readable X.509 certificate (PEM or DER)") from err
    if not certs:
        raise UsageError(f"{source} holds no certificate")
    return certs


def parse_crls(data: bytes, *, source: str) -> tuple[x509.CertificateRevocationList, ...]:
    """Every CRL in PEM ``data`` (DER accepted for a single one)."""
    if len(data) > _MAX_PEM:
        raise UsageError(f"{source}: CRL file larger than {_MAX_PEM} bytes")
    try:
        if b"-----BEGIN" not in data:
            return (x509.load_der_x509_crl(data),)
        blocks = data.split(b"-----END X509 CRL-----")
        out = tuple(x509.load_pem_x509_crl(b + b"-----END X509 CRL-----\n")
                    for b in blocks if b"-----BEGIN X509 CRL-----" in b)
    except ValueError as err:
        raise UsageError(f"{source} is not a readable CRL (PEM or DER)") from err
    if not out:
        raise UsageError(f"{source} holds no CRL")
    return out


def _read(path: Path, what: str) -> bytes:
    try:
        return read_bounded(path, max_bytes=_MAX_PKI_FILE, what=f"{what} {path}")  # never a FIFO
    except MalformedDocument as err:
        raise UsageError(str(err)) from None
    except OSError as err:
        raise EnvironmentProblem(f"cannot read {what} {path}: {err.strerror}") from err


def load_certificates(paths: Iterable[Path]) -> tuple[x509.Certificate, ...]:
    """Certificates from PEM/DER files, in the order given."""
    return tuple(c for p in paths for c in parse_certificates(_read(p, "certificate"),
                                                             source=str(p)))


def load_crls(paths: Iterable[Path]) -> tuple[x509.CertificateRevocationList, ...]:
    """CRLs from PEM/DER files."""
    return tuple(c for p in paths for c in parse_crls(_read(p, "CRL"), source=str(p)))


@dataclass(frozen=True)
class IdentityRule:
    """One accepted signer: fnmatch patterns on the RFC 4514 subject and/or a SAN value.

    A rule with both patterns needs both to match; an empty rule is refused by the policy.
    """

    subject: str | None = None
    san: str | None = None

    def matches(self, subject: str, sans: tuple[str, ...]) -> bool:
        """True when the certificate's subject and SANs satisfy this rule."""
        if self.subject is not None and not fnmatch.fnmatchcase(subject, self.subject):
            return False
        return self.san is None or any(fnmatch.fnmatchcase(s, self.san) for s in sans)


@dataclass(frozen=True)
class ChainTrust:
    """What a verifier trusts: anchors, the CRLs it holds, and the identities it accepts."""

    anchors: tuple[x509.Certificate, ...]
    crls: tuple[x509.CertificateRevocationList, ...] = ()
    identities: tuple[IdentityRule, ...] = ()  # empty: any identity the anchors certify
    code_signing: bool = True


@dataclass(frozen=True)
class CertIdentity:
    """A signer whose certificate chain validated: who it is and which anchor vouched."""

    subject: str
    sans: tuple[str, ...]
    issuer: str
    fingerprint: str
    anchor: str
    public: PublicKey

    @property
    def name(self) -> str:
        """The identity shown to people: the first SAN, else the subject."""
        return self.sans[0] if self.sans else self.subject

    def to_json(self) -> dict[str, object]:
        """JSON form for reports and provenance."""
        return {"method": "certificate", "identity": self.name, "subject": self.subject,
                "sans": list(self.sans), "issuer": self.issuer,
                "certificate_sha256": self.fingerprint, "anchor": self.anchor}


def _san_values(cert: x509.Certificate) -> tuple[str, ...]:
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return ()
    out: list[str] = []
    for kind in (x509.RFC822Name, x509.UniformResourceIdentifier, x509.DNSName):
        out += [str(v) for v in ext.get_values_for_type(kind)]
    return tuple(out)


def _require_code_signing(_policy: object, _cert: x509.Certificate,
                          ext: x509.ExtendedKeyUsage | None) -> None:
    if ext is None or ExtendedKeyUsageOID.CODE_SIGNING not in ext:
        raise ValueError("the leaf certificate lacks the code-signing extended key usage")


def _require_digital_signature(_policy: object, _cert: x509.Certificate,
                               ext: x509.KeyUsage | None) -> None:
    if ext is not None and not ext.digital_signature:
        raise ValueError("the leaf certificate's key usage does not allow digital signatures")


def _validation_time(leaf: x509.Certificate, at: datetime) -> datetime:
    """``at`` moved into the leaf's validity when it is out by no more than the skew."""
    start, end = leaf.not_valid_before_utc, leaf.not_valid_after_utc
    if at > end + CLOCK_SKEW:
        raise UntrustedCertificate(
            f"signing certificate expired at {end.isoformat()}; the signature's time is "
            f"{at.isoformat()} (clock skew allowed: {CLOCK_SKEW})")
    if at < start - CLOCK_SKEW:
        raise UntrustedCertificate(
            f"signing certificate is valid only from {start.isoformat()}; the signature's "
            f"time is {at.isoformat()}")
    return min(max(at, start), end)


def _check_revocation(chain: list[x509.Certificate],
                      crls: tuple[x509.CertificateRevocationList, ...], at: datetime) -> None:
    for cert, issuer in itertools.pairwise(chain):
        for crl in crls:
            if crl.issuer != issuer.subject:
                continue
            pub = issuer.public_key()
            try:
                ok = crl.is_signature_valid(pub)  # type: ignore[arg-type]
            except (InvalidSignature, TypeError, ValueError):
                ok = False
            if not ok:
                raise UntrustedCertificate(
                    f"CRL for {issuer.subject.rfc4514_string()} is not signed by that issuer")
            nxt = crl.next_update_utc
            if nxt is not None and at > nxt + CLOCK_SKEW:
                raise UntrustedCertificate(
                    f"CRL for {issuer.subject.rfc4514_string()} expired at {nxt.isoformat()};"
                    " carry a current CRL beside the policy")
            entry = crl.get_revoked_certificate_by_serial_number(cert.serial_number)
            if entry is not None and entry.revocation_date_utc <= at + CLOCK_SKEW:
                raise UntrustedCertificate(
                    f"certificate {cert.subject.rfc4514_string()} (serial "
                    f"{cert.serial_number:x}) is revoked by its issuer's CRL since "
                    f"{entry.revocation_date_utc.isoformat()}")


def verify_chain(chain: tuple[x509.Certificate, ...], trust: ChainTrust,
                 at: datetime | None = None) -> CertIdentity:
    """Validate ``chain`` (leaf first, then untrusted intermediates) against ``trust``.

    Args:
        chain: the certificates a signature carries.
        trust: anchors, CRLs and accepted identities.
        at: the signature's time; now when the signature carries none.

    Raises:
        UntrustedCertificate: no path to an anchor, expired/not yet valid, wrong key usage,
            revoked, or an identity the policy does not accept.
    """
    if not chain:
        raise UntrustedCertificate("the signature carries no certificate")
    if not trust.anchors:
        raise UntrustedCertificate("no trust anchors to validate the certificate chain with")
    when = at or datetime.now(UTC)
    leaf = chain[0]
    t = _validation_time(leaf, when)
    # RFC 5280 leaf rules, except: SAN is optional (signers are people and services, not
    # hosts), and basicConstraints cA is tolerated on the leaf, as the reference verifier
    # (OpenSSL) and its published test certificates do; the leaf must still chain to an anchor
    ee = (ExtensionPolicy.webpki_defaults_ee()
          .may_be_present(x509.SubjectAlternativeName, Criticality.AGNOSTIC, None)
          .may_be_present(x509.BasicConstraints, Criticality.AGNOSTIC, None)
          .may_be_present(x509.KeyUsage, Criticality.AGNOSTIC, _require_digital_signature))
    if trust.code_signing:
        ee = ee.require_present(x509.ExtendedKeyUsage, Criticality.AGNOSTIC,
                                _require_code_signing)
    else:
        ee = ee.may_be_present(x509.ExtendedKeyUsage, Criticality.AGNOSTIC, None)
    verifier = (PolicyBuilder().store(Store(list(trust.anchors))).time(t)
                .max_chain_depth(_MAX_DEPTH)
                .extension_policies(ca_policy=ExtensionPolicy.webpki_defaults_ca(), ee_policy=ee)
                .build_client_verifier())
    try:
        path = verifier.verify(leaf, list(chain[1:])).chain
    except _PathError as err:
        why = str(err)
        if ExtendedKeyUsageOID.CODE_SIGNING.dotted_string not in why and "2.5.29.37" in why:
            why = "the leaf certificate lacks the code-signing extended key usage"
        raise UntrustedCertificate(
            f"certificate {leaf.subject.rfc4514_string()} does not validate against the "
            f"trusted anchors at {t.isoformat()}: {why}") from err
    _check_revocation(path, trust.crls, when)
    subject, sans = leaf.subject.rfc4514_string(), _san_values(leaf)
    if trust.identities and not any(r.matches(subject, sans) for r in trust.identities):
        raise UntrustedCertificate(
            f"signer {subject} (SAN {', '.join(sans) or 'none'}) is not an identity the "
            "policy accepts for this anchor")
    return CertIdentity(subject, sans, leaf.issuer.rfc4514_string(),
                        certificate_fingerprint(leaf), path[-1].subject.rfc4514_string(),
                        PublicKey.from_key(leaf.public_key()))
