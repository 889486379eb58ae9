"""llama-server runs the synthetic pairs: good speculation wins, bad speculation loses.

One module-scoped measurement runs four servers at concurrency 1 (target alone, and the target
with the good, the bad and the costly draft; all pairs share the target) and the tests read it.
Arms take turns request by request and speed-ups are medians of same-round ratios, so bursts of
load from other processes hit every arm alike. Only robust inequalities are asserted.
"""

from __future__ import annotations

import contextlib
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from specbundle.synth import SynthPair, build_tokenizer, make_model
from tests._engine import complete, llama_server, metrics, spec_args

pytestmark = [pytest.mark.engine, pytest.mark.slow]

PROMPTS = ("The draft model proposes", "An air-gapped cluster cannot download weights",
           "Numbers like 42 appear in logs", "The mirror keeps every file",
           "When the draft disagrees", "The benchmark runs the same engine")
N_PREDICT = 64
# Flags that must stay accepted by this llama.cpp (unknown flags are fatal at start).
COMMON = ["--metrics", "-fa", "on"]


@dataclass(frozen=True)
class Arm:
    tokens_per_s: float
    speedup: float  # median over rounds of tokens/s against the baseline's same round
    draft_n: int
    accepted: int
    results: tuple[dict[str, Any], ...]
    metrics: dict[str, float]
    props: dict[str, Any]
    tokenized: tuple[int, ...]
    oai: dict[str, Any]

    @property
    def acceptance(self) -> float:
        return self.accepted / self.draft_n if self.draft_n else 0.0


def _tps(result: dict[str, Any]) -> float:
    return float(result["timings"]["predicted_per_second"])


def _arm(url: str, results: list[dict[str, Any]], base: list[dict[str, Any]],
         before: dict[str, float]) -> Arm:
    timings = [r["timings"] for r in results]
    after = metrics(url)
    tok = httpx.post(url + "/tokenize", json={"content": PROMPTS[1], "add_special": True},
                     timeout=10, trust_env=False).json()["tokens"]
    oai = httpx.post(url + "/v1/completions", timeout=60, trust_env=False, json={
        "prompt": PROMPTS[0], "max_tokens": 16, "temperature": 0}).json()
    n = sum(t["predicted_n"] for t in timings)
    return Arm(tokens_per_s=1000.0 * n / sum(t["predicted_ms"] for t in timings),
               speedup=statistics.median(_tps(r) / _tps(b) for r, b in zip(results, base,
                                                                            strict=True)),
               draft_n=sum(t.get("draft_n", 0) for t in timings),
               accepted=sum(t.get("draft_n_accepted", 0) for t in timings),
               results=tuple(results),
               metrics={k: v - before.get(k, 0.0) for k, v in after.items()},
               props=httpx.get(url + "/props", timeout=10, trust_env=False).json(),
               tokenized=tuple(tok), oai=oai)


@pytest.fixture(scope="module")
def arms(llama_server_bin: Path, good_pair: SynthPair, bad_pair: SynthPair,
         costly_pair: SynthPair, synth_root: Path) -> dict[str, Arm]:
    """All servers run side by side and take turns, so machine load hits every arm alike.

    One thread each: on a busy 2-core machine, spinning ggml threads make per-step overhead,
    not model size, dominate, which would blur the cost difference the pairs are built on.
    """
    target = good_pair.target.gguf
    for other in (bad_pair, costly_pair):
        assert other.target.gguf.read_bytes() == target.read_bytes()
    flags = {"baseline": [], "good": spec_args(good_pair.draft.gguf),
             "bad": spec_args(bad_pair.draft.gguf), "costly": spec_args(costly_pair.draft.gguf)}
    with contextlib.ExitStack() as stack:
        urls = {k: stack.enter_context(llama_server(llama_server_bin, target, [*COMMON, *v],
                                                    log=synth_root / f"{k}.log", threads=1))
                for k, v in flags.items()}
        before = {}
        for k, url in urls.items():
            complete(url, "warm up", n_predict=8)
            before[k] = metrics(url)
        results: dict[str, list[dict[str, Any]]] = {k: [] for k in urls}
        for prompt in PROMPTS:
            for k, url in urls.items():
                results[k].append(complete(url, prompt, n_predict=N_PREDICT))
        out = {k: _arm(url, results[k], results["baseline"], before[k])
               for k, url in urls.items()}
    report = {k: {"tokens_per_s": round(a.tokens_per_s, 1), "speedup": round(a.speedup, 2),
                  "draft_n": a.draft_n,
                  "accepted": a.accepted, "acceptance": round(a.acceptance, 3)}
              for k, a in out.items()}
    (synth_root / "engine-report.json").write_text(json.dumps(report, indent=2))
    print("synth engine figures:", json.dumps(report))
    return out


def test_baseline_does_not_speculate(arms: dict[str, Arm]) -> None:
    base = arms["baseline"]
    assert base.draft_n == 0
    assert all("draft_n" not in r["timings"] for r in base.results)
    assert all(r["timings"]["predicted_n"] == N_PREDICT for r in base.results)
    assert not any(k.startswith("llamacpp:spec_decode") for k in base.metrics if base.metrics[k])


def test_good_pair_is_accepted(arms: dict[str, Arm]) -> None:
    good = arms["good"]
    assert good.draft_n > 0
    assert good.acceptance > 0.7
    assert all(r["timings"]["predicted_n"] == N_PREDICT for r in good.results)


def test_bad_pair_is_rejected_token_by_token(arms: dict[str, Arm]) -> None:
    bad = arms["bad"]
    assert bad.draft_n > 0
    assert bad.acceptance < 0.1


def test_speculation_keeps_the_targets_greedy_text(arms: dict[str, Arm]) -> None:
    # Greedy verification keeps the target's choice whatever the draft proposes. Batched and
    # single-token f16 kernels may round a near-tie differently, so compare a long prefix.
    plain = [r["content"] for r in arms["baseline"].results]
    for name in ("good", "bad", "costly"):
        for base, spec in zip(plain, (r["content"] for r in arms[name].results), strict=True):
            same = next((i for i, (a, b) in enumerate(zip(base, spec, strict=False)) if a != b),
                        min(len(base), len(spec)))
            assert same >= len(base) // 2, name


def test_good_speculation_wins_and_bad_loses(arms: dict[str, Arm]) -> None:
    good, bad = arms["good"].speedup, arms["bad"].speedup
    assert bad < 1.0, f"bad draft should slow decoding down: x{bad:.2f}"
    assert good > 2 * bad, f"good x{good:.2f} vs bad x{bad:.2f}"


def test_costly_draft_is_accepted_but_eats_the_win(arms: dict[str, Arm]) -> None:
    costly, good = arms["costly"], arms["good"]
    assert costly.acceptance > 0.7
    assert costly.speedup < good.speedup


def test_metrics_spec_counters_match_timings(arms: dict[str, Arm]) -> None:
    for name in ("good", "bad", "costly"):
        arm = arms[name]
        m = arm.metrics
        assert m["llamacpp:spec_decode_num_draft_tokens_total"] == arm.draft_n
        assert m["llamacpp:spec_decode_num_accepted_tokens_total"] == arm.accepted
        assert m["llamacpp:spec_decode_num_drafts_total"] > 0
        per_pos = sum(v for k, v in m.items()
                      if k.startswith("llamacpp:spec_decode_num_accepted_tokens_per_pos_total{"))
        assert per_pos == arm.accepted


def test_engine_tokenizes_like_the_hf_tokenizer(arms: dict[str, Arm],
                                                good_pair: SynthPair) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    hf = tokenizers.Tokenizer.from_file(str(good_pair.target_dir / "tokenizer.json"))
    assert list(arms["baseline"].tokenized) == hf.encode(PROMPTS[1]).ids
    tok = build_tokenizer(good_pair.vocab_size)
    assert arms["baseline"].props["bos_token"] == tok.tokens[tok.bos_id]


def test_openai_completion_carries_draft_timings(arms: dict[str, Arm]) -> None:
    timings = arms["good"].oai["timings"]
    assert timings["draft_n"] > 0
    assert 0 <= timings["draft_n_accepted"] <= timings["draft_n"]
    assert arms["good"].props["endpoint_metrics"] is True


def test_incompatible_draft_leaves_the_server_up_without_speculation(
        llama_server_bin: Path, good_pair: SynthPair, synth_root: Path) -> None:
    # Engine behaviour pinned: a draft with another vocabulary does not stop llama-server; it
    # logs an error and serves without speculation, so only draft_n/logs reveal it.
    other = make_model(synth_root / "other-vocab", vocab_size=600, hidden_size=64,
                       num_hidden_layers=1)
    log = synth_root / "incompatible.log"
    with llama_server(llama_server_bin, good_pair.target.gguf, spec_args(other.gguf),
                      log=log, threads=1) as url:
        result = complete(url, PROMPTS[0], n_predict=8)
    assert result["timings"]["predicted_n"] == 8
    assert "draft_n" not in result["timings"]
    text = log.read_text(errors="replace")
    assert "the target and draft vocabs are not compatible" in text
    assert "failed to initialize speculative decoding context" in text


def test_draft_without_spec_type_never_speculates(llama_server_bin: Path, good_pair: SynthPair,
                                                  synth_root: Path) -> None:
    # Engine behaviour pinned (llama.cpp #25345): -md loads the draft, but the default
    # --spec-type is none, so nothing is drafted and nothing warns.
    log = synth_root / "no-spec-type.log"
    with llama_server(llama_server_bin, good_pair.target.gguf,
                      ["--spec-draft-model", str(good_pair.draft.gguf)], log=log,
                      threads=1) as url:
        result = complete(url, PROMPTS[0], n_predict=16)
    assert "draft_n" not in result["timings"]
    text = log.read_text(errors="replace")
    assert "loading draft model" in text
    complaints = [ln for ln in text.splitlines() if " W " in ln or " E " in ln]
    assert not [ln for ln in complaints if "spec" in ln or "draft" in ln]
