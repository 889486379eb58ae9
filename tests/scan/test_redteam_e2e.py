"""Red team across stage seams: a hostile hub repository through pull -> scan -> sign -> verify.

Each repository is a real git repo served by olah on loopback (built with git plumbing, so it
can hold names ``git add`` refuses to write and symlink blobs), pulled with a bundle.yaml and
then judged through the CLI in every output format. Every hostile repo must end in a one-line
error with the exit code of its kind (pull 3, or scan/sign 4) and inert terminal output; the
benign twin must go all the way through sign and verify with exit 0.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from specbundle import attest
from specbundle.localhub import _GIT_ENV, LocalHub, lfs_pointer, serve_hub
from tests.lib import corpus
from tests.lib.cli import run_cli
from tests.lib.policy import key_files, policy_doc, write_policy

_ENV = {**os.environ, **_GIT_ENV}


def _git(repo: Path, *args: str, data: bytes | None = None) -> bytes:
    return subprocess.run(["git", "-C", str(repo), *args], env=_ENV, check=True,
                          capture_output=True, input=data).stdout


def _publish(hub: Path, repo_id: str, files: dict[str, bytes], *,
             symlinks: dict[str, str] | None = None, lfs: dict[str, bytes] | None = None,
             lfs_served: dict[str, bytes] | None = None) -> None:
    """Commit exactly these tree entries (any name git stores) on ``main`` of ``repo_id``."""
    repo = hub / "models" / repo_id
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    entries: list[tuple[str, str, str]] = []

    def blob(data: bytes) -> str:
        return _git(repo, "hash-object", "-w", "--stdin", data=data).decode().strip()

    for name, data in files.items():
        entries.append(("100644", blob(data), name))
    for name, target in (symlinks or {}).items():
        entries.append(("120000", blob(target.encode()), name))
    for name, data in (lfs or {}).items():
        digest = hashlib.sha256(data).hexdigest()
        obj = repo / ".git" / "lfs" / "objects" / digest[:2] / digest[2:4] / digest
        obj.parent.mkdir(parents=True, exist_ok=True)
        obj.write_bytes((lfs_served or {}).get(name, data))  # a lying LFS store, if asked
        entries.append(("100644", blob(lfs_pointer(digest, len(data))), name))
    index = b"".join(f"{m} {s}\t{n}".encode() + b"\0" for m, s, n in entries)
    _git(repo, "update-index", "-z", "--add", "--index-info", data=index)
    commit = _git(repo, "commit-tree", _git(repo, "write-tree").decode().strip(),
                  data=b"upload").decode().strip()
    _git(repo, "update-ref", "refs/heads/main", commit)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    base = corpus.hf_model(tmp_path_factory.mktemp("model"))
    return {p.name: p.read_bytes() for p in sorted(base.iterdir())}


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory, model: dict[str, bytes]) -> Iterator[LocalHub]:
    root = tmp_path_factory.mktemp("hub")
    small = {k: v for k, v in model.items() if k != "model.safetensors"}
    weights = {"model.safetensors": model["model.safetensors"]}
    cfg = model["config.json"]
    repos: dict[str, dict[str, object]] = {
        "clean": {},
        "names": {"files": {"x\x1b]8;;https://e\x1b\\.json": b"{}", "CON.json": b"{}",
                            "a:b.json": b"{}", "tok\u202enosj.model": b"{}",
                            "[bold red]x[.txt": b"x", "Config.json": cfg,
                            "\uff43onfig.json": cfg, "c1\u009b.json": b"{}",
                            "deep/" * 40 + "config.json": cfg}},
        "symlinks": {"drop": "config.json",
                     "symlinks": {"config.json": "/etc/passwd",
                                  "tokenizer.model": "../../../../etc/shadow"}},
        "lfs-lie": {"lfs_served": {"model.safetensors": b"\0" * len(weights["model.safetensors"])}},
    }
    for name, case in repos.items():
        files = {k: v for k, v in small.items() if k != case.get("drop")}
        files.update(case.get("files", {}))  # type: ignore[arg-type]
        _publish(root, f"org/{name}", files, symlinks=case.get("symlinks"),  # type: ignore[arg-type]
                 lfs=weights, lfs_served=case.get("lfs_served"))  # type: ignore[arg-type]
    with serve_hub(root) as h:
        yield h


def _spec(tmp: Path, target: str) -> Path:
    p = tmp / "bundle.yaml"
    p.write_text(f"""apiVersion: specbundle/v1
metadata: {{name: b}}
target: {{repo: org/{target}, revision: main}}
draft: {{repo: org/clean, revision: main}}
speculative: {{method: draft_model, num_speculative_tokens: 4}}
engines: {{vllm: {{}}}}
deployment: {{p95_concurrency: 8}}
""")
    return p


def _inert(text: str) -> bool:
    return not any(c in text for c in ("\x1b", "\x9b", "\u202e", "\r"))


def _pull(hub: LocalHub, tmp: Path, target: str, capsys: pytest.CaptureFixture[str],
          monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str]:
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    return run_cli(capsys, "pull", str(_spec(tmp, target)), "--mirror", str(tmp / "m"))


def _scan_all_formats(tmp: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, set[str]]:
    m = str(tmp / "m")
    code, out, err = run_cli(capsys, "scan", "b", "--mirror", m, "--no-second-opinions")
    assert _inert(out + err) and "Traceback" not in err
    code_j, out, _ = run_cli(capsys, "scan", "b", "--mirror", m, "--no-second-opinions",
                             "--json")
    report = json.loads(out)
    code_s, out, _ = run_cli(capsys, "scan", "b", "--mirror", m, "--no-second-opinions",
                             "--format", "sarif", "-o", str(tmp / "r.sarif"))
    assert json.loads(out)["version"] == "2.1.0" and (tmp / "r.sarif").is_file()
    assert code == code_j == code_s
    code_m, out, err = run_cli(capsys, "mirror", "show", "b", "--mirror", m)
    assert code_m == 0 and _inert(out + err)
    return code, {f["check_id"] for f in report["findings"]
                  if f["severity"] in ("high", "critical")}


def test_clean_twin_goes_through_sign_and_verify(
        hub: LocalHub, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    code, _, err = _pull(hub, tmp_path, "clean", capsys, monkeypatch)
    assert code == 0, err
    code, blocking = _scan_all_formats(tmp_path, capsys)
    assert code == 0 and not blocking
    key = attest.generate_key("ecdsa-p256")
    priv, _ = key_files(tmp_path, key, "release")
    code, _, err = run_cli(capsys, "sign", "b", "--mirror", str(tmp_path / "m"),
                           "--key", str(priv))
    assert code == 0, err
    trust = write_policy(tmp_path / "trust.yaml", policy_doc({"release": key}))
    code, _, err = run_cli(capsys, "verify", "b", "--mirror", str(tmp_path / "m"),
                           "--trust", str(trust))
    assert code == 0, err


@pytest.mark.parametrize(("repo", "expected"), [
    ("names", {"files.unsafe-name", "files.name-collision"}),
    # git symlink blobs arrive as their target text, never as a link: nothing escapes the tree
    ("symlinks", {"config.malformed"}),
])
def test_hostile_repo_is_blocked_and_never_signed(
        hub: LocalHub, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, repo: str, expected: set[str]) -> None:
    code, _, err = _pull(hub, tmp_path, repo, capsys, monkeypatch)
    assert code == 0, err
    for link in (tmp_path / "m").rglob("*"):
        if link.is_symlink():
            assert link.resolve().is_relative_to((tmp_path / "m").resolve())
    code, blocking = _scan_all_formats(tmp_path, capsys)
    assert code == 4 and expected <= blocking
    priv, _ = key_files(tmp_path, attest.generate_key("ecdsa-p256"), "k")
    code, _, err = run_cli(capsys, "sign", "b", "--mirror", str(tmp_path / "m"),
                           "--key", str(priv))
    assert code == 4 and len(err.strip().splitlines()) == 1


def test_lfs_bytes_that_differ_from_the_pointer_are_never_mirrored(
        hub: LocalHub, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    code, _, err = _pull(hub, tmp_path, "lfs-lie", capsys, monkeypatch)
    assert code == 3 and "LFS sha256" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli(capsys, "scan", "b", "--mirror", str(tmp_path / "m"))
    assert code == 2 and "no bundle named 'b'" in err
