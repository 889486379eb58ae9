"""Verify an OMS ``model.sig`` against any model directory (the ``verify-model`` surface).

Same semantics as the reference verifier: the signature's own ``ignore_paths`` are honoured,
the signature file is excluded, and with ``ignore_unsigned_files`` only signed files are read
(missing ones still fail). Unlike the reference it reports every difference at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from specbundle.attest import (
    CertIdentity,
    ChainTrust,
    OmsManifest,
    PublicKey,
    open_model_sig,
    open_model_sig_chain,
)
from specbundle.attest.modeldir import ModelTree, hash_model_tree, scan_model_dir
from specbundle.attest.sigstore_oms import (
    SigstoreIdentity,
    SigstoreTrust,
    open_model_sig_sigstore,
)
from specbundle.errors import VerificationError
from specbundle.strict import MalformedDocument, read_bounded
from specbundle.verify.diff import Problem, diff_files

__all__ = ["ModelVerification", "ModelVerificationFailed", "verify_model"]

_MAX_SIG_BYTES = 256 * 1024 * 1024  # a signature names every file: large trees, large manifests


@dataclass(frozen=True)
class ModelVerification:
    """A directory that matched its signature."""

    model_dir: Path
    manifest: OmsManifest
    signer: str
    identity: CertIdentity | SigstoreIdentity | None = None  # certificate / sigstore signer


class ModelVerificationFailed(VerificationError):
    """The directory does not match its signature; ``problems`` lists every difference."""

    def __init__(self, model_dir: Path, problems: list[Problem]) -> None:
        super().__init__(f"{model_dir} does not match its signature:\n  "
                         + "\n  ".join(str(p) for p in problems))
        self.problems = tuple(problems)


def verify_model(
    model_dir: Path, public: PublicKey | ChainTrust | SigstoreTrust, *,
    signature: Path | None = None,
    ignore_paths: Iterable[str | Path] = (), ignore_git_paths: bool = True,
    ignore_unsigned_files: bool = False, allow_symlinks: bool = False,
    workers: int | None = None, progress: Callable[[int], None] | None = None,
) -> ModelVerification:
    """Check ``model_dir`` against its ``model.sig``, re-hashing every file in parallel.

    ``public`` is the signer's key (OMS key method) or the anchors its certificate chain
    must validate against (certificate method; validated now, the signature has no time),
    or the Sigstore identity, issuer and trusted root (sigstore method, offline).

    Raises:
        ModelVerificationFailed: files missing, extra, changed, or refused (symlinks).
        VerificationError: the signature itself does not verify with ``public``.
    """
    sig = signature or model_dir / "model.sig"
    try:
        data = read_bounded(sig, max_bytes=_MAX_SIG_BYTES, what=str(sig))  # never a FIFO
    except MalformedDocument as err:
        raise VerificationError(f"cannot read signature: {err}") from None
    except OSError as err:
        raise VerificationError(f"cannot read signature {sig}: {err.strerror}") from err
    identity: CertIdentity | SigstoreIdentity | None = None
    if isinstance(public, ChainTrust):
        manifest, identity = open_model_sig_chain(data, public)
        signer = identity.public.fingerprint
    elif isinstance(public, SigstoreTrust):
        manifest, identity = open_model_sig_sigstore(data, public)
        signer = f"sigstore:{identity.identity}"
    else:
        manifest, signer = open_model_sig(data, public), public.fingerprint
    tree = scan_model_dir(model_dir, ignore_paths=ignore_paths, ignore_git_paths=ignore_git_paths,
                          allow_symlinks=allow_symlinks, signature=sig,
                          extra_ignored=manifest.ignore_paths)
    expected = manifest.digests()
    refused = tree.refused
    if ignore_unsigned_files:
        tree = ModelTree(tree.root, {k: v for k, v in tree.files.items() if k in expected},
                         (), tree.ignore_paths, tree.allow_symlinks)
        refused = tuple((p, w) for p, w in refused if p in expected or p == ".")
    problems = [Problem("unsafe-file", f"model:{p}", why) for p, why in refused]
    actual: dict[str, str] = {}
    if tree.files:
        actual = hash_model_tree(tree, workers=workers, progress=progress).digests()
    refused_names = {p for p, _ in refused}
    problems += diff_files("model", {k: v for k, v in expected.items()
                                     if k not in refused_names}, actual)
    if problems:
        raise ModelVerificationFailed(model_dir, problems)
    return ModelVerification(model_dir, manifest, signer, identity)
