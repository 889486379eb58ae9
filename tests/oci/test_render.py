"""Kubernetes manifests that mount the models from the registry, validated offline, with the
digests computed from the mirror equal to the ones push wrote; the benchmark Job's report goes
back to the registry as a referrer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from specbundle import attest
from specbundle.mirror import Mirror
from specbundle.oci import push_bundle
from specbundle.oci.attach import BENCH_REPORT
from specbundle.oci.media import IMAGE_INDEX, Descriptor
from tests.lib.bundles import signed_pair
from tests.lib.cli import run_cli
from tests.lib.policy import trust_file
from tests.lib.registry import Registry
from tests.oci.conftest import backend

K8S_VERSION = "1.33"  # image volumes: 1.31+
IMAGE = "vllm/vllm-openai@sha256:" + "a" * 64
TOOL = "registry.internal/specbundle@sha256:" + "b" * 64


def _docs(path: Path) -> dict[str, dict[str, Any]]:
    docs = list(yaml.safe_load_all(path.read_text()))
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    return {d["kind"]: d for d in docs}


def _render(capsys: pytest.CaptureFixture[str], mirror: Mirror, out: Path, repo: str,
            *extra: str) -> None:
    code, _, err = run_cli(capsys, "render", "pair", "--engine", "vllm", "--target",
                           "kubernetes", "--image", IMAGE, "--out", str(out), "--mirror",
                           str(mirror.root), "--model-source", "oci", "--oci-repo", repo, "--unsigned",
                           *extra)
    assert code == 0, err


def test_image_volumes_pinned_to_the_pushed_digests_validate_offline(
        tmp_path: Path, registry: Registry, capsys: pytest.CaptureFixture[str]) -> None:
    key = attest.generate_key()
    mirror = Mirror.open(tmp_path / "m", create=True)
    signed_pair(tmp_path, mirror, key, "pair", target_seed=31)
    repo = f"{registry.host}/render/pair"
    store = backend(f"{repo}:v1", plain_http=True)
    pushed = push_bundle(mirror, "pair", store, "v1")
    _render(capsys, mirror, tmp_path / "k8s", repo, "--oci-tool-image", TOOL)
    kinds = _docs(tmp_path / "k8s" / "kubernetes.yaml")
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["model-target"]["image"]["reference"] == f"{repo}@{pushed.manifests['target']}"
    assert vols["model-draft"]["image"]["reference"] == f"{repo}@{pushed.manifests['draft']}"
    assert not any("hostPath" in v for v in pod["volumes"])
    (c,) = pod["containers"]
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    # mounted where the engine's command line reads the models
    assert mounts["model-target"]["mountPath"] in c["command"]
    assert any(mounts["model-draft"]["mountPath"] in a for a in c["command"])
    assert all(m["readOnly"] for n, m in mounts.items() if n.startswith("model-"))
    assert kinds["NetworkPolicy"]["spec"]["egress"] == []
    # the benchmark Job pulls the very index push wrote, verified, and attaches its report
    job = _docs(tmp_path / "k8s" / "bench-job.yaml")["Job"]["spec"]["template"]["spec"]
    (init,) = job["initContainers"]
    assert f"{repo}@{pushed.index_digest}" in init["command"]
    assert "oci attach" in job["containers"][0]["command"][-1]


def test_init_container_variant_for_older_clusters_validates(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = attest.generate_key()
    mirror = Mirror.open(tmp_path / "m", create=True)
    signed_pair(tmp_path, mirror, key, "pair", target_seed=32)
    _render(capsys, mirror, tmp_path / "k8s", "registry.internal:5443/models/pair",
            "--oci-tool-image", TOOL, "--oci-init-container")
    kinds = _docs(tmp_path / "k8s" / "kubernetes.yaml")
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["image"] == TOOL and init["command"][:3] == ["specbundle", "oci", "pull"]
    assert "--trust" in init["command"]
    assert kinds["NetworkPolicy"]["spec"]["egress"] == [{"ports": [{"port": 5443,
                                                                   "protocol": "TCP"}]}]
    code, _, err = run_cli(capsys, "render", "pair", "--engine", "vllm", "--target",
                           "kubernetes", "--image", IMAGE, "--mirror", str(mirror.root),
                           "--model-source", "oci", "--oci-repo", "r.internal/m/p",
                           "--oci-init-container", "--unsigned")
    assert code == 2 and "tool-image" in err


def test_attached_bench_report_is_a_referrer_and_pull_ignores_it(
        tmp_path: Path, registry: Registry, capsys: pytest.CaptureFixture[str]) -> None:
    key = attest.generate_key()
    mirror = Mirror.open(tmp_path / "m", create=True)
    signed_pair(tmp_path, mirror, key, "pair", target_seed=33)
    repo = f"{registry.host}/attach/pair"
    store = backend(f"{repo}:v1", plain_http=True)
    pushed = push_bundle(mirror, "pair", store, "v1")
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"bundle": "pair", "speedup": "1.7"}))
    code, out, err = run_cli(capsys, "oci", "attach", f"{repo}@{pushed.index_digest}",
                             str(report), "--plain-http", "--json")
    assert code == 0, err
    ref = json.loads(out)["referrer"]
    index = Descriptor(IMAGE_INDEX, pushed.index_digest, 0)
    found = {d.digest: d.artifact_type for d in store.referrers(index, 1 << 22)}
    assert found[ref] == BENCH_REPORT
    code, out, err = run_cli(capsys, "oci", "pull", f"{repo}:v1", "--mirror",
                             str(tmp_path / "iso"), "--trust", str(trust_file(tmp_path, key)),
                             "--plain-http", "--json")
    assert code == 0, err
