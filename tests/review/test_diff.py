"""Real changes between real signed versions each show up, marked where they matter."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from specbundle import attest
from specbundle.digest import sha256_bytes
from specbundle.image_record import ImageRecord
from specbundle.review import DiffReport, diff_bundle, diff_schema
from specbundle.review.diff import _spec_changes
from specbundle.scan.findings import Severity
from specbundle.sign import sign_bundle
from specbundle.transfer import export_bundle
from specbundle.verify import load_policy
from tests.lib.cli import run_cli
from tests.lib.models import make_model
from tests.lib.versions import Versions

SCHEMA = Path(__file__).parents[2] / "manifests" / "schemas" / "bundle-diff.schema.json"


@pytest.fixture
def v(tmp_path: Path) -> Versions:
    out = Versions(tmp_path)
    out.sign()
    return out


def _by_path(rep: DiffReport) -> dict[str, object]:
    return {c.path: c for c in rep.changes}


def test_spec_only_change_is_runtime(v: Versions) -> None:
    v.sign(k=7, extra_args=("--enforce-eager",))
    rep = diff_bundle(v.mirror, "pair")
    assert rep.old.version == 1 and rep.new.version == 2
    paths = _by_path(rep)
    k = paths["speculative.num_speculative_tokens"]
    assert (k.before, k.after, k.runtime) == ("4", "7", True)  # type: ignore[attr-defined]
    assert paths["engines.vllm.extra_args"].runtime  # type: ignore[attr-defined]
    assert not [c for c in rep.changes if c.area in ("file", "artifact")]
    assert rep.behaviour_changed


def test_threshold_lowered_is_gate_and_loosens(v: Versions) -> None:
    v.sign(min_ratio=0.9)
    c = _by_path(diff_bundle(v.mirror, "pair"))["admission.min_throughput_ratio_lower_bound"]
    assert c.gate and not c.runtime  # type: ignore[attr-defined]
    assert c.note == "loosens the gate"  # type: ignore[attr-defined]


def test_swapped_draft_of_equal_size(v: Versions) -> None:
    make_model(v.draft, seed=555)  # same shapes, other weights
    v.sign()
    rep = diff_bundle(v.mirror, "pair")
    paths = _by_path(rep)
    w = paths["draft:model.safetensors"]
    assert w.kind == "changed" and w.runtime  # type: ignore[attr-defined]
    assert "same size, different bytes" in w.note  # type: ignore[attr-defined]
    assert w.before.split()[0] == w.after.split()[0]  # type: ignore[attr-defined]
    assert "draft.commit" in paths and "target:model.safetensors" not in paths


def test_new_file_and_changed_template(v: Versions) -> None:
    (v.target / "added_tokens.json").write_text('{"<x>": 64}')
    v.set_template("{{ messages }} changed")
    v.sign()
    paths = _by_path(diff_bundle(v.mirror, "pair"))
    new = paths["target:added_tokens.json"]
    assert new.kind == "added" and new.runtime and "tokenizer" in new.note  # type: ignore[attr-defined]
    tpl = paths["target:tokenizer_config.json"]
    assert tpl.note == "chat template changed" and tpl.runtime  # type: ignore[attr-defined]


def test_removed_file_and_a_second_signature(v: Versions) -> None:
    (v.target / "added_tokens.json").write_text('{"<x>": 64}')
    v.sign()
    (v.target / "added_tokens.json").unlink()
    v.sign()
    gone = _by_path(diff_bundle(v.mirror, "pair"))["target:added_tokens.json"]
    assert gone.kind == "removed" and gone.after is None and gone.runtime  # type: ignore[attr-defined]
    assert gone.before.endswith("…") and " B sha256:" in gone.before  # type: ignore[attr-defined]
    # the same content signed again, by a second key as well: listed, not a behaviour change
    second = attest.generate_key("ecdsa-p256")
    sign_bundle(v.mirror, "pair", [v.key, second])
    rep = diff_bundle(v.mirror, "pair")
    added = [c for c in rep.changes if c.area == "signature" and c.kind == "added"]
    assert any(c.path == "manifest" and c.after == second.fingerprint[:16] for c in added)
    assert not rep.behaviour_changed
    assert {c.area for c in rep.changes} == {"signature"}


@pytest.mark.parametrize(("path", "runtime", "gate"), [
    ("speculative.method", True, False),
    ("speculative.schedule", True, False),
    ("engines.llamacpp.ctx_size", True, False),
    ("deployment.p95_concurrency", True, True),
    ("bench.rounds", False, True),
    ("metadata.description", False, False),
    ("target.revision", False, False),
    ("unknown_section.field", True, False),
])
def test_spec_fields_are_marked(path: str, runtime: bool, gate: bool) -> None:
    (c,) = _spec_changes(_nested(path, '"a"'), _nested(path, '"b"'))
    assert (c.runtime, c.gate) == (runtime, gate)


def test_scan_and_compat_findings_and_image_records(tmp_path: Path) -> None:
    """Real scans: a compat finding (draft vocabulary) and a config finding appear in v2 and
    disappear in v3; an image record that changes is a runtime change."""
    v = Versions(tmp_path)
    images = v.mirror.bundle_dir("pair") / "images"

    def image(digit: str) -> None:
        rec = ImageRecord("vllm", "vllm/vllm-openai:v0", f"sha256:{digit * 64}", "b" * 64, 10)
        images.mkdir(parents=True, exist_ok=True)
        (images / "vllm.json").write_text(json.dumps(rec.to_json()))

    v.sign(scan_fail_on=Severity.CRITICAL)
    image("a")
    make_model(v.draft, seed=101, vocab=128)  # the draft's vocabulary no longer the target's
    (v.target / "generation_config.json").write_text('{"seed": 1, "seed": 2}')
    v.sign(scan_fail_on=Severity.CRITICAL)
    paths = _by_path(diff_bundle(v.mirror, "pair"))
    vocab = paths["draft:compat.vocab-size"]
    assert (vocab.area, vocab.kind, vocab.note) == ("compat", "added", "finding appeared")  # type: ignore[attr-defined]
    assert vocab.runtime and vocab.gate  # type: ignore[attr-defined]
    dup = paths["target:config.duplicate-key"]
    assert (dup.area, dup.kind) == ("scan", "added")  # type: ignore[attr-defined]
    assert not dup.gate, "below the report's fail_on: shown, not a gate change"  # type: ignore[attr-defined]
    assert paths["vllm"].area == "image" and paths["vllm"].kind == "added"  # type: ignore[attr-defined]
    image("c")
    make_model(v.draft, seed=101)
    (v.target / "generation_config.json").write_text('{"seed": 1}')
    v.sign(scan_fail_on=Severity.CRITICAL)
    paths = _by_path(diff_bundle(v.mirror, "pair"))
    assert paths["draft:compat.vocab-size"].note == "finding disappeared"  # type: ignore[attr-defined]
    assert paths["target:config.duplicate-key"].kind == "removed"  # type: ignore[attr-defined]
    img = paths["vllm"]
    assert img.kind == "changed" and img.runtime and img.after == sha256_bytes(  # type: ignore[attr-defined]
        (images / "vllm.json").read_bytes())


def test_transfer_set_before_import_and_trust(v: Versions, tmp_path: Path) -> None:
    v.sign(k=5)
    out = tmp_path / "set"
    export_bundle(v.mirror, "pair", out, [v.key])
    rep = diff_bundle(v.mirror, "pair", "1", str(out), policy=load_policy(v.policy_path))
    assert rep.new.label == "transfer set set" and rep.new.version == 2
    assert "speculative.num_speculative_tokens" in _by_path(rep)
    man = [s for s in rep.new.signatures if s.what == "manifest"]
    assert man and man[0].key == "release" and man[0].verified is True


def test_tampered_transfer_set_is_refused_under_trust(
        v: Versions, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    v.sign(k=5)
    out = tmp_path / "set"
    export_bundle(v.mirror, "pair", out, [v.key])
    report = out / "bundle" / "versions" / "000002" / "scan" / "report.json"
    report.write_bytes(report.read_bytes().replace(b'"high"', b'"critical"'))
    code, _, err = run_cli(capsys, "diff", "pair", "1", str(out), "--mirror",
                           str(v.mirror.root), "--trust", str(v.policy_path))
    assert code == 3 and "not the file its signed index names" in err
    # without a policy nothing is trusted: the diff still shows it, signatures unchecked
    rep = diff_bundle(v.mirror, "pair", "1", str(out))
    assert rep.new.note == "scan report differs from the one the manifest signs"
    assert {s.verified for s in rep.new.signatures} == {None}


def test_cli_json_schema_and_exit_7(v: Versions, capsys: pytest.CaptureFixture[str]) -> None:
    v.sign(min_ratio=1.0)
    mirror = str(v.mirror.root)
    code, out, _ = run_cli(capsys, "diff", "pair", "--mirror", mirror, "--json")
    assert code == 0
    doc = json.loads(out)
    jsonschema.validate(doc, json.loads(SCHEMA.read_text()))
    assert doc["summary"]["gate"] is True
    code, out, err = run_cli(capsys, "diff", "pair", "--mirror", mirror,
                             "--fail-on-behaviour-change")
    assert code == 7 and "behaviour-changed" in err
    assert "GATE" in out and "min_throughput_ratio_lower_bound" in out
    # the same version on both sides: nothing changes, so the pipeline passes
    code, out, _ = run_cli(capsys, "diff", "pair", "2", "current", "--mirror", mirror,
                           "--fail-on-behaviour-change")
    assert code == 0 and "0 change(s)" in out


def test_published_schema_is_generated() -> None:
    assert json.loads(SCHEMA.read_text()) == diff_schema()


@pytest.mark.parametrize(("path", "before", "after", "says"), [
    ("admission.min_throughput_ratio_lower_bound", "1.05", "1.2", "tightens the gate"),
    ("admission.max_concurrency_ceiling_drop", "0.1", "0.25", "loosens the gate"),
    ("admission.max_engine_errors", "2", "0", "tightens the gate"),
    ("admission.require_alpha_above_c", "true", "false", "loosens the gate"),
    ("bench.rounds", "4", "2", ""),
])
def test_threshold_direction(path: str, before: str, after: str, says: str) -> None:
    (c,) = _spec_changes({"x": 0} | _nested(path, before), {"x": 0} | _nested(path, after))
    assert c.note == says and c.gate and not c.runtime


def _nested(path: str, value: str) -> dict[str, object]:
    head, _, leaf = path.partition(".")
    return {head: {leaf: json.loads(value)}}
