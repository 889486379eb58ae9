"""``specbundle admit`` cut short on a real llama-server: a signed *inconclusive* decision.

Two ways a run ends before the sequential rule decides: the time budget runs out
(``--time-budget``) or the operator stops it (SIGTERM). Either way the command exits 5 with a
FAILED decision whose outcome is ``inconclusive`` (never admitted), the decision is a signed
VSA that ``audit`` checks against the trust policy, and the partial report it names (every
whole arm launch so far) is stored in the bundle (issue 24).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from specbundle.admit import read_status
from specbundle.attest import SLSA_VSA_V1, check_statement, read_attestations
from specbundle.attest.keys import write_private_key
from specbundle.bench import load_report
from specbundle.digest import sha256_bytes
from specbundle.synth import SynthPair
from tests.lib.bundles import Signed, signed_bundle

pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.measures]

#: Rounds before the sequential rule's first look (the most a spec allows). A round of this
#: pair takes about 2 s on an idle 2-core box since the warm-ups were cut (20 rounds seen in
#: the 40 s budget; 12 on CI before), so 64 rounds cannot finish inside the budget or before
#: the SIGTERM on any machine: the rule never gets to decide.
ROUNDS = "64"


def _admit(s: Signed, key: Path, binary: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "specbundle", "admit", s.name, "--trust", str(s.policy_path),
            "--key", str(key), "--mirror", str(s.mirror.root), "--binary", str(binary),
            "--rounds", ROUNDS, "--json", *extra]


def _signed(tmp_path: Path, pair: SynthPair) -> tuple[Signed, Path]:
    s = signed_bundle(tmp_path, "cut", pair, levels=[1])
    key = tmp_path / "gate.pem"
    write_private_key(s.key, key)  # the release key the policy trusts also signs the decision
    return s, key


def _check_inconclusive(s: Signed, out: dict[str, Any], reason: str) -> None:
    """Exit 5's JSON: inconclusive and signed; the VSA verifies under the policy; the stored
    partial report is the one it names and holds whole launches only."""
    assert next(iter(out)) == "verdict" and out["verdict"]["outcome"] == "inconclusive"
    assert (out["result"], out["outcome"], out["admitted"]) == ("FAILED", "inconclusive", False)
    assert "inconclusive" in out["reasons"][0], out["reasons"]  # the first reason says why
    status = read_status(s.mirror, s.name)
    assert status is not None and status["admitted"] is False
    envs = read_attestations(s.mirror, s.name)
    st = check_statement(envs[out["vsa_line"] - 1], [s.key.public]).statement
    assert st.predicate_type == SLSA_VSA_V1 and st.predicate["verificationResult"] == "FAILED"
    assert st.predicate["policy"]["digest"]["sha256"] == s.policy.digest
    report = load_report(s.mirror, s.name, out["bench_run_id"])
    stored = s.mirror.read_bundle_file(s.name, f"bench/{out['bench_run_id']}/report.json")
    assert stored is not None and sha256_bytes(stored) == out["bench_report_sha256"]
    assert report.stopping is not None
    # the ratio's side: undecided, or unmeasured when cut before two rounds per arm
    assert report.stopping.reason == reason
    assert report.stopping.outcome in ("inconclusive", "unmeasured")
    order = report.settings.round_order
    # partial evidence: whole launches (two a round: base and spec), fewer rounds than the
    # first look needs
    assert order and len(order) < 2 * int(ROUNDS), order
    lv = report.at_p95
    assert lv is not None and len(lv.base.round_output_throughput) == order.count("base")
    # the auditor's view: the decision verifies with the trust policy and reads INCONCLUSIVE
    audit = subprocess.run([sys.executable, "-m", "specbundle", "audit", "show", s.name,
                            "--trust", str(s.policy_path), "--mirror", str(s.mirror.root),
                            "--no-rehash", "--json"], capture_output=True, text=True,
                           timeout=300, check=False)
    assert audit.returncode == 0, audit.stderr
    (bundle,) = json.loads(audit.stdout)["bundles"]
    last = bundle["admissions"][-1]
    assert (last["status"], last["outcome"], last["result"]) == ("ok", "inconclusive", "FAILED")


def test_a_spent_time_budget_signs_an_inconclusive_decision(
        tmp_path: Path, bench_pairs: dict[str, SynthPair], llama_server_bin: Path) -> None:
    s, key = _signed(tmp_path, bench_pairs["good"])
    t0 = time.monotonic()
    res = subprocess.run(_admit(s, key, llama_server_bin, "--time-budget", "40"),
                         capture_output=True, text=True, timeout=900, check=False)
    assert res.returncode == 5, (res.stdout + res.stderr)[-3000:]
    assert time.monotonic() - t0 < 40 + 120  # the budget plus a launch, verify and signing
    assert "bench: [" in res.stderr and "/40 s" in res.stderr  # progress on stderr with --json
    _check_inconclusive(s, json.loads(res.stdout), "time_budget")


def test_sigterm_mid_run_signs_an_inconclusive_decision_with_the_partial_report(
        tmp_path: Path, bench_pairs: dict[str, SynthPair], llama_server_bin: Path) -> None:
    s, key = _signed(tmp_path, bench_pairs["good"])
    proc = subprocess.Popen(_admit(s, key, llama_server_bin), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    assert proc.stderr is not None
    seen: list[str] = []
    for line in proc.stderr:  # progress lines: wait until round 2 is under way
        seen.append(line)
        if line.startswith("bench: [") and "round 2/" in line:
            break
    else:
        pytest.fail(f"no progress into round 2: {''.join(seen)[-2000:]}")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 5, (''.join(seen) + err)[-2000:]
    _check_inconclusive(s, json.loads(out), "interrupted")
