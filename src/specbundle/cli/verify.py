"""``specbundle verify BUNDLE --trust trust.yaml``: signatures, bytes and policy, offline."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import click

from specbundle.cli._keyopts import hash_progress
from specbundle.cli._options import json_option, mirror_option, open_mirror
from specbundle.cli._output import console, err_console, esc, print_json, print_table
from specbundle.errors import BundleNotFound, MirrorError, SpecbundleError
from specbundle.mirror import Mirror
from specbundle.record import BundleRecord
from specbundle.verify import (
    BundleVerificationFailed,
    VerificationReport,
    VerifiedBundle,
    load_policy,
    record_verification,
    verify_bundle,
)

F = TypeVar("F", bound=Any)

__all__ = ["command", "trust_option", "verified", "verified_record"]


def trust_option(f: F) -> F:
    """``--trust trust.yaml`` on stages that act on a bundle (render, bench): verify first."""
    return click.option(
        "--trust", "trust", type=click.Path(dir_okay=False, path_type=Path), default=None,
        help="Trust policy: verify the bundle first and use only its signed manifest "
             "(required on the isolated side).")(f)


def verified(mirror: Mirror, bundle: str, trust: Path | None) -> VerifiedBundle | None:
    """The verified bundle when ``--trust`` is given (exit 3 if it does not verify)."""
    if trust is None:
        err_console.print("warning: no --trust given: using the unsigned bundle record "
                          "(connected side only; pass --trust on the isolated side)")
        return None
    return verify_bundle(mirror, bundle, load_policy(trust))


def verified_record(mirror: Mirror, bundle: str, trust: Path | None) -> BundleRecord | None:
    """The signed manifest's record when ``--trust`` is given (exit 3 if it does not verify)."""
    v = verified(mirror, bundle, trust)
    return v.record if v is not None else None


def _record(mirror: Mirror, report: VerificationReport) -> None:
    """Log the verdict; a read-only mirror (a common isolated-side mount) only gets a warning."""
    try:
        record_verification(mirror, report)
    except (MirrorError, OSError) as err:
        err_console.print(f"warning: verification not logged in the mirror's event log: {err}")


@click.command("verify")
@click.argument("bundle")
@click.option("--trust", "trust", required=True,
              type=click.Path(dir_okay=False, path_type=Path), help="Trust policy (trust.yaml).")
@mirror_option
@json_option
def command(bundle: str, trust: Path, mirror_dir: Path | None, as_json: bool) -> None:
    """Verify BUNDLE against a trust policy; exit 3 on any failure. Logs a verify event."""
    policy = load_policy(trust)
    mirror = open_mirror(mirror_dir)
    try:  # the unsigned record only sizes the progress bar; verification never reads it
        total: int | None = sum(a.total_size for a in mirror.load_bundle(bundle).artifacts)
    except BundleNotFound:
        raise
    except SpecbundleError:
        total = None
    try:
        with hash_progress(not as_json, total, "re-hashing") as progress:
            res = verify_bundle(mirror, bundle, policy, progress=progress)
    except BundleVerificationFailed as err:
        _record(mirror, err.report)
        if as_json:
            print_json(err.report.to_json())
        else:
            print_table(f"{bundle}: verification FAILED", ["problem", "subject", "detail",
                                                           "expected", "actual"],
                        [[p.kind, p.subject, p.message, p.expected, p.actual]
                         for p in err.report.problems])
        raise
    _record(mirror, res.report)
    if as_json:
        print_json(res.report.to_json())
        return
    rep = res.report
    console.print(f"bundle [bold]{bundle}[/] verified: {rep.files_checked} files, "
                  f"{rep.bytes_checked} bytes re-hashed, policy sha256 {rep.policy_digest[:16]}…")
    print_table(None, ["role", "OMS root digest", "model.sig signer"],
                [[r, rep.roots[r], rep.model_signers[r][:16]] for r in rep.roots])
    for art in res.record.artifacts:  # the publisher link pull verified, from the signed record
        if art.publisher:
            console.print(f"{art.role}: publisher {esc(art.publisher.identity)} ("
                          f"{art.publisher.method}, {esc(art.publisher.issuer)}) verified at pull")
    print_table(None, ["statement", "role", "signers"],
                [[k, r, ", ".join(s[:16] for s in fps)]
                 for k, by_role in sorted(rep.statement_signers.items())
                 for r, fps in sorted(by_role.items())])
