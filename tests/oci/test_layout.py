"""OCI image layout across the gap: export, copy with skopeo, import offline, verified."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from specbundle import attest
from specbundle.digest import sha256_bytes
from specbundle.mirror import Mirror
from specbundle.oci import LayoutBackend
from specbundle.oci.media import IMAGE_INDEX, dumps
from tests.lib.bundles import signed_pair
from tests.lib.cli import run_cli
from tests.lib.policy import trust_file
from tests.lib.registry import Registry


def test_export_layout_copy_with_skopeo_then_import_offline(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = attest.generate_key()
    src = Mirror.open(tmp_path / "m", create=True)
    signed_pair(tmp_path, src, key, "pair", target_seed=21)
    out_dir = tmp_path / "layout"
    code, out, err = run_cli(capsys, "oci", "export", "pair", "--to", str(out_dir),
                             "--mirror", str(src.root), "--json")
    assert code == 0, err
    pushed = json.loads(out)
    assert json.loads((out_dir / "oci-layout").read_text())["imageLayoutVersion"] == "1.0.0"
    index = json.loads((out_dir / "index.json").read_text())
    tagged = [m for m in index["manifests"]
              if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == "pair"]
    assert [m["digest"] for m in tagged] == [pushed["index_digest"]]
    assert tagged[0]["mediaType"] == IMAGE_INDEX
    for sha in src.load_bundle("pair").referenced_blobs():
        assert (out_dir / "blobs/sha256" / sha).is_file()
    # skopeo reads the layout
    raw = subprocess.run(["skopeo", "inspect", "--raw", f"oci:{out_dir}:pair"],
                         capture_output=True, text=True, check=True)
    assert json.loads(raw.stdout)["manifests"][0]["annotations"]["dev.specbundle.role"] == \
        "target"
    # exporting again writes nothing new and keeps one tag
    code, out, err = run_cli(capsys, "oci", "export", "pair", "--to", str(out_dir),
                             "--mirror", str(src.root), "--json")
    assert code == 0, err
    assert json.loads(out)["bytes_uploaded"] == 0

    dst = tmp_path / "isolated"
    code, out, err = run_cli(capsys, "oci", "import", str(out_dir), "--mirror", str(dst),
                             "--trust", str(trust_file(tmp_path, key)), "--json")
    assert code == 0, err
    assert json.loads(out)["verification"]["ok"]
    assert Mirror.open(dst).load_bundle("pair") == src.load_bundle("pair")


def test_import_refuses_a_layout_whose_blob_was_altered(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = attest.generate_key()
    src = Mirror.open(tmp_path / "m", create=True)
    signed_pair(tmp_path, src, key, "pair", target_seed=22)
    out_dir = tmp_path / "layout"
    run_cli(capsys, "oci", "export", "pair", "--to", str(out_dir), "--mirror", str(src.root))
    cfg = src.load_bundle("pair").target.file("config.json")
    assert cfg is not None
    blob = out_dir / "blobs/sha256" / cfg.sha256
    blob.write_bytes(blob.read_bytes().replace(b"16", b"32"))
    dst = tmp_path / "isolated"
    code, _, err = run_cli(capsys, "oci", "import", str(out_dir), "--mirror", str(dst),
                           "--trust", str(trust_file(tmp_path, key)))
    assert code == 3, err
    assert cfg.sha256 in err
    assert Mirror.open(dst).bundle_names() == []


def test_import_refuses_an_oversized_manifest_before_parsing_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    layout = LayoutBackend(tmp_path / "layout")
    big = dumps({"schemaVersion": 2, "mediaType": IMAGE_INDEX, "pad": "x" * (5 << 20)})
    layout.put_manifest(big, IMAGE_INDEX, f"sha256:{sha256_bytes(big)}", tag="big")
    code, _, err = run_cli(capsys, "oci", "import", str(tmp_path / "layout"), "--mirror",
                           str(tmp_path / "iso"), "--trust",
                           str(trust_file(tmp_path, attest.generate_key())))
    assert code == 3 and "larger than" in err


def test_skopeo_carries_the_layout_into_a_registry_and_pull_verifies_it(
        tmp_path: Path, registry: Registry, capsys: pytest.CaptureFixture[str]) -> None:
    key = attest.generate_key()
    src = Mirror.open(tmp_path / "m", create=True)
    signed_pair(tmp_path, src, key, "pair", target_seed=23)
    out_dir = tmp_path / "layout"
    code, _, err = run_cli(capsys, "oci", "export", "pair", "--to", str(out_dir), "--mirror",
                           str(src.root))
    assert code == 0, err
    tags = [m["annotations"]["org.opencontainers.image.ref.name"]
            for m in json.loads((out_dir / "index.json").read_text())["manifests"]
            if "annotations" in m]
    assert "pair" in tags and any(t.startswith("sha256-") for t in tags)  # referrer tags
    dest = f"{registry.host}/carried/pair"
    # what `skopeo sync` or registry replication of every tag does; skopeo 1.9 re-serialises
    # the index (dropping artifactType), which is why nothing trusted hangs off the index
    for tag in tags:
        subprocess.run(["skopeo", "copy", "--all", "--quiet", "--dest-tls-verify=false",
                        f"oci:{out_dir}:{tag}", f"docker://{dest}:{tag}"], check=True,
                       capture_output=True)
    code, out, err = run_cli(capsys, "oci", "pull", f"{dest}:pair", "--mirror",
                             str(tmp_path / "iso"), "--trust", str(trust_file(tmp_path, key)),
                             "--plain-http", "--json")
    assert code == 0, err
    assert json.loads(out)["verification"]["ok"]
    # the signed version and every attestation line came through skopeo's copies of the
    # fallback tags
    iso = Mirror.open(tmp_path / "iso")
    for rel in ("versions/000001/manifest.json", "versions/000001/sign/target/model.sig",
                "versions/000001/sign/draft/model.sig", "versions/000001/scan/report.json",
                "current", "attestations.jsonl"):
        assert iso.read_bundle_file("pair", rel) == src.read_bundle_file("pair", rel), rel
