"""Keys and trust policies: key files on disk and trust.yaml documents trusting given keys."""

from __future__ import annotations

from pathlib import Path

import yaml

from specbundle.attest import SigningKey, write_private_key, write_public_key
from specbundle.verify import TrustPolicy, parse_policy


def key_files(tmp: Path, key: SigningKey, stem: str) -> tuple[Path, Path]:
    """Write KEY.pem (0600) and KEY.pub; return both paths."""
    priv, pub = tmp / f"{stem}.pem", tmp / f"{stem}.pub"
    write_private_key(key, priv)
    write_public_key(key.public, pub)
    return priv, pub


def policy_doc(keys: dict[str, SigningKey], *, require: dict[str, object] | None = None,
               repos: tuple[str, ...] = ("org/*",), bundles: tuple[str, ...] = ("*",),
               max_age: str | None = None,
               model_signers: list[str] | None = None) -> dict[str, object]:
    """A trust.yaml document trusting ``keys`` (by name) for ``repos`` and ``bundles``."""
    doc: dict[str, object] = {
        "apiVersion": "specbundle/v1", "kind": "TrustPolicy",
        "keys": [{"name": n, "fingerprint": k.fingerprint, "public_key": k.public.pem.decode(),
                  "repos": list(repos), "bundles": list(bundles)} for n, k in keys.items()],
    }
    if require is not None:
        doc["require"] = require
    if max_age:
        doc["max_age"] = max_age
    if model_signers is not None:
        doc["model_signers"] = model_signers
    return doc


def write_policy(path: Path, doc: dict[str, object]) -> Path:
    """Write a policy document as YAML."""
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def trust_file(tmp: Path, key: SigningKey, stem: str = "trust") -> Path:
    """A trust policy trusting ``key`` for ``org/*``."""
    return write_policy(tmp / f"{stem}.yaml", policy_doc({"release": key}))


def policy_yaml(keys: dict[str, SigningKey], *, scope: str = "*") -> str:
    """trust.yaml text trusting ``keys`` (by name) for every repo and bundle in ``scope``."""
    return yaml.safe_dump(policy_doc(keys, repos=(scope,), bundles=(scope,)))


def policy_for(keys: dict[str, SigningKey], *, scope: str = "*") -> TrustPolicy:
    """A trust policy trusting ``keys`` (by name) for every repo and bundle."""
    return parse_policy(policy_yaml(keys, scope=scope).encode(), source="trust.yaml")
