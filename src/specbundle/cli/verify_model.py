"""``specbundle verify-model DIR --public-key KEY.pub``: check a directory against model.sig.

``--cert-chain CA.pem`` (repeatable, the reference tool's name) verifies a certificate-method
signature instead: the chain it carries must lead to one of these anchors (now, offline;
``--crl`` files for revocation); ``--identity``/``--identity-provider`` (and a pinned
``--trusted-root``) verify a Sigstore-signed one, offline.
"""

from __future__ import annotations

from pathlib import Path

import click

from specbundle.attest import ChainTrust, PublicKey, load_certificates, load_crls, load_public_key
from specbundle.attest.sigstore_oms import SigstoreTrust
from specbundle.cli._keyopts import hash_progress
from specbundle.cli._options import json_option
from specbundle.cli._output import console, print_json
from specbundle.errors import EnvironmentProblem, VerificationError
from specbundle.verify import ModelVerificationFailed, verify_model

__all__ = ["command"]


@click.command("verify-model")
@click.argument("model_dir", type=click.Path(exists=True, path_type=Path))
@click.option("--public-key", "--public_key", "public_key", default=None,
              type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="PEM public key of the signer (OMS key method).")
@click.option("--cert-chain", "--cert_chain", "--certificate-chain", "cert_chain",
              multiple=True, type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="Trusted CA certificate(s) for a certificate-signed model.sig (repeat).")
@click.option("--crl", "crls", multiple=True,
              type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="CRL file(s) checked for revoked certificates in the chain (repeat).")
@click.option("--identity", default=None,
              help="Sigstore method: the signer's certificate identity (email or URI).")
@click.option("--identity-provider", "--identity_provider", "identity_provider", default=None,
              help="Sigstore method: the OIDC issuer that vouched for --identity.")
@click.option("--trusted-root", "--trusted_root", "trusted_root", default=None,
              type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="Sigstore method: pinned trusted_root.json (default: the embedded "
                   "public-good root); verification is offline either way.")
@click.option("--signature", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The signature to check (default: DIR/model.sig).")
@click.option("--ignore-paths", "--ignore_paths", "ignore_paths", multiple=True,
              help="Paths (relative to DIR or the current folder) not to check.")
@click.option("--ignore-git-paths/--no-ignore-git-paths", default=True, show_default=True,
              help="Skip .git, .gitattributes, .github and .gitignore.")
@click.option("--ignore-unsigned-files", "--ignore_unsigned_files", "ignore_unsigned_files",
              is_flag=True, help="Check only the files the signature lists.")
@click.option("--allow-symlinks", "--allow_symlinks", "allow_symlinks", is_flag=True,
              help="Follow symlinks to files (refused by default).")
@json_option
def command(model_dir: Path, public_key: Path | None, cert_chain: tuple[Path, ...],
            crls: tuple[Path, ...], identity: str | None, identity_provider: str | None,
            trusted_root: Path | None, signature: Path | None,
            ignore_paths: tuple[str, ...], ignore_git_paths: bool, ignore_unsigned_files: bool,
            allow_symlinks: bool, as_json: bool) -> None:
    """Verify MODEL_DIR against its OpenSSF Model Signing signature (exit 3 if it fails)."""
    methods = [public_key is not None, bool(cert_chain), identity is not None]
    if sum(methods) != 1:
        raise click.UsageError("pass one of --public-key (key method), --cert-chain "
                               "(certificate method) or --identity (sigstore method)")
    if (identity is None) != (identity_provider is None) or (
            trusted_root is not None and identity is None):
        raise click.UsageError("--identity and --identity-provider go together "
                               "(and --trusted-root only with them)")
    pub: PublicKey | ChainTrust | SigstoreTrust
    if identity is not None and identity_provider is not None:
        pub = SigstoreTrust(identity, identity_provider, trusted_root)
    elif public_key is None:
        pub = ChainTrust(load_certificates(cert_chain), load_crls(crls))
    else:
        try:
            pub = load_public_key(public_key)
        except VerificationError as err:  # a bad key file is the environment (6), not a check
            raise EnvironmentProblem(err.message,
                                     hint="pass the signer's PEM public key (KEY.pub)") from err
    try:
        with hash_progress(not as_json, None, "hashing") as progress:
            res = verify_model(model_dir, pub, signature=signature, ignore_paths=ignore_paths,
                               ignore_git_paths=ignore_git_paths,
                               ignore_unsigned_files=ignore_unsigned_files,
                               allow_symlinks=allow_symlinks, progress=progress)
    except ModelVerificationFailed as err:
        if as_json:
            print_json({"verified": False, "problems": [p.to_json() for p in err.problems]})
        raise
    except VerificationError as err:
        if as_json:
            print_json({"verified": False, "problems": [
                {"kind": "bad-signature", "subject": "model.sig", "message": err.message}]})
        raise
    if as_json:
        print_json({"verified": True, "root_digest": res.manifest.root_digest,
                    "files": len(res.manifest.resources), "signer": res.signer,
                    "identity": res.identity.to_json() if res.identity else None})
        return
    console.print(f"verified {len(res.manifest.resources)} files of {model_dir}; "
                  f"root digest {res.manifest.root_digest}")
    if res.identity:
        console.print(f"signed by {res.identity.name} (issuer {res.identity.issuer})")
