"""Candidate entity names of a text unit, for any script (no LLM, no Dagster): a kernel
that extraction, grounding and query linking share.

The extraction prompt asks the model to type a closed list of names taken from the
unit's own text, so what this module finds bounds what the graph can hold. Three
sources, chosen per script of each text unit (:func:`scripts_of`) by the setting
``candidate_source`` (``auto`` picks per script; see :data:`AUTO_SOURCE`):

- ``proper_names`` (cased scripts: Latin, Greek, Cyrillic, Armenian, ...): runs of
  capitalized, all-caps or mixed-case words (letters by Unicode category, with the
  ``regex`` package), joined by name particles (``of``, ``van``, ``de``, ``al-`` ...),
  led by honorifics or initials, followed by numerals (``Apollo 11``, ``Harvard Mark I``),
  and quoted titles. Sentence-opening common words and shouted headings are told apart
  from names by corpus statistics (:func:`word_counts`). In inflected languages
  (:mod:`kgloom.names.morphology`) a capitalized adjective takes its lower-case head
  noun along (``Казанском университете``, ``Karlově univerzitě``), and two names that
  only stand side by side (``В Москве Толстой купил``: a place, then a person) are
  split.
- ``segmenter`` (Chinese: jieba's part-of-speech tags; Japanese: janome's): runs of
  nouns holding a proper-noun tag, plus quoted titles (《…》, 『…』, 「…」).
- ``ngram`` (any script without letter case): character n-grams that recur in the
  corpus, maximal and not led or ended by the corpus's most frequent characters.

A fourth source, ``open`` (the model proposes names, kept only when found verbatim in the
unit), needs the LLM and lives in :mod:`kgloom.extraction.extract`. The type cues of a found
name are extraction's (:mod:`kgloom.extraction.type_cues`).

Every candidate is a substring of the unit's text, so names stay grounded.

This module is the public door: it picks the sources and ranks what they find, and
re-exports what other modules use from the sources' own modules: :mod:`.proper_names`
(cased scripts), :mod:`.known_names` (the corpus's multi-word names in any case),
:mod:`.segmenters` (Chinese, Japanese), :mod:`.ngrams` (caseless scripts), with
:mod:`.corpus_stats` (:func:`word_counts`), :mod:`.tokens`, :mod:`.acronyms`,
:mod:`.scripts` and :mod:`.lexicon` (the word lists) under them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from kgloom.names.acronyms import acronym_evidence, caps_name_ok
from kgloom.names.corpus_stats import word_counts
from kgloom.names.known_names import _known_index, _known_matches, _known_names
from kgloom.names.lexicon import (
    DETERMINERS,
    HONORIFICS,
    NAME_PARTICLES,
    RANKS,
    ROMAN_NUMERAL,
    STOPWORDS,
)
from kgloom.names.ngrams import _ngram_names
from kgloom.names.normalize import MAX_NAME_CHARS, normalize_for_match
from kgloom.names.proper_names import _proper_names
from kgloom.names.scripts import CASELESS_RUN, scripts_of, unspaced
from kgloom.names.segmenters import _segmenter_names, segmenter_available, word_spans
from kgloom.names.tokens import is_locator_line, mask_locator_lines

# its own names and those it re-exports from the sources' modules
__all__ = [
    "AUTO_SOURCE", "CASELESS_RUN", "DETERMINERS", "HONORIFICS", "MAX_CANDIDATES",
    "MAX_NAME_CHARS", "NAME_PARTICLES", "RANKS", "ROMAN_NUMERAL", "SOURCES", "STOPWORDS",
    "Candidate", "_known_index", "_known_matches", "acronym_evidence", "candidate_names",
    "caps_name_ok", "find_candidates", "is_grounded", "is_locator_line",
    "mask_locator_lines", "scripts_of", "segmenter_available", "sources_for", "unspaced",
    "word_counts", "word_spans",
]


SOURCES = ("auto", "proper_names", "segmenter", "ngram", "open")  # setting candidate_source
MAX_CANDIDATES = 24  # names classified per unit (~6 output tokens each); most frequent kept

# What ``auto`` uses per script group of :func:`scripts_of`, chosen by the measurements
# of bench/bench_multilingual.py (README "Extraction for any script").
AUTO_SOURCE = {"cased": "proper_names", "zh": "segmenter", "ja": "segmenter",
               "caseless": "ngram"}


@dataclass(frozen=True)
class Candidate:
    """A candidate name: its text (a substring of the unit), first offset (characters),
    occurrences in the unit, the source that found it, and a type hint from a
    segmenter's part-of-speech tag ("" when none)."""

    name: str
    start: int
    count: int
    source: str
    hint: str = ""


def sources_for(text: str, candidate_source: str = "auto") -> dict[str, str]:
    """Return {script group: source} for the script groups of ``text`` (:func:`scripts_of`).

    ``auto`` maps each group through :data:`AUTO_SOURCE` (a segmenter that is not
    installed falls back to ``ngram``); any other source applies to every caseless
    group, while cased text always uses ``proper_names`` unless the source is ``open``.

    Raises:
        ValueError: on an unknown ``candidate_source``.
    """
    if candidate_source not in SOURCES:
        raise ValueError(f"candidate_source must be one of {SOURCES}, got {candidate_source!r}")
    out = {}
    for group in scripts_of(text):
        src = AUTO_SOURCE[group] if candidate_source == "auto" else candidate_source
        if group == "cased" and src in ("segmenter", "ngram"):
            src = "proper_names"
        if group != "cased" and src == "proper_names":
            src = AUTO_SOURCE[group]
        if src == "segmenter" and not segmenter_available(group):
            src = "ngram"
        out[group] = src
    return out


def find_candidates(text: str, candidate_source: str = "auto", stats: Counter | None = None,
                    limit: int | None = None) -> list[Candidate]:
    """Return the candidate names of one text unit, most frequent first.

    Args:
        text: the unit's text.
        candidate_source: ``auto | proper_names | segmenter | ngram | open``; ``open``
            gives nothing here (the model proposes; see :mod:`kgloom.extraction.extract`).
        stats: corpus statistics from :func:`word_counts` over the corpus's units
            (None: the unit alone).
        limit: keep at most this many (None: all).

    Returns:
        distinct names (each a substring of ``text``), ranked by occurrences in the unit
        (descending), then first position; segmenter type hints where known.
    """
    found: list[tuple[str, int, str, str]] = []
    text = mask_locator_lines(text)
    for group, src in sources_for(text, candidate_source).items():
        if src == "proper_names":
            found += [(n, p, src, "") for n, p in _proper_names(text, stats)]
            found += [(n, p, src, "") for n, p in _known_names(text, stats)]
        elif src == "segmenter":
            found += [(n, p, src, h) for n, p, h in _segmenter_names(text, group)]
        elif src == "ngram":
            found += [(n, p, src, "") for n, p in _ngram_names(text, stats)]
    counts: Counter[str] = Counter()
    first: dict[str, tuple[int, str, str]] = {}
    for name, pos, src, hint in found:
        name = name.strip()
        if not name or len(name) > MAX_NAME_CHARS:
            continue
        counts[name] += 1
        if name not in first or (hint and not first[name][2]):
            first[name] = (min(pos, first.get(name, (pos,))[0]), src, hint)
    ranked = sorted(counts, key=lambda s: (-counts[s], first[s][0]))
    if limit is not None:
        ranked = ranked[:limit]
    return [Candidate(s, first[s][0], counts[s], first[s][1], first[s][2]) for s in ranked]


def candidate_names(text: str, limit: int = MAX_CANDIDATES,
                    vocabulary: Counter | None = None, candidate_source: str = "auto",
                    ) -> list[str]:
    """Return the candidate names of ``text`` an entity may be named by.

    The names of :func:`find_candidates` (see the module docstring for the rules per
    script), with ``vocabulary`` the corpus statistics of :func:`word_counts` (None: the
    text alone).

    Returns:
        at most ``limit`` distinct names, each grounded in ``text``, most frequent first,
        then by first position.
    """
    return [c.name for c in find_candidates(text, candidate_source, vocabulary, limit)]


def is_grounded(name: str, text: str) -> bool:
    """True when ``name`` occurs in ``text`` after Unicode (NFKC) and case normalization."""
    n = normalize_for_match(name)
    return bool(n) and n in normalize_for_match(text)
