"""``specbundle render`` and ``specbundle lint``: outputs, --json and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from specbundle.mirror import Mirror
from tests.lib.bundles import DIGEST, BundleFactory
from tests.lib.cli import run_cli
from tests.lib.specs import spec_dict


def test_render_cli_writes_manifests(mirror: Mirror, bundle: BundleFactory,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    bundle()
    code, out, err = run_cli(capsys, "render", "llama-pair", "--engine", "vllm", "--target",
                             "kubernetes", "--mirror", str(mirror.root), "--image-digest",
                             DIGEST, "--json", "--unsigned")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["lint"]["ok"] is True and doc["command"]["engine"] == "vllm"
    assert Path(doc["files"][0]).name == "kubernetes.yaml"
    assert DIGEST in Path(doc["files"][0]).read_text()
    code, out, _ = run_cli(capsys, "render", "llama-pair", "--engine", "llamacpp", "--target",
                           "shell", "--mirror", str(mirror.root), "--unsigned")
    assert code == 0 and "serve.sh" in out and "UNSIGNED" in out


def test_render_cli_exit_codes(mirror: Mirror, bundle: BundleFactory,
                               capsys: pytest.CaptureFixture[str]) -> None:
    bundle()
    code, _, err = run_cli(capsys, "render", "llama-pair", "--engine", "sglang", "--target",
                           "compose", "--mirror", str(mirror.root), "--unsigned")
    assert code == 2 and "image-unpinned" in err
    code, _, err = run_cli(capsys, "render", "nope", "--engine", "sglang", "--target",
                           "shell", "--mirror", str(mirror.root), "--unsigned")
    assert code == 2 and "no bundle named" in err
    code, _, _ = run_cli(capsys, "render", "llama-pair", "--engine", "tgi", "--target",
                         "shell", "--mirror", str(mirror.root))
    assert code == 2


def test_lint_cli_on_spec_file_and_bundle(tmp_path: Path, mirror: Mirror,
                                          bundle: BundleFactory,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(spec_dict()))
    code, out, _ = run_cli(capsys, "lint", str(good), "--target", "shell", "--json")
    assert code == 0 and json.loads(out)["findings"] == []
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(spec_dict(**{"engines.llamacpp.spec_type": "none",
                                               "engines.sglang.speculative_num_steps": 3})))
    code, out, err = run_cli(capsys, "lint", str(bad), "--json")
    assert code == 2 and "lint error" in err
    rules = {f["rule"] for f in json.loads(out)["findings"] if f["severity"] == "error"}
    assert rules == {"llamacpp-draft-without-spec-type", "sglang-partial-tree"}
    code, out, _ = run_cli(capsys, "lint", str(bad), "--engine", "sglang")
    assert code == 2 and "sglang-partial-tree" in out and "llamacpp-draft" not in out
    bundle()
    code, out, _ = run_cli(capsys, "lint", "llama-pair", "--mirror", str(mirror.root))
    assert code == 0 and "image-unpinned" in out


def test_render_cli_needs_trust_or_an_explicit_unsigned(
        mirror: Mirror, bundle: BundleFactory, capsys: pytest.CaptureFixture[str]) -> None:
    """The safe path is the default: no policy and no --unsigned is a usage error."""
    bundle()
    code, _, err = run_cli(capsys, "render", "llama-pair", "--engine", "llamacpp", "--target",
                           "shell", "--mirror", str(mirror.root))
    assert code == 2 and "pass --trust" in err
    assert not (mirror.bundle_dir("llama-pair") / "render" / "llamacpp").exists()
    code, _, err = run_cli(capsys, "render", "llama-pair", "--engine", "llamacpp", "--target",
                           "shell", "--mirror", str(mirror.root), "--unsigned", "--trust",
                           str(mirror.root / "trust.yaml"))
    assert code == 2 and "contradict" in err
    code, out, err = run_cli(capsys, "render", "llama-pair", "--engine", "llamacpp", "--target",
                             "shell", "--mirror", str(mirror.root), "--unsigned", "--json")
    assert code == 0 and "UNSIGNED" in err
    assert json.loads(out)["custody"]["signed"] is False
