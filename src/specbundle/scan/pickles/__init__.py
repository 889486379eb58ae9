"""Pickles and zips: an allow-list walk of pickle opcodes, never unpickling, and a strict zip.

:mod:`.walker` is the walk (its hot loop in :mod:`.loop`, compiled where the build can, over
the opcode decoder of :mod:`.ops` and the one-opcode semantics of :mod:`.semantics`);
:mod:`.zipwalk` reads a zip's raw structure; :mod:`.check` and :mod:`.second_opinion` are the
checks. The walker's modules share internals (the compiled loop is split out of the walker);
other packages use only the names below.

The checks are imported from their modules, not here: type detection
(:mod:`specbundle.scan.sniff`), which every check reads, asks the walker whether bytes are a
pickle, so this face must not import a check.
"""

from __future__ import annotations

from specbundle.scan.pickles.walker import (
    TORCH_ALLOWED,
    PickleWalk,
    looks_like_pickle,
    walk_pickle,
)
from specbundle.scan.pickles.zipwalk import ZipAmbiguity, walk_zip

__all__ = ["TORCH_ALLOWED", "PickleWalk", "ZipAmbiguity", "looks_like_pickle", "walk_pickle",
           "walk_zip"]
