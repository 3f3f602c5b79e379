"""The ``fast`` index method's extraction: entities and relationships with no model
(no Dagster here).

Microsoft GraphRAG's ``fast`` method builds its graph from noun phrases and their
co-occurrence in a text unit, with no LLM (GraphRAG docs, "Indexing Methods": graph
extraction is about 75 % of indexing cost). kgloom's version takes the names its
extraction already finds (:func:`kgloom.extraction.extract.unit_candidates`, every
script) and writes the same two mention tables as :func:`kgloom.extraction.extract.extract_graph`,
so every later stage, table and query mode works unchanged:

- **entities**: every candidate name of a unit (no cap of ``MAX_CANDIDATES``: there is no
  prompt to fit), typed by its cue (:func:`kgloom.extraction.type_cues.type_cue`), ``OTHER``
  when no cue decides; types are then voted over the partition as in ``standard``
  (:func:`kgloom.extraction.extract.vote_types`). Description: the first sentence of the
  unit that names it (as ``standard`` with extractive descriptions).
- **relationships** (``kind = co_mention``): in each sentence, the names are ordered by
  first occurrence and each is paired with the next ``cooccurrence_window`` names. One
  sentence naming both adds ``1 + 1/d``, where ``d`` >= 1 is the distance in tokens
  between their nearest occurrences in it (GloVe's weighting, Pennington, Socher and
  Manning 2014, section 4.2: "word pairs that are d words apart contribute 1/d to the
  total count"; the 1 counts the sentence, so a pair's weight grows with how often and
  how close). Weaker, within the text unit: each of the unit's :data:`UNIT_HUBS` most
  mentioned names (the record title first) is paired with every other name it shares no
  sentence with, at :data:`UNIT_STRENGTH` (below any sentence co-occurrence). The
  relationship table's ``weight`` is the sum over units (:mod:`kgloom.graph.resolution`).
  Description: the first sentence naming both, else their first sentences joined by
  `` … `` (the form of :func:`kgloom.extraction.extract.evidence_for`).
- **pair cap**: pairs per unit are at most ``window * names`` (sentences) plus
  ``UNIT_HUBS * names`` (unit), linear in the names; of those the
  ``cooccurrence_max_pairs`` strongest are kept and the rest counted in
  ``cooccurrence_pairs_dropped``.

Tokens for ``d``: runs of letters, marks and digits, and each Han or kana character
(scripts without spaces).
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable

import polars as pl
import regex

from kgloom.core import schemas
from kgloom.core.storage import failures_frame
from kgloom.extraction.evidence import (
    NOT_AN_ENTITY,
    first_sentence_with,
    sentences,
    text_direction,
)
from kgloom.extraction.extract import (
    ExtractionResult,
    _unit_cues,
    record_titles,
    unit_candidates,
    vote_types,
)
from kgloom.extraction.records import record_edge_mentions
from kgloom.names.candidates import word_counts
from kgloom.settings.indexing import IndexSettings

UNIT_HUBS = 3  # names of a unit joined to its other names at unit level
UNIT_STRENGTH = 0.5  # one unit-level co-occurrence; one sentence adds 1 + 1/d > 1
DESCRIPTION_CHARS = 240  # of an entity description (as first_sentence_with)
EVIDENCE_CHARS = 300  # of a relationship description (as evidence_for)

_TOKEN = regex.compile(r"\p{Han}|\p{Hiragana}|\p{Katakana}|[\p{L}\p{M}\p{N}]+")
_CASED = regex.compile(r"[\p{Lu}\p{Ll}\p{Lt}\p{N}]")
_WORD_CHAR = regex.compile(r"[\p{L}\p{M}\p{N}]")


def name_spans(text: str, names: list[str]) -> list[tuple[int, int, str]]:
    """The non-overlapping occurrences ``(start, end, name)`` of ``names`` in ``text``,
    leftmost first and, at one position, longest first: "Holmes" inside "Sherlock
    Holmes" is not a second name there. A cased letter or digit at either end of a name
    must not touch another letter, mark or digit (``Ann`` is not found in ``Annual``);
    caseless-script ends (Han, kana) have no word boundary to test. Plain ``str.find``
    per name: a pattern of all names would be recompiled per unit, and the ``regex``
    module compiles slowly."""
    found = []
    for n in names:
        left, right = _CASED.match(n[0]), _CASED.match(n[-1])
        i = text.find(n)
        while i >= 0:
            end = i + len(n)
            if not (left and i and _WORD_CHAR.match(text, i - 1)) and not (
                    right and _WORD_CHAR.match(text, end)):
                found.append((i, end, n))
            i = text.find(n, i + 1)
    found.sort(key=lambda f: (f[0], f[0] - f[1]))
    out, last = [], 0
    for start, end, n in found:
        if start >= last:
            out.append((start, end, n))
            last = end
    return out


def sentence_pairs(sentence: str, names: list[str],
                   window: int) -> tuple[list[str], dict[tuple[str, str], float]]:
    """The names of one sentence and its co-occurrence strengths.

    Args:
        sentence: one sentence (whitespace collapsed).
        names: the unit's names (:func:`name_spans` finds them).
        window: each name pairs with at most this many names after it (by first
            occurrence).

    Returns:
        (names in order of first occurrence, {(a, b) sorted: 1 + 1/d}) where ``d`` >= 1
        is the token distance between their nearest occurrences.
    """
    starts = [m.start() for m in _TOKEN.finditer(sentence)]
    spans: dict[str, list[tuple[int, int]]] = {}  # name -> [(first token, last token)]
    for m_start, m_end, name in name_spans(sentence, names):
        first = bisect.bisect_right(starts, m_start) - 1
        last = bisect.bisect_left(starts, m_end) - 1
        spans.setdefault(name, []).append((max(first, 0), max(last, 0)))
    found = list(spans)  # dict order: first occurrence
    pairs: dict[tuple[str, str], float] = {}
    for i, a in enumerate(found):
        for b in found[i + 1:i + 1 + window]:
            d = min(max(1, bs - ae, as_ - be) for as_, ae in spans[a] for bs, be in spans[b])
            pairs[(a, b) if a < b else (b, a)] = 1.0 + 1.0 / d
    return found, pairs


def cooccurrence_unit(unit_id: str, text: str, settings: IndexSettings, counts: Counter,
                      vocabulary: Counter | None = None, title: str | None = None,
                      ) -> tuple[list[dict], list[dict]]:
    """One text unit's entity and relationship mention rows (``ENTITY_MENTIONS_SCHEMA``
    plus a ``cue`` key for :func:`vote_types`; ``RELATIONSHIP_MENTIONS_SCHEMA``), by the
    rules of the module docstring. ``title``: the record's title, a name of the unit
    shown above its text (as ``standard`` shows it to the model). Counters:
    ``units_without_names``, ``names_typed_by_cues``, ``names_typed_other``,
    ``sentence_pairs``, ``unit_pairs``, ``cooccurrence_pairs_dropped``."""
    cands, _ = unit_candidates(None, unit_id, text, settings, counts, vocabulary, title,
                               limit=None)
    if not cands:
        counts["units_without_names"] += 1
        return [], []
    shown = f"{title}\n\n{text}" if title else text
    names = list(dict.fromkeys(" ".join(c.name.split()) for c in cands))
    cues = _unit_cues([c.name for c in cands], shown,
                      {c.name: c.hint for c in cands if c.hint}, settings.entity_types)
    strength, evidence, first_sentence = _pair_strengths(shown, names, title,
                                                         settings.cooccurrence_window, counts)
    ranked = sorted(strength, key=lambda p: (-strength[p], p))
    kept = ranked[:settings.cooccurrence_max_pairs]
    counts["cooccurrence_pairs_dropped"] += len(ranked) - len(kept)
    ents = []
    for raw in (c.name for c in cands):
        name = " ".join(raw.split())
        cue = cues.get(name, "")
        counts["names_typed_by_cues" if cue else "names_typed_other"] += 1
        ents.append({"text_unit_id": unit_id, "title": name, "type": cue or NOT_AN_ENTITY,
                     "description": first_sentence.get(name)
                     or first_sentence_with(name, shown, DESCRIPTION_CHARS),
                     "cue": cue})
    half = EVIDENCE_CHARS // 2  # evidence_for's form, without splitting the text again
    # each pair in the direction its first shared sentence reads (sorted: none names both)
    kept = [text_direction(a, b, shown) or (a, b) for a, b in kept]
    rels = [{"text_unit_id": unit_id, "source": a, "target": b,
             "description": evidence.get((min(a, b), max(a, b))) or
             f"{first_sentence.get(a, '')[:half]} … {first_sentence.get(b, '')[:half]}",
             "strength": round(strength[(min(a, b), max(a, b))], 6), "kind": "co_mention"}
            for a, b in kept]
    return ents, rels


def _pair_strengths(shown: str, names: list[str], title: str | None, window: int,
                    counts: Counter) -> tuple[dict[tuple[str, str], float],
                                              dict[tuple[str, str], str], dict[str, str]]:
    """The co-occurrence pairs of one unit's ``shown`` text (title and text) among
    ``names``.

    Sentence level: :func:`sentence_pairs` of every sentence, their weights summed per
    pair (``window``: the setting ``cooccurrence_window``). Unit level: each of the
    :data:`UNIT_HUBS` hubs (the title first, then the most mentioned names) paired with
    every other name not already paired, at :data:`UNIT_STRENGTH`. Counters:
    ``sentence_pairs``, ``unit_pairs``.

    Returns:
        ({(a, b) sorted: strength}, {(a, b): the first sentence naming both, at most
        :data:`EVIDENCE_CHARS`}, {name: its first sentence, at most
        :data:`DESCRIPTION_CHARS`}).
    """
    strength: dict[tuple[str, str], float] = {}
    evidence: dict[tuple[str, str], str] = {}
    first_sentence: dict[str, str] = {}
    mentions: Counter[str] = Counter()
    for sentence in sentences(shown):
        found, pairs = sentence_pairs(sentence, names, window)
        for name in found:
            first_sentence.setdefault(name, sentence[:DESCRIPTION_CHARS])
            mentions[name] += 1
        for pair, w in pairs.items():
            strength[pair] = strength.get(pair, 0.0) + w
            evidence.setdefault(pair, sentence[:EVIDENCE_CHARS])
    counts["sentence_pairs"] += len(strength)
    # unit level: the title first, then the most mentioned names
    order = {n: i for i, n in enumerate(names)}
    hubs = sorted(names, key=lambda n: (n != title, -mentions[n], order[n]))[:UNIT_HUBS]
    unit_level = []
    for h in hubs:
        for n in names:
            pair = (h, n) if h < n else (n, h)
            if n != h and pair not in strength:
                strength[pair] = UNIT_STRENGTH
                unit_level.append(pair)
    counts["unit_pairs"] += len(unit_level)
    return strength, evidence, first_sentence


def cooccurrence_graph(text_units: pl.DataFrame, settings: IndexSettings,
                       progress: Callable[[int, int], None] | None = None,
                       documents: pl.DataFrame | None = None) -> ExtractionResult:
    """The ``fast`` method's :func:`kgloom.extraction.extract.extract_graph`: the same
    arguments (no LLM) and the same :class:`ExtractionResult`, every unit ``extracted``
    or ``no_names`` (nothing can fail: no reply to parse).

    Args:
        text_units: a ``CHUNKS_SCHEMA`` frame (``id``, ``text``, ``document_id``,
            ``chunk_index``).
        settings: ``candidate_source``, ``entity_types``, ``title_candidates``,
            ``cooccurrence_window``, ``cooccurrence_max_pairs``, ``record_edges``
            (:mod:`kgloom.extraction.records`).
        progress: ``progress(done, total)`` after each unit.
        documents: the units' ``DOCUMENTS_SCHEMA`` frame (record titles).
    """
    counts: Counter[str] = Counter()
    ents: list[dict] = []
    rels: list[dict] = []
    status: list[dict] = []
    vocabulary = word_counts(text_units["text"].to_list())
    titles = record_titles(documents) if settings.title_candidates else {}
    rows = list(text_units.select("id", "text", "document_id", "chunk_index")
                .iter_rows(named=True))
    for done, row in enumerate(rows, 1):
        title = titles.get(row["document_id"]) if row["chunk_index"] == 0 else None
        before = counts["units_without_names"]
        e, r = cooccurrence_unit(row["id"], row["text"], settings, counts, vocabulary, title)
        ents += e
        rels += r
        status.append({"text_unit_id": row["id"], "entities": len(e), "relationships": len(r),
                       "status": "no_names" if counts["units_without_names"] > before
                       else "extracted"})
        if progress:
            progress(done, len(rows))
    more_ents, more_rels = record_edge_mentions(documents, text_units, settings, counts)
    ents += more_ents
    rels += more_rels
    vote_types(ents, counts)
    counts.update(units=len(rows), units_failed=0, entity_mentions=len(ents),
                  relationship_mentions=len(rels))
    em = (pl.DataFrame(ents, schema=schemas.ENTITY_MENTIONS_SCHEMA) if ents
          else schemas.empty(schemas.ENTITY_MENTIONS_SCHEMA))
    rm = (pl.DataFrame(rels, schema=schemas.RELATIONSHIP_MENTIONS_SCHEMA) if rels
          else schemas.empty(schemas.RELATIONSHIP_MENTIONS_SCHEMA))
    return ExtractionResult(em, rm, failures_frame([]),
                            pl.DataFrame(status, schema=schemas.UNIT_STATUS_SCHEMA), dict(counts))
