"""vLLM is the oracle: its own parser and config builder judge every rendered command.

One interpreter start (module fixture) asks vLLM 0.32 (CPU build) about both arms of every
case below, rendered from real synthetic model directories in a real mirror, and dumps its
flag/key table. The tests then hold: every method the spec knows resolves as rendered; the
lint table and the engine agree on every case (the 7 disagreements of issue #12 are gone);
the shipped table is the installed engine's; and ``lint --engine-check`` quotes the engine.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from specbundle.bundle import read_unsigned
from specbundle.mirror import Mirror
from specbundle.render import build_serve_command, lint_bundle
from specbundle.render.argrules import VLLM_TABLE_VERSION
from specbundle.render.vllm_oracle import PINNED_VLLM, OracleAnswer, check_commands
from specbundle.spec import VLLMSettings
from tests._vllm_bundles import VllmModels, make_models, pull, vllm_doc
from tests.lib.cli import run_cli

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

TABLE = Path(__file__).resolve().parents[2] / "src/specbundle/render/vllm_args.json"
NGRAM = {"prompt_lookup_max": 4, "prompt_lookup_min": 2}


def _cases(m: VllmModels) -> dict[str, dict[str, Any]]:
    """Bundle specs by case name; every method the spec language offers appears once."""
    good, bad = m.good.draft_dir, m.bad.draft_dir
    return {
        "draft_model": vllm_doc("dm", m.target, good, k=3),
        "draft_model-bad": vllm_doc("dmbad", m.target, bad, k=3),
        "eagle3": vllm_doc("e3", m.target, m.eagle3, method="eagle3", k=3),
        "eagle": vllm_doc("e1", m.target, m.eagle1, method="eagle", k=2),
        "ngram": vllm_doc("ng", m.target, None, method="ngram", k=3, speculative_extra=NGRAM),
        "ngram_gpu": vllm_doc("ngg", m.target, None, method="ngram_gpu", k=3,
                              speculative_extra=NGRAM),
        "schedule": vllm_doc("sched", m.target, m.eagle3, method="eagle3", k=3,
                             schedule=[[1, 1, 3], [2, 8, 1]]),
        # ranges the config builder accepts; the scheduler's lookup refuses or rewrites them
        "schedule-overlap": vllm_doc("schedov", m.target, m.eagle3, method="eagle3", k=3,
                                     schedule=[[1, 4, 3], [3, 8, 1]]),
        "schedule-gap": vllm_doc("schedgap", m.target, m.eagle3, method="eagle3", k=3,
                                 schedule=[[1, 2, 3], [5, 8, 1]]),
        "schedule-clamped": vllm_doc("schedcl", m.target, m.eagle3, method="eagle3", k=3,
                                     schedule=[[1, 2, 5], [3, 8, 1]]),
        "mtp": vllm_doc("mtp", m.target, None, method="mtp", k=1),
        "dflash": vllm_doc("dfl", m.target, good, method="dflash", k=3),
        "dspark": vllm_doc("dsp", m.target, good, method="dspark", k=3),
        "medusa": vllm_doc("med", m.target, good, method="medusa", k=3),
        "per-request-metrics": vllm_doc("prm", m.target, good, k=3, extra_args=[
            "--per-request-spec-decode-metrics", "summary"]),
        "pipeline-parallel": vllm_doc("pp", m.target, good, k=3),
        # the disagreements: transcribed lint said ok (or not), the engine said otherwise
        "swap-space": vllm_doc("swap", m.target, good, extra_args=["--swap-space", "4"]),
        "no-disable-log-stats": vllm_doc("nolog", m.target, good,
                                         extra_args=["--no-disable-log-stats"]),
        "optimization-level": vllm_doc("olevel", m.target, good, extra_args=["-O", "0"]),
        "tokenizer-mode-hf": vllm_doc("tokhf", m.target, good, extra_args=[
            "--tokenizer-mode", "hf"]),
        "kv-cache-dtype-new": vllm_doc("kvnew", m.target, good, extra_args=[
            "--kv-cache-dtype", "fp8_per_token_head"]),
        "new-spec-keys": vllm_doc("keys", m.target, good, speculative_extra={
            "parallel_drafting": False, "disable_eagle_block_drop": False,
            "draft_sample_method": "greedy", "rejection_sample_method": "standard",
            "use_local_argmax_reduction": False, "enable_adaptive_verification": False}),
        "unknown-spec-key": vllm_doc("badkey", m.target, good,
                                     speculative_extra={"speculative_token_tree": "[]"}),
    }


@dataclass(frozen=True)
class Judged:
    mirror: Mirror
    names: dict[str, str]
    arms: list[tuple[str, str]]  # (case, arm) per command asked about
    answer: OracleAnswer

    def verdict(self, case: str, arm: str = "speculative") -> Any:
        return self.answer.verdicts[self.arms.index((case, arm))]


@pytest.fixture(scope="module")
def judged(module_tmp: Path, vllm_bin: Path) -> Judged:
    root = module_tmp
    models = make_models(root / "models")
    mirror = Mirror.open(root / "mirror", create=True)
    names: dict[str, str] = {}
    arms: list[tuple[str, str]] = []
    commands: list[list[str]] = []
    for case, doc in _cases(models).items():
        if case == "pipeline-parallel":
            doc["engines"]["vllm"]["pipeline_parallel_size"] = 2
            doc["deployment"]["gpus"] = 2
        names[case] = pull(mirror, doc)
        rec = mirror.load_bundle(names[case])
        for arm, spec in (("speculative", True), ("baseline", False)):
            cmd = build_serve_command(rec, "vllm", mirror=mirror, speculation=spec)
            arms.append((case, arm))
            commands.append([*cmd.args, "--host", "127.0.0.1", "--port", "8000"])
    return Judged(mirror, names, arms, check_commands(vllm_bin, commands, dump=True))


@pytest.mark.parametrize(("case", "method", "k"), [
    ("draft_model", "draft_model", 3), ("eagle3", "eagle3", 3), ("eagle", "eagle", 2),
    ("ngram", "ngram", 3), ("ngram_gpu", "ngram_gpu", 3)])
def test_every_runnable_method_resolves_as_rendered(judged: Judged, case: str, method: str,
                                                    k: int) -> None:
    v = judged.verdict(case)
    assert v.ok, v.message
    sp = v.resolved["speculative"]
    assert (sp["method"], sp["num_speculative_tokens"]) == (method, k)
    if not method.startswith("ngram"):  # the draft is read from the neutral alias the manifest names
        assert sp["model"].endswith(f"bundles/{judged.names[case]}/render/models/draft")
    assert judged.verdict(case, "baseline").resolved["speculative"] is None


def test_schedule_resolves_to_the_rendered_triples(judged: Judged) -> None:
    v = judged.verdict("schedule")
    assert v.ok, v.message
    assert v.resolved["speculative"]["num_speculative_tokens_per_batch_size"] == [
        [1, 1, 3], [2, 8, 1]]


def test_methods_this_pair_cannot_run_are_refused_in_the_engines_words(judged: Judged) -> None:
    """MTP needs a target with MTP layers and DFlash/DSpark their own drafts: a llama pair has
    none, and lint --engine-check reports vLLM's own refusal (the table cannot know that)."""
    for case in ("mtp", "dflash", "dspark"):
        v = judged.verdict(case)
        assert not v.ok and v.stage == "config" and v.message
        assert judged.verdict(case, "baseline").ok  # the baseline never names a method


def test_lint_table_agrees_with_the_engine_on_every_flag_case(judged: Judged) -> None:
    """Cases decided by the command line alone: lint (table) and vLLM give the same verdict."""
    for case in ("draft_model", "draft_model-bad", "eagle3", "eagle", "ngram", "schedule",
                 "schedule-overlap",
                 "per-request-metrics", "pipeline-parallel", "swap-space",
                 "no-disable-log-stats", "optimization-level", "tokenizer-mode-hf",
                 "kv-cache-dtype-new", "new-spec-keys", "unknown-spec-key", "medusa"):
        engine_ok = judged.verdict(case).ok and judged.verdict(case, "baseline").ok
        report = lint_bundle(read_unsigned(judged.mirror, judged.names[case]), engine="vllm")
        assert report.ok == engine_ok, (case, [str(f) for f in report.errors],
                                        judged.verdict(case).message,
                                        judged.verdict(case, "baseline").message)
    for case in ("swap-space", "no-disable-log-stats", "unknown-spec-key"):
        assert not judged.verdict(case).ok
    # --per-request-spec-decode-metrics reaches the speculative arm only: both arms start
    prm = judged.verdict("per-request-metrics")
    assert prm.ok and judged.verdict("per-request-metrics", "baseline").ok


def test_shipped_table_is_the_installed_engines(judged: Judged) -> None:
    """vllm_args.json is a dump of the pinned vLLM (ci/vllm-table.py), not a transcription."""
    shipped = json.loads(TABLE.read_text())
    shipped.pop("generated_by", None)
    assert judged.answer.table is not None
    assert shipped == judged.answer.table
    assert judged.answer.vllm_version == VLLM_TABLE_VERSION
    assert judged.answer.vllm_version.split("+")[0] == PINNED_VLLM
    assert VLLMSettings().image == f"vllm/vllm-openai:v{PINNED_VLLM}"


def test_lint_engine_check_quotes_the_engine(judged: Judged, vllm_bin: Path,
                                             capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_BIN", str(vllm_bin))
    name = judged.names["mtp"]
    code, out, err = run_cli(capsys, "lint", name, "--engine-check", "--json",
                             "--mirror", str(judged.mirror.root))
    assert code == 2, err
    doc = json.loads(out)
    found = [f for f in doc["findings"] if f["rule"] == "vllm-engine-check"]
    assert [f["where"] for f in found] == ["speculative arm: vllm serve"]
    assert judged.verdict("mtp").message.splitlines()[0][:60] in found[0]["message"]
    assert "vllm-engine-check" in doc["rules_run"]


def test_overlapping_schedule_ranges_are_refused_where_the_scheduler_builds_its_lookup(
        judged: Judged) -> None:
    """0.32's config builder accepts overlapping ranges; its scheduler refuses them at start."""
    v = judged.verdict("schedule-overlap")
    assert not v.ok and v.stage == "scheduler", (v.stage, v.message)
    assert "non-overlapping" in (v.message or "")
    assert judged.verdict("schedule").resolved["speculative"]["schedule_in_force"] == [
        [1, 1, 3], [2, 8, 1]]


def test_every_rewrite_of_the_spec_is_reported(judged: Judged) -> None:
    """Gaps carry the previous K, a K above num_speculative_tokens is clamped: both are
    rewrites of what the spec says; an exact schedule is none."""
    from specbundle.render.vllm_oracle import rewrites
    from specbundle.spec import parse_spec

    def found(case: str) -> list[str]:
        spec = parse_spec(judged.mirror.load_bundle(judged.names[case]).spec)
        return [f.message for f in rewrites(spec, judged.verdict(case))]

    assert found("schedule") == []
    (gap,) = found("schedule-gap")
    assert "K=3 at batch size 3 where the spec says nothing" in gap
    (clamped,) = found("schedule-clamped")
    assert "K=3 at batch size 1 where the spec says 5" in clamped


def test_async_scheduling_is_judged_as_a_gpu_node_decides_it(judged: Judged) -> None:
    """The CPU platform forces async scheduling off; the general path (what CUDA keeps) turns
    it on for EAGLE-3 and off for CPU n-gram, and the report names what is not reproduced."""
    e3, ng = judged.verdict("eagle3").resolved, judged.verdict("ngram").resolved
    assert e3["async_scheduling_here"] is False
    assert e3["async_scheduling_gpu"] is True and ng["async_scheduling_gpu"] is False
    assert any("cudagraph" in x for x in e3["not_reproduced"])
    from specbundle.render.vllm_oracle import rewrites
    from specbundle.spec import parse_spec

    spec = parse_spec(judged.mirror.load_bundle(judged.names["ngram"]).spec)
    assert any("async scheduling is off on a GPU node for method ngram" in f.message
               for f in rewrites(spec, judged.verdict("ngram")))
