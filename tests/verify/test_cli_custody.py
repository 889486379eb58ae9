"""The CLI's side of custody: render --trust uses only the signed manifest; exit codes."""

from __future__ import annotations

import json

import pytest

from specbundle.mirror import versions
from specbundle.record import BundleRecord
from specbundle.verify import verify_bundle
from tests.lib.bundles import Signed
from tests.lib.cli import run_cli


def _edit_record(s: Signed, tokens: int) -> None:
    rec = s.mirror.load_bundle("pair")
    spec = {**rec.spec, "speculative": {**rec.spec["speculative"],
                                        "num_speculative_tokens": tokens}}
    s.mirror.save_bundle(BundleRecord(rec.name, spec, rec.target, rec.draft, rec.created,
                                      rec.tool_version, rec.extra_blobs))


def test_render_with_trust_ignores_an_edited_record(signed: Signed,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    _edit_record(signed, 64)
    code, out, err = run_cli(capsys, "render", "pair", "--engine", "vllm", "--target", "shell",
                             "--mirror", str(signed.mirror.root), "--trust",
                             str(signed.policy_path), "--out", str(signed.tmp / "r"), "--json")
    assert code == 0, err
    signed_n = verify_bundle(signed.mirror, "pair", signed.policy).spec.speculative \
        .num_speculative_tokens
    argv = " ".join(json.loads(out)["command"]["argv"])
    assert f'"num_speculative_tokens":{signed_n}' in argv and signed_n != 64, argv


def test_render_with_trust_refuses_an_unsigned_bundle(signed: Signed,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    (signed.mirror.bundle_dir("pair") / versions.CURRENT_REF).unlink()
    code, _, err = run_cli(capsys, "render", "pair", "--engine", "vllm", "--target", "shell",
                           "--mirror", str(signed.mirror.root), "--trust",
                           str(signed.policy_path))
    assert code == 3 and "re-sign" in err


def test_verify_cli_duplicate_key_policy_is_exit_2(signed: Signed,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    signed.policy_path.write_text(signed.policy_path.read_text()
                                  + "kind: TrustPolicy\n")
    code, _, err = run_cli(capsys, "verify", "pair", "--mirror", str(signed.mirror.root),
                           "--trust", str(signed.policy_path))
    assert code == 2 and "duplicate" in err


def test_verify_cli_garbage_record_still_verifies_from_the_manifest(
        signed: Signed, capsys: pytest.CaptureFixture[str]) -> None:
    (signed.mirror.bundle_dir("pair") / "bundle.json").write_text("{garbage")
    code, out, err = run_cli(capsys, "verify", "pair", "--mirror", str(signed.mirror.root),
                             "--trust", str(signed.policy_path), "--json")
    assert code == 0, err
    assert json.loads(out)["ok"] is True
