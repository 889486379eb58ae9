"""Certificate roles of the trust policy: CA anchors, accepted identities, CRLs, scope.

::

    anchors:
      - name: corp-release                 # a role, like a key name (model_signers may name it)
        certificates: corp-root.pem        # CA certificate(s): a file beside the policy, or PEM
        crls: [corp-signing.crl]           # CRL files beside the policy (offline revocation)
        identities:                        # who under these CAs may sign; at least one rule
          - {san: "release@example.com"}   # fnmatch on a SAN value (email, URI, DNS)
          - {subject: "CN=ml-release,O=Example Corp"}   # fnmatch on the RFC 4514 subject
        code_signing: true                 # the leaf must carry the code-signing EKU (default)
        repos: ["org/*"]                   # same scope rules as keys: repos AND bundle names
        bundles: ["*"]

An anchor role signs ``model.sig`` with the OMS certificate method; attestations are DSSE
envelopes signed by keys, so ``require.*.signers`` may not name one. Files are resolved
beside the policy file (relative paths only, no ``..``) and read with a size bound.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from cryptography import x509
from pydantic import BaseModel, ConfigDict, Field

from specbundle import ids
from specbundle.attest import (
    CertIdentity,
    ChainTrust,
    IdentityRule,
    OmsManifest,
    OtherKey,
    open_model_sig_chain,
)
from specbundle.attest.certs import parse_certificates, parse_crls
from specbundle.errors import SpecbundleError, VerificationError
from specbundle.strict import MalformedDocument, read_bounded

__all__ = ["AnchorEntry", "TrustedAnchor", "build_anchors", "in_scope", "open_anchored"]

_MAX_FILE = 4 << 20


class _Identity(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    subject: str | None = Field(None, min_length=1)
    san: str | None = Field(None, min_length=1)


class AnchorEntry(BaseModel):
    """One ``anchors:`` entry as written (validated further by :func:`build_anchors`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(min_length=1)
    certificates: str = Field(min_length=1)
    crls: list[str] = []
    identities: list[_Identity] = Field(min_length=1)
    code_signing: bool = True
    repos: list[str] = []
    bundles: list[str] = []


def in_scope(repos: tuple[str, ...], bundles: tuple[str, ...], want_repos: tuple[str, ...] |
             list[str], bundle: str) -> bool:
    """The scope rule keys and anchors share: the bundle name AND every repo must match."""
    return any(fnmatch.fnmatchcase(bundle, p) for p in bundles) and all(
        any(fnmatch.fnmatchcase(r, p) for p in repos) for r in want_repos)


@dataclass(frozen=True)
class TrustedAnchor:
    """A certificate role: the chain trust it verifies with and what it may sign."""

    name: str
    trust: ChainTrust
    repos: tuple[str, ...]
    bundles: tuple[str, ...]

    def may_sign(self, repo: str, bundle: str) -> bool:
        """True if the role is scoped to this repo *and* this bundle name."""
        return in_scope(self.repos, self.bundles, (repo,), bundle)


def _material(value: str, base: Path | None, where: str) -> bytes:
    if "-----BEGIN" in value:
        return value.encode()
    if base is None:
        raise ValueError(f"{where}: {value!r} is a file beside the policy, but the policy was "
                         "not read from a file (inline the PEM instead)")
    try:
        rel = ids.check_rel_path(value)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
    try:
        return read_bounded(base / rel, max_bytes=_MAX_FILE, what=value)
    except (OSError, MalformedDocument) as err:
        why = err.strerror if isinstance(err, OSError) else str(err)
        raise ValueError(f"{where}: cannot read {value!r} beside the policy: {why}") from None


def _anchor(a: AnchorEntry, base: Path | None) -> TrustedAnchor:
    where = f"anchors[{a.name}]"
    try:
        certs = parse_certificates(_material(a.certificates, base, f"{where}.certificates"),
                                   source=f"{where}.certificates")
        crls = tuple(c for i, f in enumerate(a.crls) for c in parse_crls(
            _material(f, base, f"{where}.crls[{i}]"), source=f"{where}.crls[{i}]"))
    except SpecbundleError as err:
        raise ValueError(err.message) from None
    for c in certs:
        try:
            is_ca = c.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        except x509.ExtensionNotFound:
            is_ca = False
        if not is_ca:
            raise ValueError(f"{where}.certificates: {c.subject.rfc4514_string()} is not a CA "
                             "certificate (trust the CA that issues signing certificates)")
    for c in certs:  # a CRL an anchor issued must carry that anchor's signature
        for crl in crls:
            if crl.issuer == c.subject and not crl.is_signature_valid(
                    c.public_key()):  # type: ignore[arg-type]
                raise ValueError(f"{where}.crls: the CRL of {c.subject.rfc4514_string()} is "
                                 "not signed by that CA")
    rules = []
    for i, r in enumerate(a.identities):
        if r.subject is None and r.san is None:
            raise ValueError(f"{where}.identities[{i}]: give subject and/or san")
        rules.append(IdentityRule(r.subject, r.san))
    if not a.repos or not a.bundles:
        raise ValueError(f"{where}: scope it with both repos and bundles patterns")
    return TrustedAnchor(a.name, ChainTrust(certs, crls, tuple(rules), a.code_signing),
                         tuple(a.repos), tuple(a.bundles))


def build_anchors(entries: list[AnchorEntry], base: Path | None,
                  key_names: set[str]) -> tuple[TrustedAnchor, ...]:
    """Validate every anchor; names must be unique across keys and anchors.

    Raises:
        ValueError: naming the field (``anchors[NAME].certificates`` ...).
    """
    out: dict[str, TrustedAnchor] = {}
    for a in entries:
        if a.name in out or a.name in key_names:
            raise ValueError(f"anchors[{a.name}]: the name is already used by a key or anchor")
        out[a.name] = _anchor(a, base)
    return tuple(out.values())


def open_anchored(anchors: tuple[TrustedAnchor, ...], data: bytes, repo: str, bundle: str,
                  at: datetime | None) -> tuple[OmsManifest, TrustedAnchor, CertIdentity] | None:
    """Open a certificate-signed ``model.sig`` with the first eligible anchor that trusts it.

    Returns None when the signature carries no certificate chain or no anchor may sign
    ``repo``/``bundle``.

    Raises:
        VerificationError: the chain or signature fails against every eligible anchor (the
            messages of each, joined).
    """
    errors: list[str] = []
    for a in anchors:
        if not a.may_sign(repo, bundle):
            continue
        try:
            manifest, who = open_model_sig_chain(data, a.trust, at=at)
        except OtherKey:
            return None
        except VerificationError as err:
            errors.append(f"{a.name}: {err.message}")
            continue
        return manifest, a, who
    if errors:
        raise VerificationError("; ".join(errors))
    return None
