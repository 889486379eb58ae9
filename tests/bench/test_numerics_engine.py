"""Agreement against numerics on a real llama-server (issue 24), both directions.

Lossless speculation (the synthetic target with its draft, greedy) must pass the agreement
gate whatever near-ties the verification batch flips; a speculative path that really
changes the outputs (here: the draft's own tokens served unverified as the "speculative"
arm) must fail it, with the target's margins probed at its divergences.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from specbundle.admit import evaluate
from specbundle.bench import BenchOptions, run_bench
from specbundle.bundle import read_unsigned
from specbundle.spec import AdmissionThresholds
from specbundle.synth import SynthPair
from tests._engine import llama_server, spec_args
from tests.lib.bundles import pull_synth
from tests.lib.specs import bundle_doc

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def test_lossless_speculation_passes_and_a_changed_path_fails(
        tmp_path: Path, bench_pairs: dict[str, SynthPair], llama_server_bin: Path) -> None:
    pair = bench_pairs["good"]
    mirror = pull_synth(tmp_path / "mirror", bundle_doc("ties", pair, levels=[1]))
    common = ["-np", "1", "--metrics", "-fa", "off"]
    opts = {"measure_draft": False, "warmup_requests": 0, "max_rounds": 2,
            "time_budget_s": 600.0}
    with contextlib.ExitStack() as stack:
        def start(model: Path, extra: list[str], log: str) -> str:
            return stack.enter_context(llama_server(llama_server_bin, model, [*common, *extra],
                                                    log=tmp_path / log, threads=1))
        base_url = start(pair.target.gguf, [], "base.log")
        spec_url = start(pair.target.gguf, spec_args(pair.draft.gguf, n_max=8), "spec.log")
        changed_url = start(bench_pairs["bad"].draft.gguf, [], "changed.log")
        lossless = run_bench(read_unsigned(mirror, "ties"), options=BenchOptions(
            base_url=spec_url, baseline_url=base_url, **opts))  # type: ignore[arg-type]
        changed = run_bench(read_unsigned(mirror, "ties"), options=BenchOptions(
            base_url=changed_url, baseline_url=base_url, **opts))  # type: ignore[arg-type]

    t = AdmissionThresholds()

    def criterion(report: object) -> object:
        return next(c for c in evaluate(report, t).criteria  # type: ignore[arg-type]
                    if c.name == "token_agreement")

    ok = criterion(lossless)
    fl = lossless.validity.agreement
    assert fl is not None and fl.basis == "token-ids"
    assert ok.passed, ok.detail  # type: ignore[attr-defined]
    assert fl.near_ties == fl.probed  # every flip lossless speculation made was a near-tie
    bad = criterion(changed)
    fc = changed.validity.agreement
    assert fc is not None and fc.probed >= 1 and fc.near_ties < fc.probed, fc
    assert not bad.passed and "beyond numerics" in bad.detail  # type: ignore[attr-defined]
    assert "tie_probe" in changed.server["phase_seconds"]
