"""``specbundle keys generate|revoke``: make a signing key pair; revoke a key in a mirror.

``keys revoke`` records a signed ``revocation`` event in the mirror's hash-chained event log;
``specbundle audit`` then fails everything the revoked key signed, even if the trust policy
still lists it (only revocations signed by a key of the policy count).
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import click

from specbundle.attest import (
    KeyAlgorithm,
    generate_key,
    load_public_key,
    write_private_key,
    write_public_key,
)
from specbundle.cli._keyopts import KEY_SOURCE, load_keys, passphrase_option, read_passphrase
from specbundle.cli._options import json_option, mirror_option, open_mirror
from specbundle.cli._output import console, print_json

__all__ = ["command", "generate", "revoke"]


@click.group("keys")
def command() -> None:
    """Manage signing keys."""


@command.command("generate")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Private key file to create (PKCS#8 PEM, mode 0600); KEY.pub goes beside it.")
@click.option("--type", "algorithm", default="ecdsa-p256", show_default=True,
              type=click.Choice(["ecdsa-p256", "ecdsa-p384", "ecdsa-p521", "ed25519"]),
              help="Key type; OMS model.sig accepts the ECDSA kinds only.")
@click.option("--encrypt", is_flag=True,
              help="Encrypt the private key with a passphrase (file, env, or a prompt).")
@passphrase_option
@click.option("--force", is_flag=True, help="Replace an existing key file.")
@json_option
def generate(out: Path, algorithm: str, encrypt: bool, passphrase_file: Path | None,
             force: bool, as_json: bool) -> None:
    """Generate a key pair and print the public key and its fingerprint."""
    passphrase = None
    if encrypt:
        passphrase = read_passphrase(passphrase_file) or click.prompt(
            "passphrase", hide_input=True, confirmation_prompt=True, err=True).encode()
    key = generate_key(cast(KeyAlgorithm, algorithm))
    write_private_key(key, out, passphrase=passphrase, overwrite=force)
    pub_path = out.with_suffix(".pub")
    write_public_key(key.public, pub_path)
    info = {"private_key": str(out), "public_key": str(pub_path), "algorithm": key.algorithm,
            "fingerprint": key.fingerprint, "encrypted": bool(passphrase),
            "public_key_pem": key.public.pem.decode()}
    if as_json:
        print_json(info)
        return
    console.print(f"private key  {out} (0600{', encrypted' if passphrase else ''})")
    console.print(f"public key   {pub_path}")
    console.print(f"algorithm    {key.algorithm}")
    console.print(f"fingerprint  {key.fingerprint}")
    console.print(key.public.pem.decode().rstrip(), markup=False)


@command.command("revoke")
@click.argument("fingerprint")
@mirror_option
@click.option("--key", "key_path", required=True,
              type=KEY_SOURCE,
              help="Signing key (PEM) of the trust policy that signs the revocation.")
@passphrase_option
@click.option("--reason", required=True, help="Why the key is revoked (signed with it).")
@json_option
def revoke(fingerprint: str, mirror_dir: Path | None, key_path: Path | str,
           passphrase_file: Path | None, reason: str, as_json: bool) -> None:
    """Revoke the key FINGERPRINT (or the key in a KEY.pub file) in the mirror's event log."""
    from specbundle.audit.revocation import revoke_key  # the audit stage loads on use only

    if Path(fingerprint).is_file():
        fingerprint = load_public_key(Path(fingerprint)).fingerprint
    (signer,) = load_keys((key_path,), passphrase_file)
    rev = revoke_key(open_mirror(mirror_dir), fingerprint, signer=signer, reason=reason)
    if as_json:
        print_json(rev.to_json())
        return
    console.print(f"revoked      {rev.fingerprint}")
    console.print(f"reason       {rev.reason}", markup=False)
    console.print(f"time         {rev.time}")
    console.print(f"signed by    {signer.fingerprint}")
    console.print(f"event seq    {rev.seq}")
