"""Which files of a model directory an OMS signature covers, and their digests.

Mirrors the reference tool's ``files`` serialisation so that both tools see the same file set:
every regular file under the root, minus ignored paths (a directory ignores everything below
it), minus the git paths at the root unless asked, minus the signature file itself. Symlinks
are followed only when allowed; a symlinked *directory* is refused outright, because the
reference silently skips it and a signature that silently omits files is worse than an error.
Special files (sockets, fifos, devices) and dangling links are always refused.

A model may also be a single file (a lone GGUF or ONNX): OMS names its one resource by the
file's basename, and the model (subject) by the same name.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from specbundle.attest.oms import GIT_IGNORED_PATHS, OmsManifest
from specbundle.digest import hash_files
from specbundle.errors import UsageError

__all__ = ["ModelTree", "hash_model_tree", "resolve_ignore_paths", "scan_model_dir"]


@dataclass(frozen=True)
class ModelTree:
    """The files of a model directory as the signature sees them.

    ``files`` maps POSIX relative path -> absolute path (symlinks included when allowed);
    ``refused`` lists ``(path, reason)`` for entries that make the tree unsignable.
    """

    root: Path
    files: dict[str, Path]
    refused: tuple[tuple[str, str], ...]
    ignore_paths: tuple[str, ...]
    allow_symlinks: bool


def resolve_ignore_paths(model_dir: Path, paths: Iterable[str | Path]) -> tuple[str, ...]:
    """Ignore paths as POSIX paths relative to the model root.

    An absolute path, or a relative one that resolves inside the model from the current
    directory (how the reference CLI reads ``--ignore-paths``), is made model-relative; any
    other relative path is taken as already model-relative. Paths outside the model drop out.
    """
    root = model_dir.resolve()
    out: list[str] = []
    for p in paths:
        pp = Path(p)
        cand = pp if pp.is_absolute() else Path.cwd() / pp
        try:
            rel = cand.resolve().relative_to(root).as_posix()
        except ValueError:
            if pp.is_absolute():
                continue
            rel = PurePosixPath(pp.as_posix()).as_posix()
        if rel not in (".", "") and not rel.startswith("../"):
            out.append(rel)
    return tuple(dict.fromkeys(out))


def _ignored(rel: str, ignore: tuple[str, ...]) -> bool:
    return any(rel == i or rel.startswith(i.rstrip("/") + "/") for i in ignore)


def scan_model_dir(
    model_dir: Path, *, ignore_paths: Iterable[str | Path] = (), ignore_git_paths: bool = True,
    allow_symlinks: bool = False, signature: Path | None = None,
    extra_ignored: Iterable[str] = (),
) -> ModelTree:
    """List the files a signature over ``model_dir`` (a folder or one file) covers (no hashing)."""
    if model_dir.is_file():
        return _single_file(model_dir, allow_symlinks=allow_symlinks)
    if not model_dir.is_dir():
        raise UsageError(f"{model_dir} is neither a directory nor a regular file")
    refused: list[tuple[str, str]] = []
    if model_dir.is_symlink() and not allow_symlinks:
        refused.append((".", "the model path is a symlink (pass --allow-symlinks)"))
    extra = [signature] if signature is not None else []
    ignore = resolve_ignore_paths(model_dir, [*ignore_paths, *extra])
    ignore = (*GIT_IGNORED_PATHS, *ignore) if ignore_git_paths else ignore
    ignore = tuple(dict.fromkeys((*ignore, *extra_ignored)))
    files: dict[str, Path] = {}
    for dirpath, dirnames, filenames in os.walk(model_dir):
        base = Path(dirpath)
        for name in sorted([*dirnames, *filenames]):
            path = base / name
            rel = path.relative_to(model_dir).as_posix()
            if _ignored(rel, ignore):
                continue
            try:
                st = path.lstat()
                target = path.stat() if stat.S_ISLNK(st.st_mode) else st
            except FileNotFoundError:
                refused.append((rel, "dangling symlink"))
                continue
            if stat.S_ISLNK(st.st_mode):
                if stat.S_ISDIR(target.st_mode):
                    refused.append((rel, "symlinked directory (not signable)"))
                elif not allow_symlinks:
                    refused.append((rel, "symlink (pass --allow-symlinks to follow it)"))
                elif stat.S_ISREG(target.st_mode):
                    files[rel] = path
                else:
                    refused.append((rel, "symlink to a special file"))
            elif stat.S_ISREG(st.st_mode):
                files[rel] = path
            elif not stat.S_ISDIR(st.st_mode):
                refused.append((rel, "not a regular file or directory"))
    return ModelTree(model_dir, files, tuple(refused), ignore, allow_symlinks)


def _single_file(path: Path, *, allow_symlinks: bool) -> ModelTree:
    refused: tuple[tuple[str, str], ...] = ()
    if path.is_symlink() and not allow_symlinks:
        refused = ((path.name, "symlink (pass --allow-symlinks to follow it)"),)
    files = {} if refused else {path.name: path}
    return ModelTree(path, files, refused, GIT_IGNORED_PATHS, allow_symlinks)


def hash_model_tree(
    tree: ModelTree, *, known: dict[str, str] | None = None, workers: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> OmsManifest:
    """Digest every file (in parallel) unless ``known`` already holds its digest."""
    known = known or {}
    todo = [p for rel, p in tree.files.items() if rel not in known]
    hashed = hash_files(todo, workers=workers, progress=progress) if todo else {}
    pairs = [(rel, known.get(rel) or hashed[p]) for rel, p in tree.files.items()]
    name = tree.root.name if tree.root.is_file() else tree.root.resolve().name
    return OmsManifest.build(name, pairs, allow_symlinks=tree.allow_symlinks,
                             ignore_paths=tree.ignore_paths)
