"""Registry credentials the way docker, podman, skopeo and oras find them.

``$DOCKER_CONFIG/config.json`` (default ``~/.docker/config.json``), then
``$REGISTRY_AUTH_FILE`` / ``${XDG_RUNTIME_DIR}/containers/auth.json``: ``credHelpers`` for the
registry, else ``credsStore``, else a base64 ``auths[registry].auth`` entry. A helper is run as
``docker-credential-<name> get`` with the server on stdin (the docker credential-helper
protocol). Secrets live only in :class:`Credentials` (never in its ``repr``), never in a
message, log or file.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from specbundle.errors import EnvironmentProblem
from specbundle.strict import MalformedDocument, load_json_file, loads_json

__all__ = ["Credentials", "find_credentials"]

_IDENTITY_TOKEN_USER = "<token>"  # noqa: S105 - docker's marker for a refresh token


@dataclass(frozen=True)
class Credentials:
    """A username and secret (a password, or an OAuth2 refresh token when ``identity``)."""

    username: str
    secret: str = field(repr=False)
    identity: bool = False


def _config_files() -> list[Path]:
    out = []
    docker = os.environ.get("DOCKER_CONFIG")
    out.append(Path(docker) / "config.json" if docker else Path.home() / ".docker/config.json")
    if os.environ.get("REGISTRY_AUTH_FILE"):
        out.append(Path(os.environ["REGISTRY_AUTH_FILE"]))
    elif os.environ.get("XDG_RUNTIME_DIR"):
        out.append(Path(os.environ["XDG_RUNTIME_DIR"]) / "containers/auth.json")
    return out


def _keys(registry: str) -> list[str]:
    return [registry, f"https://{registry}", f"http://{registry}", f"https://{registry}/v1/"]


def _helper(name: str, registry: str) -> Credentials | None:
    exe = shutil.which(f"docker-credential-{name}")
    if exe is None:
        raise EnvironmentProblem(f"credential helper docker-credential-{name} is not installed",
                                 hint="install it or remove it from the docker config")
    try:
        out = subprocess.run([exe, "get"], input=registry.encode(), capture_output=True,
                             timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise EnvironmentProblem(f"credential helper {name} failed: {type(err).__name__}"
                                 ) from None
    if out.returncode != 0:
        return None  # "credentials not found": anonymous access
    try:
        doc = loads_json(out.stdout, what="credential helper reply")
        user, secret = str(doc["Username"]), str(doc["Secret"])
    except (MalformedDocument, KeyError, TypeError):
        raise EnvironmentProblem(f"credential helper {name} gave an unreadable reply") from None
    return Credentials(user, secret, identity=user == _IDENTITY_TOKEN_USER)


def _from_config(doc: dict[str, object], registry: str) -> Credentials | None:
    helpers = doc.get("credHelpers")
    if isinstance(helpers, dict) and isinstance(helpers.get(registry), str):
        return _helper(str(helpers[registry]), registry)
    auths = doc.get("auths")
    entry = next((auths[k] for k in _keys(registry)
                  if isinstance(auths, dict) and isinstance(auths.get(k), dict)), None)
    if isinstance(entry, dict):
        if isinstance(entry.get("identitytoken"), str) and entry["identitytoken"]:
            return Credentials(_IDENTITY_TOKEN_USER, str(entry["identitytoken"]), identity=True)
        if isinstance(entry.get("auth"), str) and entry["auth"]:
            try:
                user, _, pw = base64.b64decode(str(entry["auth"])).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                raise EnvironmentProblem(f"docker config auth entry for {registry} is not "
                                         "base64 user:password") from None
            return Credentials(user, pw)
    store = doc.get("credsStore")
    if isinstance(store, str) and store:
        return _helper(store, registry)
    return None


def find_credentials(registry: str, config: Path | None = None) -> Credentials | None:
    """Credentials for ``registry`` from ``config`` or the usual files; None: anonymous."""
    for path in [config] if config else _config_files():
        if not path.is_file():
            continue
        try:
            doc = load_json_file(path, max_bytes=1024 * 1024)
        except MalformedDocument as err:
            raise EnvironmentProblem(f"registry auth file {path} is malformed: {err}") from None
        if not isinstance(doc, dict):
            raise EnvironmentProblem(f"registry auth file {path} is not a JSON object",
                                     hint="a docker config.json: {\"auths\": {...}}")
        if isinstance(doc, dict):
            found = _from_config(doc, registry)
            if found is not None:
                return found
    return None

