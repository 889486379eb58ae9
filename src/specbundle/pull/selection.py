"""Which files of a model repository are mirrored, and why the others are not.

Default: only what serving engines read (weights in safetensors/GGUF, configs, tokenizer
files, chat templates, the model card and license). Pickle checkpoints and Python files are
never pulled unless the spec asks, and even then pickles are dropped when safetensors carry
the same weights. Every file left behind is recorded with its reason.
"""

from __future__ import annotations

from fnmatch import fnmatch
from pathlib import PurePosixPath

from specbundle.pull.interface import RemoteFile
from specbundle.record import SkippedFile
from specbundle.spec import ArtifactSpec

__all__ = ["ENGINE_PATTERNS", "PICKLE_SUFFIXES", "REMOTE_CODE_PATTERNS", "select_files"]

ENGINE_PATTERNS: tuple[str, ...] = (
    "*.safetensors", "*.safetensors.index.json", "*.gguf",
    "config.json", "generation_config.json", "params.json", "preprocessor_config.json",
    "processor_config.json", "video_preprocessor_config.json",
    "tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json",
    # mistral-common's tokenizers (--tokenizer-mode mistral)
    "tekken.json", "tokenizer.model.v[0-9]", "tokenizer.model.v[0-9][0-9]",
    "tokenizer.mm.model.v[0-9]", "tokenizer.mm.model.v[0-9]m[0-9]",
    "added_tokens.json", "vocab.json", "vocab.txt", "merges.txt", "*.tiktoken",
    "chat_template.jinja", "chat_template.json", "additional_chat_templates/*",
    "README.md", "LICENSE*", "NOTICE*", "USE_POLICY*",
)
PICKLE_SUFFIXES: tuple[str, ...] = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt",
                                    ".joblib", ".npy", ".npz")
REMOTE_CODE_PATTERNS: tuple[str, ...] = ("*.py", "custom_generate/*")


def _match(path: str, patterns: tuple[str, ...]) -> bool:
    name = PurePosixPath(path).name
    return any(fnmatch(path, p) or ("/" not in p and fnmatch(name, p)) for p in patterns)


def _is_pickle(path: str) -> bool:
    return PurePosixPath(path).suffix.lower() in PICKLE_SUFFIXES


def select_files(
    art: ArtifactSpec, files: tuple[RemoteFile, ...]
) -> tuple[tuple[RemoteFile, ...], tuple[SkippedFile, ...]]:
    """Split a listing into files to mirror and files skipped (with reasons)."""
    has_safetensors = any(f.path.endswith(".safetensors") for f in files)
    keep: list[RemoteFile] = []
    skipped: list[SkippedFile] = []

    def skip(f: RemoteFile, reason: str) -> None:
        skipped.append(SkippedFile(f.path, reason, f.size))

    for f in sorted(files, key=lambda x: x.path):
        parts = PurePosixPath(f.path).parts
        if parts[-1].startswith(".git") or any(x.lower() == ".git" for x in parts):
            skip(f, "git metadata")
        elif _is_pickle(f.path):
            if not art.allow_pickle:
                skip(f, "pickle format (set allow_pickle: true to pull it)")
            elif has_safetensors:
                skip(f, "pickle not mirrored: safetensors carry the weights")
            elif art.allow_patterns is None or _match(f.path, art.allow_patterns):
                keep.append(f)
            else:
                skip(f, "not matched by allow_patterns")
        elif _match(f.path, REMOTE_CODE_PATTERNS):
            if not art.allow_remote_code:
                skip(f, "remote code (set allow_remote_code: true to pull it)")
            elif art.allow_patterns is None or _match(f.path, art.allow_patterns):
                keep.append(f)
            else:
                skip(f, "not matched by allow_patterns")
        elif art.allow_patterns is not None:
            if _match(f.path, art.allow_patterns):
                keep.append(f)
            else:
                skip(f, "not matched by allow_patterns")
        elif f.path.endswith(".gguf") and art.gguf_file and f.path != art.gguf_file:
            skip(f, f"another GGUF variant (gguf_file is {art.gguf_file})")
        elif _match(f.path, ENGINE_PATTERNS):
            keep.append(f)
        else:
            skip(f, "not needed by the serving engines")
    return tuple(keep), tuple(skipped)
