"""Names that may become paths in a model tree: the rules pull screens a hub listing with and
the scan blocks a tree on, so both stages judge a name alike.

A name ends up in paths on both sides of the gap (snapshot trees, manifests, the medium
carried across) and in every UI that shows it: path syntax, Windows-hostile and over-long names,
hidden, look-alike and decomposed characters that make a UI show another name or extension
than the one the engines open, and names one case-insensitive or normalising file system would
make one. A foundation module like :mod:`specbundle.ids`, below every stage.
"""

from __future__ import annotations

import re
import unicodedata
from collections import defaultdict
from collections.abc import Iterator

from specbundle.text import hidden_chars, is_invisible

__all__ = ["MAX_DEPTH", "colliding", "collisions", "name_problem"]

#: folders deeper than this are neither walked by the scan nor mirrored by pull
MAX_DEPTH = 64
_DRIVE = re.compile(r"^[A-Za-z]:")
_MAX_COMPONENT = 255
_MAX_PATH = 1024
# characters Windows refuses in a name (':' also opens an NTFS alternate data stream)
_WINDOWS_FORBIDDEN = frozenset('<>:"|?*')
# device names Windows opens instead of a file, whatever the extension (CON.json is the console)
_WINDOWS_DEVICES = frozenset(
    {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$", "CLOCK$"}
    | {f"{d}{n}" for d in ("COM", "LPT") for n in (*"0123456789", "\u00b9", "\u00b2", "\u00b3")})
# scripts whose letters are look-alikes of Latin ones (Cyrillic 'о' in 'mоdel.safetensors')
_CONFUSABLE_SCRIPTS = frozenset({"CYRILLIC", "GREEK", "ARMENIAN", "CHEROKEE", "COPTIC", "LISU",
                                 "GEORGIAN", "CANADIAN", "TIFINAGH", "VAI", "BAMUM"})
# letters of those scripts that render like a Latin letter; a word made only of them reads as
# Latin (whole-script confusable)
_HOMOGLYPHS = frozenset("авекмнорстухіјѕԁһӏԛԝүАВЕКМНОРСТУХІЈЅҮԌԚԜ"
                        "οανικρτυχΑΒΕΖΗΙΚΜΝΟΡΤΥΧ" "օսցհոՏՕ")
_WORD = re.compile(r"[^\W\d_]+")  # runs of letters (and the marks Python's \w admits)
_COMBINING = frozenset({"Mn", "Me", "Mc"})
# scripts no model repository names files in, whose letters copy Latin ones: any letter of
# them is a look-alike, not only those in _HOMOGLYPHS
_FOREIGN_SCRIPTS = frozenset({"CHEROKEE", "COPTIC", "LISU", "CANADIAN", "TIFINAGH", "VAI",
                              "BAMUM", "OLD", "DESERET", "OSAGE", "WARANG"})
# scripts whose text is precomposed (NFC): a combining mark left on one of their letters is
# stacked on purpose ('é' + U+0301 shows as 'é'); Indic, Thai, Arabic... use marks normally
_PRECOMPOSED_SCRIPTS = frozenset({"LATIN", "GREEK", "CYRILLIC", "ARMENIAN", "GEORGIAN", "CJK",
                                  "HANGUL", "HIRAGANA", "KATAKANA"})
# Latin letters with no ASCII base that still do not pass for an ASCII letter
_DISTINCT_LATIN = frozenset("ßæœøłđþðŋẞÆŒØŁĐÞÐŊ")
# punctuation and symbols outside ASCII pass for '.', '/', '-', ':' or blank space
# ('model\u00b7safetensors', 'original\u2215tokenizer.model'); emoji are let through
_LOOKALIKE_MARKS = re.compile(r"[\u2600-\u27bf\U0001f300-\U0001faff]")
# git reads '.git' (and its 8.3 alias) as a repository: a mirrored '.git/config' with
# core.fsmonitor runs a command on the next 'git status' in the tree
_GIT_DIRS = frozenset({".git", "git~1"})


_UNFORBID = str.maketrans(dict.fromkeys(_WINDOWS_FORBIDDEN, "_"))


def _component_problem(part: str) -> str | None:
    """Why one path component is unsafe on some platform or in some UI, or None."""
    if part.endswith((".", " ")) or part.startswith(" "):
        return "leading/trailing space or trailing dot (Windows strips it: another file's name)"
    if _WINDOWS_FORBIDDEN.intersection(part):
        return "character Windows refuses or reads as a data stream (<>:\"|?*)"
    if part.split(".", 1)[0].rstrip(" ").upper() in _WINDOWS_DEVICES:
        return "reserved Windows device name"
    if part.rstrip(". ").casefold() in _GIT_DIRS:
        return "a git repository folder (git runs hooks and filters it names)"
    if part.isascii():
        return None
    if unicodedata.normalize("NFKC", part) != unicodedata.normalize("NFC", part):
        # fullwidth, mathematical, ligature, superscript forms: they look like other letters
        return "compatibility characters that look like other characters (NFKC differs)"
    prev = ""
    rtl = False
    for c in part:
        why = _char_problem(c, prev)
        if why:
            return why
        rtl = rtl or unicodedata.bidirectional(c) in ("R", "AL")
        prev = c
    if unicodedata.normalize("NFC", part) != part:
        # decomposed (macOS) or a singleton such as KELVIN SIGN for 'K': another byte string
        # for the same-looking name
        return "not in normalised form (NFC): the same-looking name has other bytes"
    stem, dot, ext = part.rpartition(".")
    # a plain ASCII extension after a right-to-left name ('العربية.md') shows as written in a
    # left-to-right UI; Latin anywhere else is reordered around the right-to-left letters
    latin = stem if dot and stem and ext.isascii() and ext.isalnum() else part
    if rtl and any(c.isascii() and c.isalnum() for c in latin):
        # right-to-left letters reorder the Latin around them on screen ('txt.exe' shown
        # with its parts swapped): the displayed name is not the name the engine opens
        return "right-to-left letters mixed with Latin (the displayed order is not the real one)"
    for word in _WORD.findall(part):
        scripts = {"LATIN" if c.isascii() else unicodedata.name(c, "?").split(" ", 1)[0]
                   for c in word}
        look_alike = scripts & _CONFUSABLE_SCRIPTS
        if look_alike and ("LATIN" in scripts or all(c in _HOMOGLYPHS for c in word)):
            # 'mоdel' (Cyrillic о among Latin) or 'рое' (all Cyrillic, reads as Latin 'poe')
            return "letters that look like Latin ones (" + "/".join(sorted(look_alike)) + ")"
    return None


def _script(c: str) -> str:
    return unicodedata.name(c, "?").split(" ", 1)[0]


def _char_problem(c: str, prev: str) -> str | None:
    """Why one character of a name passes for another (or for punctuation), or None."""
    if c.isascii():
        return None
    cat = unicodedata.category(c)
    if cat in _COMBINING:
        if not prev or prev.isascii():
            return "combining mark on an ASCII character (the name looks like another one)"
        if not unicodedata.category(prev).startswith(("L", "M")) or (
                _script(prev) in _PRECOMPOSED_SCRIPTS):
            return "combining mark stacked on a letter that has a precomposed form"
        return None
    if cat[0] == "N":  # '\u0661', '\u0967', '\u3007' pass for 1, 1 and 0
        return "digits or numerals of another script (they pass for ASCII digits)"
    if cat[0] in "PS" and not (cat == "So" and _LOOKALIKE_MARKS.match(c)):
        return "punctuation or symbol outside ASCII (it passes for '.', '/', '-' or a space)"
    if cat == "Lm" and _script(c) in ("MODIFIER", "LATIN", "GREEK"):
        return "modifier letter (it passes for punctuation or a Latin letter)"
    if cat[0] == "L" and _script(c) == "LATIN" and c not in _DISTINCT_LATIN and not (
            unicodedata.normalize("NFD", c)[0].isascii()):
        return "Latin letter with no ASCII base (dotless i, small capitals, IPA) passes for one"
    if cat[0] == "L" and _script(c) in _FOREIGN_SCRIPTS:
        return f"letters that look like Latin ones ({_script(c)})"
    return None


def name_problem(path: str, *, portable: bool = True) -> str | None:
    """Why a relative model-file name is unsafe, or None if it is acceptable.

    ``portable=False`` lets through the characters only Windows refuses (``<>:"|?*``), for a
    POSIX mirror that keeps such a name under its own spelling (the scan still blocks it).
    """
    if not path:
        return "empty name"
    if "\\" in path:
        return "backslash in name (Windows path syntax)"
    if path.startswith(("/", "//")) or (portable and _DRIVE.match(path)):
        return "absolute, drive or UNC path"
    hidden = hidden_chars(path)
    if hidden:
        # bidi overrides, zero-width, tags, variation selectors, fillers and C0/C1 controls
        # make a UI show another name or extension than the one the engines open (and
        # non-UTF-8 bytes arrive as surrogates)
        return "hidden or control character in name: " + ", ".join(hidden[:4])
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return "empty, '.' or '..' path component"
    if len(path.encode("utf-8", "surrogatepass")) > _MAX_PATH or any(
            len(p.encode("utf-8", "surrogatepass")) > _MAX_COMPONENT for p in parts):
        return "name too long"
    if len(parts) > MAX_DEPTH:
        return f"nested deeper than {MAX_DEPTH} folders (the scan does not analyse it)"
    for p in parts:
        why = _component_problem(p if portable else p.translate(_UNFORBID))
        if why:
            return why
    return None


def _fold(part: str) -> str:
    """A component as a case-insensitive, normalising, dot-stripping file system sees it."""
    if not part.isascii():
        part = "".join(c for c in unicodedata.normalize("NFKC", part) if not is_invisible(c))
    return part.rstrip(". ").casefold()


def collisions(names: list[str]) -> Iterator[tuple[str, list[str]]]:
    """Names (files, and the folders they imply) that one file system would make one."""
    groups: dict[str, set[str]] = defaultdict(set)
    for n in names:
        # empty components (an absolute or doubled-slash name, refused on its own) are not a
        # shared folder: '/a' and '/b' must not collide on ''
        parts = [p for p in n.split("/") if p]
        key = ""
        for i, part in enumerate(parts):
            key = f"{key}/{_fold(part)}" if i else _fold(part)
            groups[key].add("/".join(parts[:i + 1]))
    for key, members in sorted(groups.items()):
        if len(members) > 1:
            yield key, sorted(members)


def colliding(names: list[str]) -> set[str]:
    """The names that share a file or folder with another name once case, normalisation and
    trailing dots are folded (what a case-insensitive or normalising file system makes one)."""
    prefixes: set[str] = set()
    for _key, members in collisions(names):
        prefixes.update(members)
    if not prefixes:
        return set()
    out = set()
    for n in names:
        parts = [p for p in n.split("/") if p]
        if any("/".join(parts[:i + 1]) in prefixes for i in range(len(parts))):
            out.add(n)
    return out
