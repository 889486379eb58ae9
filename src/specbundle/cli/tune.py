"""``specbundle tune BUNDLE --engine E --key KEY``: measure K per concurrency, sign the schedule."""

from __future__ import annotations

from pathlib import Path

import click

from specbundle.bench.tune import TuneOptions, run_tune
from specbundle.bench.tune_analysis import TuneResult
from specbundle.bench.verdict import percent
from specbundle.cli._keyopts import KEY_SOURCE, load_keys, passphrase_option
from specbundle.cli._options import json_option, mirror_option, open_mirror
from specbundle.cli._output import console, print_json, print_table
from specbundle.cli.bench import show_decision, step_progress
from specbundle.cli.verify import bundle_options, open_bundle

__all__ = ["command"]


def _ints(text: str | None, flag: str) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        vals = tuple(sorted({int(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        raise click.BadParameter("comma-separated integers", param_hint=flag) from None
    if not vals or min(vals) < 1:
        raise click.BadParameter("positive integers", param_hint=flag)
    return vals


def _floats(text: str | None) -> tuple[float, ...] | None:
    if not text:
        return None
    try:
        vals = tuple(sorted({float(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        raise click.BadParameter("comma-separated numbers", param_hint="--p-min") from None
    if not vals or min(vals) < 0 or max(vals) > 1:
        raise click.BadParameter("numbers between 0 and 1", param_hint="--p-min")
    return vals


def _show(r: TuneResult) -> None:
    show_decision(*r.decision())
    fixed = r.best_fixed.name if r.best_fixed else "-"
    console.print(f"tune [bold]{r.bundle}[/] on {r.engine}: run {r.run_id}, {r.rounds} rounds, "
                  f"{r.minutes_per_k:.1f} min per setting; best fixed setting {fixed}; "
                  f"crossover concurrency {r.crossover_concurrency or '-'}")
    rows = [[c.concurrency, c.k, "-" if c.p_min is None else f"{c.p_min:g}", f"{c.ratio:.2f}",
             f"{c.ratio_low:.2f}-{c.ratio_high:.2f}",
             "-" if c.fixed_ratio is None else f"{c.fixed_ratio:.2f}",
             "-" if c.gain_over_fixed is None else f"{c.gain_over_fixed:.2f}",
             "yes" if c.decided else "no"] for c in r.choices]
    conf = percent(r.per_look_confidence or r.confidence)
    print_table(f"measured schedule (K = 0: speculation off), {conf} CIs",
                ["conc", "K", "p_min", "ratio", "CI", "fixed", "gain", "decided"], rows)
    for n in r.notes:
        console.print(f"note: {n}")


@click.command("tune")
@click.argument("bundle")
@click.option("--engine", default="llamacpp", show_default=True,
              type=click.Choice(["llamacpp", "vllm", "sglang"]), help="Serving engine.")
@click.option("--key", "key_files", required=True, multiple=True,
              type=KEY_SOURCE,
              help="Private key signing the schedule (PEM); repeat for several.")
@passphrase_option
@click.option("--k", "ks", default=None,
              help="Comma-separated K values (default: 1,2,4,.. up to num_speculative_tokens).")
@click.option("--p-min", "p_mins", default=None,
              help="Comma-separated llama.cpp --spec-draft-p-min values to sweep.")
@click.option("--levels", default=None, help="Comma-separated concurrency levels.")
@click.option("--rounds", type=click.IntRange(2, 64), default=None, help="Rounds at least.")
@click.option("--max-rounds", type=click.IntRange(2, 64), default=None,
              help="Rounds at most while a level is undecided.")
@click.option("--time-budget", type=click.FloatRange(min=1.0), default=None,
              help="Seconds: start no round pair that would end past this.")
@click.option("--requests", "requests_per_level", type=click.IntRange(1), default=None,
              help="Requests per concurrency level (default: the spec's bench settings).")
@click.option("--max-tokens", type=click.IntRange(1), default=None,
              help="Output tokens per request (default: the spec's bench settings).")
@click.option("--binary", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Engine binary (e.g. llama-server).")
@bundle_options
@mirror_option
@json_option
def command(bundle: str, engine: str, key_files: tuple[Path | str, ...],
            passphrase_file: Path | None,
            ks: str | None, p_mins: str | None, levels: str | None, rounds: int | None,
            max_rounds: int | None, time_budget: float | None, requests_per_level: int | None,
            max_tokens: int | None, binary: Path | None, trust: Path | None, unsigned: bool,
            mirror_dir: Path | None, as_json: bool) -> None:
    """Sweep K (and p_min) x concurrency on ENGINE; write and sign the measured schedule."""
    keys = load_keys(key_files, passphrase_file)
    opts = TuneOptions(ks=_ints(ks, "--k"), p_mins=_floats(p_mins),
                       levels=_ints(levels, "--levels"), rounds=rounds, max_rounds=max_rounds,
                       time_budget_s=time_budget, requests_per_level=requests_per_level,
                       max_tokens=max_tokens, binary=binary)
    mirror = open_mirror(mirror_dir)
    value = open_bundle(mirror, bundle, trust, unsigned)
    with step_progress(not as_json) as progress:
        result = run_tune(value, engine=engine, options=opts, keys=keys, progress=progress)
    if as_json:
        print_json({**result.to_json(), "custody": value.custody()})
        return
    if not value.signed:
        console.print("[bold red]UNSIGNED[/]: tuned the unsigned bundle record (--unsigned)")
    _show(result)
