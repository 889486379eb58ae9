"""Run a serving engine from a loaded image for the benchmark, and always clean it up.

Network choice: the daemon on these hosts runs with ``--bridge=none --iptables=false``, so a
container can have either no network at all or the host's. ``--network none`` leaves the
benchmark client no TCP path to the engine (ports cannot be published without a bridge), so
the engine runs with host networking and must bind to 127.0.0.1 (the caller's argv says so;
:func:`run_container` refuses a ``--host``/``--port`` pair that is not loopback). On the
isolated side the host has no route out, and the container gets nothing else: the mirror
is mounted read-only at the same path (so snapshot paths in the argv work unchanged), the
root filesystem is read-only with a small tmpfs at ``/tmp``, all capabilities are dropped
and ``no-new-privileges`` is set.

Cleanup: the container is stopped and removed when the ``with`` block ends for any reason
(normal exit, exception, Ctrl-C); SIGTERM is turned into the same path while the block runs.
Containers carry the label ``specbundle.run`` so :func:`remove_stale_containers` can reap
any left by a killed process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Protocol

import docker
import docker.errors
import httpx
from docker.models.containers import Container
from docker.types import DeviceRequest, Mount

from specbundle._fsutil import open_append
from specbundle.errors import BenchError, UsageError
from specbundle.image_record import ImageRecord
from specbundle.images.daemon import connect
from specbundle.mirror import Mirror

__all__ = ["LABEL", "ContainerCommand", "RunningContainer", "remove_stale_containers",
           "run_container", "serve_container"]

LABEL = "specbundle.run"
_LOOPBACK = ("127.0.0.1", "localhost", "::1")
_STOP_TIMEOUT_S = 10


@dataclass(frozen=True)
class RunningContainer:
    """A started engine container; ``base_url`` is where the benchmark client connects."""

    container_id: str
    name: str
    image_id: str
    base_url: str
    _container: Container = field(repr=False, compare=False)

    def logs(self, tail: int = 200) -> str:
        """The engine's recent output (for error messages when it fails to start)."""
        try:
            return bytes(self._container.logs(tail=tail)).decode("utf-8", "replace")
        except docker.errors.DockerException:
            return ""

    def is_running(self) -> bool:
        """Whether the engine process is still up."""
        try:
            self._container.reload()
        except docker.errors.NotFound:
            return False
        return str(self._container.status) == "running"


def _flag_value(argv: Sequence[str], flag: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def _check_listen(argv: Sequence[str], port: int) -> None:
    declared = _flag_value(argv, "--port")
    if declared is not None and declared != str(port):
        raise UsageError(f"engine argv serves on port {declared}, but port={port} was given")
    host = _flag_value(argv, "--host")
    if host is None or host not in _LOOPBACK:
        raise UsageError(
            f"engine argv binds to {host or 'the default address'}; with host networking the "
            "engine must listen on 127.0.0.1 only (pass --host 127.0.0.1)"
        )


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Make SIGTERM unwind like Ctrl-C, so the finally clause removes the container."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _save_logs(container: Container, log: Path) -> None:
    """Keep the engine's whole output (the benchmark stores it with the run)."""
    with contextlib.suppress(docker.errors.DockerException, OSError):
        data = bytes(container.logs(stdout=True, stderr=True))
        with os.fdopen(open_append(log), "ab") as fh:  # never through a planted link
            fh.write(data)


def _remove(container: Container) -> None:
    with contextlib.suppress(docker.errors.NotFound):
        try:
            container.stop(timeout=_STOP_TIMEOUT_S)
        except docker.errors.APIError:
            container.kill()
    with contextlib.suppress(docker.errors.NotFound):
        container.remove(force=True, v=True)


@contextlib.contextmanager
def run_container(
    image: ImageRecord | str, argv: Sequence[str], *, mirror: Mirror, port: int,
    env: Mapping[str, str] | None = None, extra_ro_mounts: Sequence[Path] = (),
    gpus: int = 0, log: Path | None = None, client: docker.DockerClient | None = None,
) -> Iterator[RunningContainer]:
    """Start ``argv`` (full command line inside the image) and yield the running container.

    ``image`` is an :class:`ImageRecord` (run by its image ID, the pin that survives
    ``docker load``) or an image reference. ``argv`` must contain ``--host 127.0.0.1`` and
    serve on ``port``. ``extra_ro_mounts`` are host paths also mounted read-only at the same
    path (e.g. a prompts file). ``gpus`` > 0 requests that many GPUs (-1: all). ``log``
    receives the engine's whole output before the container is stopped and removed on exit
    from the block, whatever the reason.
    """
    if not argv:
        raise UsageError("run_container needs a command line")
    _check_listen(argv, port)
    client = client or connect()
    image_ref = image.image_id if isinstance(image, ImageRecord) else image
    try:
        image_id = str(client.images.get(image_ref).id)
    except docker.errors.ImageNotFound as err:
        raise BenchError(
            f"engine image {image_ref} is not loaded", hint="run `specbundle images load` first"
        ) from err
    mounts = [Mount(str(p), str(p), type="bind", read_only=True)
              for p in (mirror.root, *(Path(m).resolve() for m in extra_ro_mounts))]
    run_id = uuid.uuid4().hex[:12]
    name = f"specbundle-{run_id}"
    devices = [DeviceRequest(count=gpus, capabilities=[["gpu"]])] if gpus else None
    container: Container | None = None
    with _sigterm_as_interrupt():
        try:
            try:
                container = client.containers.create(
                    image_id, entrypoint=[argv[0]], command=list(argv[1:]), name=name,
                    environment=dict(env or {}), mounts=mounts, network_mode="host",
                    read_only=True, cap_drop=["ALL"],
                    tmpfs={"/tmp": "rw,size=256m"},  # noqa: S108 - a path inside the container
                    security_opt=["no-new-privileges"], pids_limit=4096, init=True,
                    labels={LABEL: run_id, "specbundle.pid": str(os.getpid())},
                    device_requests=devices, detach=True,
                )
                container.start()
            except docker.errors.APIError as err:
                hint = ("the Docker engine has no GPU runtime (install the NVIDIA container "
                        "toolkit) or set deployment.gpus: 0" if "device driver" in
                        str(err.explanation) else None)
                raise BenchError(f"could not start the engine container: {err.explanation}",
                                 hint=hint) from err
            yield RunningContainer(str(container.id), name, image_id,
                                   f"http://127.0.0.1:{port}", container)
        finally:
            if container is not None:
                if log is not None:
                    _save_logs(container, log)
                _remove(container)


class _MountLike(Protocol):
    @property
    def source(self) -> Path: ...


class ContainerCommand(Protocol):
    """What :func:`serve_container` needs of a command (render's ``ServeCommand`` fits).

    A Protocol rather than an import, so the render stage may itself read image records.
    """

    @property
    def container_program(self) -> tuple[str, ...]: ...
    @property
    def args(self) -> tuple[str, ...]: ...
    @property
    def host_flag(self) -> str: ...
    @property
    def port_flag(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def env_dict(self) -> dict[str, str]: ...
    @property
    def mounts(self) -> Sequence[_MountLike]: ...
    @property
    def gpus(self) -> int: ...
    @property
    def health_path(self) -> str: ...


def _wait_healthy(run: RunningContainer, path: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if not run.is_running():
            raise BenchError(f"the engine container exited before it became healthy:\n"
                             f"{run.logs(40)}")
        try:
            if httpx.get(run.base_url + path, timeout=5.0, trust_env=False).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise BenchError(f"the engine container was not healthy after {timeout:.0f} s:\n"
                             f"{run.logs(40)}")
        time.sleep(0.5)


@contextlib.contextmanager
def serve_container(
    cmd: ContainerCommand, image: ImageRecord | str, *, mirror: Mirror, port: int | None = None,
    health_timeout: float = 300.0, log: Path | None = None,
    client: docker.DockerClient | None = None,
) -> Iterator[RunningContainer]:
    """Start one benchmark arm from a rendered command in its engine image, once healthy.

    The command's in-image program and arguments run with ``--host 127.0.0.1`` and ``port``
    (default: the command's), its environment and GPUs; its mounts (the mirror, prompts) are
    bound read-only at the same paths. Yields once ``health_path`` answers 200 (raises
    :class:`BenchError` with the log tail if the engine exits or times out first). ``log``
    gets the engine output; the container is stopped and removed when the block ends.

    Typical use in the benchmark::

        image = read_image_records(mirror, name)[engine]          # loaded by `images load`
        cmd = build_serve_command(record, engine, mirror=mirror, speculation=arm == "spec")
        with serve_container(cmd, image, mirror=mirror, port=port, log=run_dir / "a.log") as c:
            ...  # drive requests at c.base_url; scrape c.base_url + cmd.metrics_path
    """
    listen = port or cmd.port
    argv = [*cmd.container_program, *cmd.args, cmd.host_flag, "127.0.0.1", cmd.port_flag,
            str(listen)]
    extra = [m.source for m in cmd.mounts if Path(m.source).resolve() != mirror.root]
    with run_container(image, argv, mirror=mirror, port=listen, env=cmd.env_dict,
                       extra_ro_mounts=extra, gpus=cmd.gpus, log=log, client=client) as run:
        _wait_healthy(run, cmd.health_path, health_timeout)
        yield run


def remove_stale_containers(client: docker.DockerClient | None = None) -> tuple[str, ...]:
    """Remove specbundle engine containers whose creating process is gone; returns names."""
    client = client or connect()
    removed: list[str] = []
    for c in client.containers.list(all=True, filters={"label": LABEL}):
        pid = int(c.labels.get("specbundle.pid", "0") or 0)
        alive = pid > 0 and Path(f"/proc/{pid}").exists()
        if not alive:
            _remove(c)
            removed.append(str(c.name))
    return tuple(removed)
