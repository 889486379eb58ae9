"""Real ``verify --json`` and ``admit --json`` outputs validate against the published schemas."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from specbundle import attest
from specbundle.attest.keys import write_private_key
from tests.lib.cli import run_cli
from tests.lib.policy import policy_doc, write_policy
from tests.lib.versions import Versions

SCHEMAS = Path(__file__).parents[2] / "manifests" / "schemas"


def _schema(name: str) -> dict[str, object]:
    doc: dict[str, object] = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(doc)
    return doc


@pytest.fixture
def v(tmp_path: Path) -> Versions:
    out = Versions(tmp_path)
    out.sign()
    return out


def test_verify_json_pass_and_fail(v: Versions, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    schema = _schema("verification-report")
    code, out, _ = run_cli(capsys, "verify", "pair", "--mirror", str(v.mirror.root),
                           "--trust", str(v.policy_path), "--json")
    assert code == 0
    jsonschema.validate(json.loads(out), schema)
    other = attest.generate_key("ecdsa-p256")
    doc = policy_doc({"release": v.key, "second": other})
    doc["require"] = {"pair-binding": {"threshold": 2}}
    strict = write_policy(tmp_path / "strict.yaml", doc)
    code, out, _ = run_cli(capsys, "verify", "pair", "--mirror", str(v.mirror.root),
                           "--trust", str(strict), "--json")
    failed = json.loads(out)
    assert code == 3 and failed["problems"] and "approval" in failed
    jsonschema.validate(failed, schema)


def test_admission_decision_json(v: Versions, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A real signed FAILED decision (verification refused it before any benchmark)."""
    gate = attest.generate_key("ecdsa-p256")
    write_private_key(gate, tmp_path / "gate.pem")
    doc = policy_doc({"release": v.key, "gate": gate})
    doc["require"] = {"pair-binding": {"threshold": 2}}
    policy = write_policy(tmp_path / "gate.yaml", doc)
    code, out, _ = run_cli(capsys, "admit", "pair", "--mirror", str(v.mirror.root),
                           "--trust", str(policy), "--key", str(tmp_path / "gate.pem"),
                           "--json")
    decision = json.loads(out)
    assert code == 5 and decision["result"] == "FAILED"
    jsonschema.validate(decision, _schema("admission-decision"))
