"""``diff`` against a bundle in a real registry (Debian's docker-registry on loopback), before
``oci pull``: it is fetched and verified exactly as the pull would, then compared like a mirror
version, with the same output and exit codes; the isolated mirror is left as it was."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest

from specbundle import attest
from specbundle.mirror import Mirror
from tests.lib.cli import run_cli
from tests.lib.policy import policy_doc, write_policy
from tests.lib.registry import Registry, registry_available, run_registry
from tests.lib.versions import Gap, mirror_state, registry_gap

SCHEMA = Path(__file__).parents[2] / "manifests" / "schemas" / "bundle-diff.schema.json"
VERIFICATION_SCHEMA = SCHEMA.with_name("verification-report.schema.json")


@pytest.fixture(scope="module")
def registry(module_tmp: Path) -> Iterator[Registry]:
    if not registry_available():
        pytest.skip("docker-registry not installed (ci/install-registry.sh)")
    with run_registry(module_tmp / "registry") as reg:
        yield reg


@pytest.fixture
def gap(tmp_path: Path, registry: Registry, capsys: pytest.CaptureFixture[str]) -> Gap:
    gap = registry_gap(tmp_path, registry.host, capsys)
    report = gap.pulled_report  # the verify --json document, as oci pull embeds it
    jsonschema.validate(report, json.loads(VERIFICATION_SCHEMA.read_text()))
    return gap


def _diff(capsys: pytest.CaptureFixture[str], g: Gap, *args: str,
          trust: Path | None = None) -> tuple[int, str, str]:
    return run_cli(capsys, "diff", "pair", *args, "--mirror", str(g.iso.root), "--plain-http",
                   "--trust", str(trust or g.v.policy_path))


def test_registry_version_before_pull(gap: Gap, capsys: pytest.CaptureFixture[str]) -> None:
    before = mirror_state(gap.iso)
    code, out, err = _diff(capsys, gap, "current", f"oci://{gap.repo}:v2", "--json")
    assert code == 0, err
    doc = json.loads(out)
    jsonschema.validate(doc, json.loads(SCHEMA.read_text()))
    assert doc["old"]["label"] == "pair v1"
    assert doc["new"]["label"] == f"pair v2 at {gap.repo}:v2" and doc["new"]["version"] == 2
    k = {c["path"]: c for c in doc["changes"]}["speculative.num_speculative_tokens"]
    assert (k["before"], k["after"], k["runtime"]) == ("4", "7", True)
    assert not [c for c in doc["changes"] if c["area"] in ("file", "artifact")]
    man = [s for s in doc["new"]["signatures"] if s["what"] == "manifest"]
    assert man and man[0]["key"] == "release" and man[0]["verified"] is True
    # the pipeline gate: the same exit 7 as between two mirror versions
    code, out, err = _diff(capsys, gap, "1", f"oci://{gap.repo}:v2",
                           "--fail-on-behaviour-change")
    assert code == 7 and "behaviour-changed" in err
    assert "RUNTIME" in out and "num_speculative_tokens" in out
    # the registry's v1 is what the mirror holds: nothing changes, exit 0
    code, out, err = _diff(capsys, gap, "current", f"oci://{gap.repo}:v1",
                           "--fail-on-behaviour-change")
    assert code == 0 and "0 change(s)" in out, err
    assert mirror_state(gap.iso) == before, "a diff pulls nothing and leaves no staging behind"


def test_two_registry_versions_in_an_empty_mirror(
        gap: Gap, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = Mirror.open(tmp_path / "empty", create=True)
    code, out, err = run_cli(capsys, "diff", "pair", f"oci://{gap.repo}:v1",
                             f"oci://{gap.repo}:v2", "--mirror", str(empty.root),
                             "--plain-http", "--trust", str(gap.v.policy_path), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert [doc["old"]["version"], doc["new"]["version"]] == [1, 2]
    assert doc["summary"]["runtime"] is True
    assert empty.bundle_names() == [] and list(empty.tmp_dir.iterdir()) == []


def test_untrusted_or_unverified_registry_bundle_is_never_compared(
        gap: Gap, tmp_path: Path, registry: Registry,
        capsys: pytest.CaptureFixture[str]) -> None:
    ref = f"oci://{gap.repo}:v2"
    # no policy: nothing from the registry is read at all
    code, _, err = run_cli(capsys, "diff", "pair", "current", ref, "--mirror",
                           str(gap.iso.root), "--plain-http")
    assert code == 2 and "only once it verifies" in err
    # a policy that does not trust the signer
    stranger = write_policy(tmp_path / "stranger.yaml",
                            policy_doc({"other": attest.generate_key("ecdsa-p256")}))
    code, out, err = _diff(capsys, gap, "current", ref, trust=stranger)
    assert code == 3 and "signed by a key the policy trusts" in err and out == ""
    # a weight blob the registry serves with other bytes: refused before any comparison
    draft = gap.v.mirror.load_bundle("pair").draft
    assert draft is not None
    weights = next(f for f in draft.files if f.path == "model.safetensors")
    blob = registry.blob_data(f"sha256:{weights.sha256}")
    good = blob.read_bytes()
    blob.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    try:
        code, out, err = _diff(capsys, gap, "current", ref)
        assert code == 0, f"the isolated mirror's own copy of unchanged weights is used: {err}"
        empty = Mirror.open(tmp_path / "empty", create=True)  # no copy to use instead
        code, out, err = run_cli(capsys, "diff", "pair", f"oci://{gap.repo}:v1", ref,
                                 "--mirror", str(empty.root), "--plain-http", "--trust",
                                 str(gap.v.policy_path))
        assert code == 3 and "hashes to" in err and out == ""
        assert list(empty.tmp_dir.iterdir()) == []
    finally:
        blob.write_bytes(good)  # the registry's blobs are shared by this module's tests


def test_review_page_of_a_registry_version(gap: Gap, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """The operator's page before ``oci pull``: the registry's v2 against the mirror's v1."""
    out = tmp_path / "review.html"
    code, text, err = run_cli(capsys, "review", "pair", "--version", f"oci://{gap.repo}:v2",
                              "--mirror", str(gap.iso.root), "--plain-http", "--trust",
                              str(gap.v.policy_path), "--html", str(out), "--json")
    assert code == 0, err
    doc = json.loads(text)
    assert doc["version"] == 2 and doc["against"] == "pair v1"
    changes = {d["topic"]: d for d in doc["decisions"]}["changes"]
    assert changes["tone"] == "attention" and "1 alter what runs" in changes["text"]
    html = out.read_text()
    assert f"pair v2 at {gap.repo}:v2" in html and "num_speculative_tokens" in html
    assert list(gap.iso.tmp_dir.glob("look-*")) == []

