"""File names and types: the first gate, before any format is parsed (:mod:`.check`)."""

from __future__ import annotations

from specbundle.scan.names.check import FilesCheck, name_problem

__all__ = ["FilesCheck", "name_problem"]
