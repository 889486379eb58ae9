"""Writes into a mirror never follow a link planted there (issue 22 item 1), with twins."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbundle.bundle import read_unsigned
from specbundle.errors import CorruptMirror, RenderError
from specbundle.mirror import Mirror
from specbundle.render import render_bundle
from tests.lib.bundles import DIGEST, BundleFactory


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("precious")
    return victim


def test_render_into_a_clean_mirror_writes_under_it(mirror: Mirror, bundle: BundleFactory
                                                     ) -> None:
    bundle()
    res = render_bundle(read_unsigned(mirror, "llama-pair"), "llamacpp", "shell", image_digest=DIGEST)
    assert res.out_dir.is_relative_to(mirror.root) and not res.out_dir.is_symlink()
    script = next(p for p in res.files if p.suffix == ".sh")
    assert res.contents[script.name] == script.read_text()  # what bench runs
    again = render_bundle(read_unsigned(mirror, "llama-pair"), "llamacpp", "shell", image_digest=DIGEST)
    assert again.out_dir == res.out_dir  # a real folder is swapped, as before


@pytest.mark.parametrize("planted", ["render", "render/llamacpp", "render/llamacpp/shell"])
def test_a_link_planted_on_the_render_path_is_refused(mirror: Mirror, bundle: BundleFactory,
                                                      tmp_path: Path, planted: str) -> None:
    bundle()
    victim = _victim(tmp_path)
    link = mirror.bundle_dir("llama-pair") / planted
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(victim, target_is_directory=True)
    with pytest.raises(CorruptMirror, match="symbolic link") as err:
        render_bundle(read_unsigned(mirror, "llama-pair"), "llamacpp", "shell", image_digest=DIGEST)
    assert err.value.exit_code == 3
    assert sorted(p.name for p in victim.iterdir()) == ["keep"]
    assert (victim / "keep").read_text() == "precious"


def test_a_file_planted_as_the_model_alias_folder_is_refused(mirror: Mirror,
                                                             bundle: BundleFactory,
                                                             tmp_path: Path) -> None:
    bundle()
    victim = _victim(tmp_path)
    models = mirror.bundle_dir("llama-pair") / "render" / "models"
    models.parent.mkdir(parents=True)
    models.symlink_to(victim, target_is_directory=True)
    with pytest.raises(CorruptMirror, match="symbolic link"):
        render_bundle(read_unsigned(mirror, "llama-pair"), "llamacpp", "shell", image_digest=DIGEST)
    assert sorted(p.name for p in victim.iterdir()) == ["keep"]


def test_a_folder_planted_as_a_model_alias_is_refused(mirror: Mirror, bundle: BundleFactory
                                                      ) -> None:
    bundle()
    alias = mirror.bundle_dir("llama-pair") / "render" / "models" / "target"
    alias.mkdir(parents=True)
    with pytest.raises(RenderError, match="not a model alias"):
        render_bundle(read_unsigned(mirror, "llama-pair"), "llamacpp", "shell", image_digest=DIGEST)


def test_stage_files_never_write_through_a_planted_folder_link(mirror: Mirror,
                                                               bundle: BundleFactory,
                                                               tmp_path: Path) -> None:
    bundle()
    victim = _victim(tmp_path)
    mirror.write_bundle_file("llama-pair", "bench/r1/report.json", b"{}")  # twin
    (mirror.bundle_dir("llama-pair") / "admit").symlink_to(victim, target_is_directory=True)
    with pytest.raises(CorruptMirror, match="symbolic link"):
        mirror.write_bundle_file("llama-pair", "admit/status.json", b"{}")
    (mirror.root / "tmp").rename(mirror.root / "tmp.old")
    (mirror.root / "tmp").symlink_to(victim, target_is_directory=True)
    with pytest.raises(CorruptMirror, match="symbolic link"):
        mirror.new_temp_path()
    assert sorted(p.name for p in victim.iterdir()) == ["keep"]


def test_bench_runs_the_bytes_it_rendered_not_the_file_in_the_mirror(
        mirror: Mirror, bundle: BundleFactory) -> None:
    from specbundle.bench.api import BenchOptions, _Manifest

    rec = bundle()
    man = _Manifest(read_unsigned(mirror, rec.name), "llamacpp",
                    BenchOptions(binary="/bin/true"), mirror.tmp_dir)
    try:
        rendered = man.run_script.read_text()
        assert rendered == man.script.read_text()  # twin: the same bytes
        man.script.write_text("#!/bin/sh\ntouch /tmp/pwned\n")  # swapped after render
        assert man.run_script.read_text() == rendered
        assert not man.run_script.is_relative_to(mirror.root)
        assert oct(man.private.stat().st_mode & 0o777) == oct(0o700)
    finally:
        import shutil

        shutil.rmtree(man.private)


def test_renders_of_one_bundle_side_by_side_each_create_the_aliases(
        mirror: Mirror, bundle: BundleFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two servers of one bundle are rendered from two threads of one process (the vLLM
    engine tests do): each stages its own temp link, so neither renames the other's away."""
    import os
    import shutil
    import time
    from concurrent.futures import ThreadPoolExecutor

    real_symlink = os.symlink

    def slow_symlink(*args: object, **kwargs: object) -> None:
        real_symlink(*args, **kwargs)  # type: ignore[arg-type]
        time.sleep(0.005)  # a slow disk: the window between staging and renaming opens

    monkeypatch.setattr(os, "symlink", slow_symlink)
    bundle()
    value = read_unsigned(mirror, "llama-pair")
    models = mirror.bundle_dir("llama-pair") / "render" / "models"
    for _ in range(20):
        shutil.rmtree(models, ignore_errors=True)
        with ThreadPoolExecutor(6) as pool:
            results = list(pool.map(
                lambda _: render_bundle(value, "llamacpp", "shell", image_digest=DIGEST),
                range(6)))
        assert {r.out_dir for r in results} == {results[0].out_dir}
        assert sorted(p.name for p in models.iterdir()) == ["draft", "target"]  # no temp left
        assert all((models / n).is_symlink() and (models / n).resolve().is_dir()
                   for n in ("draft", "target"))


@pytest.mark.parametrize("what", ["file", "fifo"])
def test_a_file_or_fifo_planted_as_the_render_folder_is_refused(
        mirror: Mirror, bundle: BundleFactory, tmp_path: Path, what: str) -> None:
    """The render swap goes through the engine folder's no-follow fd: what stands where the
    target folder goes must be a folder, and nothing else is moved or deleted."""
    import os

    bundle()
    dest = mirror.bundle_dir("llama-pair") / "render" / "llamacpp" / "shell"
    dest.parent.mkdir(parents=True)
    if what == "fifo":
        os.mkfifo(dest)
    else:
        dest.write_text("planted")
    with pytest.raises(CorruptMirror, match="not a folder") as err:
        render_bundle(read_unsigned(mirror, "llama-pair"), "llamacpp", "shell",
                      image_digest=DIGEST)
    assert err.value.exit_code == 3 and "\n" not in err.value.message
    assert sorted(p.name for p in dest.parent.iterdir()) == ["shell"]  # no staging left


def test_the_render_folder_swapped_for_a_link_after_the_check_is_not_followed(
        mirror: Mirror, bundle: BundleFactory, tmp_path: Path) -> None:
    """The engine folder is replaced by a link right after it was opened and checked: the
    swap still lands in the folder that was checked, never in the victim."""
    from specbundle import _faults

    bundle()
    victim = _victim(tmp_path)
    value = read_unsigned(mirror, "llama-pair")
    render_bundle(value, "llamacpp", "shell", image_digest=DIGEST)
    engine_dir = mirror.bundle_dir("llama-pair") / "render" / "llamacpp"
    swapped: list[Path] = []
    seen: list[object] = []

    def swap(opened: object) -> None:  # the 1st open is render's check, the 2nd the swap's
        seen.append(opened)
        if opened == engine_dir and seen.count(engine_dir) == 2:
            engine_dir.rename(engine_dir.with_name("llamacpp.aside"))
            engine_dir.symlink_to(victim, target_is_directory=True)
            swapped.append(engine_dir)

    with _faults.hook("fs.dir-opened", swap):
        render_bundle(value, "llamacpp", "shell", image_digest=DIGEST)
    assert swapped
    assert sorted(p.name for p in victim.iterdir()) == ["keep"]
    assert (engine_dir.with_name("llamacpp.aside") / "shell" / "command.json").is_file()
