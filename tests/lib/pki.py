"""A local certificate authority for the certificate-method tests (root, intermediate, leaves)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from specbundle.attest import SigningKey

NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)
DAY = dt.timedelta(days=1)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Example Corp"),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _ski(key: ec.EllipticCurvePublicKey) -> x509.SubjectKeyIdentifier:
    return x509.SubjectKeyIdentifier.from_public_key(key)


@dataclass
class Ca:
    """A CA certificate and its key; ``issue`` makes sub-CAs and leaves."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey
    revoked: list[int] = field(default_factory=list)

    @classmethod
    def root(cls, cn: str = "Example Root CA") -> Ca:
        key = ec.generate_private_key(ec.SECP256R1())
        b = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(NOW - 30 * DAY).not_valid_after(NOW + 3650 * DAY)
             .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
             .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False,
                                          False), critical=True)
             .add_extension(_ski(key.public_key()), critical=False))
        return cls(b.sign(key, hashes.SHA256()), key)

    def _builder(self, subject: x509.Name, pub: ec.EllipticCurvePublicKey,
                 start: dt.datetime, end: dt.datetime) -> x509.CertificateBuilder:
        return (x509.CertificateBuilder().subject_name(subject).issuer_name(self.cert.subject)
                .public_key(pub).serial_number(x509.random_serial_number())
                .not_valid_before(start).not_valid_after(end)
                .add_extension(_ski(pub), critical=False)
                .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                    self.key.public_key()), critical=False))

    def sub_ca(self, cn: str = "Example Signing CA") -> Ca:
        key = ec.generate_private_key(ec.SECP256R1())
        b = (self._builder(_name(cn), key.public_key(), NOW - 20 * DAY, NOW + 1000 * DAY)
             .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
             .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False,
                                          False), critical=True))
        return Ca(b.sign(self.key, hashes.SHA256()), key)

    def leaf(self, key: SigningKey, *, email: str = "release@example.com",
             cn: str = "release signer", eku: x509.ObjectIdentifier | None = (
                 ExtendedKeyUsageOID.CODE_SIGNING),
             start: dt.datetime | None = None, end: dt.datetime | None = None) -> x509.Certificate:
        pub = key.public.key
        assert isinstance(pub, ec.EllipticCurvePublicKey)
        b = (self._builder(_name(cn), pub, start or NOW - 10 * DAY, end or NOW + 365 * DAY)
             .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
             .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False,
                                          False), critical=True)
             .add_extension(x509.SubjectAlternativeName([x509.RFC822Name(email)]),
                            critical=False))
        if eku is not None:
            b = b.add_extension(x509.ExtendedKeyUsage([eku]), critical=False)
        return b.sign(self.key, hashes.SHA256())

    def crl(self, serials: list[int]) -> bytes:
        b = (x509.CertificateRevocationListBuilder().issuer_name(self.cert.subject)
             .last_update(NOW - DAY).next_update(NOW + 30 * DAY))
        for s in serials:
            b = b.add_revoked_certificate(x509.RevokedCertificateBuilder().serial_number(s)
                                          .revocation_date(NOW - DAY).build())
        return b.sign(self.key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def pem(*certs: x509.Certificate) -> bytes:
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


def write_pem(path: Path, *certs: x509.Certificate) -> Path:
    path.write_bytes(pem(*certs))
    return path
