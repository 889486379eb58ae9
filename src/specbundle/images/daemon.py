"""Connecting to the Docker engine, with failures translated into the one error tree."""

from __future__ import annotations

import docker
import docker.errors

from specbundle.errors import EnvironmentProblem

__all__ = ["connect", "daemon_version"]


def connect(base_url: str | None = None) -> docker.DockerClient:
    """A client for ``base_url`` (default: ``DOCKER_HOST`` or the local socket), pinged once.

    Raises :class:`EnvironmentProblem` when no daemon answers, so commands exit 6 with a
    hint instead of a socket traceback.
    """
    try:
        client = docker.DockerClient(base_url=base_url) if base_url else docker.from_env()
        client.ping()
    except (docker.errors.DockerException, OSError) as err:
        raise EnvironmentProblem(
            f"no Docker engine reachable: {err}",
            hint="start one (ci/start-dockerd.sh) or set DOCKER_HOST",
        ) from err
    return client


def daemon_version(client: docker.DockerClient) -> str:
    """The engine's version string, for the record."""
    try:
        return str(client.version().get("Version", ""))
    except docker.errors.DockerException:
        return ""
