"""The file inventory of one artifact tree, walked without following links out of it.

A mirrored snapshot is a tree of symlinks into the content store (Hugging Face cache layout),
so a symlink is acceptable only when it resolves inside the tree or inside the roots the caller
allows (the mirror's ``objects/``). Links that escape, hard links shared with files outside the
tree and special files are recorded as findings here and never handed to the format checks.
"""

from __future__ import annotations

import os
import stat
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path, PurePosixPath

from specbundle.names import MAX_DEPTH
from specbundle.record import SkippedFile
from specbundle.scan.findings import Finding, Severity, finding

__all__ = ["ArtifactTree", "TreeFile", "walk_tree"]


@dataclass(frozen=True)
class TreeFile:
    """A regular file in the tree: its relative name and the real path to read."""

    rel: str
    path: Path
    size: int


@dataclass(frozen=True)
class ArtifactTree:
    """One artifact (target, draft, or a plain directory) as the checks see it."""

    role: str
    root: Path
    files: tuple[TreeFile, ...]
    problems: tuple[Finding, ...] = ()
    skipped: tuple[SkippedFile, ...] = ()
    allow_pickle: bool = False
    allow_remote_code: bool = False
    repo: str | None = None
    gguf_file: str | None = None

    @cached_property
    def _by_rel(self) -> dict[str, TreeFile]:
        return {f.rel: f for f in self.files}

    @cached_property
    def suffixes(self) -> frozenset[str]:
        """Lower-cased suffixes present in the tree (``".safetensors"``, ...)."""
        return frozenset(PurePosixPath(f.rel).suffix.lower() for f in self.files)

    def file(self, rel: str) -> TreeFile | None:
        """The file at a relative path, if present (a dict lookup: trees hold 10^4+ files)."""
        return self._by_rel.get(rel)

    def matching(self, suffix: str) -> tuple[TreeFile, ...]:
        """Files whose name ends with ``suffix``."""
        return tuple(f for f in self.files if f.rel.endswith(suffix))


def _inside(path: Path, roots: tuple[Path, ...]) -> bool:
    return any(path == r or path.is_relative_to(r) for r in roots)


# Real repositories are a few folders deep and hold at most tens of thousands of files; past
# these (and past specbundle.names.MAX_DEPTH folders) the tree is not analysed further and the
# scan reports it (HIGH), it never hangs.
MAX_FILES = 200_000


def _entries(path: str) -> list[os.DirEntry[str]]:
    with os.scandir(path) as it:
        return sorted(it, key=lambda e: e.name)


def walk_tree(root: Path, role: str, *, allowed_roots: tuple[Path, ...] = ()) -> ArtifactTree:
    """Inventory ``root`` (policy fields at their fail-closed defaults; use ``replace``).

    The walk is iterative (a 10 000-deep folder chain is a finding, not a RecursionError), a
    folder or file that cannot be read is a finding (never silently absent), and links and
    special files are reported here and never handed to the format checks.
    """
    root = root.resolve()
    roots = (root, *(r.resolve() for r in allowed_roots))
    files: list[TreeFile] = []
    problems: list[Finding] = []
    inodes: Counter[tuple[int, int]] = Counter()
    links: dict[tuple[int, int], tuple[int, str]] = {}
    stack: list[tuple[str, str, int]] = [(str(root), "", 0)]  # (path, rel, depth)
    while stack:
        dirpath, dirrel, depth = stack.pop()
        try:
            entries = _entries(dirpath)
        except OSError as err:
            problems.append(finding("files.unreadable", Severity.HIGH,
                                    f"folder cannot be listed: {err.strerror or err}",
                                    dirrel or "."))
            continue
        subdirs: list[tuple[str, str, int]] = []
        for entry in entries:
            rel = f"{dirrel}/{entry.name}" if dirrel else entry.name
            try:
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    if depth + 1 >= MAX_DEPTH:
                        problems.append(finding(
                            "files.too-many", Severity.HIGH,
                            f"folders nested deeper than {MAX_DEPTH}: not analysed", rel))
                    else:
                        subdirs.append((entry.path, rel, depth + 1))
                    continue
                if len(files) >= MAX_FILES:
                    problems.append(finding(
                        "files.too-many", Severity.HIGH,
                        f"more than {MAX_FILES} files: the rest is not analysed", rel))
                    stack.clear()
                    subdirs.clear()
                    break
                self_check = _one(Path(entry.path), rel, st, roots, problems)
            except OSError as err:
                problems.append(finding("files.unreadable", Severity.HIGH,
                                        f"cannot be inspected: {err.strerror or err}", rel))
                continue
            if self_check is None:
                continue
            p, st, via_link = self_check
            # A link into the content store reaches an immutable object shared by design, so
            # only files stored in the tree itself are checked for foreign hard links.
            if st.st_nlink > 1 and not via_link:
                key = (st.st_dev, st.st_ino)
                inodes[key] += 1
                links[key] = (st.st_nlink, rel)
            files.append(TreeFile(rel, p, st.st_size))
        stack.extend(reversed(subdirs))
    for key, (nlink, rel) in sorted(links.items(), key=lambda kv: kv[1][1]):
        if nlink > inodes[key]:
            problems.append(finding(
                "files.hard-link", Severity.HIGH,
                "hard link shared with a file outside the tree", rel,
                links=nlink, inside=inodes[key]))
    return ArtifactTree(role=role, root=root, files=tuple(sorted(files, key=lambda f: f.rel)),
                        problems=tuple(p.with_role(role) for p in problems))


def _one(p: Path, rel: str, st: os.stat_result, roots: tuple[Path, ...],
         problems: list[Finding]) -> tuple[Path, os.stat_result, bool] | None:
    """A non-folder entry: the real path and status to scan, or None (reported instead)."""
    via_link = stat.S_ISLNK(st.st_mode)
    if via_link:
        real = Path(os.path.realpath(p))
        if real.is_dir() and _inside(real, roots):
            problems.append(finding(
                "files.symlink-escape", Severity.CRITICAL,
                "symlinked directory (not followed)", rel, target=str(p.readlink())))
            return None
        if not _inside(real, roots) or not real.is_file():
            problems.append(finding(
                "files.symlink-escape", Severity.CRITICAL,
                "symlink points outside the artifact tree", rel, target=str(p.readlink())))
            return None
        p, st = real, real.stat()
    elif not stat.S_ISREG(st.st_mode):
        problems.append(finding("files.special", Severity.HIGH,
                                "device, FIFO or socket in the tree", rel,
                                mode=oct(st.st_mode)))
        return None
    if st.st_mode & (stat.S_ISUID | stat.S_ISGID):
        problems.append(finding("files.special", Severity.HIGH,
                                "setuid/setgid bit set", rel, mode=oct(st.st_mode)))
    return p, st, via_link
