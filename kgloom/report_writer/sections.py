"""The sections of a long document: its heading lines, and the heading each text unit
falls under, so a report can say where in a book its community lives ("Stave Three")
rather than only at which unit numbers. No model, no Dagster.
"""

from __future__ import annotations

import bisect
import re
import string

# a Markdown heading: "## The mill"
_MARKDOWN = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$")
HEADING_MAX_WORDS = 8  # longer upper-case lines are text set in capitals, not headings
HEADING_MAX_CHARS = 60
HEADING_MAX_PARTS = 4  # heading lines joined into one at most (a list of capitals is no heading)
# lines that may stand between two headings of one section: blanks and bracketed notes
# ("[Illustration]")
_BETWEEN = re.compile(r"^\s*(?:\[[^\]]*\]\s*)?$")


def _plain_heading(line: str) -> bool:
    """Is ``line`` (stripped) a plain-text heading: 1 to :data:`HEADING_MAX_WORDS` words,
    at most :data:`HEADING_MAX_CHARS` characters, at least two letters and none in
    lower case, not bracketed, no digit run of a contents page's page number at its
    end, not ending in a comma or colon?"""
    letters = [c for c in line if c.isalpha()]
    return (0 < len(line.split()) <= HEADING_MAX_WORDS and len(line) <= HEADING_MAX_CHARS
            and len(letters) >= 2 and not any(c.islower() for c in letters)
            and line[0] not in "[(" and not line[-1].isdigit() and line[-1] not in ",:")


# words an all-capitals heading keeps in lower case once capitalized, but for its first
_SMALL = frozenset({"a", "an", "and", "at", "by", "for", "in", "of", "on", "or", "the",
                    "to"})


def _shown(heading: str) -> str:
    """A heading as a report names it: an all-capitals heading in capitalized words, its
    small words in lower case ("THE END OF IT" -> "The End of It"), italics marks
    dropped, dashes as " – "."""
    text = " ".join(heading.replace("--", " – ").replace("_", "").split())
    if not any(c.islower() for c in text):
        words = string.capwords(text.lower()).split()
        text = " ".join([words[0]] + [w.lower() if w.lower() in _SMALL else w
                                      for w in words[1:]])
    return text


def headings(text: str) -> list[tuple[int, str]]:
    """The headings of ``text``: (character offset of the heading's first line, its
    name), in order.

    A heading is a Markdown heading line, or a plain line that :func:`_plain_heading`
    accepts standing alone (a blank line or the text's edge before and after it).
    Plain headings separated only by blank or bracketed lines are one heading, joined by
    " – " ("STAVE ONE", "[Illustration]", "MARLEY'S GHOST" -> "Stave One – Marley's
    Ghost"), at most :data:`HEADING_MAX_PARTS` lines a heading; a Markdown heading is
    one of its own (its level says what it is under).
    """
    lines = text.splitlines(keepends=True)
    out: list[tuple[int, str]] = []
    offset, last_end, last_md = 0, -1, False  # last_end: the line after the last heading
    for i, raw in enumerate(lines):
        line = raw.strip()
        md = _MARKDOWN.match(line)
        alone = (i == 0 or not lines[i - 1].strip()) and (
            i + 1 == len(lines) or not lines[i + 1].strip())
        if md or (alone and _plain_heading(line)):
            name = _shown(md.group(1) if md else line)
            joined = (not md and not last_md and out and last_end >= 0
                      and out[-1][1].count(" – ") < HEADING_MAX_PARTS - 1
                      and all(_BETWEEN.match(x) for x in lines[last_end:i]))
            if joined:
                out[-1] = (out[-1][0], f"{out[-1][1]} – {name}")
            else:
                out.append((offset, name))
            last_end, last_md = i + 1, bool(md)
        offset += len(raw)
    return out


def unit_sections(text: str, spans: list[tuple[int, int]]) -> list[str]:
    """The section of each text unit of a document: the heading (:func:`headings` of the
    document's ``text``) in effect at the middle of its span (``spans``: (start_char,
    end_char) of each unit in ``text``), "" before the first heading or when the
    document has none."""
    found = headings(text)
    starts = [at for at, _ in found]
    out = []
    for start, end in spans:
        k = bisect.bisect_right(starts, (start + end) // 2) - 1
        out.append(found[k][1] if k >= 0 else "")
    return out
