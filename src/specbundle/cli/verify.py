"""``specbundle verify BUNDLE --trust trust.yaml``: signatures, bytes and policy, offline."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import click

from specbundle.bundle import Bundle, read_unsigned
from specbundle.cli._keyopts import hash_progress
from specbundle.cli._options import json_option, mirror_option, open_mirror
from specbundle.cli._output import console, err_console, print_json, print_table
from specbundle.errors import BundleNotFound, MirrorError, SpecbundleError, UsageError
from specbundle.mirror import Mirror
from specbundle.verify import (
    BundleVerificationFailed,
    TrustPolicy,
    VerificationReport,
    load_policy,
    record_verification,
    verify_bundle,
)

F = TypeVar("F", bound=Any)

__all__ = ["bundle_options", "command", "open_bundle"]


def bundle_options(f: F) -> F:
    """``--trust`` / ``--unsigned`` on every stage that acts on a bundle: which reading to use."""
    f = click.option(
        "--unsigned", "unsigned", is_flag=True,
        help="Connected side only: act on the mirror's UNSIGNED bundle record, with nothing "
             "verified (said so in the output and --json).")(f)
    return click.option(
        "--trust", "trust", type=click.Path(dir_okay=False, path_type=Path), default=None,
        help="Trust policy: verify the bundle first and use only its signed version "
             "(required on the isolated side).")(f)


def open_bundle(mirror: Mirror, bundle: str, trust: Path | None, unsigned: bool) -> Bundle:
    """The one place a stage's bundle value is chosen: verified, or unsigned when asked.

    Raises:
        UsageError: neither or both of ``--trust`` and ``--unsigned``.
        BundleVerificationFailed: the bundle does not verify (exit 3).
    """
    if trust is not None and unsigned:
        raise UsageError("--trust and --unsigned contradict each other")
    if trust is not None:
        return verify_bundle(mirror, bundle, load_policy(trust))
    if not unsigned:
        raise UsageError("pass --trust trust.yaml: this stage acts on the verified bundle only",
                         hint="on the connected side, --unsigned acts on the unsigned record")
    err_console.print("WARNING: --unsigned: acting on the UNSIGNED bundle record; nothing was "
                      "verified (connected side only; pass --trust on the isolated side)")
    return read_unsigned(mirror, bundle)


def _record(mirror: Mirror, report: VerificationReport) -> None:
    """Log the verdict; a read-only mirror (a common isolated-side mount) only gets a warning."""
    try:
        record_verification(mirror, report)
    except (MirrorError, OSError) as err:
        err_console.print(f"warning: verification not logged in the mirror's event log: {err}")


def _report_failure(mirror: Mirror, bundle: str, policy: TrustPolicy,
                    err: BundleVerificationFailed, as_json: bool) -> None:
    """The problems, then the approval status: exit 3 always says who still must sign.

    The approval reader loads on failure only: render, bench and admit import this module.
    """
    from specbundle.cli._approval import approval_or_none, print_approval

    approval = approval_or_none(mirror, bundle, policy)
    if as_json:
        doc = err.report.to_json()
        if approval is not None:
            doc["approval"] = approval.to_json()
        print_json(doc)
        return
    print_table(f"{bundle}: verification FAILED", ["problem", "subject", "detail",
                                                   "expected", "actual"],
                [[p.kind, p.subject, p.message, p.expected, p.actual]
                 for p in err.report.problems])
    if approval is not None:
        print_approval(approval)


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
        _report_failure(mirror, bundle, policy, err, as_json)
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
    print_table(None, ["statement", "role", "signers"],
                [[k, r, ", ".join(s[:16] for s in fps)]
                 for k, by_role in sorted(rep.statement_signers.items())
                 for r, fps in sorted(by_role.items())])
