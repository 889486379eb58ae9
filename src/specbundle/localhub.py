"""A loopback Hugging Face endpoint for the demo and the tests: git repos served by olah.

olah (PyPI, a self-hosted HF mirror) serves pre-cloned git repositories from its
``mirrors-path`` in offline mode, including Git LFS pointers whose objects sit in
``.git/lfs/objects``. :func:`publish_repo` writes such a repository (without needing the
git-lfs tool) and :func:`serve_hub` runs olah on 127.0.0.1 until the block ends. Nothing here
is used by the pipeline itself; it only stands in for a real hub or an internal mirror.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from specbundle.errors import EnvironmentProblem
from specbundle.strict import open_regular

__all__ = ["LFS_SUFFIXES", "LocalHub", "free_port", "lfs_pointer", "publish_repo", "serve_hub"]

# Files Hugging Face stores through LFS by default (.gitattributes of a new repo).
LFS_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt", ".pth", ".pkl", ".model", ".msgpack",
                ".h5", ".onnx", ".npy", ".zip")

_GIT_ENV = {"GIT_AUTHOR_NAME": "specbundle", "GIT_AUTHOR_EMAIL": "specbundle@localhost",
            "GIT_COMMITTER_NAME": "specbundle", "GIT_COMMITTER_EMAIL": "specbundle@localhost",
            "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent"}


@dataclass(frozen=True)
class LocalHub:
    """A running loopback hub: point ``HF_ENDPOINT`` at :attr:`endpoint`."""

    endpoint: str
    root: Path
    pid: int


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def lfs_pointer(sha256: str, size: int) -> bytes:
    """A Git LFS pointer file, byte for byte as git-lfs writes it."""
    return (f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\n"
            f"size {size}\n").encode()


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, **_GIT_ENV}
    out = subprocess.run(["git", "-C", str(repo), *args], env=env, check=True,
                         capture_output=True, text=True)
    return out.stdout.strip()


def publish_repo(
    hub_root: Path, repo_id: str, src: Path, *, message: str = "upload",
    tags: tuple[str, ...] = (), lfs_suffixes: tuple[str, ...] = LFS_SUFFIXES,
) -> str:
    """Commit the files of ``src`` as a new commit on ``main`` of ``repo_id``; return its sha.

    Weight-like files are stored as LFS pointers with their bytes in ``.git/lfs/objects``, as on
    the Hub, so the endpoint reports an LFS sha256 for them.
    """
    repo = hub_root / "models" / repo_id
    if not (repo / ".git").is_dir():
        repo.mkdir(parents=True, exist_ok=True)
        _git(repo, "init", "-q", "-b", "main")
    for old in repo.iterdir():
        if old.name != ".git":
            shutil.rmtree(old) if old.is_dir() else old.unlink()
    for f in sorted(p for p in src.rglob("*") if p.is_file() and ".git" not in p.parts):
        rel = f.relative_to(src)
        dest = repo / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if f.suffix in lfs_suffixes:
            h, size = hashlib.sha256(), 0
            with open_regular(f, follow=True) as fh:
                while chunk := fh.read(1 << 22):
                    h.update(chunk)
                    size += len(chunk)
            digest = h.hexdigest()
            obj = repo / ".git" / "lfs" / "objects" / digest[:2] / digest[2:4] / digest
            obj.parent.mkdir(parents=True, exist_ok=True)
            if not obj.exists():
                shutil.copyfile(f, obj)
            dest.write_bytes(lfs_pointer(digest, size))
        else:
            shutil.copyfile(f, dest)
    _git(repo, "add", "-A")
    unchanged = subprocess.run(["git", "-C", str(repo), "diff", "--cached", "--quiet"],
                               env={**os.environ, **_GIT_ENV}, check=False).returncode == 0
    has_head = subprocess.run(["git", "-C", str(repo), "rev-parse", "-q", "--verify", "HEAD"],
                              env={**os.environ, **_GIT_ENV}, capture_output=True,
                              check=False).returncode == 0
    if not (unchanged and has_head):  # same tree again: keep the commit (and its sha)
        _git(repo, "commit", "-q", "--allow-empty", "-m", message)
    for t in tags:
        _git(repo, "tag", "-f", t)
    return _git(repo, "rev-parse", "HEAD")


def _config(root: Path, port: int) -> str:
    return (
        "[basic]\n"
        f'host = "127.0.0.1"\nport = {port}\n'
        f'repos-path = "{root / ".olah-repos"}"\n'
        f'mirrors-path = ["{root}"]\n'
        f'mirror-netloc = "127.0.0.1:{port}"\nmirror-lfs-netloc = "127.0.0.1:{port}"\n'
        "metadata-cache-ttl = 0\n"
        "[accessibility]\noffline = true\n"
        '[[accessibility.proxy]]\nrepo = "*"\nallow = true\n'
        '[[accessibility.cache]]\nrepo = "*"\nallow = true\n'
    )


def _olah_cli() -> str:
    exe = Path(sys.executable).parent / "olah-cli"
    found = str(exe) if exe.exists() else shutil.which("olah-cli")
    if not found:
        raise EnvironmentProblem(
            "olah is not installed; the local hub needs it",
            hint="pip install 'specbundle[demo]', or use a dir: source",
        )
    return found


@contextlib.contextmanager
def serve_hub(root: Path, *, port: int | None = None, timeout: float = 60.0) -> Iterator[LocalHub]:
    """Run olah on loopback serving the git repos under ``root/models`` until the block ends."""
    root = root.resolve()
    root.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    cfg = root / ".olah.toml"
    cfg.write_text(_config(root, port))
    log = (root / ".olah.log").open("wb")
    proc = subprocess.Popen(  # loopback only: host is 127.0.0.1 in the config
        [_olah_cli(), "-c", str(cfg)], cwd=root, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise EnvironmentProblem(
                    f"olah exited with {proc.returncode}; see {root / '.olah.log'}")
            try:
                httpx.get(endpoint + "/api/whoami-v2", timeout=2.0, trust_env=False)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise EnvironmentProblem(f"olah did not start within {timeout}s") from None
                time.sleep(0.2)
        yield LocalHub(endpoint=endpoint, root=root, pid=proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
