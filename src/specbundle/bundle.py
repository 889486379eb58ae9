"""One bundle value: what render, bench, tune, images and admit act on.

A :class:`Bundle` holds a bundle version's record and spec (parsed once) with accessors for
the files a stage uses beside the models: the engine image records, the benchmark prompts and
the tuned schedule. It has exactly two constructors, and the CLI is the only place that picks
one:

* :func:`specbundle.verify.verify_bundle` returns a :class:`~specbundle.verify.VerifiedBundle`
  (isolated side): everything comes from the signed manifest, and every accessor reads only
  bytes whose digests that manifest (or a statement verification counted) signs;
* :func:`read_unsigned` returns an :class:`UnsignedBundle` (connected side, or an explicit,
  loudly reported ``--unsigned``): the mirror's own ``bundle.json`` and bundle-level files.

Stages never branch on which one they got: each accessor is the subclass's own, so the safe
reading is the only one a verified bundle can give.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specbundle.attest.mirrored import bundle_manifest, claimed_subjects
from specbundle.attest.statement import Subject
from specbundle.digest import sha256_bytes
from specbundle.errors import MirrorError, SpecError, VerificationError
from specbundle.image_record import ImageRecord, bundle_image_bytes, parse_image_record
from specbundle.mirror import Mirror
from specbundle.record import BundleRecord
from specbundle.schedule import TunedSchedule, read_logged_schedule
from specbundle.spec import BundleSpec, parse_spec
from specbundle.strict import MalformedDocument, read_bounded, read_mirror_file

__all__ = ["Bundle", "UnsignedBundle", "read_unsigned"]

_TOKEN = object()


@dataclass(frozen=True)
class Bundle(ABC):
    """A bundle version as every stage acts on it (see the module docstring).

    Abstract: only :class:`UnsignedBundle` (:func:`read_unsigned`) and
    :class:`~specbundle.verify.VerifiedBundle` (:func:`~specbundle.verify.verify_bundle`)
    exist.
    """

    mirror: Mirror
    record: BundleRecord
    spec: BundleSpec
    #: role -> the artifact's own tree (``Mirror.artifact_dir``): what verify hashed
    paths: Mapping[str, Path]

    @property
    def name(self) -> str:
        """The bundle name."""
        return self.record.name

    @property
    @abstractmethod
    def signed(self) -> bool:
        """Whether a verification under a trust policy produced this value."""

    @property
    @abstractmethod
    def roots(self) -> Mapping[str, str]:
        """OMS root digest per role."""

    @abstractmethod
    def custody(self) -> dict[str, Any]:
        """How this value was obtained, for every stage's output and JSON."""

    @abstractmethod
    def subjects(self) -> list[Subject]:
        """What a statement about this bundle names (signed manifest first when verified)."""

    @abstractmethod
    def image_engines(self) -> tuple[str, ...]:
        """Engines this bundle carries an image record for."""

    @abstractmethod
    def image_record_bytes(self, engine: str) -> bytes | None:
        """The bytes of one engine's image record, None when the bundle carries none."""

    @abstractmethod
    def image_digests(self) -> frozenset[str]:
        """Record and archive digests an image load may accept for this bundle."""

    @abstractmethod
    def tuned_schedule(self, engine: str) -> TunedSchedule | None:
        """The measured schedule in force for ``engine``, if any."""

    @abstractmethod
    def _unnamed_prompts(self, rel: str, path: Path) -> bytes:
        """A prompts file nothing signed names (only the unsigned reading accepts one)."""

    def image_record(self, engine: str) -> ImageRecord | None:
        """One engine's image record, parsed strictly.

        Raises:
            VerificationError: the record is unusable (or, verified, not the signed bytes).
        """
        raw = self.image_record_bytes(engine)
        if raw is None:
            return None
        try:
            return parse_image_record(raw, engine)
        except MirrorError as err:
            raise VerificationError(f"bundle {self.name!r}: {err.message}") from None

    def image_records(self) -> dict[str, ImageRecord]:
        """Every image record the bundle carries, by engine."""
        out = {e: self.image_record(e) for e in self.image_engines()}
        return {e: r for e, r in out.items() if r is not None}

    def prompts(self) -> tuple[bytes, Path] | None:
        """The benchmark prompts file (bytes, where it was read), None for the default set.

        A file in the bundle folder is used only as the bytes whose digest the record names
        (``prompts_sha256``, set by pull and signed with the record); one in the target
        snapshot is covered by the snapshot's signature. Anything else is the subclass's call:
        a verified bundle refuses it, since swapped prompts would change what admission
        measures.
        """
        rel = self.spec.bench.prompts_file
        if rel is None:
            return None
        if rel.startswith("/") or ".." in Path(rel).parts:
            raise SpecError("must be a relative path inside the bundle", field="bench.prompts_file")
        in_bundle = self.mirror.bundle_dir(self.name) / rel
        if self.record.prompts_sha256 is not None:
            try:
                data = read_mirror_file(in_bundle)  # a regular file, never a link, FIFO, device
            except MalformedDocument as err:  # a link, FIFO or device planted in the mirror
                raise VerificationError(f"cannot read the bundle's prompts file {rel!r}: {err}",
                                        hint="restore the bundle from a transfer set") from None
            except OSError as err:
                raise SpecError(f"cannot read the bundle's prompts file {rel!r}: {err.strerror}",
                                field="bench.prompts_file") from None
            if sha256_bytes(data) != self.record.prompts_sha256:
                raise VerificationError(f"prompts file {rel!r} differs from the one the bundle "
                                        "record signs", hint="pull and sign the bundle again")
            return data, in_bundle
        if rel in {f.path for f in self.record.target.files}:
            path = self.mirror.artifact_dir(self.record.target) / rel
            try:  # a link into the content store by design; a FIFO or device is refused
                return read_bounded(path, what=f"prompts file {path}"), path
            except MalformedDocument as err:
                raise VerificationError(str(err), hint="restore the bundle from a transfer set") \
                    from None
            except OSError as err:
                raise SpecError(f"cannot read prompts file: {err.strerror}",
                                file=str(path)) from None
        return self._unnamed_prompts(rel, in_bundle), in_bundle


@dataclass(frozen=True)
class UnsignedBundle(Bundle):
    """The mirror's own, unsigned reading of a bundle (connected side; ``--unsigned``)."""

    _token: object = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._token is not _TOKEN:
            raise TypeError("UnsignedBundle is only created by specbundle.bundle.read_unsigned")

    @property
    def signed(self) -> bool:
        """Never: nothing checked who wrote these bytes."""
        return False

    @property
    def roots(self) -> Mapping[str, str]:
        """Root digests computed from the record's digests (objects must be present)."""
        return {a.role: bundle_manifest(self.mirror, a).root_digest
                for a in self.record.artifacts}

    def custody(self) -> dict[str, Any]:
        """Unsigned, said so."""
        return {"signed": False,
                "source": f"bundle record of {self.name!r} (unsigned: no --trust given)"}

    def subjects(self) -> list[Subject]:
        """The artifacts as the record claims them."""
        return claimed_subjects(self.mirror, self.record)

    def image_engines(self) -> tuple[str, ...]:
        """Engines with a bundle-level record."""
        return tuple(bundle_image_bytes(self.mirror, self.name))

    def image_record_bytes(self, engine: str) -> bytes | None:
        """The bundle-level record (``bundles/<name>/images/<engine>.json``)."""
        return bundle_image_bytes(self.mirror, self.name).get(engine)

    def image_digests(self) -> frozenset[str]:
        """The bundle record's ``extra_blobs``: integrity, not authorship."""
        return frozenset(self.record.extra_blobs)

    def tuned_schedule(self, engine: str) -> TunedSchedule | None:
        """The schedule file any logged tune statement names (signatures unchecked)."""
        return read_logged_schedule(self.mirror, self.name, engine)

    def _unnamed_prompts(self, rel: str, path: Path) -> bytes:
        try:
            return read_mirror_file(path, what=f"prompts file {path}")
        except MalformedDocument as err:
            raise VerificationError(str(err)) from None
        except OSError:
            pass
        raise SpecError(f"{rel!r} is in neither the bundle folder nor the target snapshot",
                        field="bench.prompts_file")


def read_unsigned(mirror: Mirror, name: str) -> UnsignedBundle:
    """The connected side's reading of bundle ``name``: ``bundle.json``, nothing verified.

    Raises:
        BundleNotFound: no such bundle.
        SpecError: the recorded spec does not parse.
    """
    rec = mirror.load_bundle(name)
    spec = parse_spec(rec.spec, file=f"bundles/{name}/bundle.json")
    paths: dict[str, Path] = {a.role: mirror.artifact_dir(a) for a in rec.artifacts}
    return UnsignedBundle(mirror, rec, spec, paths, _TOKEN)
