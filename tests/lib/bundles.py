"""Signed bundles: a pulled, scanned and signed bundle plus a policy trusting its key."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from specbundle import attest
from specbundle.mirror import Mirror
from specbundle.record import BundleRecord
from specbundle.sign import sign_bundle
from specbundle.verify import TrustPolicy, load_policy
from tests.sign.helpers import policy_doc, pulled_bundle, write_policy, write_scan_report


@dataclass
class Signed:
    tmp: Path
    mirror: Mirror
    record: BundleRecord
    key: attest.SigningKey
    policy_path: Path

    @property
    def policy(self) -> TrustPolicy:
        return load_policy(self.policy_path)


def make_signed(tmp: Path, *, name: str = "pair", seed: int = 1,
                mirror: Mirror | None = None, key: attest.SigningKey | None = None,
                draft_repo: str = "org/draft") -> Signed:
    mirror = mirror or Mirror.open(tmp / "mirror", create=True)
    rec = pulled_bundle(tmp, mirror, name, seed=seed, draft_repo=draft_repo)
    write_scan_report(mirror, name)
    key = key or attest.generate_key("ecdsa-p256")
    sign_bundle(mirror, name, [key])
    path = write_policy(tmp / "trust.yaml", policy_doc({"release": key}))
    return Signed(tmp, mirror, rec, key, path)


@pytest.fixture
def signed(tmp_path: Path) -> Signed:
    return make_signed(tmp_path)
