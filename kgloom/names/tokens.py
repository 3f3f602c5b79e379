"""The words of a text for the cased-script rules: tokens with their kind (cap, upper,
mixed, initial, num, lower), locator lines (front matter masked out), sentence starts
and shouted headings.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

import regex

from kgloom.names.lexicon import _ABBREVIATIONS, _CLOSERS, _OPEN_QUOTES, _SENTENCE_END_CHARS, _WORD


@dataclass(frozen=True)
class _Tok:
    start: int
    end: int
    text: str
    kind: str  # cap | upper | mixed | initial | num | lower


def _kind(w: str) -> str:
    letters = [c for c in w if c.isalpha()]
    if not letters:
        return "num" if w.isdigit() and len(w) <= 3 else "other"
    first = letters[0]
    has_lower = any(c.islower() for c in letters)
    has_upper = any(c.isupper() or unicodedata.category(c) == "Lt" for c in letters)
    if not has_lower and has_upper:
        if len(letters) == 1 and not any(c.isdigit() for c in w):
            return "initial"
        return "upper"
    if first.isupper() or unicodedata.category(first) == "Lt":
        return "cap"
    if has_upper:
        return "mixed"  # eBay, iPhone, al-Rahman
    return "lower" if first.islower() else "other"


def _tokens(text: str) -> list[_Tok]:
    return [_Tok(m.start(), m.end(), m.group(0), _kind(m.group(0)))
            for m in _WORD.finditer(text)]


# A line laid out as a table row that points elsewhere: text, a column gap (3+ spaces, a
# tab, or dot leaders), then a locator at the line's end (a page number or range, a roman
# numeral, or one word such as "_Frontispiece_"): the rows of a table of contents, a list
# of illustrations or an index, in any language. Prose never sets a word that far apart.
_LOCATOR = regex.compile(r"\p{N}+(?:[-–]\p{N}+)?|[ivxlcdmIVXLCDM]+|_?[\p{L}\p{M}]{1,20}_?")
_GAP_CHARS = " \t.…"


def is_locator_line(line: str) -> bool:
    """Is ``line`` (no line break) a locator line: text, a column gap (3+ spaces, a tab,
    3+ dots of leaders, or an ellipsis), then a locator at its end (:data:`_LOCATOR`: a
    page number or range, a roman numeral, or one word such as "_Frontispiece_")? Read
    from the end in linear time: a line of thousands of dots costs no more than its
    length."""
    body = line.rstrip(" \t")
    i = len(body)
    while i > 0 and body[i - 1] not in _GAP_CHARS:
        i -= 1
    if not _LOCATOR.fullmatch(body, i):
        return False
    before = body[:i]
    core = before.rstrip(_GAP_CHARS)
    gap = before[len(core):]
    return bool(core.strip()) and ("   " in gap or "\t" in gap or "…" in gap
                                   or gap.count(".") >= 3)


def mask_locator_lines(text: str) -> str:
    """``text`` with every locator line (:func:`is_locator_line`: a row of a table of
    contents, a list of illustrations or an index) blanked to spaces, so offsets stay
    and no name is taken from, or runs into, front matter such as "Heading to Stave One
    ....... 3". Line breaks are kept. Returns ``text`` itself when no line is one."""
    if "   " not in text and "\t" not in text and "..." not in text and "…" not in text:
        return text  # the common case, without reading line by line
    lines = text.split("\n")
    masked = [" " * len(line) if is_locator_line(line) else line for line in lines]
    return text if masked == lines else "\n".join(masked)


def _sentence_start(text: str, toks: list[_Tok], i: int) -> bool:
    """True when token ``i`` opens a sentence, a line after a blank line, or a quote (a
    quotation mark after a space, a line break or a dash: "said, 'Good-morning, sir!'")."""
    j = toks[i].start - 1
    if j >= 0 and text[j] in _OPEN_QUOTES and (j == 0 or text[j - 1].isspace()
                                               or text[j - 1] in "([—–-"):
        return True
    while j >= 0 and (text[j].isspace() or text[j] in _OPEN_QUOTES or text[j] in "([¿¡—–-"):
        if text[j] == "\n" and j > 0 and text[:j].rstrip(" \t").endswith("\n"):
            return True  # a paragraph start
        j -= 1
    if j < 0:
        return True
    while j >= 0 and text[j] in _CLOSERS:
        j -= 1
    if j >= 0 and text[j] in ":;":
        return True
    if j < 0 or text[j] not in _SENTENCE_END_CHARS:
        return False
    if text[j] == "." and i > 0 and toks[i - 1].end == j:
        prev = toks[i - 1]
        if prev.text in _ABBREVIATIONS or prev.kind == "initial":
            return False
    return True


def _shouted(text: str, toks: list[_Tok], i: int) -> bool:
    """True when all-caps token ``i`` is part of a heading or shouting, not an acronym:
    its line has no lower-case letter, or it stands in a run of 3+ all-caps words."""
    t = toks[i]
    a = text.rfind("\n", 0, t.start) + 1
    b = text.find("\n", t.end)
    line = text[a: b if b >= 0 else len(text)]
    if not any(c.islower() for c in line):
        return True
    run = 1
    for step in (-1, 1):
        k = i + step
        while 0 <= k < len(toks) and toks[k].kind in ("upper", "initial") \
                and "\n\n" not in text[min(toks[k].end, t.end):max(toks[k].start, t.start)]:
            run += 1
            k += step
    return run >= 3
