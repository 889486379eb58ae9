"""A file of the mirror or a transfer set swapped for a FIFO, a link to /dev/zero or a folder.

Every stage that reads it ends at once with exit 3 and one line naming what it refused: a
plain ``open`` would wait forever for a FIFO's writer, ``read_bytes`` of ``/dev/zero`` never
ends, and a folder is an ``IsADirectoryError`` traceback. The commands run in-process under a
per-test timeout (pytest-timeout, test body only), so a hang fails the test instead of the
suite; each is also held to a few seconds of wall time.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from specbundle.bench.api import _workload
from specbundle.errors import SpecbundleError
from specbundle.transfer import export_bundle
from tests.lib.bundles import Signed, pulled_with_prompts, verified_local
from tests.lib.cli import run_cli

IMAGE = "vllm/vllm-openai@sha256:" + "a" * 64
SHAPES = ("fifo", "dev-zero-link", "folder")
_SECONDS = 45  # a hang is forever; an intact `audit pair` takes ~20 s on a loaded CI box


def plant(path: Path, shape: str) -> None:
    """Replace the file at ``path`` with a hostile shape (its folder made writable first)."""
    path.parent.chmod(0o755)
    path.unlink()
    if shape == "fifo":
        os.mkfifo(path)  # nobody ever writes it: a blocking open would wait forever
    elif shape == "dev-zero-link":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()


@dataclass(frozen=True)
class Case:
    """One stage: the file it reads (found in the signed mirror) and the argv reading it."""

    where: Callable[[Signed], Path]
    argv: Callable[[Signed, Path], list[str]]
    says: str = ""  # how the error names the file, where not by its own name


def _object(s: Signed, role: str, rel: str) -> Path:
    art = s.record.target if role == "target" else s.record.draft
    assert art is not None
    sha = next(f.sha256 for f in art.files if f.path == rel)
    return s.mirror.object_path(sha)


def _bundle(s: Signed, rel: str) -> Path:
    return s.mirror.bundle_dir("pair") / rel


def _exported(s: Signed, tmp: Path) -> Path:
    out = tmp / "set"
    if not out.exists():
        export_bundle(s.mirror, "pair", out, [s.key])
    return out


def _trust(s: Signed) -> list[str]:
    return ["--mirror", str(s.mirror.root), "--trust", str(s.policy_path)]


CASES: dict[str, Case] = {
    "verify/model-object": Case(lambda s: _object(s, "target", "model.safetensors"),
                                lambda s, t: ["verify", "pair", *_trust(s)],
                                "model.safetensors"),
    "verify/manifest": Case(lambda s: _bundle(s, "versions/000001/manifest.json"),
                            lambda s, t: ["verify", "pair", *_trust(s)]),
    "verify/model.sig": Case(lambda s: _bundle(s, "versions/000001/sign/target/model.sig"),
                             lambda s, t: ["verify", "pair", *_trust(s)]),
    "render/draft-weights": Case(
        lambda s: _object(s, "draft", "model.safetensors"),
        lambda s, t: ["render", "pair", "--engine", "vllm", "--target", "kubernetes",
                      "--image", IMAGE, "--out", str(t / "out"), *_trust(s)],
        "model.safetensors"),
    "diff/transfer-set-manifest": Case(
        lambda s: _exported(s, s.tmp) / "bundle" / "versions/000001/manifest.json",
        lambda s, t: ["diff", "pair", "current", str(_exported(s, s.tmp)),
                      "--mirror", str(s.mirror.root)]),
    "audit/event-log": Case(lambda s: s.mirror.events_path,
                            lambda s, t: ["audit", "log", "--verify", *_trust(s)]),
    "audit/attestations": Case(lambda s: _bundle(s, "attestations.jsonl"),
                               lambda s, t: ["audit", "pair", *_trust(s)], "attestation log"),
    "import/object": Case(
        lambda s: _exported(s, s.tmp) / "objects" / _object(s, "target", "model.safetensors").name,
        lambda s, t: ["import", str(_exported(s, s.tmp)), "--mirror", str(t / "iso"),
                      "--trust", str(s.policy_path)]),
    "import/index": Case(lambda s: _exported(s, s.tmp) / "index.json",
                         lambda s, t: ["import", str(_exported(s, s.tmp)), "--mirror",
                                       str(t / "iso"), "--trust", str(s.policy_path)]),
    "gc/current": Case(lambda s: _bundle(s, "current"),
                       lambda s, t: ["mirror", "gc", "--mirror", str(s.mirror.root)]),
}


def _one_line(err: str) -> bool:
    """One error line; indented lines under it are its hint or the verifier's problem list."""
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("  ")]
    return len(lines) == 1 and "Traceback" not in err and "internal" not in err


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.timeout(120, func_only=True)
def test_each_stage_refuses_a_hostile_shape_at_once(
        signed: Signed, tmp_path: Path, case: str, shape: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    c = CASES[case]
    argv = c.argv(signed, tmp_path)  # the transfer set, if any, exists before planting
    path = c.where(signed)
    plant(path, shape)
    start = time.monotonic()
    code, _, err = run_cli(capsys, *argv)
    assert time.monotonic() - start < _SECONDS
    assert code == 3, err
    assert _one_line(err), err
    assert path.name in err or (c.says and c.says in err), err


def test_the_untouched_twin_passes(signed: Signed, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The same commands on the intact mirror and set succeed: the refusals are the shape."""
    for name in ("verify/manifest", "audit/event-log", "import/index", "gc/current"):
        code, _, err = run_cli(capsys, *CASES[name].argv(signed, tmp_path))
        assert code == 0, f"{name}: {err}"


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.timeout(120, func_only=True)
def test_bench_refuses_hostile_prompts_at_once(tmp_path: Path, shape: str) -> None:
    m = pulled_with_prompts(tmp_path)
    v = verified_local(tmp_path, m)
    plant(m.bundle_dir("local") / "prompts" / "p.jsonl", shape)
    start = time.monotonic()
    with pytest.raises(SpecbundleError) as err:
        _workload(v)
    assert time.monotonic() - start < _SECONDS
    assert err.value.exit_code == 3 and "p.jsonl" in str(err.value)
    assert "\n" not in str(err.value)


def test_plant_leaves_no_regular_file(tmp_path: Path) -> None:
    for shape in SHAPES:
        p = tmp_path / shape
        p.write_bytes(b"x")
        plant(p, shape)
        assert not p.is_file() or p.is_symlink()
    shutil.rmtree(tmp_path / "folder")
