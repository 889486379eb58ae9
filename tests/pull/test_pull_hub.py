"""pull against a real loopback hub (olah serving git repos)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from huggingface_hub import snapshot_download

from specbundle.errors import DigestMismatch, SourceUnavailable
from specbundle.localhub import LocalHub, publish_repo
from specbundle.mirror import Mirror
from specbundle.pull import pull_bundle
from specbundle.pull.huggingface import HubSource
from specbundle.spec import load_spec
from tests.lib.cli import run_cli
from tests.lib.models import make_model_dir
from tests.lib.specs import spec_text

pytestmark = pytest.mark.integration


def _write_spec(tmp_path: Path, text: str, name: str = "bundle.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_branch_resolves_to_sha_and_selects_engine_files(
    hub: LocalHub, published: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    repo, sha = published
    spec = _write_spec(tmp_path, spec_text("b1", repo, repo))
    code, out, err = run_cli(capsys, "pull", str(spec), "--mirror", str(tmp_path / "m"),
                             "--endpoint", hub.endpoint, "--json")
    assert code == 0, err
    doc = json.loads(out)
    target = doc["bundle"]["artifacts"]["target"]
    assert target["commit"] == sha
    assert target["requested_revision"] == "main"
    assert target["endpoint"] == hub.endpoint
    paths = {f["path"]: f for f in target["files"]}
    assert set(paths) == {"model.safetensors", "config.json", "tokenizer_config.json", "README.md"}
    # safetensors come through LFS: the hub's sha256 is recorded and equals ours
    st = paths["model.safetensors"]
    assert st["lfs_sha256"] == st["sha256"]
    assert paths["config.json"]["git_blob_id"]
    skipped = {s["path"]: s["reason"] for s in target["skipped"]}
    assert "pickle" in skipped["pytorch_model.bin"]
    assert "remote code" in skipped["modeling_tiny.py"]
    assert "not needed" in skipped["notes.txt"]
    m = Mirror.open(tmp_path / "m")
    ref = m.model_dir(repo) / "refs" / "main"
    assert ref.read_text() == sha
    snap = m.snapshot_dir(repo, sha)
    data = (snap / "model.safetensors").read_bytes()
    assert len(data) == st["size"]
    # the draft is the same repo here: its bytes are stored once
    assert len(list((m.root / "objects" / "sha256").glob("*/*"))) == 4


def test_tag_and_sha_revisions(hub: LocalHub, published: tuple[str, str], tmp_path: Path) -> None:
    repo, sha = published
    spec = load_spec(_write_spec(tmp_path, spec_text("b2", repo, repo, target_rev="v1",
                                                     draft_rev=sha)))
    res = pull_bundle(spec, Mirror(tmp_path / "m"), endpoint=hub.endpoint)
    assert res.record.target.commit == sha
    assert res.record.target.requested_revision == "v1"
    assert res.record.draft is not None and res.record.draft.commit == sha
    m = Mirror.open(tmp_path / "m")
    assert (m.model_dir(repo) / "refs" / "v1").read_text() == sha
    # a sha needs no ref
    assert not (m.model_dir(repo) / "refs" / sha).exists()


def test_offline_snapshot_download_resolves_the_mirror(
    hub: LocalHub, published: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    repo, sha = published
    spec = load_spec(_write_spec(tmp_path, spec_text("b3", repo, repo)))
    pull_bundle(spec, Mirror(tmp_path / "m"), endpoint=hub.endpoint)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for rev in (sha, "main"):
        path = snapshot_download(repo, revision=rev, cache_dir=str(tmp_path / "m"),
                                 local_files_only=True)
        assert Path(path).name == sha
        assert (Path(path) / "config.json").is_file()


def test_bad_revision_writes_nothing(
    hub: LocalHub, published: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    repo, _ = published
    spec = _write_spec(tmp_path, spec_text("b4", repo, repo, draft_rev="no-such-branch"))
    code, _, err = run_cli(capsys, "pull", str(spec), "--mirror", str(tmp_path / "m"),
                           "--endpoint", hub.endpoint)
    assert code == 6
    assert "revision 'no-such-branch' not found" in err
    m = Mirror.open(tmp_path / "m")
    assert m.bundle_names() == []


def test_missing_repo(hub: LocalHub, tmp_path: Path) -> None:
    with pytest.raises(SourceUnavailable, match="repository org/does-not-exist not found"):
        HubSource(hub.endpoint).resolve("org/does-not-exist", "main")


def test_lfs_digest_mismatch_is_refused(
    hub: LocalHub, tmp_path: Path, repo_name: str, capsys: pytest.CaptureFixture[str],
) -> None:
    src = make_model_dir(tmp_path / "src", seed=7)
    publish_repo(hub.root, repo_name, src)
    # corrupt the LFS object the hub serves, keeping the pointer (and its sha256) intact
    objs = list((hub.root / "models" / repo_name / ".git" / "lfs" / "objects").rglob("*"))
    obj = next(p for p in objs if p.is_file())
    raw = bytearray(obj.read_bytes())
    raw[-1] ^= 0xFF
    obj.write_bytes(bytes(raw))
    spec = _write_spec(tmp_path, spec_text("b5", repo_name, repo_name))
    code, _, err = run_cli(capsys, "pull", str(spec), "--mirror", str(tmp_path / "m"),
                           "--endpoint", hub.endpoint)
    assert code == 3
    assert "LFS sha256" in err and "model.safetensors" in err
    m = Mirror.open(tmp_path / "m")
    assert m.bundle_names() == []
    assert not any(p.name == obj.name for p in (m.root / "objects").rglob("*"))
    assert not list((m.root / "tmp" / "partial").glob("*.part"))
    with pytest.raises(DigestMismatch):
        pull_bundle(load_spec(spec), m, endpoint=hub.endpoint)


def test_token_never_written(
    hub: LocalHub, published: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    token = "hf_SuperSecretTokenValue123456"
    monkeypatch.setenv("HF_TOKEN", token)
    repo, _ = published
    spec = _write_spec(tmp_path, spec_text("b6", repo, repo))
    code, out, err = run_cli(capsys, "pull", str(spec), "--mirror", str(tmp_path / "m"),
                             "--endpoint", hub.endpoint, "--json")
    assert code == 0
    bad = _write_spec(tmp_path, spec_text("b7", repo, "org/nope"), "bad.yaml")
    code2, out2, err2 = run_cli(capsys, "pull", str(bad), "--mirror", str(tmp_path / "m"),
                                "--endpoint", hub.endpoint)
    assert code2 == 6
    for text in (out, err, out2, err2):
        assert token not in text
    for p in (tmp_path / "m").rglob("*"):
        if p.is_file() and not p.is_symlink():
            assert token.encode() not in p.read_bytes(), p


def _pull_proc(spec: Path, mirror: Path, endpoint: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "HF_ENDPOINT": endpoint}
    return subprocess.Popen(
        [sys.executable, "-m", "specbundle", "pull", str(spec), "--mirror", str(mirror),
         "--json", "--workers", "1"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_interrupt_then_resume_reuses_verified_files(
    hub: LocalHub, tmp_path: Path, repo_name: str,
) -> None:
    src = make_model_dir(tmp_path / "src", big=96 << 20)
    publish_repo(hub.root, repo_name, src)
    spec = _write_spec(tmp_path, spec_text("b8", repo_name, repo_name))
    mirror = tmp_path / "m"
    proc = _pull_proc(spec, mirror, hub.endpoint)
    partial = mirror / "tmp" / "partial"
    import time
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        parts = list(partial.glob("*.part")) if partial.exists() else []
        if any(p.stat().st_size > (1 << 20) for p in parts):
            break
        time.sleep(0.05)
    proc.send_signal(2)  # Ctrl-C mid-download
    proc.communicate(timeout=30)  # waits, and closes its pipes
    assert proc.returncode != 0
    m = Mirror.open(mirror)
    assert m.bundle_names() == []  # nothing half-visible
    verified_before = {p.name for p in (mirror / "objects").rglob("*") if p.is_file()}
    assert verified_before, "the small files verified before the interrupt stay in the store"
    res = pull_bundle(load_spec(spec), m, endpoint=hub.endpoint)
    target = res.artifacts[0]
    reused_digests = {res.record.target.file(p).sha256 for p in target.reused}  # type: ignore[union-attr]
    assert verified_before <= reused_digests | {f.sha256 for f in res.record.target.files}
    assert set(target.reused) >= {f.path for f in res.record.target.files
                                  if f.sha256 in verified_before}
    assert "model-big.safetensors" in target.downloaded + target.resumed
    # a third run moves no bytes at all
    again = pull_bundle(load_spec(spec), m, endpoint=hub.endpoint)
    assert again.unchanged
    assert all(not a.downloaded and not a.resumed for a in again.artifacts)


def test_two_concurrent_pulls_share_one_mirror(
    hub: LocalHub, tmp_path: Path, repo_name: str,
) -> None:
    t1 = make_model_dir(tmp_path / "t1", seed=1)
    t2 = make_model_dir(tmp_path / "t2", seed=2)
    d = make_model_dir(tmp_path / "d", seed=3, big=8 << 20)
    publish_repo(hub.root, repo_name + "-t1", t1)
    publish_repo(hub.root, repo_name + "-t2", t2)
    publish_repo(hub.root, repo_name + "-d", d)
    s1 = _write_spec(tmp_path, spec_text("c1", repo_name + "-t1", repo_name + "-d"), "a.yaml")
    s2 = _write_spec(tmp_path, spec_text("c2", repo_name + "-t2", repo_name + "-d"), "b.yaml")
    mirror = tmp_path / "m"
    p1, p2 = _pull_proc(s1, mirror, hub.endpoint), _pull_proc(s2, mirror, hub.endpoint)
    for p in (p1, p2):
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
    m = Mirror.open(mirror)
    assert m.bundle_names() == ["c1", "c2"]
    r1, r2 = m.load_bundle("c1"), m.load_bundle("c2")
    assert r1.draft == r2.draft or (r1.draft and r2.draft and r1.draft.files == r2.draft.files)
    objects = [p for p in (mirror / "objects").rglob("*") if p.is_file()]
    digests = r1.referenced_blobs() | r2.referenced_blobs()
    assert {p.name for p in objects} == digests  # every object once, none stray
    events = m.read_events()
    assert [e["type"] for e in events] == ["pull", "pull"]
    assert events[1]["prev"] != events[0]["prev"]


def test_publish_repo_moves_main_only_on_change(tmp_path: Path) -> None:
    src = make_model_dir(tmp_path / "src", seed=5)
    first = publish_repo(tmp_path / "hub", "org/moving", src, tags=("v1",))
    assert publish_repo(tmp_path / "hub", "org/moving", src) == first  # same tree, same commit
    (src / "README.md").write_text("---\nlicense: mit\n---\n")
    second = publish_repo(tmp_path / "hub", "org/moving", src)
    repo = tmp_path / "hub" / "models" / "org" / "moving"

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], check=True,
                              capture_output=True, text=True).stdout.strip()

    assert first != second
    assert git("rev-parse", "main") == second
    assert git("rev-parse", "v1") == first
    pointer = git("show", "main:model.safetensors")
    assert pointer.startswith("version https://git-lfs.github.com/spec/v1")
