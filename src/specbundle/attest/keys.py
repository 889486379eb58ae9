"""Signing keys: generate, load, write, fingerprint (ECDSA P-256/P-384/P-521 and Ed25519).

A key is named everywhere by its *fingerprint*: the sha256 hex of the public key's
SubjectPublicKeyInfo DER, which is independent of PEM line wrapping. OMS ``model.sig`` files
carry a different name for the same key, the *hint* (sha256 of the PEM SPKI text), because the
reference tool defines it so; :attr:`PublicKey.oms_hint` computes it.

Private keys only ever live in the file the user names, or in a token (PKCS#11, a
:class:`TokenKey`) they never leave: :class:`SigningKey` never serialises
itself (``repr`` shows the fingerprint only) and :func:`write_private_key` creates the file
``0600`` without ever exposing the bytes through another path.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, Protocol, get_args

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from specbundle.errors import EnvironmentProblem, UsageError, VerificationError
from specbundle.strict import MalformedDocument, read_bounded

__all__ = [
    "KeyAlgorithm",
    "PublicKey",
    "SigningKey",
    "TokenKey",
    "generate_key",
    "load_public_key",
    "load_signing_key",
    "public_key_from_pem",
    "write_private_key",
    "write_public_key",
]

KeyAlgorithm = Literal["ecdsa-p256", "ecdsa-p384", "ecdsa-p521", "ed25519"]
_MAX_KEY_FILE = 1024 * 1024  # a PEM key is a few KB; a FIFO or device is refused
_CURVES: dict[str, tuple[KeyAlgorithm, hashes.HashAlgorithm]] = {
    # The hash follows the curve size, as the OMS reference signer does.
    "secp256r1": ("ecdsa-p256", hashes.SHA256()),
    "secp384r1": ("ecdsa-p384", hashes.SHA384()),
    "secp521r1": ("ecdsa-p521", hashes.SHA512()),
}
_ALG_CURVES: dict[str, ec.EllipticCurve] = {
    "ecdsa-p256": ec.SECP256R1(), "ecdsa-p384": ec.SECP384R1(), "ecdsa-p521": ec.SECP521R1(),
}
_PubKey = ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey
_PrivKey = ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey


def _algorithm_of(key: _PubKey) -> KeyAlgorithm:
    if isinstance(key, ed25519.Ed25519PublicKey):
        return "ed25519"
    entry = _CURVES.get(key.curve.name)
    if entry is None:
        raise UsageError(f"unsupported elliptic curve {key.curve.name!r}",
                         hint="use P-256, P-384, P-521 or Ed25519")
    return entry[0]


@dataclass(frozen=True)
class PublicKey:
    """A public key that may verify signatures, with its stable fingerprint."""

    key: _PubKey = field(repr=False)
    algorithm: KeyAlgorithm
    fingerprint: str

    @classmethod
    def from_key(cls, key: object) -> PublicKey:
        """Wrap a ``cryptography`` public key; refuses RSA/DSA and unknown curves."""
        if not isinstance(key, ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey):
            raise UsageError(f"unsupported public key type {type(key).__name__}",
                             hint="use an ECDSA (P-256/P-384/P-521) or Ed25519 key")
        der = key.public_bytes(serialization.Encoding.DER,
                               serialization.PublicFormat.SubjectPublicKeyInfo)
        return cls(key, _algorithm_of(key), hashlib.sha256(der).hexdigest())

    @property
    def pem(self) -> bytes:
        """PEM SubjectPublicKeyInfo (what ``keys generate`` writes as ``KEY.pub``)."""
        return self.key.public_bytes(serialization.Encoding.PEM,
                                     serialization.PublicFormat.SubjectPublicKeyInfo)

    @property
    def oms_hint(self) -> str:
        """``verificationMaterial.publicKey.hint`` of an OMS bundle: sha256 hex of the PEM."""
        return hashlib.sha256(self.pem).hexdigest()

    def verify(self, signature: bytes, data: bytes) -> bool:
        """True when ``signature`` is this key's signature over ``data``."""
        try:
            if isinstance(self.key, ed25519.Ed25519PublicKey):
                self.key.verify(signature, data)
            else:
                self.key.verify(signature, data, ec.ECDSA(_CURVES[self.key.curve.name][1]))
        except InvalidSignature:
            return False
        return True


class TokenKey(Protocol):
    """A private key that signs inside a device (HSM, smart card) and never leaves it."""

    def public_key(self) -> ec.EllipticCurvePublicKey:
        """The public half, read from the device."""
        ...

    def sign(self, data: bytes, algorithm: hashes.HashAlgorithm) -> bytes:
        """DER ECDSA signature over ``data`` hashed with ``algorithm``."""
        ...


@dataclass(frozen=True, repr=False)
class SigningKey:
    """A private key in memory or in a token; only :func:`write_private_key` serialises one.

    ``chain`` is the signer's X.509 certificate and its issuers (leaf first) when the key
    signs with the OMS *certificate* method; empty for the *key* method.
    """

    _key: _PrivKey | TokenKey
    public: PublicKey
    chain: tuple[x509.Certificate, ...] = ()

    @classmethod
    def from_key(cls, key: object) -> SigningKey:
        """Wrap a ``cryptography`` private key."""
        if not isinstance(key, ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey):
            raise UsageError(f"unsupported private key type {type(key).__name__}",
                             hint="use an ECDSA (P-256/P-384/P-521) or Ed25519 key")
        return cls(key, PublicKey.from_key(key.public_key()))

    @classmethod
    def from_token(cls, key: TokenKey) -> SigningKey:
        """Wrap a key that stays in its device (ECDSA only: the curve picks the hash)."""
        return cls(key, PublicKey.from_key(key.public_key()))

    @property
    def in_token(self) -> bool:
        """True when the private key lives in a device and cannot be exported."""
        return not isinstance(self._key, ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey)

    def with_chain(self, chain: tuple[x509.Certificate, ...]) -> SigningKey:
        """This key signing as the certificate ``chain[0]`` (issuers after it).

        Raises:
            UsageError: the leaf certificate certifies another key.
        """
        if chain:
            leaf = PublicKey.from_key(chain[0].public_key())
            if leaf.fingerprint != self.fingerprint:
                raise UsageError(
                    f"the signing certificate certifies key {leaf.fingerprint[:16]}…, "
                    f"not the signing key {self.fingerprint[:16]}…",
                    hint="pass the certificate issued for this key (--signing-cert)")
        return replace(self, chain=chain)

    @property
    def algorithm(self) -> KeyAlgorithm:
        """Key type, e.g. ``ecdsa-p256``."""
        return self.public.algorithm

    @property
    def fingerprint(self) -> str:
        """Fingerprint of the public half."""
        return self.public.fingerprint

    def sign(self, data: bytes) -> bytes:
        """Raw signature (DER ECDSA or 64-byte Ed25519) over ``data``."""
        if isinstance(self._key, ed25519.Ed25519PrivateKey):
            return self._key.sign(data)
        if isinstance(self._key, ec.EllipticCurvePrivateKey):
            return self._key.sign(data, ec.ECDSA(_CURVES[self._key.curve.name][1]))
        return self._key.sign(data, _CURVES[self._key.public_key().curve.name][1])

    def private_pem(self, passphrase: bytes | None = None) -> bytes:
        """PKCS#8 PEM, encrypted with the best available scheme when a passphrase is given."""
        if not isinstance(self._key, ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey):
            raise UsageError("the private key lives in a PKCS#11 token and cannot be exported")
        enc: serialization.KeySerializationEncryption = (
            serialization.BestAvailableEncryption(passphrase) if passphrase
            else serialization.NoEncryption()
        )
        return self._key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8, enc)

    def __repr__(self) -> str:
        where = ", token" if self.in_token else ""
        return f"SigningKey({self.algorithm}, {self.fingerprint[:16]}…{where})"


def generate_key(algorithm: KeyAlgorithm = "ecdsa-p256") -> SigningKey:
    """A fresh key. OMS ``model.sig`` accepts only the ECDSA kinds; attestations take all."""
    if algorithm not in get_args(KeyAlgorithm):
        raise UsageError(f"unknown key algorithm {algorithm!r}",
                         hint="one of " + ", ".join(get_args(KeyAlgorithm)))
    if algorithm == "ed25519":
        return SigningKey.from_key(ed25519.Ed25519PrivateKey.generate())
    return SigningKey.from_key(ec.generate_private_key(_ALG_CURVES[algorithm]))


def load_signing_key(path: Path, passphrase: bytes | None = None) -> SigningKey:
    """Load a private key from PEM (PKCS#8 or SEC1) or DER PKCS#8, decrypting if needed."""
    try:
        data = read_bounded(path, max_bytes=_MAX_KEY_FILE, what=f"key file {path}")
    except MalformedDocument as err:
        raise UsageError(str(err)) from None
    except OSError as err:
        raise EnvironmentProblem(f"cannot read key file {path}: {err.strerror}") from err
    if b"PUBLIC KEY-----" in data[:4096] and b"PRIVATE KEY-----" not in data[:4096]:
        # the common mix-up (KEY.pub for KEY): say so instead of "not a readable private key"
        raise UsageError(f"{path} holds a public key; --key needs the private key",
                         hint="pass the key file itself, not KEY.pub")
    loader = (serialization.load_pem_private_key if b"-----BEGIN" in data
              else serialization.load_der_private_key)
    try:
        key = loader(data, passphrase)
    except TypeError as err:
        # cryptography raises TypeError for "encrypted but no password" and the reverse.
        need = "is encrypted: pass its passphrase" if passphrase is None else "is not encrypted"
        raise EnvironmentProblem(f"key file {path} {need}",
                                 hint="set SPECBUNDLE_KEY_PASSPHRASE or --passphrase-file") from err
    except (ValueError, UnsupportedAlgorithm) as err:
        raise EnvironmentProblem(
            f"key file {path} is not a readable private key (or the passphrase is wrong)"
        ) from err
    return SigningKey.from_key(key)


def public_key_from_pem(data: bytes, *, source: str = "<pem>") -> PublicKey:
    """Parse a PEM SubjectPublicKeyInfo (a private key PEM is accepted and its public half used)."""
    try:
        if b"PRIVATE KEY" in data:
            raise UsageError(f"{source} holds a private key; pass the public key (KEY.pub)")
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm) as err:
        raise VerificationError(f"{source} is not a readable PEM public key") from err
    return PublicKey.from_key(key)


def load_public_key(path: Path) -> PublicKey:
    """Load a PEM public key file."""
    try:
        data = read_bounded(path, max_bytes=_MAX_KEY_FILE, what=f"public key {path}")
    except MalformedDocument as err:
        raise UsageError(str(err)) from None
    except OSError as err:
        raise EnvironmentProblem(f"cannot read public key {path}: {err.strerror}") from err
    return public_key_from_pem(data, source=str(path))


def write_private_key(
    key: SigningKey, path: Path, *, passphrase: bytes | None = None, overwrite: bool = False
) -> None:
    """Create ``path`` with mode 0600 holding the PKCS#8 PEM; refuses to replace a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    if overwrite:
        path.unlink(missing_ok=True)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError as err:
        raise UsageError(f"{path} exists; refusing to overwrite a key",
                         hint="choose another path or pass --force") from err
    try:
        os.fchmod(fd, 0o600)  # the umask cannot widen it, but be explicit
        os.write(fd, key.private_pem(passphrase))
        os.fsync(fd)
    finally:
        os.close(fd)


def write_public_key(key: PublicKey, path: Path) -> None:
    """Write the PEM public key (world-readable: it is meant to be shared)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(key.pem)
