"""trust.yaml: an empty, unreadable or inconsistent policy is an error, never "trust all"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from specbundle import attest
from specbundle.cli import main
from specbundle.errors import SpecError
from specbundle.verify import load_policy, parse_policy
from tests.lib.bundles import Signed
from tests.lib.policy import policy_doc

KEY = attest.generate_key("ecdsa-p256")
OTHER = attest.generate_key("ed25519")


def _parse(doc: object) -> object:
    return parse_policy(yaml.safe_dump(doc).encode(), source="trust.yaml")


@pytest.mark.parametrize("text", ["", "   \n", "{}", "[]", "null"])
def test_empty_policy_is_an_error(text: str) -> None:
    with pytest.raises(SpecError, match="empty trust policy"):
        parse_policy(text.encode())


def test_unreadable_policy_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read trust policy"):
        load_policy(tmp_path / "absent.yaml")
    (tmp_path / "bad.yaml").write_text("keys: [unclosed")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_policy(tmp_path / "bad.yaml")


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda d: d.update(keys=[]), "at least 1"),
    (lambda d: d["keys"][0].update(fingerprint=OTHER.fingerprint), "does not match"),
    (lambda d: d["keys"][0].update(repos=[]), "scope it"),
    (lambda d: d.update(require={}), "at least one statement kind"),
    (lambda d: d.update(require={"vibes": {"threshold": 1}}), "unknown statement kind"),
    (lambda d: d.update(require={"pair-binding": {"threshold": 2}}), "exceeds the 1 eligible"),
    (lambda d: d.update(require={"pair-binding": {"signers": ["nobody"]}}), "unknown key"),
    (lambda d: d.update(require={"pair-binding": {"signers": []}}), "never be satisfied"),
    (lambda d: d.update(max_age="forever"), "not a duration"),
    (lambda d: d.update(surprise=True), "Extra inputs"),
])
def test_inconsistent_policies_are_refused(mutate: object, message: str) -> None:
    doc = policy_doc({"release": KEY})
    mutate(doc)  # type: ignore[operator]
    with pytest.raises(SpecError, match=message):
        _parse(doc)


def test_defaults_and_scoping() -> None:
    pol = parse_policy(yaml.safe_dump(policy_doc({"release": KEY, "ml": OTHER}, repos=("org/*",),
                                                 max_age="30d")).encode())
    assert {r.kind for r in pol.requirements} == {"fetch-provenance", "scan-result",
                                                  "pair-binding"}
    assert all(r.threshold == 1 and r.max_age and r.max_age.days == 30
               for r in pol.requirements)
    k = pol.key(KEY.fingerprint)
    assert k is not None and k.may_sign("org/x", "b") and not k.may_sign("evil/x", "b")
    assert pol.model_signers == {KEY.fingerprint, OTHER.fingerprint}


def test_example_policies_parse() -> None:
    root = Path(__file__).resolve().parents[2] / "manifests" / "policies"
    files = sorted(root.glob("*.yaml"))
    assert files, "manifests/policies/ ships example policies"
    for f in files:
        text = f.read_text()
        # examples carry placeholder keys; substitute a real one to prove the shape is valid
        doc = yaml.safe_load(text)
        for k in doc["keys"]:
            new = attest.generate_key("ecdsa-p256")
            k["fingerprint"], k["public_key"] = new.fingerprint, new.public.pem.decode()
        assert parse_policy(yaml.safe_dump(doc).encode(), source=str(f)).requirements


def test_cli_verify_exit_codes(signed: Signed, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["verify", signed.record.name, "--trust", str(signed.policy_path), "--mirror",
            str(signed.mirror.root), "--json"]
    with pytest.raises(SystemExit) as ex:
        main(args)
    assert ex.value.code == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    (signed.mirror.snapshot_dir("org/target", signed.record.target.commit)
     / "config.json").unlink()
    with pytest.raises(SystemExit) as ex:
        main(args)
    assert ex.value.code == 3
    out = json.loads(capsys.readouterr().out)
    assert out["problems"][0]["kind"] == "missing-file"
    signed.policy_path.write_text("")
    with pytest.raises(SystemExit) as ex:
        main(args)
    assert ex.value.code == 2
    # each verdict the command reached is in the hash-chained event log; the bad policy is not
    log = [e for e in signed.mirror.read_events() if e["type"] == "verify"]
    assert [(e["bundle"], e["data"]["result"], e["data"]["problems"]) for e in log] == [
        (signed.record.name, "verified", 0), (signed.record.name, "failed", len(out["problems"]))]
    assert log[1]["data"]["policy_sha256"] == out["policy_sha256"]
    assert log[1]["data"]["problem_kinds"] == ["missing-file"] and log[1]["data"]["by"]
