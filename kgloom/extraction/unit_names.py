"""The candidate names of one text unit: the candidate finder's (:mod:`kgloom.names
.candidates`), the model's own proposals (``candidate_source=open``), its record's title;
and the record's subject with the other forms of its name.
"""

from __future__ import annotations

import json
from collections import Counter

import regex

from kgloom.extraction.extraction_prompts import _EXAMPLE_TEXT, STAGE
from kgloom.extraction.type_cues import bounded_occurrences
from kgloom.llm import CachedLLM, PromptTemplate, structured_call
from kgloom.names.candidates import (
    HONORIFICS,
    MAX_CANDIDATES,
    MAX_NAME_CHARS,
    NAME_PARTICLES,
    RANKS,
    Candidate,
    caps_name_ok,
    find_candidates,
    sources_for,
)
from kgloom.names.normalize import normalize_for_match, normalize_title
from kgloom.settings.indexing import IndexSettings

OPEN_TEMPLATE = PromptTemplate(
    name="propose_names",
    system="You find the names of people, organizations, places and events in a text. "
           "You answer with JSON only.",
    user="Text:\n\"\"\"\n{text}\n\"\"\"\nList the names in this text, each copied "
         "exactly as it is written.",
    schema={},  # see open_schema
    max_tokens=400,
    examples=((f"Text:\n\"\"\"\n{_EXAMPLE_TEXT}\n\"\"\"\nList the names in this text, "
               "each copied exactly as it is written.",
               json.dumps({"names": ["Dr. Watson", "Sherlock Holmes",
                                     "St. Bartholomew's Hospital", "London", "Baker Street",
                                     "Mrs. Hudson"]}, ensure_ascii=False)),),
)


def open_schema(limit: int = MAX_CANDIDATES) -> dict:
    """Schema of an open-extraction reply: at most ``limit`` names of at most
    ``MAX_NAME_CHARS`` characters."""
    return {"type": "object", "properties": {"names": {
        "type": "array", "maxItems": limit,
        "items": {"type": "string", "minLength": 1, "maxLength": MAX_NAME_CHARS}}},
        "required": ["names"], "additionalProperties": False}


def open_candidates(llm: CachedLLM, unit_id: str, text: str, settings: IndexSettings,
                    counts: Counter) -> tuple[list[Candidate], dict | None]:
    """Open extraction: the model proposes names under :func:`open_schema`; a name is
    kept only when it occurs verbatim in ``text`` (whitespace runs aside) and, when it is
    all-caps, with evidence that it is a name
    (:func:`kgloom.names.candidates.caps_name_ok`: not PWNED, SYSTEM or DROP TABLE).

    Returns:
        (candidates in reply order, None) or ([], failure row) when the reply breaks
        the schema twice (see :func:`kgloom.llm.structured_call`).
    """
    obj, failure = structured_call(llm, OPEN_TEMPLATE, STAGE, f"{unit_id}#open", settings.seed,
                                   schema=open_schema(), text=text)
    if obj is None:
        return [], failure
    flat = " ".join(text.split())
    out, seen = [], set()
    for raw in obj["names"]:
        name = " ".join(raw.split()).strip(" ,.;:")
        if not name or name not in flat:
            counts["open_names_not_in_text"] += 1
            continue
        if not caps_name_ok(name, flat):  # shouting or code the model took for a name
            counts["open_names_caps_without_evidence"] += 1
            continue
        if name not in seen:
            seen.add(name)
            out.append(Candidate(name, flat.find(name), flat.count(name), "open"))
    return out, None


def unit_candidates(llm: CachedLLM | None, unit_id: str, text: str, settings: IndexSettings,
                    counts: Counter, vocabulary: Counter | None = None,
                    title: str | None = None, limit: int | None = MAX_CANDIDATES,
                    ) -> tuple[list[Candidate], list[dict]]:
    """The candidate names of one unit: the record ``title`` first (when given), then the
    names of its scripts' sources but those written only inside the title
    (:func:`inside_title`) (``settings.candidate_source``; ``open`` asks the model,
    so ``llm`` may be None for any other source), distinct after normalization, at most
    ``limit`` (None: all; the model's prompt holds ``MAX_CANDIDATES``).

    Returns:
        (candidates, failure rows of the open-extraction call, if any).

    Raises:
        ValueError: the ``open`` source without an ``llm``.
    """
    found = find_candidates(text, settings.candidate_source, vocabulary)
    failures = []
    if "open" in sources_for(text, settings.candidate_source).values():
        if llm is None:
            raise ValueError("candidate_source 'open' asks the model, but no llm was given")
        proposed, failure = open_candidates(llm, unit_id, text, settings, counts)
        found = proposed + found
        failures += [failure] if failure else []
    if title:
        spans = title_spans(title, text)  # once a unit, not once a candidate
        found = [Candidate(title, -1, 1, "title")] + [
            c for c in found if not inside_title(c.name, text, title, vocabulary, spans)]
    out, seen = [], set()
    for c in found:
        key = normalize_for_match(c.name)
        if key not in seen:
            seen.add(key)
            out.append(c)
        counts[f"candidates_{c.source}"] += 1
    return out[:limit], failures


_WORD_EDGE = r"(?<![\p{L}\p{M}\p{N}])"
_WORD_END = r"(?![\p{L}\p{M}\p{N}])"


def title_spans(title: str, text: str) -> list[tuple[int, int]]:
    """(start, end) of each place ``text`` writes ``title``: its words in any letter
    case, whitespace between them of any kind and length, a hyphen maybe followed by
    spaces or a line break ("Hohenlohe- Langenburg"), no letter, mark or digit touching
    either end."""
    words = title.split()
    if not words:
        return []
    body = r"\s+".join(regex.escape(w).replace("\\-", r"-\s*") for w in words)
    return [m.span() for m in regex.finditer(_WORD_EDGE + body + _WORD_END, text,
                                             flags=regex.IGNORECASE)]


_PLACE_PARTICLES = NAME_PARTICLES - {"the", "to"}  # "Henry I of Werle", not "Eye of the Tiger"


def inside_title(name: str, text: str, title: str, stats: Counter | None = None,
                 spans: list[tuple[int, int]] | None = None) -> bool:
    """Is ``name`` only ever written in ``text`` as a part of the record's ``title`` (a
    work's title names one thing, not its words): "Dick" in "Becoming Dick is a 2000
    film", "Beach" in "Bhaji on the Beach", "Eye of the Tiger" in "Sinbad and the Eye of
    the Tiger"? Kept as things of their own: a part after a particle such as "of", named
    in the name ("Werle" in "Henry I of Werle"), a name also written outside the title,
    and a shorter form of a title made of names only (:func:`is_short_form`: "Iglesias"
    of "Julio Iglesias", "Feodora of Hohenlohe-Langenburg" of "Princess Feodora of ...";
    not "Dick" of "Becoming Dick", whose other word the corpus writes in lower case).

    Args:
        name: a candidate name, as written in ``text``.
        text: the unit's text.
        title: its record's title (:func:`record_titles`).
        stats: corpus statistics (:func:`kgloom.names.candidates.word_counts`) that tell
            a common word (more often lower case than capitalized) from a name word;
            None: the title's words outside a short form are read as names.
        spans: :func:`title_spans` of ``title`` in ``text`` when the caller has them
            (None: found here).

    Returns:
        True when every whole-word occurrence of ``name`` lies strictly inside a place
        where ``text`` writes ``title`` (:func:`title_spans`), follows no such particle
        there, and ``name`` is no short form of a title of names; False when ``name``
        is the title or is not found.
    """
    if is_short_form(name, title):
        rest = normalize_title(title).split()
        short = normalize_title(name).split()
        rest = rest[len(short):] if rest[:len(short)] == short else rest[:-len(short)]
        if stats is None or all(w in _PLACE_PARTICLES or w.title() in RANKS
                                or stats[w] <= stats[w.title()] for w in rest):
            return False
    found = bounded_occurrences(name, text)
    if spans is None:
        spans = title_spans(title, text) if found else []
    for a, b in found:
        span = next(((s, e) for s, e in spans if s <= a and b <= e and (s, e) != (a, b)),
                    None)
        if span is None:
            return False
        before = text[span[0]:a].split()
        if before and before[-1] in _PLACE_PARTICLES:
            return False
    return bool(found)


def is_short_form(name: str, full: str) -> bool:
    """Is ``name`` a shorter form of the name ``full``: its words (compared by
    :func:`normalize_title`) are the first words of ``full`` ("Henry I" of "Henry I of
    Werle", "Giselbert" of "Giselbert, Count of Roucy") or its last words after a word
    that is no particle ("Iglesias" of "Julio Iglesias"; not "Werle" after "of", a place
    named in the name)? A name is no short form of itself."""
    short, words = normalize_title(name).split(), normalize_title(full).split()
    k = len(short)
    if not short or k >= len(words):
        return False
    return words[:k] == short or (words[-k:] == short and words[-k - 1] not in NAME_PARTICLES)


# what may open a parenthesis of other names right after a subject: "(born Andrea
# Douglas Story", "(German: Friedrich August", "(née Lisbet Beck-Friis", "(also Mathilda"
_ALSO_NAMED = regex.compile(r"\s*\((?:born|née|nee|also(?: known as| called)?|a\.k\.a\.|"
                            r"[\p{L}\p{M}]+:)?\s*")


def subject_forms(names: list[str], subject: str, text: str) -> set[str]:
    """The names among ``names`` that are other forms of the record's ``subject`` in
    its unit's ``text``:

    - a shorter form (:func:`is_short_form`: "Iglesias" of "Julio Iglesias");
    - the subject with a rank in front ("Countess Johanna Magdalene of Hanau" of
      "Johanna Magdalene of Hanau");
    - the same first and last words with words between left out or added ("Oakley
      Haldeman" of "Oakley W. Haldeman", "Michael Jay Broyde" of "Michael Broyde");
    - a name that opens the parenthesis right after the subject's first mention, maybe
      after "born", "née", "also known as" or a language and a colon ("Andi Story (born
      Andrea Douglas Story", "Frederick Augustus (German: Friedrich August").

    On the 2Wiki pool's hand labels (``bench/data/labels/pool-relationships-c/-d``) 17
    of 200 relationships joined two forms of one person. Returns a subset of ``names``
    (never ``subject``)."""
    words = normalize_title(subject).split()
    forms = set()
    for n in names:
        other = normalize_title(n).split()
        if n == subject or not other:
            continue
        ranked = len(other) > len(words) and other[-len(words):] == words and all(
            w.title() in RANKS or w.title() in HONORIFICS for w in other[:-len(words)])
        if is_short_form(n, subject) or ranked or _same_ends(other, words):
            forms.add(n)
    first = bounded_occurrences(subject, text)
    m = _ALSO_NAMED.match(text, first[0][1]) if first else None
    if m:
        forms |= {n for n in names if n != subject and text.startswith(n, m.end())}
    return forms


def _same_ends(a: list[str], b: list[str]) -> bool:
    """Are word lists ``a`` and ``b`` (at least two words each, not equal) the same name
    with middle words left out: same first and last word, the shorter's words in order
    within the longer?"""
    short, long_ = sorted((a, b), key=len)
    if len(short) < 2 or a == b or short[0] != long_[0] or short[-1] != long_[-1]:
        return False
    it = iter(long_)
    return all(w in it for w in short)


def record_subject(names: list[str], title: str | None) -> str | None:
    """The name among ``names`` that is the record's ``title`` (:func:`record_titles`,
    compared by :func:`normalize_for_match`): the unit's subject, as a Wikipedia
    passage's article. None without a title or when no name is it.

    A record's first unit relates what it names to its subject ("He married Ilse
    Varnow, daughter of Odo Brannick"): there :func:`_finish_unit` keeps only the
    relationships with the subject at one end, and every other entity of the unit gets a
    co-mention edge from it. On the 2Wiki pool's hand labels (200 relationships,
    ``bench/data/labels/pool-relationships*.jsonl``) 58 % of the relationships with the
    passage's subject at one end were supported by the text, 20 % of the others. A name
    of the unit that is a shorter form of the subject (:func:`is_short_form`: "Iglesias"
    in the passage on Julio Iglesias) is the subject: it has no relationship and no
    co-mention edge there (on the next sample of 100, 16 relationships joined two forms
    of one entity); its mention stays, so a question naming "Iglesias" still finds the
    passage (dropping it cost the HotpotQA sample 1.5 R@2 points)."""
    if not title:
        return None
    key = normalize_for_match(title)
    return next((n for n in names if normalize_for_match(n) == key), None)
