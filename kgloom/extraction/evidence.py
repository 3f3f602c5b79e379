"""What every extraction path (the LLM's, ``method=fast``'s co-occurrence, the records'
edges) shares about a text unit's text: its sentences, the first sentence naming an
entity (a mention's description), a record's title as a name, the type of a span that is
not an entity and the weight of one extracted relationship mention. No LLM here.
"""

from __future__ import annotations

import functools
import itertools
import re

from kgloom.extraction.type_cues import bounded_occurrences
from kgloom.names.candidates import MAX_NAME_CHARS, is_grounded

NOT_AN_ENTITY = "OTHER"
EXTRACTED_STRENGTH = 2.0  # weight of one extracted relationship mention (co-mention: config)

# a sentence ends at . ! ? (and closing quotes) before a space, except after an honorific
_SENTENCE_END = re.compile(
    r"(?<!\bMr)(?<!\bMrs)(?<!\bMs)(?<!\bDr)(?<!\bSt)[.!?]['\"’”]*\s|[。！？]")


def sentences(text: str) -> list[str]:
    """Split ``text`` into sentences, whitespace collapsed.

    Sentences end at ``.``, ``!`` or ``?`` (plus closing quotes) before a space, but not
    after an honorific (``Mr.``, ``Mrs.``, ``St.`` ...); the ``_italics_`` marks of
    Project Gutenberg texts are dropped.
    """
    return list(_sentences(text))


@functools.lru_cache(maxsize=64)
def _sentences(text: str) -> tuple[str, ...]:
    """:func:`sentences`, remembered for the last texts: a unit's text is split once for
    each of its mentions' descriptions and relationships' evidence (~25 times)."""
    flat = " ".join(text.replace("_", "").split())
    bounds = [0] + [m.end() for m in _SENTENCE_END.finditer(flat)] + [len(flat)]
    return tuple(flat[a:b].strip() for a, b in itertools.pairwise(bounds)
                 if flat[a:b].strip())


def first_sentence_with(name: str, text: str, max_chars: int = 240) -> str:
    """Return the first of :func:`sentences` of ``text`` that mentions ``name`` (exactly,
    else after Unicode and case normalization), cut to ``max_chars``; "" when none does.
    """
    found = sentences(text)
    hit = next((x for x in found if name in x), None) or next(
        (x for x in found if is_grounded(name, x)), "")
    return hit[:max_chars]


def record_title(title: str | None) -> str | None:
    """A record's title as a name: without a trailing parenthesis ("Theodred II (Bishop
    of Elmham)" -> "Theodred II"), None when empty or too long."""
    if not title:
        return None
    name = " ".join(re.sub(r"\s*\([^()]*\)\s*$", "", title).split())
    return name if 0 < len(name) <= MAX_NAME_CHARS else None


# The agent of a passive clause follows its verb after "by" and its equivalents: "Yarrow
# Textiles is supplied by Zephyr Mills", "fondée par", "gegründet von", "założona przez".
_AGENT_MARKER = re.compile(r"\b(?:by|par|von|durch|przez|od|от|по)\b", re.IGNORECASE)


def text_direction(a: str, b: str, text: str) -> tuple[str, str] | None:
    """The direction the text states between names ``a`` and ``b``: the first sentence of
    ``text`` naming both (whole words, as written) reads from the name it writes first
    to the other ("Zephyr Mills supplies Yarrow Textiles"), except across a passive
    agent's marker ("Yarrow Textiles is supplied by Zephyr Mills": from the agent).
    None when no sentence names both. The subject of an active clause comes before its
    object in English and the other subject-first languages of the test suite, which a
    135M model's pair order does not follow (it reversed all three of a supply chain).
    """
    for sentence in sentences(text):
        at_a, at_b = bounded_occurrences(a, sentence), bounded_occurrences(b, sentence)
        if not at_a or not at_b:
            continue
        ia, ib = at_a[0][0], at_b[0][0]
        first, second = (a, b) if ia <= ib else (b, a)
        lo, hi = sorted((ia, ib))
        between = sentence[lo + len(first):hi]
        return (second, first) if _AGENT_MARKER.search(between) else (first, second)
    return None
