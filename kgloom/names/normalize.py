"""The keys names are compared by: a kernel that extraction, entity resolution and query
linking share (no Dagster here).

- :func:`normalize_title`: the entity-resolution key of a title (one entity per key).
- :func:`normalize_for_match`: Unicode and case normalization for "does this name occur
  in this text" (grounding).
"""

from __future__ import annotations

import functools
import re
import unicodedata

from kgloom.names.morphology import nominative

MAX_NAME_CHARS = 60  # the longest candidate name (characters); longer spans are run-ons


def record_title(title: str | None) -> str | None:
    """A record's title as a name: without a trailing parenthesis ("Theodred II (Bishop
    of Elmham)" -> "Theodred II", Wikipedia's disambiguator), whitespace collapsed; None
    when empty, without a letter or digit ("((((", "***": no name), or longer than
    ``MAX_NAME_CHARS``."""
    if not title:
        return None
    name = " ".join(re.sub(r"\s*\([^()]*\)\s*$", "", title).split())
    return name if 0 < len(name) <= MAX_NAME_CHARS and any(
        ch.isalnum() for ch in name) else None


# the passes of entity resolution (kgloom.graph.resolution; the setting resolution_methods)
RESOLUTION_METHODS: frozenset[str] = frozenset({"normalized", "name_extension", "name_context",
                                                "embedding"})

_APOSTROPHES = re.compile(r"['\u2019\u2018\u02bc`]")
_POSSESSIVE = re.compile(r"['\u2019\u02bc]s\s*$")


@functools.lru_cache(maxsize=65536)  # resolution asks it of each title several times
def normalize_title(title: str) -> str:
    """Return the normalization key of an extracted title.

    Steps: Russian words put in the nominative case
    (:func:`kgloom.names.morphology.nominative`: "Ясной Поляне" and "Ясная Поляна"
    are one key, as are "Москве" and "Москва"), Unicode NFKC, casefold, drop a trailing
    possessive "'s", drop apostrophes
    (so "O'Brien" == "OBrien"), turn every other punctuation or symbol character into a
    space, collapse whitespace, drop one leading "the ". Honorifics stay as tokens, so
    "Mr. Scrooge" -> "mr scrooge" and "Mrs. Fezziwig" -> "mrs fezziwig".

    Possessive choice: "Scrooge's" keys as "scrooge". The extractor copies names from
    the text, and a bare possessive title is almost always the name lifted from "Scrooge's
    office"; places named by a possessive ("Fezziwig's warehouse") keep their head noun
    and stay distinct.

    Returns "" for a title with no letters or digits (the caller keeps such titles
    apart under their casefolded text).
    """
    text = unicodedata.normalize("NFKC", nominative(title)).casefold().strip()
    text = _POSSESSIVE.sub("", text)
    text = _APOSTROPHES.sub("", text)
    text = "".join(" " if unicodedata.category(ch)[0] in "PSZC" else ch for ch in text)
    tokens = text.split()
    if len(tokens) > 1 and tokens[0] == "the":
        tokens = tokens[1:]
    return " ".join(tokens)


def normalize_for_match(text: str) -> str:
    """Return ``text`` NFKC-normalized, case-folded, with runs of whitespace as one space."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())
