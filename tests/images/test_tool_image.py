"""The tool image: specbundle as installed here, in a container, verifying a bundle offline.

The Kubernetes bench Job and the OCI init container run `specbundle` from a "tool image"
(``containers/*.Containerfile``). A registry-free build of that recipe is not possible here,
so the image is made the way the other Docker tests make theirs (``docker import``): the
Python interpreter, its standard library and exactly the installed packages a host run of
``specbundle verify`` imported, found by tracing that run. The container then verifies the
bundle with no network (``--network none``), and refuses it once a weight byte is changed.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
import sysconfig
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest

from specbundle.render.targets import templates_dir
from specbundle.spec import LlamaCppSettings, SGLangSettings, VLLMSettings
from tests.lib.bundles import make_signed

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
_LDD_RE = re.compile(r"(/\S+)")

# Runs the real CLI on the host and records every module file it loaded, whatever the exit.
_TRACE = """
import json, sys
from specbundle.cli import main
try:
    main(sys.argv[2:])
except SystemExit:
    pass
finally:
    files = [getattr(m, "__file__", None) for m in list(sys.modules.values())]
    with open(sys.argv[1], "w") as fh:
        json.dump(sorted({f for f in files if f}), fh)
"""


def _ldd(path: Path) -> set[Path]:
    out = subprocess.run(["ldd", str(path)], capture_output=True, text=True, check=False)
    return {Path(m.group(1)) for line in out.stdout.splitlines() if "=>" in line or "ld-" in line
            if (m := _LDD_RE.search(line.split("=>")[-1]))}


def _add_tree(tar: tarfile.TarFile, host: Path, dest: str) -> Iterator[Path]:
    """Add a file or folder (no caches); yield every shared object in it."""
    paths = [host] if host.is_file() else sorted(p for p in host.rglob("*")
                                                 if "__pycache__" not in p.parts)
    for path in paths:
        rel = dest if path == host else f"{dest}/{path.relative_to(host)}"
        if path.is_dir() or not path.exists():
            continue
        info = tar.gettarinfo(str(path.resolve()), arcname=rel.lstrip("/"))
        info.mtime = 0
        with path.resolve().open("rb") as fh:
            tar.addfile(info, fh)
        if ".so" in path.name:
            yield path


def _rootfs(packages: set[Path], site: Path) -> bytes:
    """Debian's python3.11 with its stdlib, the traced packages and specbundle itself."""
    buf = io.BytesIO()
    shared: set[Path] = set()
    python = Path("/usr/bin/python3.11").resolve()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        shared |= set(_add_tree(tar, python, "/usr/bin/python3"))
        stdlib = Path("/usr/lib/python3.11")
        shared |= set(_add_tree(tar, stdlib, str(stdlib)))
        for pkg in sorted(packages):
            shared |= set(_add_tree(tar, pkg, f"/opt/specbundle/site/{pkg.relative_to(site)}"))
        import specbundle

        shared |= set(_add_tree(tar, Path(specbundle.__file__).parent,
                                "/opt/specbundle/site/specbundle"))
        list(_add_tree(tar, templates_dir(), "/opt/specbundle/site/specbundle/templates"))
        libs = {lib for so in shared for lib in _ldd(so)}
        for lib in sorted(libs):
            if lib.exists() and not str(lib).startswith(("/opt/", str(site))):
                list(_add_tree(tar, lib, str(lib)))
        script = b"#!/usr/bin/python3\nfrom specbundle.cli import main\nmain()\n"
        info = tarfile.TarInfo("usr/local/bin/specbundle")
        info.size, info.mode = len(script), 0o755
        tar.addfile(info, io.BytesIO(script))
        for d in ("tmp", "proc", "sys", "dev", "root"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
    return buf.getvalue()


def _traced_packages(tmp: Path, argv: list[str]) -> tuple[set[Path], Path]:
    """The installed distributions (folders/modules in site-packages) a CLI run imports."""
    out = tmp / "modules.json"
    proc = subprocess.run([sys.executable, "-c", _TRACE, str(out), *argv],
                          capture_output=True, text=True, check=False, timeout=300)
    assert out.is_file(), proc.stderr[-2000:]
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    tops: set[Path] = set()
    for name in json.loads(out.read_text()):
        path = Path(name).resolve()
        if site in path.parents:
            top = site / path.relative_to(site).parts[0]
            tops.add(top)
            libs = site / f"{top.name.split('.')[0]}.libs"  # auditwheel's vendored libraries
            if libs.is_dir():
                tops.add(libs)
    tops |= set(site.glob("*.dist-info"))  # importlib.metadata answers in the image too
    return tops, site


def _spoil_weight(mirror: Path) -> None:
    """Flip one bit of the largest stored object (a weight file)."""
    objects = [p for p in (mirror / "objects").rglob("*") if p.is_file()]
    victim = max(objects, key=lambda p: p.stat().st_size)
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0x01
    victim.chmod(0o644)
    victim.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def tool_image(docker_client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory,
               ) -> Iterator[tuple[str, Path, Path]]:
    if not Path("/usr/bin/python3.11").is_file():
        pytest.skip("Debian's python3.11 is needed to lay out the image")
    tmp = tmp_path_factory.mktemp("tool-image")
    signed = make_signed(tmp)
    # both outcomes the tests exercise: a verify that passes and one that fails (a failure
    # report loads more of the package, e.g. the approval table)
    spoiled = make_signed(tmp_path_factory.mktemp("tool-image-spoiled"))
    _spoil_weight(spoiled.mirror.root)
    packages: set[Path] = set()
    for s in (signed, spoiled):
        argv = ["verify", "pair", "--mirror", str(s.mirror.root), "--trust",
                str(s.policy_path), "--json"]
        found, site = _traced_packages(tmp, argv)
        packages |= found
    tag = f"specbundle-test/tool:{uuid.uuid4().hex[:10]}"
    repo, version = tag.rsplit(":", 1)
    docker_client.api.import_image_from_data(
        _rootfs(packages, site), repository=repo, tag=version,
        changes=["ENV PYTHONPATH=/opt/specbundle/site", "ENV HF_HUB_OFFLINE=1",
                 "ENV HOME=/root"])
    try:
        yield tag, signed.mirror.root, signed.policy_path
    finally:
        with contextlib.suppress(docker.errors.APIError):
            docker_client.images.remove(tag, force=True)


def _verify_in_container(client: docker.DockerClient, image: str, mirror: Path,
                         policy: Path) -> tuple[int, str]:
    container = client.containers.run(
        image, ["specbundle", "verify", "pair", "--mirror", str(mirror), "--trust", str(policy),
                "--json"],
        network_mode="none", detach=True,
        volumes={str(mirror): {"bind": str(mirror), "mode": "rw"},
                 str(policy.parent): {"bind": str(policy.parent), "mode": "rw"}})
    try:
        rc = int(container.wait(timeout=300)["StatusCode"])
        return rc, container.logs(stdout=True, stderr=True).decode(errors="replace")
    finally:
        container.remove(force=True)


def test_tool_image_verifies_a_bundle_offline(tool_image: tuple[str, Path, Path],
                                              docker_client: docker.DockerClient) -> None:
    image, mirror, policy = tool_image
    rc, out = _verify_in_container(docker_client, image, mirror, policy)
    assert rc == 0, out
    report = json.loads(out[out.index("{"):])
    assert report["bundle"] == "pair"
    assert report["ok"] is True


def test_tool_image_refuses_a_tampered_weight(tool_image: tuple[str, Path, Path],
                                              docker_client: docker.DockerClient) -> None:
    image, mirror, policy = tool_image
    _spoil_weight(mirror)
    rc, out = _verify_in_container(docker_client, image, mirror, policy)
    assert rc == 3, out


def test_containerfiles_name_the_pinned_engine_images() -> None:
    """Each engine's recipe is documented with that engine's pinned default image."""
    recipes = {"vllm": "tool.Containerfile", "sglang": "tool.Containerfile",
               "llamacpp": "llamacpp.Containerfile"}
    defaults = {"vllm": VLLMSettings().image, "sglang": SGLangSettings().image,
                "llamacpp": LlamaCppSettings().image}
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for engine, recipe in recipes.items():
        body = (ROOT / "containers" / recipe).read_text(encoding="utf-8")
        assert "ARG ENGINE_IMAGE" in body and "FROM ${ENGINE_IMAGE}" in body
        assert "--no-index" in body  # built offline from the wheels in the context
        assert f"containers/{recipe}" in readme
        assert defaults[engine].split("@")[0] in readme, f"{engine}: README names another image"
