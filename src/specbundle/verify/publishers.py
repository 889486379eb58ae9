"""The trust policy's ``publishers:`` section: whose own signature a pulled repo must carry.

::

    publishers:
      - repos: ["nvidia/*"]                 # fnmatch patterns; the first matching entry rules
        required: true                      # default: a repo without model.sig is refused
        certificate:                        # OMS certificate method
          certificates: nvidia-ca.pem       # anchors, beside the policy (or inline PEM)
          crls: [nvidia-ca.crl]
          identities: [{subject: "CN=NVIDIA Model Signing*"}]
      - repos: ["acme/*"]
        sigstore:                           # OMS sigstore method, verified offline
          identity: release@acme.example
          issuer: https://accounts.google.com
          trusted_root: sigstore-trusted_root.json   # pinned; omit for the embedded public-good

Pull checks the signature before any file is fetched and records the verified identity in
the artifact record, which the fetch provenance carries.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from specbundle import ids
from specbundle.attest import ChainTrust, open_model_sig_chain
from specbundle.attest.sigstore_oms import SigstoreTrust, open_model_sig_sigstore
from specbundle.errors import VerificationError
from specbundle.pull.publisher import PublisherVerdict
from specbundle.record import Publisher
from specbundle.verify.anchors import AnchorEntry, build_anchors

__all__ = ["PublisherEntry", "PublisherPolicy", "PublisherRule", "build_publishers"]


class _Cert(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    certificates: str = Field(min_length=1)
    crls: list[str] = []
    identities: list[dict[str, str]] = Field(min_length=1)
    code_signing: bool = True


class _Sigstore(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    identity: str = Field(min_length=1)
    issuer: str = Field(min_length=1)
    trusted_root: str | None = None


class PublisherEntry(BaseModel):
    """One ``publishers:`` entry as written."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    repos: list[str] = Field(min_length=1)
    required: bool = True
    certificate: _Cert | None = None
    sigstore: _Sigstore | None = None


@dataclass(frozen=True)
class PublisherRule:
    """Repos and the one way their publisher's signature must verify."""

    repos: tuple[str, ...]
    required: bool
    trust: ChainTrust | SigstoreTrust

    def covers(self, repo: str) -> bool:
        """True if this rule names ``repo``."""
        return any(fnmatch.fnmatchcase(repo, p) for p in self.repos)


def build_publishers(entries: list[PublisherEntry], base: Path | None
                     ) -> tuple[PublisherRule, ...]:
    """Validate every entry (exactly one method each; files beside the policy).

    Raises:
        ValueError: naming the field (``publishers[0].sigstore.trusted_root`` ...).
    """
    out: list[PublisherRule] = []
    for i, e in enumerate(entries):
        where = f"publishers[{i}]"
        if (e.certificate is None) == (e.sigstore is None):
            raise ValueError(f"{where}: give exactly one of certificate or sigstore")
        trust: ChainTrust | SigstoreTrust
        if e.certificate is not None:
            c = e.certificate
            anchor = AnchorEntry.model_validate({
                "name": where, "certificates": c.certificates, "crls": c.crls,
                "identities": c.identities, "code_signing": c.code_signing,
                "repos": ["*"], "bundles": ["*"]})
            trust = build_anchors([anchor], base, set())[0].trust
        else:
            s = e.sigstore
            if s is None:  # unreachable: exactly one is set (checked above); for the types
                raise ValueError(f"{where}: give exactly one of certificate or sigstore")
            root = None
            if s.trusted_root is not None:
                if base is None:
                    raise ValueError(f"{where}.sigstore.trusted_root: the policy was not read "
                                     "from a file")
                try:
                    root = base / ids.check_rel_path(s.trusted_root)
                except ValueError as err:
                    raise ValueError(f"{where}.sigstore.trusted_root: {err}") from None
                if not root.is_file():
                    raise ValueError(f"{where}.sigstore.trusted_root: no file {s.trusted_root!r}"
                                     " beside the policy")
            trust = SigstoreTrust(s.identity, s.issuer, root)
        out.append(PublisherRule(tuple(e.repos), e.required, trust))
    return tuple(out)


@dataclass(frozen=True)
class PublisherPolicy:
    """The :class:`~specbundle.pull.publisher.PublisherCheck` the trust policy provides."""

    rules: tuple[PublisherRule, ...]

    def check(self, repo: str, signature: bytes | None) -> PublisherVerdict | None:
        """Verify ``repo``'s model.sig under the first rule naming it (see the Protocol)."""
        rule = next((r for r in self.rules if r.covers(repo)), None)
        if rule is None:
            return None
        if signature is None:
            if rule.required:
                raise VerificationError(f"{repo} must carry its publisher's signature "
                                        "(model.sig) under the trust policy, and has none")
            return None
        try:
            if isinstance(rule.trust, ChainTrust):
                manifest, cert = open_model_sig_chain(signature, rule.trust)
                who = Publisher("certificate", cert.name, cert.issuer)
            else:
                manifest, sig = open_model_sig_sigstore(signature, rule.trust)
                who = Publisher("sigstore", sig.identity, sig.issuer)
        except VerificationError as err:
            raise VerificationError(f"{repo}: the publisher's signature is refused: "
                                    f"{err.message}") from err
        return PublisherVerdict(who, manifest.digests())
