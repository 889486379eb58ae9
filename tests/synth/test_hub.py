"""A published synthetic repo is served by the loopback hub byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest
from huggingface_hub import snapshot_download

from specbundle.localhub import publish_repo, serve_hub
from specbundle.synth import MODEL_FILES, make_model

pytestmark = pytest.mark.integration


def test_hub_serves_a_published_model_at_its_commit(tmp_path: Path) -> None:
    pytest.importorskip("olah")
    model = make_model(tmp_path / "model", hidden_size=64, num_hidden_layers=1)
    commit = publish_repo(tmp_path / "hub", "synth/tiny", model.path)
    with serve_hub(tmp_path / "hub") as hub:
        snap = Path(snapshot_download("synth/tiny", revision="main", endpoint=hub.endpoint,
                                      cache_dir=tmp_path / "cache"))
    assert snap.name == commit
    for name in MODEL_FILES:
        assert (snap / name).read_bytes() == (model.path / name).read_bytes(), name
