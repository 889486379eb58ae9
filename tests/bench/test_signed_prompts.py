"""The benchmark prompts are the bytes the signed record names, or nothing."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from specbundle import attest
from specbundle.bench.api import _workload
from specbundle.bundle import read_unsigned
from specbundle.digest import sha256_bytes
from specbundle.errors import SpecError, VerificationError
from specbundle.mirror import Mirror
from specbundle.pull import pull_bundle
from specbundle.sign import sign_bundle
from specbundle.spec import load_spec
from specbundle.verify import VerifiedBundle, load_policy, verify_bundle
from tests.lib.bundles import write_scan_report
from tests.lib.models import make_model_dir
from tests.lib.policy import policy_doc, write_policy
from tests.lib.specs import spec_text

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


def _verified(tmp_path: Path, m: Mirror) -> VerifiedBundle:
    """Scan, sign and verify the pulled bundle: the isolated side's value."""
    write_scan_report(m, "local")
    key = attest.generate_key("ecdsa-p256")
    sign_bundle(m, "local", [key])
    doc = policy_doc({"release": key}, repos=("local/*",))
    return verify_bundle(m, "local", load_policy(write_policy(tmp_path / "trust.yaml", doc)))


def test_pull_records_the_prompts_digest_and_bench_reads_those_bytes(tmp_path: Path) -> None:
    m = _pulled(tmp_path)
    rec = m.load_bundle("local")
    assert rec.prompts_sha256 == sha256_bytes(PROMPTS)
    assert rec.to_json()["prompts_sha256"] == sha256_bytes(PROMPTS)
    w = _workload(_verified(tmp_path, m))
    assert len(w.prompts) == 2 and w.sha256 == sha256_bytes(PROMPTS)


def test_swapped_prompts_fail_closed(tmp_path: Path) -> None:
    m = _pulled(tmp_path)
    v = _verified(tmp_path, m)
    m.write_bundle_file("local", "prompts/p.jsonl", b'{"prompt": "aaaa"}\n{"prompt": "aaaa!"}\n')
    for bundle in (v, read_unsigned(m, "local")):
        with pytest.raises(VerificationError, match="differs from the one the bundle record"):
            _workload(bundle)


def test_a_symlinked_prompts_file_is_not_followed(tmp_path: Path) -> None:
    m = _pulled(tmp_path)
    v = _verified(tmp_path, m)
    target = m.bundle_dir("local") / "prompts" / "p.jsonl"
    (tmp_path / "elsewhere.jsonl").write_bytes(PROMPTS)
    target.unlink()
    target.symlink_to(tmp_path / "elsewhere.jsonl")
    with pytest.raises(SpecError, match="symbolic link"):
        _workload(v)


def test_prompts_no_signed_record_names_are_refused_when_verified(tmp_path: Path) -> None:
    m = _pulled(tmp_path)
    with m.lock():  # an older record, pulled before records named the prompts' digest
        m.save_bundle(dataclasses.replace(m.load_bundle("local"), prompts_sha256=None))
    with pytest.raises(VerificationError, match="not covered by the signed record"):
        _workload(_verified(tmp_path, m))
    assert len(_workload(read_unsigned(m, "local")).prompts) == 2  # connected side
