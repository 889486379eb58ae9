"""Moved to tests/lib/ (models.small_pair, specs.bundle_spec, bundles.pulled_bundle with
``synth=True``); kept importable for modules not yet ported."""

from __future__ import annotations

from pathlib import Path

from specbundle.mirror import Mirror
from specbundle.record import BundleRecord
from tests.lib import bundles
from tests.lib.models import small_pair
from tests.lib.specs import bundle_spec

__all__ = ["bundle_spec", "pulled_bundle", "small_pair"]


def pulled_bundle(root: Path, work: Path, name: str = "pair", *, image: str | None = None,
                  seed: int = 0) -> tuple[Mirror, BundleRecord]:
    """A mirror at ``root`` holding one pulled bundle named ``name`` (the old signature)."""
    mirror = Mirror.open(root, create=True)
    return mirror, bundles.pulled_bundle(work, mirror, name, seed=seed, synth=True, image=image)
