"""``specbundle sign-model DIR --key KEY.pem``: an OMS ``model.sig`` for any model directory."""

from __future__ import annotations

from pathlib import Path

import click

from specbundle.cli._keyopts import hash_progress, load_keys, passphrase_option
from specbundle.cli._options import json_option
from specbundle.cli._output import console, print_json
from specbundle.sign import sign_model

__all__ = ["command"]


@click.command("sign-model")
@click.argument("model_dir", type=click.Path(exists=True, path_type=Path))
@click.option("--key", "key_path", required=True,
              type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="ECDSA P-256/P-384/P-521 private key (PEM or PKCS#8).")
@passphrase_option
@click.option("--signature", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Where to write the signature (default: DIR/model.sig).")
@click.option("--ignore-paths", "--ignore_paths", "ignore_paths", multiple=True,
              help="Paths (relative to DIR or the current folder) to leave unsigned.")
@click.option("--ignore-git-paths/--no-ignore-git-paths", default=True, show_default=True,
              help="Leave .git, .gitattributes, .github and .gitignore unsigned.")
@click.option("--allow-symlinks", "--allow_symlinks", "allow_symlinks", is_flag=True,
              help="Follow symlinks to files (refused by default).")
@json_option
def command(model_dir: Path, key_path: Path, passphrase_file: Path | None,
            signature: Path | None, ignore_paths: tuple[str, ...], ignore_git_paths: bool,
            allow_symlinks: bool, as_json: bool) -> None:
    """Sign MODEL_DIR in the OpenSSF Model Signing v1.0 format."""
    key = load_keys((key_path,), passphrase_file)[0]
    with hash_progress(not as_json, None, "hashing") as progress:
        res = sign_model(model_dir, key, signature=signature, ignore_paths=ignore_paths,
                         ignore_git_paths=ignore_git_paths, allow_symlinks=allow_symlinks,
                         progress=progress)
    info = {"signature": str(res.signature), "root_digest": res.manifest.root_digest,
            "files": len(res.manifest.resources), "signer": key.fingerprint}
    if as_json:
        print_json(info)
        return
    console.print(f"signed {info['files']} files of {model_dir} -> {res.signature}")
    console.print(f"root digest {res.manifest.root_digest}  key {key.fingerprint}")
