"""``specbundle admit BUNDLE --trust trust.yaml --key KEY``: verify, bench, gate, sign."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from specbundle.admit import Decision, Rejected, admit_bundle, reject_unverified
from specbundle.bench import BenchReport, load_report
from specbundle.bench.verdict import Verdict, gate_decision, gate_verdict, verdict_first
from specbundle.cli._keyopts import KEY_SOURCE, load_keys, passphrase_option
from specbundle.cli._options import json_option, mirror_option, open_mirror
from specbundle.cli._output import console, err_console, print_table, write_json_text
from specbundle.cli.bench import (
    bench_options,
    interruptible,
    make_options,
    show_verdict,
    step_progress,
    time_budget_option,
)
from specbundle.errors import BundleNotFound, SpecbundleError
from specbundle.mirror import Mirror
from specbundle.verify import load_policy, verify_bundle

__all__ = ["command"]


def _verdict(mirror: Mirror, d: Decision) -> Verdict:
    """The gate's own criteria, explained with the figures of the report it judged."""
    report: BenchReport | None = None
    if d.bench_run_id is not None:
        try:
            report = load_report(mirror, d.bundle, d.bench_run_id)
        except (SpecbundleError, ValueError):
            report = None
    gate = tuple(c.name + ": " for c in d.criteria)
    earlier = [r for r in d.reasons if not r.startswith(gate)]
    return gate_verdict(d.criteria, report, admitted=d.admitted, earlier=earlier,
                        inconclusive=d.outcome == "inconclusive")


def _emit(mirror: Mirror, d: Decision, as_json: bool) -> None:
    verdict = _verdict(mirror, d)
    if as_json:
        write_json_text(verdict_first({"verdict": dataclasses.asdict(verdict), **d.to_json()}))
        return
    show_verdict(verdict, gate_decision(verdict))
    _show(d)


def _show(d: Decision) -> None:
    color = "green" if d.admitted else "yellow" if d.outcome == "inconclusive" else "red"
    console.print(f"bundle [bold]{d.bundle}[/]: [{color}]{d.result} ({d.outcome})[/] "
                  f"(VSA at attestations.jsonl line {d.vsa_line}, bench run {d.bench_run_id})")
    print_table(None, ["criterion", "passed", "measured", "threshold"],
                [[c.name, "yes" if c.passed else "NO", c.measured, c.threshold]
                 for c in d.criteria])


@click.command("admit")
@click.argument("bundle")
@click.option("--trust", "trust_file", required=True,
              type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="Trust policy (trust.yaml).")
@click.option("--key", "key_files", required=True, multiple=True,
              type=KEY_SOURCE,
              help="Private key signing the decision (PEM); repeat for several.")
@passphrase_option
@mirror_option
@bench_options
@time_budget_option
@json_option
def command(bundle: str, trust_file: Path, key_files: tuple[Path | str, ...],
            passphrase_file: Path | None, mirror_dir: Path | None, engine: str, runtime: str,
            base_url: str | None, baseline_url: str | None, draft_url: str | None,
            binary: Path | None, rounds: int | None, max_rounds: int | None,
            requests_per_level: int | None, max_tokens: int | None, levels: str | None,
            aa_rounds: int, time_budget: float | None, as_json: bool) -> None:
    """Verify BUNDLE, benchmark it and admit or reject it with a signed decision (exit 5).

    A bench cut short by its time budget or an interrupt ends in a signed inconclusive
    decision (FAILED, exit 5), never an admission.
    """
    policy = load_policy(trust_file)
    keys = load_keys(key_files, passphrase_file)
    opts = dataclasses.replace(
        make_options(base_url, baseline_url, draft_url, binary, rounds, requests_per_level,
                     max_tokens, levels, aa_rounds, runtime, max_rounds),
        time_budget_s=time_budget)
    mirror = open_mirror(mirror_dir)

    def stage(name: str) -> None:
        if not as_json:
            err_console.print(f"admit: {name}")

    mirror.load_bundle(bundle)  # BundleNotFound (exit 2) before any stage runs or is reported
    try:
        stage("verify")
        try:
            verified = verify_bundle(mirror, bundle, policy)
        except BundleNotFound:
            raise
        except SpecbundleError as err:  # refused: the FAILED decision is signed too
            raise reject_unverified(mirror, bundle, err, policy=policy, keys=keys) from None
        with interruptible(), step_progress(not as_json) as progress:
            decision = admit_bundle(verified, keys=keys, engine=engine, bench_options=opts,
                                    progress=progress, on_stage=stage)
    except Rejected as err:
        _emit(mirror, err.decision, as_json)
        raise
    _emit(mirror, decision, as_json)
