"""Per-text-unit entity and relationship extraction with a local LLM.

Why it cannot break with small models:
- The reply is decoded under a JSON schema (llama.cpp grammar) with ``maxItems`` and
  ``maxLength`` bounds, so it always parses and always closes.
- Entity names are *grounded by construction*: the proper-name spans of the unit's own
  text (:func:`kgloom.names.candidates.candidate_names`) are the schema's property names,
  and the model gives each a type or ``OTHER``; relationship ``source``/``target`` are
  enums of them. The model decides and types entities but cannot invent or misspell
  one. Each stored name is still re-checked against the text.
- Relationships may only join entities of the same reply; when the model returns
  entities but no usable relationship, co-mention edges (``kind = co_mention``, lower
  strength) join the unit's main entities, and an entity the model left without any
  relationship is joined to the unit's most mentioned entity, so no entity of a unit
  ends up isolated. In a record's first unit every relationship has the record's
  subject at one end (:func:`record_subject`); a shorter form of the subject's name is
  the subject and is joined to nothing there.
- Entity descriptions are extractive: the first sentence of the unit that mentions the
  entity, so a small model's invented descriptions never enter the graph; the summaries
  stage condenses them when an entity collects many.
- Optional gleaning rounds (``max_gleanings``) ask for relationships missed between the
  unit's entities (GraphRAG's ``CONTINUE_PROMPT`` idea, made grammar-safe).
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import polars as pl
import regex

from kgloom.core import layout, schemas
from kgloom.core.storage import failures_frame
from kgloom.embedding.tokenizer import default_tokenizer
from kgloom.extraction.evidence import (
    EXTRACTED_STRENGTH,
    NOT_AN_ENTITY,
    first_sentence_with,
    sentences,
    text_direction,
)
from kgloom.extraction.records import record_edge_mentions
from kgloom.extraction.type_cues import bounded_occurrences, type_cue
from kgloom.llm import CachedLLM, PromptTemplate, prompt_room, reply_token_bound, structured_call
from kgloom.names.candidates import (
    HONORIFICS,
    MAX_CANDIDATES,
    MAX_NAME_CHARS,
    NAME_PARTICLES,
    RANKS,
    Candidate,
    caps_name_ok,
    find_candidates,
    is_grounded,
    sources_for,
    word_counts,
)
from kgloom.names.normalize import normalize_for_match, normalize_title, record_title
from kgloom.settings.indexing import IndexSettings

STAGE = layout.EXTRACTION
DESCRIPTION_MAX_CHARS = 80  # of a relationship description


def extraction_schema(names: list[str], settings: IndexSettings,
                      typed: list[str] | None = None,
                      max_relationships: int | None = None) -> dict:
    """Return the bounded JSON schema of one extraction reply for a unit with ``names``.

    ``entities`` is an object with one required property per name of ``typed`` (default:
    every candidate name), in order, whose value is an entity type or ``OTHER``: the
    model classifies each of them once (no duplicates, no invented names, ~6 tokens
    each); :func:`extract_unit` leaves out the names whose type a cue already decides.
    ``relationships`` is an array (``maxItems``: ``max_relationships``, default
    ``settings.max_relationships_per_unit``) of ``[source, target]`` pairs (enums of the
    candidates): the pair without its two keys is about 6 reply tokens shorter a
    relationship than ``{"source": .., "target": ..}`` (docs/scale.md). With
    ``settings.llm_descriptions`` the model also writes each entity's description and
    each relationship's, as an object ``{"source", "target", "description"}``
    (``maxLength``); otherwise descriptions are the
    evidence sentences of the text (:func:`first_sentence_with`, :func:`evidence_for`),
    which measured far more faithful for a 135M model and costs a third of the output
    tokens. llama-cpp-python's grammar converter ignores ``minimum``/``maximum``, so no
    numeric field is asked for; every object forbids additional properties.
    """
    typed = list(names) if typed is None else typed
    name = {"type": "string", "enum": names}
    etype = {"type": "string", "enum": [*settings.entity_types, NOT_AN_ENTITY]}
    text = {"type": "string", "minLength": 1, "maxLength": DESCRIPTION_MAX_CHARS}
    if settings.llm_descriptions:
        entity_value = {"type": "object", "properties": {"type": etype, "description": text},
                        "required": ["type", "description"], "additionalProperties": False}
        rel_props = {"source": name, "target": name, "description": text}
        relationship = {"type": "object", "properties": rel_props,
                        "required": list(rel_props), "additionalProperties": False}
    else:
        entity_value = etype
        relationship = {"type": "array", "prefixItems": [name, name], "minItems": 2,
                        "maxItems": 2, "items": False}
    return {
        "type": "object",
        "properties": {
            "entities": {"type": "object", "properties": {n: entity_value for n in typed},
                         "required": list(typed), "additionalProperties": False},
            "relationships": {"type": "array", "maxItems": max_relationships
                              or settings.max_relationships_per_unit,
                              "items": relationship},
        },
        "required": ["entities", "relationships"],
        "additionalProperties": False,
    }


_EXAMPLE_TEXT = ("Dr. Watson met Sherlock Holmes at the laboratory of St. Bartholomew's Hospital "
                 "in London. Holmes needed a friend to share rooms in Baker Street, and Watson "
                 "agreed. \"Capital!\" said Mrs. Hudson, their landlady.")
_EXAMPLE_NAMES = ["Holmes", "Watson", "Sherlock Holmes", "Dr. Watson", "Capital",
                  "St. Bartholomew's Hospital", "London", "Baker Street", "Mrs. Hudson"]
_EXAMPLE_TYPES = ["PERSON", "PERSON", "PERSON", "PERSON", "OTHER", "ORGANIZATION", "LOCATION",
                  "LOCATION", "PERSON"]
_EXAMPLE_DESCRIPTIONS = ["A detective looking for rooms", "A doctor who shares rooms with Holmes",
                         "A detective looking for rooms", "A doctor who shares rooms with Holmes",
                         "", "A hospital with a laboratory", "The city where they meet",
                         "The street where Holmes and Watson share rooms",
                         "The landlady of Holmes and Watson"]
_EXAMPLE_RELS = [("Watson", "Holmes", "Watson agrees to share rooms with Holmes"),
                 ("Mrs. Hudson", "Holmes", "Mrs. Hudson is the landlady of Holmes"),
                 ("Holmes", "Baker Street", "Holmes takes rooms in Baker Street")]


def _example_reply(llm_descriptions: bool) -> str:
    if llm_descriptions:
        ents = {n: {"type": t, "description": d if t != "OTHER" else "-"}
                for n, t, d in zip(_EXAMPLE_NAMES, _EXAMPLE_TYPES, _EXAMPLE_DESCRIPTIONS)}
        rels = [{"source": a, "target": b, "description": d} for a, b, d in _EXAMPLE_RELS]
    else:
        ents = dict(zip(_EXAMPLE_NAMES, _EXAMPLE_TYPES))
        rels = [[a, b] for a, b, _ in _EXAMPLE_RELS]
    return json.dumps({"entities": ents, "relationships": rels})

_SYSTEM = ("You build a knowledge graph from a text. You answer with JSON only: the type of "
           "each name found in the text, and the relationships between the entities.")
# no list of the names: the reply's keys are the names, forced by the schema, so the model
# reads each one just before it types it (the list cost a fifth of a pool passage's
# prompt tokens; docs/scale.md). The instruction comes before the text: everything up to
# the text is the same in every call, so the backend's KV cache of the shared prompt prefix
# holds it and it is evaluated once, not per unit (bench/bench_prompt_layout.py: 33 prompt
# tokens and 1.13x the seconds a pool passage, docs/scale.md)
_USER = ("Entity types: {types} (OTHER: not an entity)\n"
         "Give each name its entity type, or OTHER when it is not a person, organization, "
         "location or event. Then list how the entities are related in the text.\n"
         "Text:\n\"\"\"\n{text}\n\"\"\"")

def extraction_template(llm_descriptions: bool) -> PromptTemplate:
    """The extraction prompt; its few-shot reply matches :func:`extraction_schema`."""
    return PromptTemplate(
        name="extract_graph",
        system=_SYSTEM,
        user=_USER,
        schema={},  # per unit: see extraction_schema
        max_tokens=700 if llm_descriptions else 400,
        examples=((_USER.format(types="PERSON, ORGANIZATION, LOCATION, EVENT",
                                text=_EXAMPLE_TEXT),
                   _example_reply(llm_descriptions)),),
    )


GLEANING_TEMPLATE = PromptTemplate(
    name="extract_graph_gleaning",
    system=_SYSTEM,
    user=("Entities: {names}\n"
          "Relationships already found: {found}\n"
          "Text:\n\"\"\"\n{text}\n\"\"\"\n"
          "Many relationships were missed last time. List other relationships between "
          "these entities that the text states."),
    schema={},
    max_tokens=300,
)


def gleaning_schema(names: list[str], settings: IndexSettings) -> dict:
    """Schema of a gleaning reply: more relationships between ``names`` only."""
    rel = extraction_schema(names, settings)["properties"]["relationships"]
    return {"type": "object", "properties": {"relationships": rel},
            "required": ["relationships"], "additionalProperties": False}


GAP = "…"  # stands for the sentences :func:`named_sentences` leaves out


def named_sentences(text: str, names: list[str]) -> str:
    """Return the :func:`sentences` of ``text`` that name one of ``names`` (exactly, else
    after :func:`normalize_for_match`), in order, a run of left-out sentences shown as
    :data:`GAP`; ``text`` itself when no sentence names one.

    What the extraction call is shown (``IndexSettings.extraction_text`` =
    ``named_sentences``): a sentence naming no candidate can give no name its type
    and state no relationship between two names. On the bundled book these sentences
    hold 46 % of the text units' model tokens (23,570 of 51,506).
    """
    keys = [k for k in map(normalize_for_match, names) if k]
    parts: list[str] = []  # kept sentences, GAP marks between them
    kept_any = False
    for sentence in sentences(text):
        named = any(n in sentence for n in names)
        if not named and keys:
            norm = normalize_for_match(sentence)  # once per sentence, not per name
            named = any(k in norm for k in keys)
        if named:
            parts.append(sentence)
            kept_any = True
        elif kept_any and parts[-1] != GAP:
            parts.append(GAP)
    return " ".join(parts) if kept_any else text


@dataclass
class ExtractionResult:
    """What :func:`extract_graph` returns: three tables and counters."""

    entity_mentions: pl.DataFrame  # ENTITY_MENTIONS_SCHEMA
    relationship_mentions: pl.DataFrame  # RELATIONSHIP_MENTIONS_SCHEMA
    failures: pl.DataFrame  # FAILURES_SCHEMA
    units: pl.DataFrame  # schemas.UNIT_STATUS_SCHEMA: one row per text unit
    counts: dict[str, int] = field(default_factory=dict)


def evidence_for(source: str, target: str, text: str, max_chars: int = 300) -> str:
    """Return the evidence of a relationship: the first sentence of ``text`` naming both
    ``source`` and ``target``, else their first sentences joined by `` … ``."""
    for sentence in sentences(text):
        if source in sentence and target in sentence:
            return sentence[:max_chars]
    return f"{first_sentence_with(source, text, max_chars // 2)} … " \
           f"{first_sentence_with(target, text, max_chars // 2)}"


def _unit_cues(names: list[str], text: str, hints: dict[str, str],
               types: tuple[str, ...]) -> dict[str, str]:
    """{name (whitespace runs collapsed): the type :func:`kgloom.extraction.type_cues.type_cue`
    gives it in ``text``, "" when none or not one of ``types``}. ``hints``: name -> the
    type a part-of-speech tagger gave it (jieba, janome). Computed once per unit."""
    out: dict[str, str] = {}
    for raw in names:
        name = " ".join(raw.split())
        cue = type_cue(name, text, hints.get(raw, hints.get(name, "")))
        out[name] = cue if cue in types else ""
    return out


def _parse_reply(obj: dict, unit_id: str, text: str, counts: Counter, allowed: set[str],
                 cues: dict[str, str]) -> tuple[list[dict], list[dict]]:
    """Turn one validated reply into mention rows.

    ``cues``: :func:`_unit_cues` of the unit's names. Where a name has a cue, that type
    stands instead of the model's, also when the model said OTHER (a cue is evidence of
    an entity; a 135M model's OTHER is not); a name typed OTHER with no cue is dropped.
    """
    ents: dict[str, dict] = {}
    for raw_name, value in obj.get("entities", {}).items():
        name = " ".join(raw_name.split())
        etype = value["type"] if isinstance(value, dict) else value
        cue = cues.get(name, "")
        if etype == NOT_AN_ENTITY:
            if not cue:
                counts["names_typed_other"] += 1
                continue
            counts["other_overruled_by_cues"] += 1
        if cue and cue != etype.upper():
            counts["types_from_cues"] += 1
            etype = cue
        if name not in allowed or not is_grounded(name, text):
            counts["ungrounded_entities_dropped"] += 1
            continue
        desc = value["description"].strip() if isinstance(value, dict) else ""
        ents[name] = {"text_unit_id": unit_id, "title": name, "type": etype.upper(),
                      "description": desc or first_sentence_with(name, text), "cue": cue}
    rels = _parse_relationships(obj, unit_id, ents, counts, text)
    return list(ents.values()), rels


def _parse_relationships(obj: dict, unit_id: str, ents: dict, counts: Counter,
                         text: str) -> list[dict]:
    rels, seen = [], set()
    for r in obj.get("relationships", []):
        pair = r if isinstance(r, list) else (r["source"], r["target"])  # a pair or an object
        s, t = " ".join(pair[0].split()), " ".join(pair[1].split())
        if s == t or s not in ents or t not in ents:
            counts["relationships_dropped"] += 1
            continue
        stated = text_direction(s, t, text)  # the text's direction, not the pair's order
        if stated and stated != (s, t):
            counts["relationships_turned_to_text"] += 1
            s, t = stated
        if (s, t) in seen:
            counts["relationships_dropped"] += 1
            continue
        seen.add((s, t))
        desc = r["description"].strip() if isinstance(r, dict) and "description" in r else ""
        rels.append({"text_unit_id": unit_id, "source": s, "target": t,
                     "description": desc or evidence_for(s, t, text),
                     "strength": EXTRACTED_STRENGTH, "kind": "extracted"})
    return rels


def _co_mentions(unit_id: str, names: list[str], text: str, strength: float,
                 rels: list[dict], subject: str | None = None) -> list[dict]:
    """Co-mention edges that keep a unit's entities connected.

    With the unit's ``subject`` (:func:`record_subject`; ``rels`` then all have it at
    one end): an edge from it to every other entity it has no relationship with.
    An entity named to tell who another one is ("He married Margaret, daughter of
    Arnold": :func:`described_by`) gets its edge from that one instead.
    Otherwise, with no relationship at all: an edge from the most mentioned entity to
    each of the (at most 4) next ones; with relationships: each entity left without one
    gets an edge to the most mentioned entity that has one. A passage relates what it
    names to its subject, not each name to each other: on the 2Wiki pool most edges
    between every pair of the five most mentioned were "linked only through a third
    entity" or "named with no tie stated" by its hand labels (``bench/data/labels/``).
    Descriptions are the evidence sentence (:func:`evidence_for`); each pair runs in the
    text's direction where a sentence names both (:func:`text_direction`).
    """
    norm = normalize_for_match(text)
    ranked = sorted(names, key=lambda n: (-norm.count(normalize_for_match(n)), n))
    linked = {r["source"] for r in rels} | {r["target"] for r in rels}
    if subject is not None:
        pairs = [(described_by(n, names, text, subject) or subject, n)
                 for n in ranked if n != subject and n not in linked]
    elif not rels:
        pairs = [(ranked[0], n) for n in ranked[1:5]]
    else:
        hub = next(n for n in ranked if n in linked)  # so the unit ends up one component
        pairs = [(hub, n) for n in ranked if n not in linked]
    pairs = [text_direction(a, b, text) or (a, b) for a, b in pairs]
    return [{"text_unit_id": unit_id, "source": a, "target": b,
             "description": evidence_for(a, b, text), "strength": strength,
             "kind": "co_mention"} for a, b in pairs]


# "Margaret, daughter of ", "Beatrice, a niece of ": one to three lower-case words and
# "of" after a comma, right before a name
_APPOSITION_OF = regex.compile(r",\s+(?:\p{Ll}[\p{L}\p{M}'’\-]*\s+){1,3}of\s+(?:the\s+)?$")


def described_by(name: str, names: list[str], text: str, subject: str) -> str | None:
    """The name among ``names`` that ``name`` is named to describe at its first mention
    in ``text``, or None: "He married Margaret, daughter of Arnold" names Arnold to tell
    who Margaret is, so Arnold's tie is to Margaret, not to the passage's ``subject``
    (on the 2Wiki pool's hand labels, "linked only through a third entity" was the
    commonest fault of a subject's co-mention edges that join two real entities). The
    form: another name, a comma, one to three lower-case words and "of" right before
    ``name``; never ``subject`` or ``name`` itself."""
    found = bounded_occurrences(name, text)
    if not found:
        return None
    start = found[0][0]
    m = _APPOSITION_OF.search(text, max(0, start - 80), start)
    if m is None:
        return None
    head = text[:m.start()]
    return next((n for n in sorted(names, key=len, reverse=True)
                 if n not in (name, subject) and head.endswith(n)), None)


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


def _cut(text: str, share: float) -> str:
    """The first ``share`` of ``text``, ended at the last sentence end or whitespace."""
    head = text[:max(1, int(len(text) * share))]
    m = re.search(r"(?s).*[.!?。！？]\s", head) or re.search(r"(?s).*\s", head)
    return (m.group(0) if m and len(m.group(0)) > len(head) // 2 else head).rstrip()


@dataclass
class _Unit:
    """One text unit made ready for its extraction call (:func:`_prepare_unit`)."""

    unit_id: str
    text: str  # the unit's text (cut when the prompt did not fit the context)
    shown: str  # title and text: what descriptions, evidence and cues come from
    names: list[str]  # candidate names, in prompt order
    cues: dict[str, str]  # :func:`_unit_cues`
    cued: dict[str, str]  # name -> its cue's type: not asked of the model
    prompt_text: str  # what the call shows of the unit (title, named sentences)
    failures: list[dict]  # of the open-extraction call, if any
    title: str | None = None  # its record's title, the name of its subject


def _prepare_unit(llm: CachedLLM, unit_id: str, text: str, settings: IndexSettings,
                  counts: Counter, vocabulary: Counter[str] | None, title: str | None,
                  ) -> _Unit | list[dict]:
    """The candidates, cues and shown text of one unit, the text cut until the unit's own
    call fits the model's context (see :func:`extract_unit`); the failure rows of its
    open-extraction call instead when the unit has no candidate name."""
    template = extraction_template(settings.llm_descriptions)
    types = ", ".join(settings.entity_types)
    for _ in range(6):  # the prompt must fit the model's context: cut the text if not
        cands, failures = unit_candidates(llm, unit_id, text, settings, counts, vocabulary,
                                          title)
        names = [c.name for c in cands]
        if not names:
            counts["units_without_names"] += 1
            return failures
        shown = f"{title}\n\n{text}" if title else text
        cues = _unit_cues(names, shown, {c.name: c.hint for c in cands if c.hint},
                          settings.entity_types)
        cued: dict[str, str] = {}  # name -> the type its cue gives: not asked of the model
        if not settings.type_cued_names and not settings.llm_descriptions:
            cued = {n: cue for n in names if (cue := cues[" ".join(n.split())])}
        prompt_text = (named_sentences(text, names) if settings.extraction_text
                       == "named_sentences" else text)
        prompt_text = f"{title}\n\n{prompt_text}" if title else prompt_text
        unit = _Unit(unit_id, text, shown, names, cues, cued, prompt_text, failures, title)
        schema = extraction_schema(names, settings, [n for n in names if n not in cued])
        room = prompt_room(llm, template, reply_token_bound(schema) or template.max_tokens,
                           types=types, text=prompt_text)
        if room is None or room >= 0 or len(text) < 200:
            return unit
        counts["units_cut_to_fit_context"] += 1
        text = _cut(text, 0.75)
    return unit


def pack_label(k: int) -> str:
    """The label of the ``k``-th unit (from 0) of a packed call: in front of its text in
    the prompt, and the key of its relationships in the reply."""
    return f"[{k + 1}]"


def unit_schema(units: list[_Unit], settings: IndexSettings) -> dict:
    """The reply schema of one extraction call for ``units``: :func:`extraction_schema`
    for one unit; for several (a packed call), the type of every distinct name once (the
    names cued in every unit that has them not asked) and ``relationships`` an object
    with one array per unit (key :func:`pack_label`), each of its own names' pairs only
    and ``max_relationships_per_unit`` long, so no relationship can join two units."""
    names = list(dict.fromkeys(n for u in units for n in u.names))
    typed = [n for n in names if not all(n in u.cued for u in units if n in u.names)]
    schema = extraction_schema(names, settings, typed)
    if len(units) > 1:
        per_unit = {pack_label(k): extraction_schema(u.names, settings)["properties"]
                    ["relationships"] for k, u in enumerate(units)}
        schema["properties"]["relationships"] = {
            "type": "object", "properties": per_unit, "required": list(per_unit),
            "additionalProperties": False}
    return schema


def _call_units(llm: CachedLLM, units: list[_Unit], settings: IndexSettings,
                counts: Counter) -> tuple[dict | None, dict | None]:
    """One extraction call for ``units`` (one, or several packed: :func:`extract_pack`)
    under :func:`unit_schema`, each packed unit's text after its :func:`pack_label`.
    Returns :func:`kgloom.llm.structured_call`'s (reply, failure row)."""
    text = units[0].prompt_text if len(units) == 1 else PACK_SEPARATOR.join(
        f"{pack_label(k)} {u.prompt_text}" for k, u in enumerate(units))
    return structured_call(llm, extraction_template(settings.llm_descriptions), STAGE,
                           units[0].unit_id, settings.seed, schema=unit_schema(units, settings),
                           types=", ".join(settings.entity_types), text=text)


def _finish_unit(llm: CachedLLM, unit: _Unit, obj: dict, settings: IndexSettings,
                 counts: Counter) -> tuple[list[dict], list[dict], list[dict]]:
    """Mention rows of one unit from the reply ``obj`` of its call (only its own names and
    the relationships between them), then its gleaning rounds and co-mention edges."""
    names, cued, text, unit_id = unit.names, unit.cued, unit.text, unit.unit_id
    failures = list(unit.failures)
    counts["names_typed_by_cues_only"] += sum(n not in obj.get("entities", {}) for n in cued)
    replied = obj.get("entities", {})
    obj = {**obj, "entities": {n: replied[n] if n in replied else cued[n]
                               for n in names if n in replied or n in cued}}
    ents, rels = _parse_reply(obj, unit_id, unit.shown, counts, set(names), unit.cues)
    entity_names = [e["title"] for e in ents]
    for round_no in range(settings.max_gleanings if len(ents) >= 2 else 0):
        found = "; ".join(f"{r['source']} - {r['target']}" for r in rels) or "(none)"
        glean, failure = structured_call(
            llm, GLEANING_TEMPLATE, STAGE, f"{unit_id}#glean{round_no + 1}", settings.seed,
            schema=gleaning_schema(entity_names, settings), names=", ".join(entity_names),
            found=found, text=text)
        if glean is None:
            failures += [failure] if failure else []
            break
        known = {(r["source"], r["target"]) for r in rels}
        more = [r for r in _parse_relationships(glean, unit_id, {n: 1 for n in entity_names},
                                                counts, text)
                if (r["source"], r["target"]) not in known]
        counts["gleaned_relationships"] += len(more)
        rels += more
        if not more:
            break
    subject = record_subject(entity_names, unit.title)
    if subject is not None:
        kept = [r for r in rels if subject in (r["source"], r["target"])]
        counts["relationships_without_the_subject"] += len(rels) - len(kept)
        # "Iglesias" in the passage on Julio Iglesias is Julio Iglesias: no relationship
        # between them (the mention stays, the name's evidence for linking a question)
        forms = subject_forms(entity_names, subject, unit.text)
        counts["subject_short_forms"] += len(forms)
        rels = [r for r in kept if r["source"] not in forms and r["target"] not in forms]
        entity_names = [n for n in entity_names if n not in forms]
    if len(entity_names) >= 2 and settings.co_mention_edges:
        extra = _co_mentions(unit_id, entity_names, text, settings.co_mention_strength,
                             rels, subject)
        counts["co_mention_edges"] += len(extra)
        rels += extra
    return ents, rels, failures


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


def extract_unit(llm: CachedLLM, unit_id: str, text: str, settings: IndexSettings,
                 counts: Counter, vocabulary: Counter[str] | None = None,
                 title: str | None = None,
                 ) -> tuple[list[dict], list[dict], list[dict]]:
    """Extract one text unit: returns (entity mention rows, relationship rows, failure rows).

    Rows follow ``ENTITY_MENTIONS_SCHEMA``, ``RELATIONSHIP_MENTIONS_SCHEMA`` and
    ``FAILURES_SCHEMA``. ``title``: the record's title (see ``title_candidates``), shown
    to the model above the text and a candidate name. A unit with no candidate name makes
    no typing call and yields nothing. When the prompt and the longest reply the schema
    allows do not fit the model's context window (:func:`kgloom.llm.prompt_room`; text in scripts
    such as Chinese takes about twice as many model tokens as chunking tokens), the text
    shown is cut to its first three quarters at a sentence end, as often as needed, and
    the candidates are taken from what is shown (counted in
    ``units_cut_to_fit_context``).
    """
    unit = _prepare_unit(llm, unit_id, text, settings, counts, vocabulary, title)
    if not isinstance(unit, _Unit):
        return [], [], unit
    return _extract_prepared(llm, unit, settings, counts)


PACK_SEPARATOR = "\n\n"  # between the texts of the units of one packed call


def extract_pack(llm: CachedLLM, rows: list[tuple[str, str, str | None]],
                 settings: IndexSettings, counts: Counter,
                 vocabulary: Counter[str] | None = None, nameless: set[str] | None = None,
                 ) -> list[tuple[list[dict], list[dict], list[dict]]]:
    """Extract several short text units in as few calls as their names allow.

    ``rows``: (unit id, text, title or None) of consecutive short units
    (:func:`pack_units`). Each unit's candidates, cues and shown text are prepared as
    for :func:`extract_unit`; the units with names are then taken in order into calls of
    at most :data:`kgloom.names.candidates.MAX_CANDIDATES` distinct names (the size of a
    one-unit reply). A call shows the units' texts one after the other, each after its
    :func:`pack_label`, asks the type of every name once, and the relationships of each
    unit in an array of its own (:func:`unit_schema`: its own names only, so the model
    cannot join two units). Each unit takes the types of its own names and its own
    array. A packed call that fails (bad reply twice) or does not fit the context falls
    back to one call per unit (``packs_split_after_failure`` /
    ``packs_split_to_fit_context``), so packing loses no unit.

    Returns:
        per row, in order, what :func:`extract_unit` returns for it; the ids of the
        units with no candidate name are added to ``nameless`` when given.
    """
    results: list[tuple[list[dict], list[dict], list[dict]]] = [([], [], [])] * len(rows)
    ready: list[tuple[int, _Unit]] = []
    for i, (unit_id, text, title) in enumerate(rows):
        unit = _prepare_unit(llm, unit_id, text, settings, counts, vocabulary, title)
        if isinstance(unit, _Unit):
            ready.append((i, unit))
        else:
            results[i] = ([], [], unit)
            if nameless is not None:
                nameless.add(unit_id)
    packs: list[list[tuple[int, _Unit]]] = []
    for item in ready:
        names = {n for _, u in packs[-1] for n in u.names} if packs else set()
        if packs and len(names | set(item[1].names)) <= MAX_CANDIDATES:
            packs[-1].append(item)
        else:
            packs.append([item])
    for pack in packs:
        calls = [pack]
        if len(pack) > 1 and not _pack_fits(llm, [u for _, u in pack], settings):
            counts["packs_split_to_fit_context"] += 1
            calls = [[item] for item in pack]
        for call in calls:
            units = [u for _, u in call]
            obj, failure = _call_units(llm, units, settings, counts)
            if obj is None and len(units) > 1:
                counts["packs_split_after_failure"] += 1
                for i, u in call:
                    results[i] = _extract_prepared(llm, u, settings, counts)
                continue
            if obj is None:
                i, u = call[0]
                results[i] = ([], [], u.failures + ([failure] if failure else []))
                continue
            if len(units) > 1:
                counts["packed_calls"] += 1
                counts["packed_units"] += len(units)
            for k, (i, u) in enumerate(call):
                mine = obj["relationships"][pack_label(k)] if len(units) > 1 else \
                    obj["relationships"]
                results[i] = _finish_unit(llm, u, {**obj, "relationships": mine}, settings,
                                          counts)
    return results


def _pack_fits(llm: CachedLLM, units: list[_Unit], settings: IndexSettings) -> bool:
    """Whether one packed call of ``units`` (prompt and longest reply) fits the context."""
    template = extraction_template(settings.llm_descriptions)
    room = prompt_room(llm, template, reply_token_bound(unit_schema(units, settings))
                       or template.max_tokens, types=", ".join(settings.entity_types),
                       text=PACK_SEPARATOR.join(
                           f"{pack_label(k)} {u.prompt_text}" for k, u in enumerate(units)))
    return room is None or room >= 0


def _extract_prepared(llm: CachedLLM, unit: _Unit, settings: IndexSettings,
                      counts: Counter) -> tuple[list[dict], list[dict], list[dict]]:
    """:func:`extract_unit` of a prepared unit: its own call, then its mention rows."""
    obj, failure = _call_units(llm, [unit], settings, counts)
    if obj is None:
        return [], [], unit.failures + ([failure] if failure else [])
    return _finish_unit(llm, unit, obj, settings, counts)


def pack_units(n_tokens: list[int], budget: int) -> list[list[int]]:
    """Group row positions into packs for :func:`extract_pack`: consecutive rows of at
    most ``budget`` chunking tokens together while their sum stays within ``budget``;
    every longer row alone. ``budget`` 0: every row alone (today's one call per unit).
    Deterministic in the rows' order, so a rerun over the same units asks the same calls
    (the LLM cache answers them).

    Example: ``pack_units([60, 50, 700, 90, 90, 90], 200)`` -> ``[[0, 1], [2], [3, 4], [5]]``.
    """
    packs: list[list[int]] = []
    size = 0
    for i, n in enumerate(n_tokens):
        if budget and n <= budget and packs and size and size + n <= budget:
            packs[-1].append(i)
            size += n
        else:
            packs.append([i])
            size = n if budget and n <= budget else 0
    return packs


def vote_types(mentions: list[dict], counts: Counter) -> None:
    """Give every mention of a name one type, decided over all its mentions (in place).

    Mentions are grouped by :func:`kgloom.names.normalize.normalize_title`. When any mention
    of a group had a type cue (``cue``: :func:`kgloom.extraction.type_cues.type_cue`), the
    most common cue type wins; otherwise the most common model type (ties: alphabetical). The
    ``cue`` key is removed. Resolution votes again across the names it merges.
    """
    groups: dict[str, list[dict]] = {}
    for m in mentions:
        groups.setdefault(normalize_title(m["title"]) or m["title"], []).append(m)
    for group in groups.values():
        cues = Counter(m["cue"] for m in group if m.get("cue"))
        pool = cues or Counter(m["type"] for m in group)
        winner = min(pool, key=lambda t: (-pool[t], t))
        for m in group:
            counts["mention_types_changed_by_vote"] += m["type"] != winner
            m["type"] = winner
    for m in mentions:
        m.pop("cue", None)


def record_titles(documents: pl.DataFrame | None) -> dict[str, str]:
    """{document id: its record's title as a name (:func:`record_title`)} for documents
    read from a JSONL/CSV record with its own ``title`` field (a ``.txt`` file's title is
    its file name, which names nothing)."""
    out: dict[str, str] = {}
    if documents is None or documents.is_empty():
        return out
    for doc_id, raw in documents.select("id", "raw_data").iter_rows():
        try:
            rec = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            rec = None
        title = rec.get("title") if isinstance(rec, dict) else None
        name = record_title(title) if isinstance(title, str) else None
        if name:
            out[doc_id] = name
    return out


def extract_graph(text_units: pl.DataFrame, llm: CachedLLM, settings: IndexSettings,
                  progress: Callable[[int, int], None] | None = None,
                  documents: pl.DataFrame | None = None) -> ExtractionResult:
    """Extract entity and relationship mentions from every text unit.

    Args:
        text_units: a ``CHUNKS_SCHEMA`` frame (``id``, ``text``, ``document_id`` and
            ``chunk_index`` are used).
        documents: the units' ``DOCUMENTS_SCHEMA`` frame; with ``settings.title_candidates``
            a record's own title is a candidate of its first unit (:func:`record_titles`).
        llm: the cached LLM; one call per unit plus gleaning rounds (cache hits are free).
        settings: entity types, bounds, gleanings, co-mention options, seed; its
            ``record_edges`` fields of the documents' records become relationships of
            the record's title (:mod:`kgloom.extraction.records`).
        progress: called as ``progress(done, total)`` after each unit.

    Units are extracted ``llm.concurrency`` at a time (:meth:`CachedLLM.map`); the
    tables keep the text units' order whatever the concurrency.

    Returns:
        an :class:`ExtractionResult`; ``units`` says for every unit whether it was
        extracted (possibly with no entity) or failed; a failed unit has a failures row
        with the reason and the raw reply excerpt.
    """
    counts: Counter[str] = Counter()
    ents: list[dict] = []
    rels: list[dict] = []
    fails: list[dict] = []
    status: list[dict] = []
    total = text_units.height
    vocabulary = word_counts(text_units["text"].to_list())
    titles = record_titles(documents) if settings.title_candidates else {}
    rows = list(text_units.select("id", "text", "document_id", "chunk_index")
                .iter_rows(named=True))
    budget = settings.extraction_pack_tokens
    if not budget:  # one unit per call: no need to count
        n_tokens = [0] * total
    elif "n_tokens" in text_units.columns:
        n_tokens = text_units["n_tokens"].to_list()
    else:
        n_tokens = [default_tokenizer().count(t) for t in text_units["text"]]
    packs = pack_units(n_tokens, budget)
    done = [0]  # units finished, for ``progress`` (the map counts packs)
    lock = threading.Lock()

    def one(pack: list[int]) -> tuple[list[tuple[list[dict], list[dict], list[dict]]],
                                      list[bool], Counter]:
        own: Counter[str] = Counter()  # per pack: the calls run in threads
        items = [(rows[i]["id"], rows[i]["text"], titles.get(rows[i]["document_id"])
                  if rows[i]["chunk_index"] == 0 else None) for i in pack]
        nameless: set[str] = set()
        out = extract_pack(llm, items, settings, own, vocabulary, nameless)  # 1 unit: 1 call
        with lock:
            done[0] += len(pack)
        return out, [item[0] in nameless for item in items], own

    def units_done(_packs_done: int, _packs: int) -> None:
        if progress:
            progress(done[0], total)

    per_unit: list[tuple[tuple[list[dict], list[dict], list[dict]], bool]] = []
    for pack_out, pack_nameless, own in llm.map(one, packs, units_done):
        counts.update(own)
        per_unit += list(zip(pack_out, pack_nameless))
    for row, ((e, r, f), nameless) in zip(rows, per_unit):
        ents += e
        rels += r
        fails += f
        failed = bool(f) and not e
        counts["units_failed"] += failed
        no_names = nameless and not failed
        status.append({"text_unit_id": row["id"], "entities": len(e), "relationships": len(r),
                       "status": "failed" if failed else "no_names" if no_names
                       else "extracted"})

    more_ents, more_rels = record_edge_mentions(documents, text_units, settings, counts)
    ents += more_ents
    rels += more_rels
    vote_types(ents, counts)
    counts["units"] = total
    counts["entity_mentions"] = len(ents)
    counts["relationship_mentions"] = len(rels)
    em = pl.DataFrame(ents, schema=schemas.ENTITY_MENTIONS_SCHEMA) if ents else schemas.empty(
        schemas.ENTITY_MENTIONS_SCHEMA)
    rm = pl.DataFrame(rels, schema=schemas.RELATIONSHIP_MENTIONS_SCHEMA) if rels else \
        schemas.empty(schemas.RELATIONSHIP_MENTIONS_SCHEMA)
    return ExtractionResult(em, rm, failures_frame(fails),
                            pl.DataFrame(status, schema=schemas.UNIT_STATUS_SCHEMA), dict(counts))
