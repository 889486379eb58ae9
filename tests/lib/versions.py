"""Bundles with several signed versions: each version a real pull, scan report and sign."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from specbundle import attest
from specbundle.mirror import Mirror, versions
from specbundle.pull import pull_bundle
from specbundle.scan import ScanOptions, scan_bundle
from specbundle.scan.findings import Severity
from specbundle.sign import sign_bundle
from specbundle.spec import load_spec
from tests.lib.bundles import write_scan_report
from tests.lib.cli import run_cli
from tests.lib.models import make_model
from tests.lib.policy import policy_doc, write_policy


@dataclass
class Versions:
    """A mirror, its signing key and policy, and the model folders the next pull reads."""

    tmp: Path
    name: str = "pair"
    mirror: Mirror = field(init=False)
    key: attest.SigningKey = field(init=False)
    policy_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.mirror = Mirror.open(self.tmp / "mirror", create=True)
        self.key = attest.generate_key("ecdsa-p256")
        self.policy_path = write_policy(self.tmp / "trust.yaml",
                                        policy_doc({"release": self.key}))
        self.target = make_model(self.tmp / "src" / "target", seed=1)
        self.draft = make_model(self.tmp / "src" / "draft", seed=101)

    def sign(self, *, k: int = 4, min_ratio: float = 1.05, extra_args: tuple[str, ...] = (),
             model_name: str | None = None, scan_fail_on: Severity | None = None) -> None:
        """Pull the folders with this spec, write a clean scan report, sign a new version.

        ``scan_fail_on``: run the real scanner with this threshold instead."""
        spec = {
            "apiVersion": "specbundle/v1", "metadata": {"name": self.name},
            "target": {"repo": "org/target", "source": f"dir:{self.target}"},
            "draft": {"repo": "org/draft", "source": f"dir:{self.draft}"},
            "speculative": {"method": "draft_model", "num_speculative_tokens": k},
            "engines": {"vllm": {"extra_args": list(extra_args)}},
            "deployment": {"p95_concurrency": 8},
            "admission": {"min_throughput_ratio_lower_bound": min_ratio},
        }
        if model_name is not None:
            spec["metadata"]["description"] = model_name  # type: ignore[index]
        path = self.tmp / f"{self.name}.yaml"
        path.write_text(json.dumps(spec))
        rec = pull_bundle(load_spec(path), self.mirror).record
        if scan_fail_on is None:
            write_scan_report(self.mirror, self.name)
        else:
            scan_bundle(self.mirror, rec, load_spec(path),
                        options=ScanOptions(fail_on=scan_fail_on))
        sign_bundle(self.mirror, self.name, [self.key])

    def set_template(self, template: str, role: str = "target") -> None:
        """Give the model folder's tokenizer_config.json a chat template."""
        folder = self.target if role == "target" else self.draft
        (folder / "tokenizer_config.json").write_text(json.dumps(
            {"model_max_length": 128, "chat_template": template}))


@dataclass
class Gap:
    """v1 and v2 (K 4 -> 7) pushed as tags v1 and v2; the isolated mirror pulled v1 only."""

    v: Versions
    iso: Mirror
    repo: str  # REGISTRY/REPO, no tag
    pulled_report: dict[str, Any]  # the verification report `oci pull --json` embedded


def registry_gap(tmp_path: Path, host: str, capsys: pytest.CaptureFixture[str]) -> Gap:
    """Push v1 and v2 of bundle ``pair`` to the registry at ``host`` and ``oci pull`` v1 into
    an isolated mirror: the registry is ahead of the mirror by one version."""
    v = Versions(tmp_path)
    repo = f"{host}/models/{tmp_path.name.lower().replace('_', '-')}"
    for tag, k in (("v1", 4), ("v2", 7)):
        v.sign(k=k)
        code, _, err = run_cli(capsys, "oci", "push", "pair", f"{repo}:{tag}", "--mirror",
                               str(v.mirror.root), "--plain-http")
        assert code == 0, err
    iso = tmp_path / "isolated"
    code, out, err = run_cli(capsys, "oci", "pull", f"{repo}:v1", "--mirror", str(iso),
                             "--trust", str(v.policy_path), "--plain-http", "--json")
    assert code == 0, err
    return Gap(v, Mirror.open(iso), repo, json.loads(out)["verification"])


def mirror_state(m: Mirror) -> tuple[int | None, list[str], list[Path]]:
    """What a look at another version must not change: the bundle ``pair``'s current
    version, the log's event types, anything under tmp/."""
    return (versions.current_version(m, "pair"), [e["type"] for e in m.read_events()],
            sorted(m.tmp_dir.iterdir()))
