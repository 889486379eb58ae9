"""``specbundle sign BUNDLE --key KEY``: model.sig per artifact + attestations for a bundle."""

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
from specbundle.cli._options import json_option, mirror_option, open_mirror
from specbundle.cli._output import console, print_json, print_table
from specbundle.sign import sign_bundle

__all__ = ["command"]


@click.command("sign")
@click.argument("bundle")
@mirror_option
@click.option("--key", "key_paths", required=True, multiple=True,
              type=KEY_SOURCE,
              help="Private key (repeat for co-signers; the first one signs model.sig, "
                   "which must be ECDSA).")
@passphrase_option
@cert_options
@click.option("--allow-unscanned", is_flag=True,
              help="Sign without a scan report (recorded as a FAILED scan attestation).")
@click.option("--rehash", is_flag=True,
              help="Re-read every object instead of trusting the digests pull recorded.")
@json_option
def command(bundle: str, mirror_dir: Path | None, key_paths: tuple[Path | str, ...],
            passphrase_file: Path | None, signing_cert: Path | None,
            cert_chain: tuple[Path, ...], allow_unscanned: bool, rehash: bool,
            as_json: bool) -> None:
    """Sign BUNDLE: OMS model.sig for target and draft, provenance/scan/pair attestations."""
    mirror = open_mirror(mirror_dir)
    keys = attach_chain(load_keys(key_paths, passphrase_file), signing_cert, cert_chain)
    total = sum(a.total_size for a in mirror.load_bundle(bundle).artifacts) if rehash else None
    with hash_progress(rehash and not as_json, total, "re-hashing") as progress:
        res = sign_bundle(mirror, bundle, keys, allow_unscanned=allow_unscanned, rehash=rehash,
                          progress=progress)
    info = {"bundle": res.name, "roots": res.roots,
            "signatures": {r: str(p) for r, p in res.signatures.items()},
            "attestation_lines": list(res.attestation_lines), "signers": list(res.signers),
            "scanned": res.scanned}
    if as_json:
        print_json(info)
        return
    console.print(f"signed bundle [bold]{res.name}[/] with {len(res.signers)} key(s)"
                  + ("" if res.scanned else " [yellow](unscanned, recorded as FAILED)[/]"))
    print_table(None, ["role", "OMS root digest", "model.sig"],
                [[r, res.roots[r], str(res.signatures[r])] for r in res.roots])
    console.print(f"attestations appended at lines {list(res.attestation_lines)}")
