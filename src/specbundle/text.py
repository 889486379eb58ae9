"""Strings from model files, made safe to carry: every report string goes through here.

Names, keys and values in a model file are attacker bytes: invalid UTF-8 (decoded with
``surrogateescape`` into lone surrogates that no UTF-8 encoder accepts), control characters that
rewrite a terminal, bidi overrides and zero-width characters that hide a real extension. The
report must always serialise (JSON, SARIF, table) and must show what is really there, so every
non-printable or invisible code point is replaced by its ``\\uhhhh`` escape. Escaping is
idempotent: its output is printable ASCII where it escaped, so escaping twice changes nothing
(reports are re-read and re-built).
"""

from __future__ import annotations

import bisect
import unicodedata

__all__ = ["HIDDEN_CATEGORIES", "escape_char", "hidden_chars", "is_invisible", "safe_text"]

# Unicode categories that render as nothing, or as something else than they are: controls
# (C0/C1), format characters (bidi overrides, zero-width joiners, BOM, tags), surrogates,
# private use, unassigned, and line/paragraph separators.
HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})

# Code points that Python calls printable but that render as nothing or as blank space: the
# Default_Ignorable_Code_Point set of DerivedCoreProperties.txt (combining grapheme joiner,
# Hangul fillers, Khmer inherent vowels, Mongolian free variation selectors, variation
# selectors 1-256, tags...) plus blank-looking symbols (braille blank, object and replacement
# characters). Inclusive ranges, sorted.
_INVISIBLE_RANGES = (
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160),
    (0x17B4, 0x17B5), (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E),
    (0x2060, 0x206F), (0x2800, 0x2800), (0x3164, 0x3164), (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0xFFFC, 0xFFFD),
    (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF),
)
_STARTS = [lo for lo, _hi in _INVISIBLE_RANGES]


def is_invisible(c: str) -> bool:
    """Whether a character renders as nothing or blank (any space but U+0020 included)."""
    o = ord(c)
    if o < 0x80:
        return not c.isprintable()
    i = bisect.bisect_right(_STARTS, o) - 1
    if i >= 0 and o <= _INVISIBLE_RANGES[i][1]:
        return True
    cat = unicodedata.category(c)
    return cat in HIDDEN_CATEGORIES or cat == "Zs"


def escape_char(c: str) -> str:
    """One code point as its ``\\xhh``, ``\\uhhhh`` or ``\\Uhhhhhhhh`` escape."""
    o = ord(c)
    if o < 0x100:
        return f"\\x{o:02x}"
    return f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def safe_text(s: str) -> str:
    """``s`` with every non-printable or invisible code point (space excepted) escaped."""
    if s.isascii() and s.isprintable():
        return s
    return "".join(c if c == " " or not is_invisible(c) else escape_char(c) for c in s)


def hidden_chars(s: str) -> list[str]:
    """The code points of ``s`` that hide or disguise text, as ``U+hhhh NAME`` labels.

    Controls, format characters (bidi, zero-width, BOM, tags), surrogates, private use,
    unassigned code points, every space but U+0020, and the printable-but-invisible set
    (variation selectors, Hangul fillers, combining grapheme joiner, braille blank...).
    """
    if s.isascii() and s.isprintable():
        return []  # the common case, without a per-character lookup
    return [f"U+{ord(c):04X} {unicodedata.name(c, 'unnamed')}" for c in s
            if c != " " and is_invisible(c)]
