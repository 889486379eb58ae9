"""The base of every typed predicate: frozen, strict, wire names by alias, exact bytes back.

A predicate model is written with :meth:`PredicateModel.to_predicate` and read with
``model_validate`` on a predicate the strict JSON parser (:mod:`specbundle.strict`: duplicate
keys, depth and size limits) already produced. Fields set when the model was built (or
present in the signed bytes it was read from) are exactly the fields written back, nulls
included, so a model re-serialises a signed predicate to the same canonical bytes.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, JsonValue
from pydantic.alias_generators import to_camel

from specbundle.errors import VerificationError

__all__ = ["JsonObject", "OpenModel", "PredicateModel", "ResourceDescriptor", "StrictModel",
           "WrongPredicateType"]

#: A free-form JSON object (where the predicate format leaves the content to its producer).
JsonObject = dict[str, JsonValue]


class WrongPredicateType(VerificationError):
    """A statement of a predicate type (or version) no model is registered for, or not the
    type the caller expected; ``predicate_type`` names what was found."""

    def __init__(self, message: str, predicate_type: str = "") -> None:
        super().__init__(message)
        self.predicate_type = predicate_type


class StrictModel(BaseModel):
    """specbundle's own shapes: unknown fields are refused, types are not coerced."""

    model_config = ConfigDict(frozen=True, strict=True, extra="forbid", alias_generator=to_camel,
                              validate_by_name=True, validate_by_alias=True)

    def to_json(self) -> dict[str, Any]:
        """The wire form: fields that were set, under their wire names."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


class OpenModel(StrictModel):
    """A standard's shape (in-toto, SLSA, OMS): its consumers must ignore unknown fields, so
    they are kept (and written back) but never read."""

    model_config = ConfigDict(extra="allow")


class PredicateModel(StrictModel):
    """One predicate type and version; ``PREDICATE_TYPE`` is the URI it is signed under."""

    PREDICATE_TYPE: ClassVar[str]

    def to_predicate(self) -> dict[str, Any]:
        """The predicate object a statement signs."""
        return self.to_json()

    def signed_time(self) -> str | None:
        """When the claim was made, as signed: ``timeCreated`` (the in-toto SVR name) unless
        the format defines another field (provenance, VSA override this)."""
        value = getattr(self, "time_created", None)
        return value if isinstance(value, str) else None


class ResourceDescriptor(OpenModel):
    """in-toto ResourceDescriptor v1 (the fields specbundle writes and reads)."""

    name: str | None = None
    uri: str | None = None
    digest: dict[str, str] | None = None
    annotations: JsonObject | None = None
