"""Render takes the engine image from the signed version, never the mirror's unsigned copy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from specbundle import attest
from specbundle.bundle import read_unsigned
from specbundle.digest import sha256_bytes
from specbundle.errors import VerificationError
from specbundle.mirror import Mirror, versions
from specbundle.render import render_bundle
from specbundle.sign import sign_bundle
from specbundle.verify import verify_bundle
from tests.lib.bundles import pulled_bundle, write_scan_report
from tests.lib.policy import policy_doc, write_policy

SIGNED = "vllm/vllm-openai@sha256:" + "e" * 64
SWAPPED = "evil/vllm@sha256:" + "f" * 64


def _record(repo_digest: str) -> bytes:
    return json.dumps({
        "schema": "https://specbundle.dev/image-record/v1", "engine": "vllm",
        "reference": "vllm/vllm-openai:v0.32.0", "image_id": "sha256:" + "c" * 64,
        "archive_sha256": "d" * 64, "archive_size": 1, "repo_digest": repo_digest,
    }).encode()


def _signed_with_image(tmp_path: Path) -> tuple[Mirror, Path]:
    mirror = Mirror.open(tmp_path / "mirror", create=True)
    pulled_bundle(tmp_path, mirror, "pair")
    write_scan_report(mirror, "pair")
    mirror.write_bundle_file("pair", "images/vllm.json", _record(SIGNED))
    key = attest.generate_key("ecdsa-p256")
    sign_bundle(mirror, "pair", [key])
    return mirror, write_policy(tmp_path / "trust.yaml", policy_doc({"release": key}))


def test_a_swapped_unsigned_image_record_is_not_rendered(tmp_path: Path) -> None:
    mirror, policy = _signed_with_image(tmp_path)
    from specbundle.verify import load_policy

    v = verify_bundle(mirror, "pair", load_policy(policy))
    # after verification, someone with write access to the mirror swaps the bundle-level copy
    mirror.write_bundle_file("pair", "images/vllm.json", _record(SWAPPED))
    res = render_bundle(v, "vllm", "compose", tmp_path / "out")
    assert res.command.image == SIGNED and res.custody["signed"] is True
    assert yaml.safe_load(res.files[0].read_text())["services"]["engine"]["image"] == SIGNED
    # the connected side, without a verified manifest, reads the mirror's copy
    unsigned = render_bundle(read_unsigned(mirror, "pair"), "vllm", "compose", tmp_path / "out2")
    assert unsigned.command.image == SWAPPED and unsigned.custody["signed"] is False


def test_a_signed_image_record_changed_after_verification_fails_closed(tmp_path: Path) -> None:
    mirror, policy = _signed_with_image(tmp_path)
    from specbundle.verify import load_policy

    v = verify_bundle(mirror, "pair", load_policy(policy))
    rel = versions.version_rel(v.manifest.version, "images/vllm.json")
    mirror.write_bundle_file("pair", rel, _record(SWAPPED))
    with pytest.raises(VerificationError, match="differs from the one signed"):
        render_bundle(v, "vllm", "compose", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_the_cli_renders_the_signed_image(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    from specbundle.cli import main

    mirror, policy = _signed_with_image(tmp_path)
    mirror.write_bundle_file("pair", "images/vllm.json", _record(SWAPPED))
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as done:
        main(["render", "pair", "--engine", "vllm", "--target", "compose", "--out", str(out),
              "--trust", str(policy), "--mirror", str(mirror.root), "--json"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert SIGNED in text and SWAPPED not in text
    doc = yaml.safe_load((out / "compose.yaml").read_text())
    assert doc["services"]["engine"]["image"] == SIGNED


def test_the_docker_bench_runs_the_signed_image(tmp_path: Path) -> None:
    from specbundle.bench.api import BenchOptions, _Manifest
    from specbundle.verify import load_policy

    mirror, policy = _signed_with_image(tmp_path)
    v = verify_bundle(mirror, "pair", load_policy(policy))
    swapped = json.loads(_record(SWAPPED))
    swapped["image_id"] = "sha256:" + "9" * 64
    mirror.write_bundle_file("pair", "images/vllm.json", json.dumps(swapped).encode())
    log = tmp_path / "logs"
    log.mkdir()
    man = _Manifest(v, "vllm", BenchOptions(runtime="docker"), log)
    assert man.image.image_id == "sha256:" + "c" * 64
    assert man.image.repo_digest == SIGNED
    # no verified manifest (connected side): the bundle-level record
    plain = _Manifest(read_unsigned(mirror, "pair"), "vllm", BenchOptions(runtime="docker"), log)
    assert plain.image.image_id == "sha256:" + "9" * 64


def test_a_signed_image_record_with_duplicate_keys_is_refused(tmp_path: Path) -> None:
    """Signed bytes are still parsed strictly: readers disagree on which duplicate wins."""

    from specbundle.errors import RenderError
    from specbundle.verify import load_policy

    mirror = Mirror.open(tmp_path / "mirror", create=True)
    pulled_bundle(tmp_path, mirror, "pair")
    write_scan_report(mirror, "pair")
    dup = _record(SIGNED)[:-1] + f', "repo_digest": "{SWAPPED}"}}'.encode()
    mirror.write_bundle_file("pair", "images/vllm.json", dup)
    key = attest.generate_key("ecdsa-p256")
    sign_bundle(mirror, "pair", [key])
    policy = write_policy(tmp_path / "trust.yaml", policy_doc({"release": key}))
    v = verify_bundle(mirror, "pair", load_policy(policy))
    with pytest.raises(RenderError, match="duplicate"):
        render_bundle(v, "vllm", "compose", tmp_path / "out")
    with pytest.raises(VerificationError, match="duplicate"):
        v.image_records()


def test_a_side_index_and_record_never_vouch_for_an_image(tmp_path: Path) -> None:
    """Issue 22 item 2: a transfer index signed by a revoked policy key, with its own record,
    planted beside the signed version, vouches for nothing: load takes the signed record."""
    from specbundle._fsutil import canonical_json
    from specbundle.attest import sign_statement
    from specbundle.image_record import ImageRecord
    from specbundle.images import check_image, vouched_digests
    from specbundle.transfer.index import Part, TransferIndex
    from specbundle.verify import load_policy

    mirror, policy_path = _signed_with_image(tmp_path)
    stolen = attest.generate_key("ecdsa-p256")  # in the policy, and revoked there
    doc = yaml.safe_load(policy_path.read_text())
    doc["keys"].append({**doc["keys"][0], "name": "stolen", "fingerprint": stolen.fingerprint,
                        "public_key": stolen.public.pem.decode()})
    doc["revoked"] = [{"fingerprint": stolen.fingerprint, "reason": "laptop stolen"}]
    policy_path.write_text(yaml.safe_dump(doc, sort_keys=False))
    v = verify_bundle(mirror, "pair", load_policy(policy_path))
    evil = json.loads(_record(SWAPPED))
    evil.update(archive_sha256="a" * 64, image_id="sha256:" + "b" * 64)
    evil_bytes = json.dumps(evil).encode()
    idx = TransferIndex("pair", 9, "2026-01-01T00:00:00Z", (
        Part("bundle/images/vllm.json", len(evil_bytes), sha256_bytes(evil_bytes)),
        Part(f"objects/{'a' * 64}", 1, "a" * 64)))
    env = sign_statement(idx.statement(v.subjects()), [stolen])
    mirror.write_bundle_file("pair", "import/index.json", canonical_json(env.to_json()))
    mirror.write_bundle_file("pair", "images/vllm.json", evil_bytes)
    vouched = vouched_digests(v)
    assert vouched.signed and "a" * 64 not in vouched.digests
    assert vouched.digests == {v.manifest.images["vllm"], "d" * 64}
    rec = v.image_record("vllm")
    assert rec is not None and rec.image_id == "sha256:" + "c" * 64
    with (tmp_path / "blob").open("w+b") as fh, \
            pytest.raises(VerificationError, match="not bound to the signed version 1"):
        check_image(ImageRecord.from_json(evil), evil_bytes, vouched, fh)
    # the benign twin: the unsigned reading (connected side) would take the planted record
    from specbundle.bundle import read_unsigned

    assert read_unsigned(mirror, "pair").image_record("vllm") == ImageRecord.from_json(evil)
