"""``specbundle diff BUNDLE [FROM] [TO]``: what a version changes, marked where it matters."""

from __future__ import annotations

from pathlib import Path

import click
from rich.text import Text

from specbundle.cli._options import json_option, mirror_option, open_mirror
from specbundle.cli._output import console, esc, print_json, print_table
from specbundle.cli.oci import registry_options, store_opener
from specbundle.errors import BehaviourChanged
from specbundle.review import Change, DiffReport, diff_bundle
from specbundle.review.diff import SideSummary
from specbundle.verify import load_policy

__all__ = ["command", "mark", "print_signatures"]


def mark(c: Change) -> Text:
    """``RUNTIME``/``GATE`` marks, styled; blank for a change that alters neither."""
    words = [w for w, on in (("RUNTIME", c.runtime), ("GATE", c.gate)) if on]
    return Text("+".join(words), style="bold red" if words else "")


def print_signatures(side: SideSummary) -> None:
    """The signatures one side carries and what each covers."""
    rows = [[s.what, s.covers, s.key or s.keyid[:16],
             {True: "verified", False: "NOT verified", None: "unchecked"}[s.verified]]
            for s in side.signatures]
    print_table(f"signatures of {side.label}", ["on", "covers", "key", "status"],
                rows or [["-", "-", "none", "-"]])


def _print(rep: DiffReport) -> None:
    c = rep.changes
    console.print(f"[bold]{esc(rep.old.label)}[/] -> [bold]{esc(rep.new.label)}[/]: "
                  f"{len(c)} change(s), {sum(x.runtime for x in c)} alter what runs, "
                  f"{sum(x.gate for x in c)} alter the gate")
    for s in (rep.old, rep.new):
        if s.note:
            console.print(f"  note ({esc(s.label)}): {esc(s.note)}")
    if c:
        print_table(None, ["mark", "area", "what", "before", "after", "note"],
                    [[mark(x), x.area, x.path, x.before or "-", x.after or "-", x.note]
                     for x in c])
    for s in (rep.old, rep.new):
        print_signatures(s)


@click.command("diff")
@click.argument("bundle")
@click.argument("old", metavar="[FROM]", required=False)
@click.argument("new", metavar="[TO]", required=False)
@click.option("--trust", "trust", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Trust policy: check and name each side's signatures.")
@click.option("--fail-on-behaviour-change", "fail", is_flag=True,
              help="Exit 7 if a difference alters what runs or the admission gate.")
@mirror_option
@registry_options
@json_option
def command(bundle: str, old: str | None, new: str | None, trust: Path | None, fail: bool,
            mirror_dir: Path | None, plain_http: bool, ca_bundle: Path | None,
            auth_file: Path | None, as_json: bool) -> None:
    """Compare two versions of BUNDLE (default: the current one and the one before).

    FROM and TO: a version (3, v3, current, previous), `working` (the unsigned record the
    next `sign` would seal), OTHER or OTHER@N (another bundle), a transfer set folder
    (before import), or oci://REGISTRY/REPO:TAG (before `oci pull`; verified under --trust
    as the pull would, before anything is compared). Changes are marked RUNTIME (what the
    engines serve or how they speculate) and GATE (what admission or approval judges).
    """
    policy = load_policy(trust) if trust is not None else None
    rep = diff_bundle(open_mirror(mirror_dir), bundle, old, new, policy=policy,
                      open_store=store_opener(plain_http, ca_bundle, auth_file))
    if as_json:
        print_json(rep.to_json())
    else:
        _print(rep)
    if fail and rep.behaviour_changed:
        n = sum(1 for x in rep.changes if x.runtime or x.gate)
        raise BehaviourChanged(f"{rep.old.label} -> {rep.new.label}: {n} change(s) alter what "
                               "runs or the admission gate",
                               hint="review them (`specbundle review`) before signing")
