"""The benchmark prompts are the bytes the signed record names, or nothing."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from specbundle.bench.api import _workload
from specbundle.digest import sha256_bytes
from specbundle.errors import SpecError, VerificationError
from specbundle.mirror import Mirror
from specbundle.pull import pull_bundle
from specbundle.spec import load_spec, parse_spec
from tests.pull.conftest import make_model_dir, spec_text

PROMPTS = b'{"prompt": "one"}\n{"prompt": "two"}\n'


def _pulled(tmp_path: Path) -> Mirror:
    make_model_dir(tmp_path / "t", seed=1)
    make_model_dir(tmp_path / "d", seed=2)
    spec = tmp_path / "bundle.yaml"
    spec.write_text(spec_text("local", "local/target", "local/draft", source="dir:PLACEHOLDER")
                    .replace('source: "dir:PLACEHOLDER"}\ndraft', 'source: "dir:t"}\ndraft')
                    .replace('source: "dir:PLACEHOLDER"}', 'source: "dir:d"}')
                    + "bench: {prompts_file: prompts/p.jsonl}\n")
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "p.jsonl").write_bytes(PROMPTS)
    m = Mirror(tmp_path / "m")
    pull_bundle(load_spec(spec), m, spec_dir=tmp_path)
    return m


def test_pull_records_the_prompts_digest_and_bench_reads_those_bytes(tmp_path: Path) -> None:
    m = _pulled(tmp_path)
    rec = m.load_bundle("local")
    assert rec.prompts_sha256 == sha256_bytes(PROMPTS)
    assert rec.to_json()["prompts_sha256"] == sha256_bytes(PROMPTS)
    spec = parse_spec(rec.spec, file="t")
    w = _workload(m, rec, spec, verified=True)
    assert len(w.prompts) == 2 and w.sha256 == sha256_bytes(PROMPTS)


def test_swapped_prompts_fail_closed(tmp_path: Path) -> None:
    m = _pulled(tmp_path)
    rec = m.load_bundle("local")
    spec = parse_spec(rec.spec, file="t")
    m.write_bundle_file("local", "prompts/p.jsonl", b'{"prompt": "aaaa"}\n{"prompt": "aaaa!"}\n')
    for verified in (True, False):
        with pytest.raises(VerificationError, match="differs from the one the bundle record"):
            _workload(m, rec, spec, verified=verified)


def test_a_symlinked_prompts_file_is_not_followed(tmp_path: Path) -> None:
    m = _pulled(tmp_path)
    rec = m.load_bundle("local")
    spec = parse_spec(rec.spec, file="t")
    target = m.bundle_dir("local") / "prompts" / "p.jsonl"
    (tmp_path / "elsewhere.jsonl").write_bytes(PROMPTS)
    target.unlink()
    target.symlink_to(tmp_path / "elsewhere.jsonl")
    with pytest.raises(SpecError, match="symbolic link"):
        _workload(m, rec, spec, verified=True)


def test_prompts_no_signed_record_names_are_refused_when_verified(tmp_path: Path) -> None:
    m = _pulled(tmp_path)
    old = dataclasses.replace(m.load_bundle("local"), prompts_sha256=None)  # an older record
    spec = parse_spec(old.spec, file="t")
    with pytest.raises(VerificationError, match="not covered by the signed record"):
        _workload(m, old, spec, verified=True)
    assert len(_workload(m, old, spec, verified=False).prompts) == 2  # connected side
