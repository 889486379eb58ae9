"""A real CNCF distribution registry (Debian's ``docker-registry``) on loopback, for tests and
the OCI benchmark: temp storage root, its own config file, a free port, stopped on exit."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from specbundle.bench.servers import free_port

__all__ = ["REGISTRY_BIN", "Registry", "registry_available", "run_registry"]

REGISTRY_BIN = shutil.which("docker-registry") or "/usr/bin/docker-registry"

_CONFIG = """version: 0.1
log: {{level: error, accesslog: {{disabled: true}}}}
storage:
  filesystem: {{rootdirectory: {root}}}
  delete: {{enabled: true}}
  maintenance: {{uploadpurging: {{enabled: false}}}}
http:
  addr: 127.0.0.1:{port}
{auth}"""


@dataclass(frozen=True)
class Registry:
    """A running registry: ``host`` (127.0.0.1:PORT) and its storage root."""

    host: str
    storage: Path
    log: Path

    def blob_data(self, digest: str) -> Path:
        """The file distribution keeps a blob's bytes in (for tamper tests)."""
        hx = digest.removeprefix("sha256:")
        return self.storage / "docker/registry/v2/blobs/sha256" / hx[:2] / hx / "data"

    def upload_dirs(self) -> list[Path]:
        """In-progress upload sessions (for resume tests)."""
        return sorted(self.storage.glob("docker/registry/v2/repositories/*/*/_uploads/*")) + \
            sorted(self.storage.glob("docker/registry/v2/repositories/*/_uploads/*"))


def registry_available() -> bool:
    """True when the docker-registry binary is installed."""
    return Path(REGISTRY_BIN).is_file()


@contextmanager
def run_registry(work: Path, *, htpasswd: Path | None = None,
                 tls: tuple[Path, Path] | None = None) -> Iterator[Registry]:
    """Start ``docker-registry serve`` on a free loopback port; stop it afterwards.

    ``htpasswd``: Basic auth from that file; ``tls``: (certificate, key) PEM files.
    """
    work.mkdir(parents=True, exist_ok=True)
    port = free_port()
    auth = (f"auth:\n  htpasswd: {{realm: test, path: {htpasswd}}}\n" if htpasswd else "")
    if tls:
        auth = f"  tls: {{certificate: {tls[0]}, key: {tls[1]}}}\n" + auth
    cfg = work / "config.yml"
    cfg.write_text(_CONFIG.format(root=work / "storage", port=port, auth=auth))
    log = work / "registry.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen([REGISTRY_BIN, "serve", str(cfg)], stdout=fh, stderr=fh)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                url = f"{'https' if tls else 'http'}://127.0.0.1:{port}/v2/"
                verify = ssl.create_default_context(cafile=str(tls[0])) if tls else True
                if httpx.get(url, timeout=1, verify=verify).status_code in (200, 401):
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"docker-registry did not start: {log.read_text()[-2000:]}")
            time.sleep(0.05)
        yield Registry(f"127.0.0.1:{port}", work / "storage", log)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
