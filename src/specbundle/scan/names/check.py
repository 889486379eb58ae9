"""File names and file types: the first gate, before any format is parsed.

Names end up in paths on the isolated side (snapshot trees, manifests), so path syntax,
case-insensitive collisions and control characters are rejected outright, by the rules pull
screens a hub listing with (:mod:`specbundle.names`). Types come from the
bytes (:mod:`specbundle.scan.sniff`): executables anywhere, archives the engines never read, and
any file whose content disagrees with its name are findings.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import ClassVar

from specbundle.names import colliding, collisions, name_problem
from specbundle.scan.findings import CheckOutcome, Finding, Severity, finding
from specbundle.scan.interface import Check, CheckContext
from specbundle.scan.inventory import ArtifactTree
from specbundle.scan.sniff import ARCHIVE_KINDS, EXECUTABLE_KINDS, FileKind, expected_kinds

__all__ = ["FilesCheck", "colliding", "name_problem"]

class FilesCheck(Check):
    """Names, links, special files, executables, archives and magic bytes."""

    family = "files"
    rules: ClassVar[dict[str, str]] = {
        "files.unsafe-name": "Traversal, absolute/UNC/backslash, control, bidi, zero-width, "
                             "look-alike or Windows-reserved names",
        "files.name-collision": "Names that collide case-insensitively or after normalisation",
        "files.symlink-escape": "Symlink resolving outside the artifact tree",
        "files.hard-link": "Hard link shared with a file outside the tree",
        "files.special": "Device file, FIFO, socket or setuid/setgid file",
        "files.executable": "Executable (ELF, PE, Mach-O, shebang script)",
        "files.archive": "Archive that no serving engine reads",
        "files.magic-mismatch": "Content does not match what the file name says",
        "files.polyglot": "Bytes that parse as safetensors and as another format (a polyglot)",
        "files.unknown-type": "A file type the scan does not know (fail closed)",
        "files.record-mismatch": "Mirrored tree differs from the bundle record",
        "files.skipped": "A file pull deliberately did not mirror (recorded)",
        "files.nothing-scanned": "No file to scan: an empty tree is never reported clean",
        "files.unreadable": "A file or folder the scan cannot read (never treated as absent)",
        "files.too-many": "More files or deeper folders than the scan analyses",
    }

    def run(self, ctx: CheckContext) -> CheckOutcome:
        """Check every tree's names and every file's type."""
        out: list[Finding] = []
        for tree in ctx.trees:
            out.extend(tree.problems)
            out.extend(f.with_role(tree.role) for f in self._tree(ctx, tree))
        return CheckOutcome.of(out)

    def _tree(self, ctx: CheckContext, tree: ArtifactTree) -> Iterator[Finding]:
        if not tree.files:
            # one public scanner reports "nothing scanned" as clean; we block instead
            yield finding("files.nothing-scanned", Severity.HIGH,
                          f"no files to scan in {tree.root}", None)
        names = [f.rel for f in tree.files] + [s.path for s in tree.skipped]
        for n in names:
            why = name_problem(n)
            if why:
                yield finding("files.unsafe-name", Severity.CRITICAL, why, n)
        for _key, members in collisions(names):
            yield finding("files.name-collision", Severity.HIGH,
                          "names collide on case-insensitive file systems", members[0],
                          names=", ".join(members))
        for s in tree.skipped:
            yield finding("files.skipped", Severity.INFO, f"not mirrored: {s.reason}", s.path,
                          size=s.size)
        for f in tree.files:
            kind = ctx.kind(f.path)
            why = ctx.unreadable(f.path)
            if why:
                yield finding("files.unreadable", Severity.HIGH,
                              f"cannot be read, so cannot be checked: {why}", f.rel)
                continue
            yield from self._type(f.rel, kind)

    def _type(self, rel: str, kind: FileKind) -> Iterator[Finding]:
        expected = expected_kinds(rel)
        if kind is FileKind.POLYGLOT:  # no name allows it: each loader would see another file
            yield finding("files.polyglot", Severity.CRITICAL,
                          "bytes parse as safetensors and as another format", rel,
                          suffix=PurePosixPath(rel).suffix)
        elif kind in EXECUTABLE_KINDS and not (kind is FileKind.SCRIPT and rel.endswith(".py")):
            yield finding("files.executable", Severity.CRITICAL,
                          f"executable content ({kind.value})", rel,
                          kind=kind.value, suffix=PurePosixPath(rel).suffix)
        elif kind in ARCHIVE_KINDS and not (expected and kind in expected):
            yield finding("files.archive", Severity.HIGH,
                          f"{kind.value} archive; engines never read archives", rel,
                          kind=kind.value)
        elif expected is None:
            sev = Severity.MEDIUM if kind in (FileKind.TEXT, FileKind.EMPTY) else Severity.HIGH
            yield finding("files.unknown-type", sev,
                          f"unknown file name; content is {kind.value}", rel, kind=kind.value)
        elif kind not in expected:
            yield finding("files.magic-mismatch", Severity.HIGH,
                          f"content is {kind.value}, name says "
                          f"{'/'.join(sorted(k.value for k in expected))}", rel,
                          kind=kind.value)
