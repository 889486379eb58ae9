"""A complete chain of custody in a real mirror: pull -> scan -> sign -> render -> checkpoint."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specbundle.attest import SigningKey, generate_key
from specbundle.audit import write_checkpoint
from specbundle.bundle import read_unsigned
from specbundle.mirror import Mirror
from specbundle.pull import pull_bundle
from specbundle.record import BundleRecord
from specbundle.render import render_bundle
from specbundle.scan import scan_bundle
from specbundle.sign import sign_bundle
from specbundle.synth import SynthPair
from specbundle.verify import TrustPolicy
from tests.lib.models import small_pair
from tests.lib.policy import policy_for
from tests.lib.specs import bundle_spec


@dataclass(frozen=True)
class Chain:
    """A mirror with one fully signed bundle and the keys/policy that vouch for it."""

    mirror: Mirror
    record: BundleRecord
    release: SigningKey
    other: SigningKey
    policy: TrustPolicy
    work: Path


def build_chain(root: Path, *, name: str = "pair", seed: int = 0,
                release: SigningKey | None = None, mirror: Mirror | None = None,
                image: str | None = None, llamacpp: dict[str, Any] | None = None,
                before_sign: Callable[[Mirror], object] | None = None,
                pair: SynthPair | None = None) -> Chain:
    """Pull a synthetic pair, scan, sign, render for llama.cpp and sign a log checkpoint.

    ``before_sign`` runs between scan and sign (e.g. to save engine images into the bundle);
    ``pair``: a shared read-only pair to pull (else :func:`small_pair` with ``seed`` is built
    under ``root``).
    """
    pair = pair or small_pair(root / f"models-{name}", seed=seed)
    spec = bundle_spec(pair, name, image=image, llamacpp=llamacpp)
    mirror = mirror or Mirror.open(root / "mirror", create=True)
    record = pull_bundle(spec, mirror, workers=2).record
    scan_bundle(mirror, record, spec)
    if before_sign is not None:
        before_sign(mirror)
    key = release or generate_key("ecdsa-p256")
    sign_bundle(mirror, name, [key])
    render_bundle(read_unsigned(mirror, name), "llamacpp", "shell", allow_unpinned_image=True)
    write_checkpoint(mirror, [key])
    other = generate_key("ecdsa-p256")
    return Chain(mirror, record, key, other, policy_for({"release": key}), root)
