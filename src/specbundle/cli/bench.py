"""``specbundle bench BUNDLE --engine E``: A/B benchmark with and without speculation."""

from __future__ import annotations

import contextlib
import re
import signal
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import click
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from specbundle.bench import BenchOptions, BenchReport, report_path, run_bench
from specbundle.bench.runner import Progress as ProgressFn
from specbundle.bench.verdict import (
    Verdict,
    bench_decision,
    c_basis,
    looks_text,
    percent,
    verdict_first,
)
from specbundle.cli._options import json_option, mirror_option, open_mirror
from specbundle.cli._output import console, err_console, print_table, write_json_text
from specbundle.cli.verify import bundle_options, open_bundle
from specbundle.errors import UsageError

__all__ = ["bench_options", "command", "interruptible", "make_options", "show_decision",
           "show_report", "show_verdict", "step_progress", "time_budget_option"]


@contextlib.contextmanager
def step_progress(enabled: bool) -> Iterator[ProgressFn]:
    """Progress on stderr in every mode: a rich bar on a terminal, else (``--json``, a log)
    one line per step (round, arm, level, the P95 ratio's current interval, time used)."""
    if not enabled or not err_console.is_terminal:
        last = [""]

        def line(what: str, done: int, total: int) -> None:
            if what != last[0]:
                last[0] = what
                click.echo(f"bench: [{done}/{total}] {what}", err=True)

        yield line
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err_console) as bar:
        task = bar.add_task("starting", total=None)

        def update(what: str, done: int, total: int) -> None:
            bar.update(task, description=what, completed=done, total=total)

        yield update


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """SIGTERM acts as SIGINT while a benchmark runs: the runner stops, the partial report
    is written (and admit signs an inconclusive decision) instead of dying mid-write."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


time_budget_option = click.option(
    "--time-budget", type=click.FloatRange(min=1.0), default=None,
    help="Seconds for the whole benchmark; when spent it stops with the evidence so far, "
         "inconclusive (never admitted). Default: the spec's bench.time_budget_s, else "
         "120 s x bench.rounds x arm launches per round.")


def _fmt(v: float | None, spec: str = ".3f") -> str:
    return "-" if v is None else format(v, spec)


_VERDICT_COLORS = {"wins": "green", "admitted": "green", "loses": "red", "rejected": "red"}
_WORD_COLORS = {"PASSES": "green", "ADMITTED": "green", "REJECTED": "red", "OFF": "red"}


def show_decision(word: str, why: str) -> None:
    """The decision in one word and one sentence of why: the first line of every report."""
    console.print(f"[bold {_WORD_COLORS.get(word, 'yellow')}]{escape(word)}[/]: {escape(why)}")


def show_verdict(verdict: Verdict | None, decision: tuple[str, str] | None = None) -> None:
    """The decision first (one word, one sentence), the headline, then the reasons."""
    if verdict is None:
        return
    if decision is not None:
        show_decision(*decision)
    color = _VERDICT_COLORS.get(verdict.outcome, "yellow")
    console.print(f"[bold {color}]{escape(verdict.headline)}[/]")
    for reason in verdict.reasons:
        console.print(f"  - {escape(reason)}")


def show_report(report: BenchReport, path: Path) -> None:
    """Human summary: the decision and verdict, one row per level, then validity and notes."""
    show_verdict(report.verdict, bench_decision(report))
    if report.server.get("custody", {}).get("signed") is False:
        console.print("[bold red]UNSIGNED[/]: measured the unsigned bundle record (--unsigned)")
    console.print(f"bench [bold]{report.bundle}[/] on {report.engine}: run {report.run_id} "
                  f"({report.settings.rounds} rounds {' '.join(report.settings.round_order)})")
    rows: list[list[object]] = []
    for lv in report.levels:
        r, a = lv.ratio, lv.acceptance
        rows.append([lv.concurrency, _fmt(lv.base.output_throughput, ".0f"),
                     _fmt(lv.spec.output_throughput, ".0f"),
                     _fmt(r.ratio if r else None, ".2f"),
                     f"{_fmt(r.low if r else None, '.2f')}-{_fmt(r.high if r else None, '.2f')}",
                     _fmt(a.acceptance_rate, ".2f"), _fmt(a.mean_acceptance_length, ".1f"),
                     _fmt(a.alpha, ".2f"), _fmt(lv.c_measured, ".2f"),
                     _fmt(lv.predicted_improvement, ".2f"),
                     _fmt(lv.model.v.value if lv.model else
                          lv.verify_cost.v if lv.verify_cost else None, ".2f"),
                     _fmt(lv.model.extended.value if lv.model else None, ".2f"),
                     _fmt(lv.spec.itl_chunk_ms.p50 if lv.spec.itl_chunk_ms else None, ".2f"),
                     _fmt(lv.spec.itl_token_ms.p50 if lv.spec.itl_token_ms else None, ".2f")])
    st = report.stopping
    # the ratio CIs are the sequential rule's repeated CIs (per-look confidence) when it looked
    # more than once: the header names the confidence the columns actually carry
    conf = st.per_look_confidence if st is not None and st.per_look_confidence else \
        report.settings.confidence
    print_table(f"output tok/s, ratio spec/base with its {percent(conf)} CI; "
                "pred: paper model, ext: with verification cost v (decode steps); "
                "ITL p50 in ms per chunk and per token",
                ["conc", "base", "spec", "ratio", "CI", "acc", "τ", "α", "c", "pred", "v",
                 "ext", "itl/chunk", "itl/tok"], rows)
    v = report.validity
    console.print(f"token agreement {_fmt(v.token_agreement)} over {v.compared_outputs} outputs; "
                  f"engine errors {v.engine_errors}; crossover concurrency "
                  f"{report.crossover_concurrency or '-'}; KV ceiling drop "
                  f"{_fmt(report.ceiling.drop)}")
    fl = v.agreement
    if fl is not None:
        console.print(f"common prefix {_fmt(fl.spec_mean_prefix, '.1f')} tokens vs the A/A "
                      f"floor {_fmt(fl.aa_mean_prefix, '.1f')} ({fl.basis}): relative "
                      f"{_fmt(fl.relative, '.2f')}")
    for lv in report.levels:
        if lv.c_ci is not None:
            console.print(f"c at {lv.concurrency}: {lv.c_ci.ratio:.3f} [{lv.c_ci.low:.3f}, "
                          f"{lv.c_ci.high:.3f}] over "
                          f"{c_basis(lv.c_ci.n_base, len(lv.base.round_output_throughput))}"
                          + (f"; {lv.c_check.note}" if lv.c_check else ""))
    if st is not None:
        looks = looks_text(st.looks, st.per_look_confidence, report.settings.confidence)
        console.print(f"stopping: {st.outcome} after {st.rounds} rounds ({st.reason})"
                      + (f"; {looks}" if looks else "")
                      + (f", about {st.rounds_to_resolve} rounds per arm would resolve it"
                         if st.rounds_to_resolve else ""))
    for p in v.problems:
        console.print(f"[red]invalid:[/] {p}")
    for n in report.notes:
        console.print(f"note: {n}")
    console.print(f"report: {path} (+ report.html)")


def bench_options(f: click.decorators.FC) -> click.decorators.FC:
    """Options shared by ``bench`` and ``admit``."""
    for opt in reversed([
        click.option("--engine", default="llamacpp", show_default=True,
                     type=click.Choice(["llamacpp", "vllm", "sglang"]), help="Serving engine."),
        click.option("--runtime", default="shell", show_default=True,
                     type=click.Choice(["shell", "docker"]),
                     help="Run the rendered command with the host binary or in the bundle's "
                          "loaded engine image."),
        click.option("--base-url", default=None,
                     help="An already running speculative server (skips the manifest)."),
        click.option("--baseline-url", default=None,
                     help="The already running baseline server (with --base-url)."),
        click.option("--draft-url", default=None,
                     help="The draft served alone (with --base-url), to measure c."),
        click.option("--binary", type=click.Path(dir_okay=False, path_type=Path), default=None,
                     help="Engine binary for the rendered script (e.g. llama-server)."),
        click.option("--rounds", type=click.IntRange(2, 64), default=None,
                     help="ABBA rounds (default: the spec's bench.rounds)."),
        click.option("--max-rounds", type=click.IntRange(2, 64), default=None,
                     help="While the P95 ratio CI straddles the admission threshold, add ABBA "
                          "round pairs up to this many rounds."),
        click.option("--requests", "requests_per_level", type=click.IntRange(1), default=None,
                     help="Requests per concurrency level."),
        click.option("--max-tokens", type=click.IntRange(1), default=None,
                     help="Output tokens per request."),
        click.option("--levels", default=None,
                     help="Comma-separated concurrency levels (default: 1,2,4,..,2xP95 + P95)."),
        click.option("--aa-rounds", type=click.IntRange(0, 64), default=0, show_default=True,
                     help="Extra baseline launches at P95 (A/A) to measure the noise floor."),
    ]):
        f = opt(f)
    return f


def _check_servers(base_url: str | None, baseline_url: str | None, draft_url: str | None,
                   binary: Path | None, runtime: str) -> None:
    """Servers given by URL come as a pair, and replace the rendered manifest entirely."""
    for flag, url in (("--base-url", base_url), ("--baseline-url", baseline_url),
                      ("--draft-url", draft_url)):
        if url is not None and not re.match(r"^https?://[^/\s]+", url):
            raise click.BadParameter(f"{url!r} is not an http(s) URL", param_hint=flag)
    if base_url is None:
        if baseline_url or draft_url:
            raise UsageError("--baseline-url and --draft-url go with --base-url")
        return
    if not baseline_url:
        raise UsageError("--base-url needs --baseline-url: a benchmark compares two servers, "
                         "one with and one without speculation")
    if binary is not None or runtime != "shell":
        raise UsageError("--binary and --runtime start engines from the manifest; servers "
                         "given by --base-url are already running")


def make_options(base_url: str | None, baseline_url: str | None, draft_url: str | None,
                 binary: Path | None, rounds: int | None, requests_per_level: int | None,
                 max_tokens: int | None, levels: str | None, aa_rounds: int = 0,
                 runtime: str = "shell", max_rounds: int | None = None) -> BenchOptions:
    """BenchOptions from the shared flags; contradictory ones are usage errors (exit 2)."""
    _check_servers(base_url, baseline_url, draft_url, binary, runtime)
    if rounds is not None and max_rounds is not None and max_rounds < rounds:
        raise UsageError(f"--max-rounds {max_rounds} is below --rounds {rounds}",
                         hint="--max-rounds caps the extension beyond --rounds")
    parsed = None
    if levels:
        try:
            parsed = tuple(sorted({int(x) for x in levels.split(",") if x.strip()}))
        except ValueError:
            raise click.BadParameter("comma-separated integers", param_hint="--levels") from None
        if not parsed or min(parsed) < 1:
            raise click.BadParameter("positive integers", param_hint="--levels")
    return BenchOptions(base_url=base_url, baseline_url=baseline_url, draft_url=draft_url,
                        binary=binary, rounds=rounds, requests_per_level=requests_per_level,
                        max_tokens=max_tokens, levels=parsed, aa_rounds=aa_rounds,
                        runtime=runtime, max_rounds=max_rounds)


@click.command("bench")
@click.argument("bundle")
@bundle_options
@mirror_option
@bench_options
@time_budget_option
@json_option
def command(bundle: str, trust: Path | None, unsigned: bool, mirror_dir: Path | None, engine: str,
            runtime: str,
            base_url: str | None,
            baseline_url: str | None, draft_url: str | None, binary: Path | None,
            rounds: int | None, max_rounds: int | None, requests_per_level: int | None,
            max_tokens: int | None, levels: str | None, aa_rounds: int,
            time_budget: float | None, as_json: bool) -> None:
    """Benchmark BUNDLE with and without speculation (same engine, prompts, concurrency)."""
    opts = replace(make_options(base_url, baseline_url, draft_url, binary, rounds,
                                requests_per_level, max_tokens, levels, aa_rounds, runtime,
                                max_rounds), time_budget_s=time_budget)
    mirror = open_mirror(mirror_dir)
    value = open_bundle(mirror, bundle, trust, unsigned)
    with interruptible(), step_progress(not as_json) as progress:
        report = run_bench(value, engine=engine, options=opts, progress=progress)
    if as_json:
        write_json_text(verdict_first(report.to_json()))
    else:
        show_report(report, report_path(mirror, bundle, report.run_id))
    if report.stopping is not None and report.stopping.reason == "interrupted":
        raise KeyboardInterrupt  # the partial report is stored: exit 130 like any interrupt
