"""``specbundle keys generate``: a signing key pair (private key 0600, public key, fingerprint)."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import click

from specbundle.attest import KeyAlgorithm, generate_key, write_private_key, write_public_key
from specbundle.cli._keyopts import passphrase_option, read_passphrase
from specbundle.cli._options import json_option
from specbundle.cli._output import console, print_json

__all__ = ["command"]


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
