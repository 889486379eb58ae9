"""Problems verification reports, and the file-set comparison behind most of them.

Every message says what was expected and what was found, so an operator can act on it
without re-running anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Problem", "ProblemKind", "diff_files"]

ProblemKind = Literal[
    "missing-file", "extra-file", "changed-file", "unsafe-file", "missing-signature",
    "bad-signature", "unknown-signature", "wrong-predicate-type", "unmet-threshold",
    "expired", "binding-mismatch", "malformed", "record-mismatch", "unsigned-manifest",
    "revoked-key", "out-of-scope", "wrong-bundle", "chain-mismatch",
    "rolled-back",
]


@dataclass(frozen=True)
class Problem:
    """One reason verification failed."""

    kind: ProblemKind
    subject: str
    message: str
    expected: str | None = None
    actual: str | None = None

    def __str__(self) -> str:
        extra = ""
        if self.expected is not None or self.actual is not None:
            extra = f" (expected {self.expected or '-'}, actual {self.actual or '-'})"
        return f"[{self.kind}] {self.subject}: {self.message}{extra}"

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {"kind": self.kind, "subject": self.subject, "message": self.message,
                "expected": self.expected, "actual": self.actual}


def diff_files(
    subject: str, expected: Mapping[str, str], actual: Mapping[str, str],
) -> list[Problem]:
    """Missing, extra and changed files between a signed manifest and what is on disk."""
    out = [Problem("missing-file", f"{subject}:{p}", "signed file is missing",
                   expected[p], None) for p in sorted(set(expected) - set(actual))]
    out += [Problem("extra-file", f"{subject}:{p}", "file is not in the signature",
                    None, actual[p]) for p in sorted(set(actual) - set(expected))]
    out += [Problem("changed-file", f"{subject}:{p}", "content differs from the signature",
                    expected[p], actual[p])
            for p in sorted(set(expected) & set(actual)) if expected[p] != actual[p]]
    return out
