"""Compiled twins: used only when built from the current source, and required where CI says so."""

from __future__ import annotations

import hashlib
import importlib
import io
import os
import pickle
import sys
from pathlib import Path

import pytest

from specbundle import _native
from tests.scan.pickles.builds import use_build


def _package(tmp_path: Path, name: str, source: str, twin_digest: str | None) -> None:
    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "m.py").write_text(source)
    if twin_digest is not None:
        (pkg / "m_native.py").write_text(f'KIND = "twin"\nSOURCE_DIGEST = "{twin_digest}"\n')


@pytest.mark.parametrize(("digest", "expected"), [
    ("match", "twin"),
    ("0" * 64, "pure"),     # built from another version of the source: stale, never used
    ("", "pure"),
    (None, "pure"),         # not built at all
])
def test_twin_is_used_only_when_built_from_the_current_source(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, digest: str | None,
        expected: str) -> None:
    source = 'KIND = "pure"\n'
    real = hashlib.sha256(source.encode()).hexdigest()
    name = f"twinpkg_{abs(hash((str(tmp_path), digest)))}"
    _package(tmp_path, name, source, real if digest == "match" else digest)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(_native.PURE_ENV, raising=False)
    module = importlib.import_module(f"{name}.m")
    kind = _native.twin(module).KIND
    assert kind == expected


def test_a_twin_that_fails_to_import_is_not_used(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    source = 'KIND = "pure"\n'
    _package(tmp_path, "twinpkg_broken", source, None)
    (tmp_path / "twinpkg_broken" / "m_native.py").write_text("raise KeyError('object')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(_native.PURE_ENV, raising=False)
    module = importlib.import_module("twinpkg_broken.m")
    assert _native.twin(module) is module


def test_pure_python_can_be_forced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = 'KIND = "pure"\n'
    _package(tmp_path, "twinpkg_forced", source, hashlib.sha256(source.encode()).hexdigest())
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("twinpkg_forced.m")
    monkeypatch.setenv(_native.PURE_ENV, "1")
    assert _native.twin(module) is module
    monkeypatch.setenv(_native.PURE_ENV, "0")
    assert _native.twin(module).KIND == "twin"


def test_an_edited_source_falls_back_to_pure(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    source = 'KIND = "pure"\n'
    _package(tmp_path, "twinpkg_edited", source, hashlib.sha256(source.encode()).hexdigest())
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(_native.PURE_ENV, raising=False)
    module = importlib.import_module("twinpkg_edited.m")
    assert _native.twin(module).KIND == "twin"
    (tmp_path / "twinpkg_edited" / "m.py").write_text(source + "# edited\n")
    assert _native.twin(module) is module


@pytest.mark.skipif(os.environ.get("SPECBUNDLE_REQUIRE_NATIVE", "") in ("", "0"),
                    reason="only where the install must have compiled the twins (CI)")
def test_the_install_built_the_walker_twin() -> None:
    """CI installs with a compiler: a silently pure build would hide a 3x regression."""
    from specbundle.scan.pickles import walker as pickle_walker

    assert pickle_walker.NATIVE, "the pickle walker's compiled twin was not built or is stale"
    assert pickle_walker._LOOP.__name__ == "specbundle.scan.pickles.loop_native"


def test_walker_results_do_not_depend_on_the_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """A blocked and a clean pickle get the same walk from both builds (when both exist)."""
    from specbundle.scan.pickles import loop as pickle_loop
    from specbundle.scan.pickles import walker as pickle_walker

    hostile = b"\x80\x04\x8c\x02os\x94\x8c\x06system\x94\x93\x94\x8c\x02id\x94\x85\x94R\x94."
    clean = pickle.dumps({f"k{i}": [i, float(i), None] for i in range(3000)}, protocol=4)
    results = []
    for loop in (pickle_loop, pickle_walker._LOOP):
        use_build(loop, monkeypatch)
        results.append([pickle_walker.walk_pickle(io.BytesIO(d), pickle_walker.TORCH_ALLOWED,
                                                  max_bytes=1 << 24) for d in (hostile, clean)])
    for walks in results:
        assert walks[0].blocked and ("os.system", 16) in walks[0].globals
        assert not walks[1].blocked and walks[1].complete
    assert all(r == results[0] for r in results)
    assert sys.modules["specbundle.scan.pickles.loop"] is pickle_loop

