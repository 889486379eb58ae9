"""OpenSSF Model Signing v1.0 ``model.sig``: build and open, with ``cryptography`` alone.

Layers (spec v1.0 §4-6): Sigstore bundle v0.3 JSON -> DSSE envelope -> in-toto Statement v1
with predicateType ``https://model_signing/signature/v1.0``; the predicate lists one sha256
resource per file and the subject digest is the *root digest*: sha256 over the raw bytes of
every resource digest in listed order.

Interop with the reference tool (model-signing 1.1.1), pinned by tests both ways:

* resources are ordered by path *components* (what the reference sorts by), not by code point,
  so our root digest equals the one ``model_signing`` computes for the same tree;
* ``publicKey.hint`` is sha256 hex of the PEM SPKI and ``keyid`` is ``""``;
* the bundle JSON keeps the reference key order; the statement is canonical JSON (the
  reference verifies the signed bytes, so whitespace is free);
* only ``files`` + ``sha256`` serialisations are accepted when opening (the reference CLI
  verifies nothing else either); a ``shards`` or BLAKE3 signature is refused by name.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from specbundle.attest.dsse import (
    INTOTO_PAYLOAD_TYPE,
    Envelope,
    MalformedEnvelope,
    check_envelope,
    sign_envelope,
)
from specbundle.attest.keys import PublicKey, SigningKey
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
    "open_model_sig",
    "resource_order",
]

OMS_BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
#: Ignored by default at the model root, exactly the reference tool's list.
GIT_IGNORED_PATHS = (".git", ".gitattributes", ".github", ".gitignore")


class OtherKey(VerificationError):
    """The model.sig names (``publicKey.hint``) a different key than the one offered."""


class WrongPredicateType(VerificationError):
    """The signed statement is not an OMS v1.0 model signature."""


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
        predicate: dict[str, Any] = {
            "serialization": {"method": "files", "hash_type": "sha256",
                              "allow_symlinks": self.allow_symlinks,
                              "ignore_paths": list(self.ignore_paths)},
            "resources": [{"name": r.name, "algorithm": "sha256", "digest": r.digest}
                          for r in self.resources],
        }
        return Statement.build([Subject(self.model_name, {"sha256": self.root_digest})],
                               OMS_SIGNATURE_V1, predicate)

    @classmethod
    def from_statement(cls, st: Statement) -> OmsManifest:
        """Inverse of :meth:`to_statement`; checks type, serialisation and root consistency."""
        if st.predicate_type != OMS_SIGNATURE_V1:
            raise WrongPredicateType(
                f"wrong predicate type {st.predicate_type!r}, expected {OMS_SIGNATURE_V1!r}")
        if len(st.subjects) != 1 or "sha256" not in st.subjects[0].digest:
            raise VerificationError("OMS statement must have exactly one sha256 subject")
        ser = st.predicate.get("serialization")
        if not isinstance(ser, dict) or ser.get("method") != "files" \
                or ser.get("hash_type") != "sha256":
            raise VerificationError(
                f"unsupported OMS serialisation {ser!r}: only method=files, hash_type=sha256")
        raw = st.predicate.get("resources")
        if not isinstance(raw, list) or not raw:
            raise VerificationError("OMS predicate lists no resources")
        res: list[Resource] = []
        for r in raw:
            if not isinstance(r, dict) or r.get("algorithm") != "sha256" \
                    or not isinstance(r.get("name"), str) or not is_sha256(str(r.get("digest"))):
                raise VerificationError(f"malformed OMS resource {r!r}")
            res.append(Resource(r["name"], r["digest"]))
        if len(res) == 1 and res[0].name == ".":
            # the reference tool names a single-file model's one resource "." (its path
            # relative to itself); OMS names it by the basename, which is the subject name
            res = [Resource(st.subjects[0].name, res[0].digest)]
        ignore = ser.get("ignore_paths", [])
        if not isinstance(ignore, list) or not all(isinstance(p, str) for p in ignore):
            raise VerificationError("OMS serialization.ignore_paths must be a list of strings")
        m = cls(st.subjects[0].name, tuple(res), bool(ser.get("allow_symlinks", False)),
                tuple(ignore))
        if m.root_digest != st.subjects[0].digest["sha256"]:
            raise VerificationError(
                f"OMS manifest is inconsistent: subject root digest "
                f"{st.subjects[0].digest['sha256']}, resources hash to {m.root_digest}")
        if len(m.digests()) != len(res):
            raise VerificationError("OMS manifest lists a file twice")
        return m


def build_model_sig(manifest: OmsManifest, key: SigningKey) -> bytes:
    """The ``model.sig`` bytes for ``manifest``, signed with an ECDSA key."""
    if not key.algorithm.startswith("ecdsa-"):
        raise UsageError(f"OMS model.sig needs an ECDSA P-256/P-384/P-521 key, not {key.algorithm}",
                         hint="Ed25519 keys may sign attestations but not model.sig")
    env = sign_envelope(manifest.to_statement().to_bytes(), INTOTO_PAYLOAD_TYPE, [key],
                        keyid=False)
    bundle = {
        "mediaType": OMS_BUNDLE_MEDIA_TYPE,
        "verificationMaterial": {"publicKey": {"hint": key.public.oms_hint}, "tlogEntries": []},
        "dsseEnvelope": env.to_json(),
    }
    return json.dumps(bundle, separators=(",", ":")).encode()


def open_model_sig(data: bytes, public: PublicKey) -> OmsManifest:
    """Verify a ``model.sig`` with ``public`` and return the manifest it signs.

    Raises:
        VerificationError: malformed bundle, wrong key (hint or signature), wrong payload or
            predicate type, inconsistent root digest.
    """
    try:
        bundle = loads_json(data, what="model.sig")
    except ValueError as err:
        raise MalformedEnvelope(f"model.sig is not JSON: {err}") from err
    if not isinstance(bundle, dict) or bundle.get("mediaType") != OMS_BUNDLE_MEDIA_TYPE:
        raise MalformedEnvelope(f"model.sig is not a Sigstore bundle ({OMS_BUNDLE_MEDIA_TYPE})")
    material = bundle.get("verificationMaterial")
    hint = material.get("publicKey", {}).get("hint") if isinstance(material, dict) else None
    if hint and hint != public.oms_hint:
        raise OtherKey(
            f"model.sig was signed by another key (hint {hint}, this key {public.oms_hint})")
    env = Envelope.from_json(bundle.get("dsseEnvelope"))
    if env.payload_type != INTOTO_PAYLOAD_TYPE:
        raise VerificationError(f"model.sig payloadType {env.payload_type!r} is not in-toto")
    check = check_envelope(env, [public])
    if not check.signers:
        raise VerificationError("model.sig signature does not verify with the given key: "
                                + "; ".join(check.problems))
    return OmsManifest.from_statement(parse_statement(check.payload))
