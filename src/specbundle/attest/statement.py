"""in-toto Statement v1: build, sign as canonical JSON inside DSSE, and open again.

Statements are signed as canonical JSON bytes (sorted keys, no whitespace) and verified as
those exact bytes; parsing happens only *after* a signature checked out, through a private
pydantic model (the payload is untrusted input until then).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from specbundle._fsutil import canonical_json
from specbundle.attest.dsse import (
    INTOTO_PAYLOAD_TYPE,
    Envelope,
    EnvelopeCheck,
    check_envelope,
    sign_envelope,
)
from specbundle.attest.keys import PublicKey, SigningKey
from specbundle.attest.models import PredicateModel, WrongPredicateType, parse_predicate
from specbundle.attest.predicates import parse_time
from specbundle.errors import VerificationError
from specbundle.strict import loads_json

__all__ = [
    "STATEMENT_TYPE",
    "CheckedStatement",
    "Statement",
    "Subject",
    "artifact_subjects",
    "check_statement",
    "parse_statement",
    "sign_statement",
]

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"

_M = TypeVar("_M", bound=PredicateModel)


@dataclass(frozen=True)
class Subject:
    """A ResourceDescriptor subject: a name and a DigestSet (matched by digest only)."""

    name: str
    digest: Mapping[str, str]

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {"name": self.name, "digest": dict(self.digest)}


@dataclass(frozen=True)
class Statement:
    """A Statement v1 value; build it with :meth:`build` so it is validated."""

    subjects: tuple[Subject, ...]
    predicate_type: str
    predicate: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def build(
        cls, subjects: Sequence[Subject], predicate_type: str, predicate: Mapping[str, Any]
    ) -> Statement:
        """Validate and build; refuses empty subjects/digests, floats (not canonical) and a
        predicate that does not fit its type's model (or of a type without one)."""
        st = cls(tuple(subjects), predicate_type, dict(predicate))
        _Statement.model_validate(st.to_json())
        _reject_floats(st.predicate, "predicate")
        st.__dict__["typed"] = parse_predicate(predicate_type, st.predicate)
        return st

    @classmethod
    def of(cls, subjects: Sequence[Subject], predicate: PredicateModel) -> Statement:
        """The statement signing a typed predicate under its own type URI."""
        return cls.build(subjects, predicate.PREDICATE_TYPE, predicate.to_predicate())

    @cached_property
    def typed(self) -> PredicateModel:
        """The predicate as its type's model (validated once; raises when it does not fit).

        Raises:
            WrongPredicateType: no model exists for the predicate type.
            VerificationError: the predicate does not fit the model.
        """
        return parse_predicate(self.predicate_type, self.predicate)

    def typed_as(self, model: type[_M]) -> _M:
        """:attr:`typed`, for a caller that needs one type: any other type is refused.

        Raises:
            WrongPredicateType: the statement is of another predicate type.
            VerificationError: the predicate does not fit the model.
        """
        if self.predicate_type != model.PREDICATE_TYPE:
            raise WrongPredicateType(f"predicate type {self.predicate_type[:200]!r}, expected "
                                     f"{model.PREDICATE_TYPE!r}", self.predicate_type)
        got = self.typed
        if not isinstance(got, model):  # the registry maps each type to one model
            raise WrongPredicateType(f"no {model.__name__} model for {self.predicate_type!r}",
                                     self.predicate_type)
        return got

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {"_type": STATEMENT_TYPE, "subject": [s.to_json() for s in self.subjects],
                "predicateType": self.predicate_type, "predicate": dict(self.predicate)}

    def to_bytes(self) -> bytes:
        """The canonical bytes that get signed."""
        return canonical_json(self.to_json())

    @property
    def time(self) -> datetime | None:
        """The signed time of the claim, where the predicate type defines one."""
        try:
            return parse_time(self.typed.signed_time())
        except VerificationError:  # an untyped statement has no signed time (fail closed)
            return None

    def digests(self, algorithm: str) -> set[str]:
        """All subject digests of one algorithm (e.g. ``sha256``, ``gitCommit``)."""
        return {s.digest[algorithm] for s in self.subjects if algorithm in s.digest}


def _reject_floats(value: Any, where: str) -> None:
    # RFC 8785 number formatting differs from Python's for floats; carry them as strings.
    if isinstance(value, float):
        raise VerificationError(f"{where}: floats are not signed; use a string or integer")
    if isinstance(value, Mapping):
        for k, v in value.items():
            _reject_floats(v, f"{where}.{k}")
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _reject_floats(v, f"{where}[{i}]")


class _Subject(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    name: str
    digest: dict[str, str]

    @field_validator("digest")
    @classmethod
    def _non_empty(cls, v: dict[str, str]) -> dict[str, str]:
        if not v or not all(v.values()):
            raise ValueError("subject digest must be a non-empty DigestSet")
        return v


class _Statement(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type_: str = Field(alias="_type")
    subject: list[_Subject]
    predicateType: str  # noqa: N815 - the wire name
    predicate: dict[str, Any]

    @field_validator("type_")
    @classmethod
    def _stmt_type(cls, v: str) -> str:
        if v != STATEMENT_TYPE:
            raise ValueError(f"expected {STATEMENT_TYPE}, got {v!r}")
        return v

    @field_validator("subject")
    @classmethod
    def _subjects(cls, v: list[_Subject]) -> list[_Subject]:
        if not v:
            raise ValueError("a statement needs at least one subject")
        return v


def parse_statement(payload: bytes, *, typed: bool = True) -> Statement:
    """Parse statement bytes (call only on bytes whose signature was checked).

    With ``typed`` (the default) the predicate is validated against its type's model here, at
    the boundary; ``typed=False`` defers that to the first :attr:`Statement.typed` access (for
    a payload nobody trusted signed, whose content must not be looked at).

    Raises:
        WrongPredicateType: the predicate type has no model.
        VerificationError: the payload is not a statement, or its predicate does not fit.
    """
    try:
        raw = loads_json(payload, what="statement payload")
        model = _Statement.model_validate(raw)
    except (ValueError, ValidationError) as err:
        raise VerificationError(f"payload is not an in-toto Statement v1: {err}") from err
    st = Statement(
        tuple(Subject(s.name, dict(s.digest)) for s in model.subject),
        model.predicateType, model.predicate,
    )
    if typed:
        _ = st.typed
    return st


def sign_statement(statement: Statement, keys: Sequence[SigningKey]) -> Envelope:
    """Canonical bytes of ``statement`` in a DSSE envelope, one signature per key."""
    return sign_envelope(statement.to_bytes(), INTOTO_PAYLOAD_TYPE, keys)


@dataclass(frozen=True)
class CheckedStatement:
    """An envelope whose signatures were checked, and the statement it carries.

    ``statement`` is parsed from the envelope's payload bytes; ``signers`` lists trusted
    fingerprints with a valid signature. Empty ``signers`` means nobody trusted signed it.
    """

    envelope: Envelope
    statement: Statement
    check: EnvelopeCheck

    @property
    def signers(self) -> frozenset[str]:
        """Fingerprints of trusted keys that signed."""
        return self.check.signers


def check_statement(env: Envelope, trusted: Iterable[PublicKey]) -> CheckedStatement:
    """Check signatures and parse the statement; raises only when the payload is malformed.

    A statement a trusted key signed has its predicate validated against its type's model
    (an unknown type raises :class:`~specbundle.attest.models.WrongPredicateType`); an
    unsigned one's predicate is not looked at until ``statement.typed`` is read.
    """
    if env.payload_type != INTOTO_PAYLOAD_TYPE:
        raise VerificationError(
            f"payloadType is {env.payload_type!r}, expected {INTOTO_PAYLOAD_TYPE!r}"
        )
    res = check_envelope(env, trusted)
    return CheckedStatement(env, parse_statement(res.payload, typed=bool(res.signers)), res)


def artifact_subjects(
    name: str, root_digest: str, commit: str, commit_kind: str = "git"
) -> tuple[Subject, Subject]:
    """The two subjects every specbundle attestation about a model names.

    The OMS root digest (what ``model.sig`` signs) identifies the bytes; the commit identifies
    where they came from. A ``dir:`` source has no git history, so its content-derived commit
    goes under a specbundle DigestSet key instead of pretending to be ``gitCommit``.
    """
    key = "gitCommit" if commit_kind == "git" else "specbundleContentCommit"
    return (Subject(name, {"sha256": root_digest}), Subject(f"{name}@{commit}", {key: commit}))
