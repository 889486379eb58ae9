"""``specbundle sign-model DIR --key KEY``: an OMS ``model.sig`` for any model directory.

``--signing-cert LEAF --cert-chain CA…`` switch to the OMS certificate method (the reference
tool's option names); ``--key`` may be a PKCS#11 URI.
"""

from __future__ import annotations

from pathlib import Path

import click

from specbundle.cli._keyopts import (
    KEY_SOURCE,
    attach_chain,
    cert_options,
    hash_progress,
    load_keys,
    passphrase_option,
)
from specbundle.cli._options import json_option
from specbundle.cli._output import console, print_json
from specbundle.sign import sign_model

__all__ = ["command"]


@click.command("sign-model")
@click.argument("model_dir", type=click.Path(exists=True, path_type=Path))
@click.option("--key", "key_path", required=True,
              type=KEY_SOURCE,
              help="ECDSA P-256/P-384/P-521 private key (PEM or PKCS#8) or pkcs11: URI.")
@passphrase_option
@cert_options
@click.option("--signature", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Where to write the signature (default: DIR/model.sig).")
@click.option("--ignore-paths", "--ignore_paths", "ignore_paths", multiple=True,
              help="Paths (relative to DIR or the current folder) to leave unsigned.")
@click.option("--ignore-git-paths/--no-ignore-git-paths", default=True, show_default=True,
              help="Leave .git, .gitattributes, .github and .gitignore unsigned.")
@click.option("--allow-symlinks", "--allow_symlinks", "allow_symlinks", is_flag=True,
              help="Follow symlinks to files (refused by default).")
@json_option
def command(model_dir: Path, key_path: Path | str, passphrase_file: Path | None,
            signing_cert: Path | None, cert_chain: tuple[Path, ...], signature: Path | None,
            ignore_paths: tuple[str, ...], ignore_git_paths: bool, allow_symlinks: bool,
            as_json: bool) -> None:
    """Sign MODEL_DIR in the OpenSSF Model Signing v1.0 format."""
    key = attach_chain(load_keys((key_path,), passphrase_file), signing_cert, cert_chain)[0]
    with hash_progress(not as_json, None, "hashing") as progress:
        res = sign_model(model_dir, key, signature=signature, ignore_paths=ignore_paths,
                         ignore_git_paths=ignore_git_paths, allow_symlinks=allow_symlinks,
                         progress=progress)
    info = {"signature": str(res.signature), "root_digest": res.manifest.root_digest,
            "files": len(res.manifest.resources), "signer": key.fingerprint,
            "method": "certificate" if key.chain else "key"}
    if as_json:
        print_json(info)
        return
    console.print(f"signed {info['files']} files of {model_dir} -> {res.signature}")
    console.print(f"root digest {res.manifest.root_digest}  key {key.fingerprint}")
