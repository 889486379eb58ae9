"""Compatibility of a draft with its target under a method (:mod:`.check`), tokenizer
identity included (:mod:`.vocab`)."""

from __future__ import annotations

from specbundle.scan.compat.check import CompatCheck

__all__ = ["CompatCheck"]
