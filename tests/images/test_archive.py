"""Reading ``docker save`` archives without Docker: image ID, layers, malformed input."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from specbundle.errors import MirrorError, VerificationError
from specbundle.images import ImageRecord, inspect_archive


def _archive(path: Path, *, layer: bytes, diff: bytes | None = None, images: int = 1,
             manifest: bool = True) -> str:
    """A classic-format archive; ``diff`` is what the config claims the layer is."""
    config = json.dumps({"rootfs": {"type": "layers", "diff_ids": [
        "sha256:" + hashlib.sha256(diff if diff is not None else layer).hexdigest()]}}).encode()
    cid = hashlib.sha256(config).hexdigest()
    entries = {f"{cid}.json": config, "l1/layer.tar": layer}
    if manifest:
        entries["manifest.json"] = json.dumps(
            [{"Config": f"{cid}.json", "RepoTags": ["x/y:1"], "Layers": ["l1/layer.tar"]}]
            * images).encode()
    with tarfile.open(path, "w") as tar:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return "sha256:" + cid


def test_image_id_is_the_config_digest(tmp_path: Path) -> None:
    image_id = _archive(tmp_path / "a.tar", layer=b"layer bytes")
    info = inspect_archive(tmp_path / "a.tar")
    assert (info.image_id, info.repo_tags, info.layers) == (image_id, ("x/y:1",), ("l1/layer.tar",))
    with (tmp_path / "a.tar").open("rb") as fh:
        assert inspect_archive(fh).image_id == image_id


def test_layer_that_differs_from_its_diff_id_is_refused(tmp_path: Path) -> None:
    _archive(tmp_path / "a.tar", layer=b"evil", diff=b"good")
    with pytest.raises(VerificationError, match="layer 0"):
        inspect_archive(tmp_path / "a.tar")
    assert inspect_archive(tmp_path / "a.tar", check_layers=False).layers == ("l1/layer.tar",)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"manifest": False}, "no manifest.json"),
    ({"images": 2}, "exactly one image"),
])
def test_malformed_archives(tmp_path: Path, kwargs: dict[str, object], message: str) -> None:
    _archive(tmp_path / "a.tar", layer=b"x", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(VerificationError, match=message):
        inspect_archive(tmp_path / "a.tar")
    (tmp_path / "b.tar").write_bytes(b"not a tar at all")
    with pytest.raises(VerificationError, match="not a readable image archive"):
        inspect_archive(tmp_path / "b.tar")


def test_image_record_round_trip_and_validation() -> None:
    rec = ImageRecord("llamacpp", "ghcr.io/ggml-org/llama.cpp:server", "sha256:" + "a" * 64,
                      "b" * 64, 10, repo_digest="ghcr.io/ggml-org/llama.cpp@sha256:" + "c" * 64)
    assert ImageRecord.from_json(rec.to_json()) == rec
    assert rec.pinned_ref == rec.repo_digest
    with pytest.raises(MirrorError, match="bad image id"):
        ImageRecord("x", "r", "sha256:nothex", "b" * 64, 1)
    with pytest.raises(MirrorError, match="unknown image record schema"):
        ImageRecord.from_json({**rec.to_json(), "schema": "other"})
