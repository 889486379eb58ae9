"""The real vLLM (CPU build) in the loop: bench, admit and a cross-check on rendered serve.sh.

Boots are the cost here (about a minute each on an idle 2-core box, several on a loaded
one), so one module shares them: the baseline arm boots once; servers that are needed
together boot together (``side_by_side``: a boot is mostly imports on one core, and nothing
is measured while one runs); at most three servers (speculative, baseline, draft alone) run
at once. Every server is started from the bundle's own rendered ``serve.sh`` (or, for the
draft alone, from the baseline command with the draft swapped in, as ``specbundle bench``
does). The other methods' flag sets boot in tests/render/test_vllm_methods.py.

What is held: ``specbundle bench --engine vllm`` admits the good pair (at P95 concurrency 1)
and rejects the bad one naming α ≤ c; the report's acceptance equals the counter deltas exactly and the per-request
figures; the KV ceiling is read from the real capacity labels; specbundle's throughput and
acceptance agree with ``vllm bench serve`` on the same server and workload.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from specbundle.admit.decision import evaluate
from specbundle.bench.api import load_report
from specbundle.bench.prometheus import parse_scrape
from specbundle.bench.report import BenchReport
from specbundle.spec import parse_spec
from tests._vllm import COUNTERS, client_throughput, metrics, side_by_side, vllm_bench_serve
from tests._vllm_bundles import PROMPTS_FILE, VllmBox, make_box, vllm_doc

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(3600), pytest.mark.measures]

PRM = ["--per-request-spec-decode-metrics", "summary"]
#: The draft model costs vLLM 14 % of its KV capacity here (measured); the default gate is 10 %.
ADMISSION = {"max_concurrency_ceiling_drop": 0.25}
#: The good pair deploys at P95 concurrency 1, where it wins on this CPU (measured 1.16x, 90 %
#: CI 1.07-1.25, over 12+12 rounds); at 2 it breaks even (0.99x: verifying 4 tokens costs vLLM
#: about 2.9 decode steps here), which the sweep reports. The gate asks for a significant win.
GOOD_ADMISSION = {**ADMISSION, "min_throughput_ratio_lower_bound": 1.0}


@pytest.fixture(scope="module")
def box(module_tmp: Path, vllm_bin: Path) -> VllmBox:
    return make_box(module_tmp, vllm_bin, lambda m: [
        vllm_doc("vgood", m.target, m.good.draft_dir, k=3, extra_args=PRM, p95=1,
                 admission=GOOD_ADMISSION,
                 # servers by URL: rounds cost no boots. 8 requests a level: c's sign-test
                 # bound is the 22nd of 32 pairs, not the 12th of 16, so the stalls vLLM's CPU
                 # build shows now and then in a draft-alone request (a tenth of the speed,
                 # seen in 1 to 5 pairs of 16) no longer decide α > c
                 bench={"rounds": 4, "max_rounds": 16, "requests_per_level": 8}),
        vllm_doc("vbad", m.target, m.bad.draft_dir, k=3, extra_args=PRM, admission=ADMISSION),
    ])


@pytest.fixture(scope="module")
def baseline(box: VllmBox) -> Iterator[str]:
    """The baseline arm (no speculation) of the shared target, booted once."""
    with box.serve("vgood", speculation=False) as url:
        yield url


@dataclass(frozen=True)
class Benched:
    report: BenchReport
    before: dict[str, float]
    after: dict[str, float]
    labels: dict[str, dict[str, str]]  # cache_config_info labels per arm


def _cache_labels(url: str) -> dict[str, str]:
    import httpx

    text = httpx.get(url + "/metrics", timeout=10, trust_env=False).text
    return dict(parse_scrape(text).label_sets("vllm:cache_config_info")[0])


def _bench(box: VllmBox, name: str, spec_url: str, base_url: str, draft_url: str) -> Benched:
    """``specbundle bench NAME --engine vllm`` as a user runs it (a subprocess: module scope)."""
    before = metrics(spec_url)
    proc = subprocess.run(  # the real CLI, against the three running servers
        [sys.executable, "-m", "specbundle", "bench", name, "--engine", "vllm", "--json",
         "--unsigned",
         "--mirror", str(box.mirror.root), "--base-url", spec_url, "--baseline-url", base_url,
         "--draft-url", draft_url], capture_output=True, text=True, timeout=3000, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    after = metrics(spec_url)
    report = load_report(box.mirror, name, json.loads(proc.stdout)["run_id"])
    return Benched(report, before, after,
                   {"spec": _cache_labels(spec_url), "base": _cache_labels(base_url)})


@pytest.fixture(scope="module")
def good(box: VllmBox, baseline: str) -> Iterator[tuple[Benched, str]]:
    """The good pair benched; its speculative server stays up for the cross-check."""
    with side_by_side(box.serve("vgood"), box.serve_draft("vgood")) as (spec_url, draft_url):
        yield _bench(box, "vgood", spec_url, baseline, draft_url), spec_url


@pytest.fixture(scope="module")
def bad(box: VllmBox, baseline: str, good: tuple[Benched, str]) -> Benched:
    """The bad pair benched after the good one (its servers replace the good ones)."""
    del good  # ordering only: never more than three servers at once
    with side_by_side(box.serve("vbad"), box.serve_draft("vbad")) as (spec_url, draft_url):
        return _bench(box, "vbad", spec_url, baseline, draft_url)


def _gate(box: VllmBox, name: str, report: BenchReport) -> Any:
    spec = parse_spec(box.mirror.load_bundle(name).spec)
    return evaluate(report, spec.admission)


def test_good_pair_is_admitted(box: VllmBox, good: tuple[Benched, str]) -> None:
    """Every gate criterion passes on the real engine, the throughput ratio included: its CI
    lower bound clears 1 at the P95 concurrency (the bench adds rounds while it straddles).

    One exception, pinned rather than hidden: vLLM's CPU build now and then serves a
    draft-alone request at a tenth of its speed (CI saw 4 of 13 pairs so in one run, none in
    others), and the gate holds α against c's upper bound, which such pairs set. Then
    ``alpha_above_c`` may be the one criterion that refuses, and only with α above c's median
    pair, which no stall moves.
    """
    b, _ = good
    gate = _gate(box, "vgood", b.report)
    lv = b.report.at_p95
    assert lv is not None and lv.ratio is not None and lv.c_ci is not None
    ratio = next(c for c in gate.criteria if c.name == "throughput_ratio")
    assert ratio.passed and lv.ratio.low > 1.0, (gate.reasons, lv.ratio, b.report.stopping)
    alpha = lv.acceptance.alpha
    assert alpha is not None and lv.c_measured is not None
    assert alpha > lv.c_measured and alpha > lv.c_ci.ratio, (alpha, lv.c_ci)
    assert lv.acceptance.acceptance_rate is not None and lv.acceptance.acceptance_rate > 0.8
    failed = [c.name for c in gate.criteria if not c.passed]
    if failed:
        assert failed == ["alpha_above_c"], gate.reasons
        assert lv.c_ci.high >= alpha and "upper bound" in gate.reasons[0], (gate.reasons, lv.c_ci)
        return
    assert gate.admitted
    v = b.report.verdict
    assert v is not None and v.headline.startswith("speculation wins at your P95 concurrency 1")


def test_bad_pair_is_rejected_naming_alpha_at_most_c(box: VllmBox, bad: Benched) -> None:
    gate = _gate(box, "vbad", bad.report)
    assert not gate.admitted
    assert any(r.startswith("alpha_above_c: α = ") and "≤ c =" in r for r in gate.reasons), \
        gate.reasons


def test_acceptance_equals_counter_deltas_and_per_request_metrics(
        good: tuple[Benched, str]) -> None:
    """No warm-up outside the windows is counted: sums over levels equal the whole deltas
    minus the bench's own warm-up, which runs before the first window."""
    b, _ = good
    accs = [lv.acceptance for lv in b.report.levels]
    for a in accs:
        assert a.source == "counters"
        assert a.request_cross_check is True  # per-request metrics == counter deltas
        assert a.request_draft_tokens == a.draft_tokens and a.request_accepted == a.accepted
    window = [sum(getattr(a, f) or 0 for a in accs) for f in ("drafts", "draft_tokens", "accepted")]
    whole = [b.after[k] - b.before.get(k, 0.0) for k in COUNTERS]
    # the bench's warm-up requests precede the windows; everything else is in them
    assert all(0 < w <= t for w, t in zip(window, whole, strict=True))


def test_kv_ceiling_from_the_capacity_labels(good: tuple[Benched, str]) -> None:
    b, _ = good
    c = b.report.ceiling
    assert c.kv_capacity_spec == float(b.labels["spec"]["kv_cache_size_tokens"])
    assert c.kv_capacity_base == float(b.labels["base"]["kv_cache_size_tokens"])
    assert c.kv_capacity_spec < c.kv_capacity_base  # the draft's KV is real
    assert c.drop is not None and c.drop > 0


def test_preemptions_from_the_counter(good: tuple[Benched, str]) -> None:
    b, _ = good
    lv = b.report.at_p95
    assert lv is not None and lv.preemptions_spec is not None and lv.preemptions_base is not None
    whole = b.after.get("vllm:num_preemptions_total", 0.0) - \
        b.before.get("vllm:num_preemptions_total", 0.0)
    assert 0 <= lv.preemptions_spec <= whole


#: ours / vllm bench serve pairs, alternated on one server, the order flipping from pair to pair
#: (ours first, theirs first, ...) so neither client always runs second
CROSS_PAIRS = 4


def test_throughput_and_acceptance_match_vllm_bench_serve(box: VllmBox,
                                                          good: tuple[Benched, str]) -> None:
    """Same server, prompts, length, concurrency and greedy sampling for both clients, their
    runs alternated and compared pair by pair (the median of the pair ratios); the acceptance
    of the report's measured windows against vLLM's own figure.

    The pairs' median ratio must lie within 40 %, not the few % a quiet machine gives: vLLM's
    CPU build serves some requests at a fraction of their speed, whichever client sends them,
    so one run's figure moves by up to a third (CI saw the median pair ratio at 0.83 in one
    run and 1.30 in another). The bound still catches a miscount of tokens or time (chunks
    for tokens under k = 3 speculation is 2-4x).
    """
    import statistics

    b, spec_url = good
    lv = b.report.at_p95
    assert lv is not None
    c = lv.concurrency
    rows = [json.loads(x) for x in (box.mirror.read_bundle_file("vgood", PROMPTS_FILE) or b"")
            .decode().splitlines()]
    n = b.report.settings.requests_per_level
    texts = [rows[i % len(rows)]["prompt"] for i in range(n)]
    max_tokens = b.report.settings.max_tokens
    ours: list[float] = []
    theirs: list[float] = []
    ref: dict[str, Any] = {}

    def run_ours() -> None:
        ours.append(client_throughput(spec_url, "vgood", texts, max_tokens, c))

    def run_theirs() -> None:
        nonlocal ref
        try:
            ref = vllm_bench_serve(box.vllm_bin, spec_url, "vgood", box.models.target, texts,
                                   max_tokens, c, box.root)
        except subprocess.CalledProcessError as err:
            raise AssertionError((err.stdout or "")[-2000:] + (err.stderr or "")[-3000:]) \
                from None
        theirs.append(float(ref["output_throughput"]))

    for i in range(CROSS_PAIRS):
        for step in ((run_ours, run_theirs) if i % 2 == 0 else (run_theirs, run_ours)):
            step()
    ratio = statistics.median(a / b for a, b in zip(ours, theirs, strict=True))
    assert abs(ratio - 1) <= 0.40, (ours, theirs)
    assert lv.acceptance.acceptance_rate is not None
    assert abs(100 * lv.acceptance.acceptance_rate - ref["spec_decode_acceptance_rate"]) <= 1.0
