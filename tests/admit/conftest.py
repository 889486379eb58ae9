"""A signed bundle per synthetic pair, ready for ``admit`` (pull -> scan -> sign)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from specbundle.attest import SigningKey, generate_key
from specbundle.mirror import Mirror
from specbundle.scan import scan_bundle
from specbundle.sign import sign_bundle
from specbundle.spec import parse_spec
from specbundle.synth import SynthPair
from specbundle.verify import TrustPolicy, parse_policy
from tests.bench.conftest import bench_pairs, bundle_doc, pull_synth

__all__ = ["Signed", "bench_pairs", "signed_bundle"]


@dataclass(frozen=True)
class Signed:
    """A mirror with one signed bundle, the key that signed it and a policy trusting it."""

    mirror: Mirror
    name: str
    key: SigningKey
    policy: TrustPolicy
    policy_path: Path


def signed_bundle(root: Path, name: str, pair: SynthPair, *, levels: list[int],
                  admission: dict[str, float] | None = None) -> Signed:
    doc = bundle_doc(name, pair, levels=levels, admission=admission)
    mirror = pull_synth(root / "mirror", doc)
    record = mirror.load_bundle(name)
    scan_bundle(mirror, record, parse_spec(doc))
    key = generate_key("ecdsa-p256")
    sign_bundle(mirror, name, [key])
    policy_doc = {"apiVersion": "specbundle/v1", "kind": "TrustPolicy", "keys": [
        {"name": "release", "fingerprint": key.fingerprint, "public_key": key.public.pem.decode(),
         "repos": ["*"], "bundles": ["*"]}]}
    text = yaml.safe_dump(policy_doc)
    path = root / "trust.yaml"
    path.write_text(text)
    return Signed(mirror, name, key, parse_policy(text.encode(), source=str(path)), path)


@pytest.fixture(scope="session")
def admit_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("admit")
