"""Strings from model files, made safe to carry: every report string goes through here.

Names, keys and values in a model file are attacker bytes: invalid UTF-8 (decoded with
``surrogateescape`` into lone surrogates that no UTF-8 encoder accepts), control characters that
rewrite a terminal, bidi overrides and zero-width characters that hide a real extension. The
report must always serialise (JSON, SARIF, table) and must show what is really there, so every
non-printable code point is replaced by its ``\\uhhhh`` escape. Escaping is idempotent: its
output is printable, so escaping twice changes nothing (reports are re-read and re-built).
"""

from __future__ import annotations

import unicodedata

__all__ = ["HIDDEN_CATEGORIES", "hidden_chars", "safe_text"]

# Unicode categories that render as nothing, or as something else than they are: controls
# (C0/C1), format characters (bidi overrides, zero-width joiners, BOM), surrogates, private
# use, unassigned, and line/paragraph separators.
HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def _escape(c: str) -> str:
    o = ord(c)
    if o < 0x100:
        return f"\\x{o:02x}"
    return f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def safe_text(s: str) -> str:
    """``s`` with every non-printable code point (space excepted) escaped."""
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() or c == " " else _escape(c) for c in s)


def hidden_chars(s: str) -> list[str]:
    """The code points of ``s`` that hide or disguise text, as ``U+hhhh NAME`` labels."""
    if s.isascii() and s.isprintable():
        return []  # the common case, without a per-character lookup
    return [f"U+{ord(c):04X} {unicodedata.name(c, 'unnamed')}" for c in s
            if unicodedata.category(c) in HIDDEN_CATEGORIES]
