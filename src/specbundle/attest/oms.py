"""OpenSSF Model Signing v1.0 ``model.sig``: build and open, with ``cryptography`` alone.

Layers (spec v1.0 §4-6): Sigstore bundle v0.3 JSON -> DSSE envelope -> in-toto Statement v1
with predicateType ``https://model_signing/signature/v1.0``; the predicate lists one sha256
resource per file and the subject digest is the *root digest*: sha256 over the raw bytes of
every resource digest in listed order.

Interop with the reference tool (model-signing 1.1.1), pinned by tests both ways:

* resources are ordered by path *components* (what the reference sorts by), not by code point,
  so our root digest equals the one ``model_signing`` computes for the same tree;
* ``publicKey.hint`` is sha256 hex of the PEM SPKI and ``keyid`` is ``""``;
* the *certificate* method carries ``x509CertificateChain.certificates`` (leaf first, DER in
  ``rawBytes``) instead of the hint; the chain is validated against anchors the verifier
  holds (:mod:`specbundle.attest.certs`), never against the chain's own root;
* the bundle JSON keeps the reference key order; the statement is canonical JSON (the
  reference verifies the signed bytes, so whitespace is free);
* only ``files`` + ``sha256`` serialisations are accepted when opening (the reference CLI
  verifies nothing else either); a ``shards`` or BLAKE3 signature is refused by name.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from specbundle.attest.certs import CertIdentity, ChainTrust, verify_chain
from specbundle.attest.dsse import (
    INTOTO_PAYLOAD_TYPE,
    Envelope,
    MalformedEnvelope,
    b64decode,
    check_envelope,
    sign_envelope,
)
from specbundle.attest.keys import PublicKey, SigningKey
from specbundle.attest.models import OmsSignatureV1, WrongPredicateType
from specbundle.attest.models.standard import OmsResource, OmsSerialization
from specbundle.attest.predicates import OMS_SIGNATURE_V1
from specbundle.attest.statement import Statement, Subject, parse_statement
from specbundle.digest import is_sha256
from specbundle.errors import UsageError, VerificationError
from specbundle.strict import loads_json

__all__ = [
    "GIT_IGNORED_PATHS",
    "OMS_BUNDLE_MEDIA_TYPE",
    "OmsManifest",
    "OtherKey",
    "Resource",
    "WrongPredicateType",
    "build_model_sig",
    "model_sig_chain",
    "open_model_sig",
    "open_model_sig_chain",
    "resource_order",
]

OMS_BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
#: Ignored by default at the model root, exactly the reference tool's list.
GIT_IGNORED_PATHS = (".git", ".gitattributes", ".github", ".gitignore")


class OtherKey(VerificationError):
    """The model.sig names (``publicKey.hint``) a different key than the one offered."""


def resource_order(name: str) -> tuple[str, ...]:
    """Sort key of the reference implementation: path components, then lexicographic."""
    return tuple(name.split("/"))


@dataclass(frozen=True)
class Resource:
    """One signed file: POSIX path relative to the model root and its sha256."""

    name: str
    digest: str


@dataclass(frozen=True)
class OmsManifest:
    """What a ``model.sig`` asserts: the file set, how it was serialised, and its root digest."""

    model_name: str
    resources: tuple[Resource, ...]
    allow_symlinks: bool = False
    ignore_paths: tuple[str, ...] = GIT_IGNORED_PATHS

    @classmethod
    def build(
        cls, model_name: str, files: Iterable[tuple[str, str]], *,
        allow_symlinks: bool = False, ignore_paths: Iterable[str] = GIT_IGNORED_PATHS,
    ) -> OmsManifest:
        """Manifest from ``(relative path, sha256)`` pairs, ordered as the reference orders."""
        res = sorted((Resource(n, d) for n, d in files), key=lambda r: resource_order(r.name))
        if not res:
            raise UsageError("refusing to sign an empty model: no files to sign",
                             hint="OMS v1.0 requires at least one resource")
        names = [r.name for r in res]
        if len(set(names)) != len(names):
            raise UsageError("duplicate file names in the manifest")
        for r in res:
            if not is_sha256(r.digest):
                raise UsageError(f"{r.name}: not a sha256 digest: {r.digest!r}")
        return cls(model_name or "model", tuple(res), allow_symlinks,
                   tuple(dict.fromkeys(ignore_paths)))

    @property
    def root_digest(self) -> str:
        """sha256 over the concatenated raw resource digests, in listed order."""
        h = hashlib.sha256()
        for r in self.resources:
            h.update(bytes.fromhex(r.digest))
        return h.hexdigest()

    def digests(self) -> dict[str, str]:
        """Path -> sha256."""
        return {r.name: r.digest for r in self.resources}

    def to_statement(self) -> Statement:
        """The in-toto statement ``model.sig`` signs."""
        predicate = OmsSignatureV1(
            serialization=OmsSerialization(method="files", hash_type="sha256",
                                           allow_symlinks=self.allow_symlinks,
                                           ignore_paths=list(self.ignore_paths)),
            resources=[OmsResource(name=r.name, algorithm="sha256", digest=r.digest)
                       for r in self.resources])
        return Statement.of([Subject(self.model_name, {"sha256": self.root_digest})], predicate)

    @classmethod
    def from_statement(cls, st: Statement) -> OmsManifest:
        """Inverse of :meth:`to_statement`; checks type, serialisation and root consistency."""
        if st.predicate_type != OMS_SIGNATURE_V1:
            raise WrongPredicateType(
                f"wrong predicate type {st.predicate_type!r}, expected {OMS_SIGNATURE_V1!r}",
                st.predicate_type)
        if len(st.subjects) != 1 or "sha256" not in st.subjects[0].digest:
            raise VerificationError("OMS statement must have exactly one sha256 subject")
        p = st.typed_as(OmsSignatureV1)
        ser = p.serialization
        if ser.method != "files" or ser.hash_type != "sha256":
            raise VerificationError(f"unsupported OMS serialisation {ser.to_json()!r}: only "
                                    "method=files, hash_type=sha256")
        if not p.resources:
            raise VerificationError("OMS predicate lists no resources")
        res: list[Resource] = []
        for r in p.resources:
            if r.algorithm != "sha256" or not is_sha256(r.digest):
                raise VerificationError(f"malformed OMS resource {r.to_json()!r}")
            res.append(Resource(r.name, r.digest))
        if len(res) == 1 and res[0].name == ".":
            # the reference tool names a single-file model's one resource "." (its path
            # relative to itself); OMS names it by the basename, which is the subject name
            res = [Resource(st.subjects[0].name, res[0].digest)]
        m = cls(st.subjects[0].name, tuple(res), ser.allow_symlinks, tuple(ser.ignore_paths))
        if m.root_digest != st.subjects[0].digest["sha256"]:
            raise VerificationError(
                f"OMS manifest is inconsistent: subject root digest "
                f"{st.subjects[0].digest['sha256']}, resources hash to {m.root_digest}")
        if len(m.digests()) != len(res):
            raise VerificationError("OMS manifest lists a file twice")
        return m


def build_model_sig(manifest: OmsManifest, key: SigningKey) -> bytes:
    """The ``model.sig`` bytes for ``manifest``, signed with an ECDSA key (and its chain)."""
    if not key.algorithm.startswith("ecdsa-"):
        raise UsageError(f"OMS model.sig needs an ECDSA P-256/P-384/P-521 key, not {key.algorithm}",
                         hint="Ed25519 keys may sign attestations but not model.sig")
    env = sign_envelope(manifest.to_statement().to_bytes(), INTOTO_PAYLOAD_TYPE, [key],
                        keyid=False)
    material: dict[str, Any] = {"publicKey": {"hint": key.public.oms_hint}, "tlogEntries": []}
    if key.chain:  # OMS certificate method: the chain replaces the hint
        material = {"x509CertificateChain": {"certificates": [
            {"rawBytes": base64.b64encode(c.public_bytes(serialization.Encoding.DER)).decode()}
            for c in key.chain]}, "tlogEntries": []}
    bundle = {
        "mediaType": OMS_BUNDLE_MEDIA_TYPE,
        "verificationMaterial": material,
        "dsseEnvelope": env.to_json(),
    }
    return json.dumps(bundle, separators=(",", ":")).encode()


def _open_bundle(data: bytes) -> tuple[dict[str, Any], Envelope]:
    try:
        bundle = loads_json(data, what="model.sig")
    except ValueError as err:
        raise MalformedEnvelope(f"model.sig is not JSON: {err}") from err
    if not isinstance(bundle, dict) or bundle.get("mediaType") != OMS_BUNDLE_MEDIA_TYPE:
        raise MalformedEnvelope(f"model.sig is not a Sigstore bundle ({OMS_BUNDLE_MEDIA_TYPE})")
    material = bundle.get("verificationMaterial")
    if not isinstance(material, dict):
        raise MalformedEnvelope("model.sig has no verificationMaterial")
    env = Envelope.from_json(bundle.get("dsseEnvelope"))
    if env.payload_type != INTOTO_PAYLOAD_TYPE:
        raise VerificationError(f"model.sig payloadType {env.payload_type!r} is not in-toto")
    return material, env


def _check(env: Envelope, public: PublicKey, who: str) -> OmsManifest:
    check = check_envelope(env, [public])
    if not check.signers:
        raise VerificationError(f"model.sig signature does not verify with {who}: "
                                + "; ".join(check.problems))
    return OmsManifest.from_statement(parse_statement(check.payload))


def model_sig_chain(data: bytes) -> tuple[x509.Certificate, ...]:
    """The certificate chain a ``model.sig`` carries (leaf first); empty for other methods.

    Raises:
        MalformedEnvelope: not a bundle, or an unreadable certificate.
    """
    material, _ = _open_bundle(data)
    raw = material.get("x509CertificateChain")
    if raw is None:
        return ()
    certs = raw.get("certificates") if isinstance(raw, dict) else None
    if not isinstance(certs, list) or not certs or len(certs) > 16:
        raise MalformedEnvelope("model.sig x509CertificateChain must list 1-16 certificates")
    out: list[x509.Certificate] = []
    for c in certs:
        raw_bytes = c.get("rawBytes") if isinstance(c, dict) else None
        if not isinstance(raw_bytes, str):
            raise MalformedEnvelope("model.sig certificate entry lacks rawBytes")
        der = b64decode(raw_bytes, what="certificate rawBytes")
        try:
            out.append(x509.load_der_x509_certificate(der))
        except ValueError as err:
            raise MalformedEnvelope("model.sig carries an unreadable certificate") from err
    return tuple(out)


def open_model_sig(data: bytes, public: PublicKey) -> OmsManifest:
    """Verify a ``model.sig`` with ``public`` and return the manifest it signs.

    Raises:
        VerificationError: malformed bundle, wrong key (hint or signature), wrong payload or
            predicate type, inconsistent root digest.
    """
    material, env = _open_bundle(data)
    pk = material.get("publicKey")
    hint = pk.get("hint") if isinstance(pk, dict) else None
    if hint and hint != public.oms_hint:
        raise OtherKey(
            f"model.sig was signed by another key (hint {hint}, this key {public.oms_hint})")
    return _check(env, public, "the given key")


def open_model_sig_chain(data: bytes, trust: ChainTrust, *, at: datetime | None = None
                         ) -> tuple[OmsManifest, CertIdentity]:
    """Verify a certificate-method ``model.sig``: chain to ``trust`` at ``at``, then signature.

    Args:
        data: the ``model.sig`` bytes.
        trust: anchors, CRLs and accepted identities.
        at: the signature's time (OMS signs none: callers pass a signed time they hold, e.g.
            the bundle manifest's, else validation happens now).

    Raises:
        UntrustedCertificate: chain, revocation or identity not trusted.
        VerificationError: no chain, bad signature, malformed bundle or statement.
    """
    chain = model_sig_chain(data)
    if not chain:
        raise OtherKey("model.sig carries no certificate chain (it is not certificate-signed)")
    signer = verify_chain(chain, trust, at)
    _, env = _open_bundle(data)
    return _check(env, signer.public, f"the certificate of {signer.name}"), signer
