"""What every extraction path (the LLM's, ``method=fast``'s co-occurrence, the records'
edges) shares about a text unit's text: its sentences, the first sentence naming an
entity (a mention's description), a record's title as a name, the type of a span that is
not an entity and the weight of one extracted relationship mention; and, once names are
resolved, each relationship's evidence read again with every alias of its ends
(:func:`whole_evidence`). No LLM here.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Mapping, Sequence

import polars as pl

from kgloom.extraction.type_cues import bounded_occurrences
from kgloom.names.candidates import is_grounded

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


# --- relationship evidence read again once names are resolved (the entity_graph stage) ---
# Extraction describes a relationship mention by the first sentence of its unit that
# writes both names as extracted, else the first sentence naming each, joined by " … "
# and cut (evidence_for). After resolution every form of a name is known ("Bob
# Cratchit" is also "Bob", "Ebenezer Scrooge" "Scrooge"), and read with them a unit often
# holds one sentence that names both: whole, it is what a reader of a relationship, a
# report's finding or a query context wants (on the bundled book most extractive
# descriptions were two half-sentences cut mid-word, and reports fell back to "A and B
# are named together in 3 text units").

# the longest sentence kept as evidence (characters): a long narrative sentence is still
# one statement; longer ones (lists, run-on paragraphs without an end mark) are not
EVIDENCE_MAX_CHARS = 400


def _spans(forms: list[str], sentence: str, besides: Sequence[str] = ()) -> list[tuple[int, int]]:
    """Where ``sentence`` names an alias in ``forms`` (whole words), leaving out the
    places inside a name of ``besides`` ("Orrin" inside "Orrin Vale" is Orrin Vale)."""
    other = [o for f in besides for o in bounded_occurrences(f, sentence)]
    return [(x, y) for f in forms for x, y in bounded_occurrences(f, sentence)
            if not any(a <= x and y <= b and (a, b) != (x, y) for a, b in other)]


def _names_both(a: list[str], b: list[str], sentence: str) -> bool:
    """Does ``sentence`` name an alias of ``a`` and one of ``b`` in two places that do not
    overlap? "'Dick Wilkins, to be sure!'" names "Dick Wilkins" once, not "Dick" beside it."""
    spans_a = _spans(a, sentence, b)
    spans_b = _spans(b, sentence, a) if spans_a else []
    return any(x_end <= y or y_end <= x for x, x_end in spans_a for y, y_end in spans_b)


def _first_whole(forms: list[str], found: tuple[str, ...] | list[str], max_chars: int,
                 besides: list[str]) -> str:
    return next((s for s in found if len(s) <= max_chars and _spans(forms, s, besides)), "")


def whole_evidence(relationships: pl.DataFrame, aliases: pl.DataFrame,
                   unit_text: Mapping[str, str], max_chars: int = EVIDENCE_MAX_CHARS
                   ) -> tuple[pl.DataFrame, int]:
    """Describe each relationship by whole sentences of its text units, read with every
    alias of both its ends.

    Args:
        relationships: ``RELATIONSHIPS_SCHEMA`` rows (``source_id``, ``target_id``,
            ``text_unit_ids``, ``description`` read).
        aliases: ``ENTITY_ALIASES_SCHEMA`` rows (``alias``, ``entity_id``): every surface
            form of each entity.
        unit_text: text unit id -> its text.
        max_chars: the longest sentence kept (characters, whitespace collapsed).

    Returns:
        (relationships, rewritten): the table with ``description`` = one line per text
        unit, in ``text_unit_ids`` order: the unit's first sentence (:func:`sentences`)
        of at most ``max_chars`` characters that names an alias of the source and one of
        the target (whole words, :func:`bounded_occurrences`), else its first such
        sentence naming the source and its first naming the target joined by `` … ``
        (the form of :func:`kgloom.extraction.extract.evidence_for`, each sentence
        whole); distinct lines joined by "\n". A relationship none of whose units gives
        a line keeps its description. ``rewritten`` counts the relationships whose
        description changed. Row order and every other column are unchanged.
    """
    if relationships.height == 0:
        return relationships, 0
    forms: dict[str, list[str]] = {}
    for alias, eid in zip(aliases["alias"].to_list(), aliases["entity_id"].to_list()):
        forms.setdefault(eid, []).append(alias)
    for fs in forms.values():
        fs.sort(key=len, reverse=True)
    split: dict[str, tuple[str, ...]] = {}  # unit id -> its sentences, each unit split once
    out, rewritten = [], 0
    for src, dst, units, old in zip(relationships["source_id"].to_list(),
                                    relationships["target_id"].to_list(),
                                    relationships["text_unit_ids"].to_list(),
                                    relationships["description"].to_list()):
        a, b = forms.get(src, []), forms.get(dst, [])
        lines: list[str] = []
        for u in units or []:
            if u not in split:
                split[u] = tuple(sentences(unit_text.get(u, "")))
            found = split[u]
            line = next((s for s in found if len(s) <= max_chars
                         and _names_both(a, b, s)), "")
            if not line:
                one = _first_whole(a, found, max_chars, b)
                other = _first_whole(b, found, max_chars, a) if one else ""
                line = f"{one} … {other}" if one and other else ""
            if line and line not in lines:
                lines.append(line)
        new = "\n".join(lines) if lines else old
        rewritten += new != old
        out.append(new)
    return relationships.with_columns(pl.Series("description", out, dtype=pl.String)), rewritten
