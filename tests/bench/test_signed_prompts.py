"""The benchmark prompts are the bytes the signed record names, or nothing."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from specbundle.bench.api import _workload
from specbundle.bundle import read_unsigned
from specbundle.digest import sha256_bytes
from specbundle.errors import VerificationError
from tests.lib.bundles import PROMPTS, pulled_with_prompts, verified_local


def test_pull_records_the_prompts_digest_and_bench_reads_those_bytes(tmp_path: Path) -> None:
    m = pulled_with_prompts(tmp_path)
    rec = m.load_bundle("local")
    assert rec.prompts_sha256 == sha256_bytes(PROMPTS)
    assert rec.to_json()["prompts_sha256"] == sha256_bytes(PROMPTS)
    w = _workload(verified_local(tmp_path, m))
    assert len(w.prompts) == 2 and w.sha256 == sha256_bytes(PROMPTS)


def test_swapped_prompts_fail_closed(tmp_path: Path) -> None:
    m = pulled_with_prompts(tmp_path)
    v = verified_local(tmp_path, m)
    m.write_bundle_file("local", "prompts/p.jsonl", b'{"prompt": "aaaa"}\n{"prompt": "aaaa!"}\n')
    for bundle in (v, read_unsigned(m, "local")):
        with pytest.raises(VerificationError, match="differs from the one the bundle record"):
            _workload(bundle)


def test_a_symlinked_prompts_file_is_not_followed(tmp_path: Path) -> None:
    m = pulled_with_prompts(tmp_path)
    v = verified_local(tmp_path, m)
    target = m.bundle_dir("local") / "prompts" / "p.jsonl"
    (tmp_path / "elsewhere.jsonl").write_bytes(PROMPTS)
    target.unlink()
    target.symlink_to(tmp_path / "elsewhere.jsonl")
    with pytest.raises(VerificationError, match="symbolic link"):
        _workload(v)


def test_prompts_no_signed_record_names_are_refused_when_verified(tmp_path: Path) -> None:
    m = pulled_with_prompts(tmp_path)
    with m.lock():  # an older record, pulled before records named the prompts' digest
        m.save_bundle(dataclasses.replace(m.load_bundle("local"), prompts_sha256=None))
    with pytest.raises(VerificationError, match="not covered by the signed record"):
        _workload(verified_local(tmp_path, m))
    assert len(_workload(read_unsigned(m, "local")).prompts) == 2  # connected side
