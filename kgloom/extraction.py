"""Per-text-unit entity and relationship extraction with a local LLM.

Why it cannot break with small models:
- The reply is decoded under a JSON schema (llama.cpp grammar) with ``maxItems`` and
  ``maxLength`` bounds, so it always parses and always closes.
- Entity names are *grounded by construction*: the proper-name spans of the unit's own
  text (:func:`candidate_names`) are the schema's property names, and the model gives
  each a type or ``OTHER``; relationship ``source``/``target`` are enums of them. The
  model decides and types entities but cannot invent or misspell one. Each stored name
  is still re-checked against the text.
- Relationships may only join entities of the same reply; when the model returns
  entities but no usable relationship, co-mention edges (``kind = co_mention``, lower
  strength) join the unit's main entities, and an entity the model left without any
  relationship is joined to the unit's most mentioned entity, so no entity of a unit
  ends up isolated.
- Entity descriptions are extractive: the first sentence of the unit that mentions the
  entity, so a small model's invented descriptions never enter the graph; the summaries
  stage condenses them when an entity collects many.
- Optional gleaning rounds (``max_gleanings``) ask for relationships missed between the
  unit's entities (GraphRAG's ``CONTINUE_PROMPT`` idea, made grammar-safe).
"""

from __future__ import annotations

import itertools
import json
import re
import unicodedata
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import polars as pl

from kgloom import schemas
from kgloom.config import IndexSettings
from kgloom.llm import CachedLLM, PromptTemplate, structured_call
from kgloom.storage import failures_frame

STAGE = "extraction"
MAX_CANDIDATES = 24  # names classified per unit (~6 output tokens each); most frequent kept
MAX_NAME_WORDS = 6  # "Ghost of Christmas Yet to Come"; longer spans are run-on headings
MAX_NAME_CHARS = 60
TO_SPAN_MIN_COUNT = 3  # corpus occurrences (overlaps count twice) to keep "X to Y" whole
DESCRIPTION_MAX_CHARS = 80  # of a relationship description
NOT_AN_ENTITY = "OTHER"
EXTRACTED_STRENGTH = 2.0  # weight of one extracted relationship mention (co-mention: config)

_HONORIFIC = r"(?:Mr|Mrs|Ms|Miss|Dr|St|Sir|Lady|Master)\.?"
_CAP = r"[A-Z][a-z][^\W_]*(?:['’\-][^\W_]+)*"  # a capitalized word, not ALL-CAPS
_NAME = re.compile(
    rf"(?:{_HONORIFIC}\s+)?(?:{_CAP})(?:(?:\s+(?:of|of\s+the|to|de|van|von))?\s+(?:{_CAP}))*")
# Capitalized words that start sentences or address people rather than name anything.
_STOP = frozenset("""a an and as at but by for from he her here his how i if in is it its
let me my no not now o of oh on or our she so that the their then there these they this
those thus to up upon we what when where which while who why will with yes yet you your
said says mr mrs ms miss dr st sir lady master god good come well ah ha""".split())
_POSSESSIVE = re.compile(r"['’]s$")
# a sentence ends at . ! ? (and closing quotes) before a space, except after an honorific
_SENTENCE_END = re.compile(
    r"(?<!\bMr)(?<!\bMrs)(?<!\bMs)(?<!\bDr)(?<!\bSt)[.!?]['\"’”]*\s")


def normalize_for_match(text: str) -> str:
    """Return ``text`` NFKC-normalized, case-folded, with runs of whitespace as one space."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def is_grounded(name: str, text: str) -> bool:
    """True when ``name`` occurs in ``text`` after Unicode (NFKC) and case normalization."""
    n = normalize_for_match(name)
    return bool(n) and n in normalize_for_match(text)


# after a lower-case word, a comma/semicolon, a closing quote, or an honorific
_MID_SENTENCE_WORD = re.compile(
    r"(?:(?<=[a-z,;] )|(?<=['’”] )|(?<=\bMr\. )|(?<=\bMrs\. )|(?<=\bMr )|(?<=\bMrs ))"
    r"[A-Z][^\W\d_]+")


def word_counts(texts: list[str]) -> Counter:
    """Return corpus statistics for :func:`candidate_names`.

    Keys: each word as written (case kept) -> occurrences; ``("mid", word)`` ->
    occurrences of a capitalized word right after a lower-case word, a comma, a closing
    quote or an honorific (``Mr. Scrooge``), i.e. most likely not a sentence start; and
    ``("to", span)`` -> occurrences of each name span joined by "to" (``Ghost of
    Christmas Yet to Come``). Counts include the overlap of consecutive text units.
    """
    counts: Counter = Counter()
    for t in texts:
        counts.update(re.findall(r"[^\W\d_]+", t))
        counts.update(("mid", w) for w in _MID_SENTENCE_WORD.findall(t))
        counts.update(("to", " ".join(m.group(0).split())) for m in _NAME.finditer(t)
                      if " to " in m.group(0))
    return counts


def candidate_names(text: str, limit: int = MAX_CANDIDATES,
                    vocabulary: Counter | None = None) -> list[str]:
    """Return the proper-name spans of ``text`` an entity may be named by.

    A span is a run of capitalized words, optionally led by an honorific (``Mr.``,
    ``Mrs.`` ...) and joined by ``of``/``of the``/``to``. Then:
    - a trailing possessive is dropped (``Scrooge's`` -> ``Scrooge``), and a word
      repeated back to back is kept once;
    - leading common words are dropped (``Perhaps Scrooge`` -> ``Scrooge``,
      ``But Marley`` -> ``Marley``); honorifics stay;
    - a one-word span that is a common word is dropped;
    - a span joined by "to" is kept whole only when it recurs in the corpus (``Ghost of
      Christmas Yet to Come``, not ``Christmas to Scrooge``); its parts are always tried;
    - spans over MAX_NAME_WORDS words or MAX_NAME_CHARS characters are run-on headings.

    A word is *common* when it is a stopword, or, with ``vocabulary`` (corpus statistics
    from :func:`word_counts`), when it is written in lower case at least as often as
    capitalized, or is never capitalized mid-sentence ("Piercing, searching..." opens a
    sentence, it names nothing). Without a vocabulary, a word is common when it occurs
    in lower case in ``text``.
    ALL-CAPS headings are ignored.

    Returns:
        at most ``limit`` distinct spans, most frequent first, then by first position.
    """
    lower_words = set(re.findall(r"\b[a-z][\w'’\-]*\b", text))

    def common_word(w: str) -> bool:
        if w.lower() in _STOP or len(w) < 2:
            return True
        if vocabulary is None:
            return w.lower() in lower_words
        # written in lower case as often, or never capitalized mid-sentence. A name that
        # only ever opens sentences ("Belle" in the sample book) is lost with the many
        # sentence-opening words ("Alas", "Meanwhile") this rule removes.
        return vocabulary[w.lower()] >= vocabulary[w] or not vocabulary[("mid", w)]

    counts: Counter[str] = Counter()
    first: dict[str, int] = {}

    def add(span: str, pos: int) -> None:
        words: list[str] = []
        for w in _POSSESSIVE.sub("", span.strip()).split():
            if not words or w != words[-1]:
                words.append(w)
        while (len(words) > 1 and not re.fullmatch(_HONORIFIC, words[0])
               and words[1][:1].isupper() and common_word(words[0])):
            words = words[1:]
        if not words or (len(words) == 1 and common_word(words[0])):
            return
        if all(w.lower().rstrip(".") in _STOP for w in words):
            return
        span = " ".join(words)
        if len(words) > MAX_NAME_WORDS or len(span) > MAX_NAME_CHARS:
            return
        counts[span] += 1
        first.setdefault(span, pos)

    for m in _NAME.finditer(text):
        span = " ".join(m.group(0).split())
        if " to " in span:
            if vocabulary is None or vocabulary[("to", span)] >= TO_SPAN_MIN_COUNT:
                add(span, m.start())
            for part in span.split(" to "):
                add(part, m.start())
        else:
            add(span, m.start())
    ranked = sorted(counts, key=lambda s: (-counts[s], first[s]))
    return ranked[:limit]


def extraction_schema(names: list[str], settings: IndexSettings) -> dict:
    """Return the bounded JSON schema of one extraction reply for a unit with ``names``.

    ``entities`` is an object with one required property per candidate name, in order,
    whose value is an entity type or ``OTHER``: the model classifies every candidate
    once (no duplicates, no invented names, ~6 tokens each). ``relationships`` is an
    array (``maxItems``) of source/target pairs (enums of the candidates). With
    ``settings.llm_descriptions`` the model also writes each entity's and relationship's
    description (``maxLength``); otherwise descriptions are the evidence sentences of the
    text (:func:`first_sentence_with`, :func:`evidence_for`), which measured far more
    faithful for a 135M model and costs a third of the output tokens. llama-cpp-python's grammar converter ignores
    ``minimum``/``maximum``, so no numeric field is asked for; every object forbids
    additional properties.
    """
    name = {"type": "string", "enum": names}
    etype = {"type": "string", "enum": [*settings.entity_types, NOT_AN_ENTITY]}
    text = {"type": "string", "minLength": 1, "maxLength": DESCRIPTION_MAX_CHARS}
    if settings.llm_descriptions:
        entity_value = {"type": "object", "properties": {"type": etype, "description": text},
                        "required": ["type", "description"], "additionalProperties": False}
        rel_props = {"source": name, "target": name, "description": text}
    else:
        entity_value, rel_props = etype, {"source": name, "target": name}
    return {
        "type": "object",
        "properties": {
            "entities": {"type": "object", "properties": {n: entity_value for n in names},
                         "required": list(names), "additionalProperties": False},
            "relationships": {"type": "array", "maxItems": settings.max_relationships_per_unit,
                              "items": {"type": "object", "properties": rel_props,
                                        "required": list(rel_props),
                                        "additionalProperties": False}},
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
        ents = {n: {"type": t, "description": d} if t != "OTHER" else {"type": t, "description": "-"}
                for n, t, d in zip(_EXAMPLE_NAMES, _EXAMPLE_TYPES, _EXAMPLE_DESCRIPTIONS)}
        rels = [{"source": a, "target": b, "description": d} for a, b, d in _EXAMPLE_RELS]
    else:
        ents = dict(zip(_EXAMPLE_NAMES, _EXAMPLE_TYPES))
        rels = [{"source": a, "target": b} for a, b, _ in _EXAMPLE_RELS]
    return json.dumps({"entities": ents, "relationships": rels})

_SYSTEM = ("You build a knowledge graph from a text. You answer with JSON only: the type of "
           "each name found in the text, and the relationships between the entities.")
_USER = ("Entity types: {types} (OTHER: not an entity)\n"
         "Names found in the text: {names}\n"
         "Text:\n\"\"\"\n{text}\n\"\"\"\n"
         "Give each name its entity type, or OTHER when it is not a person, organization, "
         "location or event. Then list how the entities are related in this text.")

def extraction_template(llm_descriptions: bool) -> PromptTemplate:
    """The extraction prompt; its few-shot reply matches :func:`extraction_schema`."""
    return PromptTemplate(
        name="extract_graph",
        system=_SYSTEM,
        user=_USER,
        schema={},  # per unit: see extraction_schema
        max_tokens=700 if llm_descriptions else 400,
        examples=((_USER.format(types="PERSON, ORGANIZATION, LOCATION, EVENT",
                                names=", ".join(_EXAMPLE_NAMES), text=_EXAMPLE_TEXT),
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


def sentences(text: str) -> list[str]:
    """Split ``text`` into sentences, whitespace collapsed.

    Sentences end at ``.``, ``!`` or ``?`` (plus closing quotes) before a space, but not
    after an honorific (``Mr.``, ``Mrs.``, ``St.`` ...); the ``_italics_`` marks of
    Project Gutenberg texts are dropped.
    """
    flat = " ".join(text.replace("_", "").split())
    bounds = [0] + [m.end() for m in _SENTENCE_END.finditer(flat)] + [len(flat)]
    return [flat[a:b].strip() for a, b in zip(bounds, bounds[1:]) if flat[a:b].strip()]


def first_sentence_with(name: str, text: str, max_chars: int = 240) -> str:
    """Return the first of :func:`sentences` of ``text`` that mentions ``name`` (exactly,
    else after Unicode and case normalization), cut to ``max_chars``; "" when none does.
    """
    found = sentences(text)
    hit = next((x for x in found if name in x), None) or next(
        (x for x in found if is_grounded(name, x)), "")
    return hit[:max_chars]


UNIT_STATUS = "extraction_units"  # table name: extraction status per text unit
UNIT_STATUS_SCHEMA = {"text_unit_id": pl.String, "status": pl.String,
                      "entities": pl.Int64, "relationships": pl.Int64}


@dataclass
class ExtractionResult:
    """What :func:`extract_graph` returns: three tables and counters."""

    entity_mentions: pl.DataFrame  # ENTITY_MENTIONS_SCHEMA
    relationship_mentions: pl.DataFrame  # RELATIONSHIP_MENTIONS_SCHEMA
    failures: pl.DataFrame  # FAILURES_SCHEMA
    units: pl.DataFrame  # UNIT_STATUS_SCHEMA: one row per text unit
    counts: dict[str, int] = field(default_factory=dict)


def evidence_for(source: str, target: str, text: str, max_chars: int = 300) -> str:
    """Return the evidence of a relationship: the first sentence of ``text`` naming both
    ``source`` and ``target``, else their first sentences joined by `` … ``."""
    for sentence in sentences(text):
        if source in sentence and target in sentence:
            return sentence[:max_chars]
    return f"{first_sentence_with(source, text, max_chars // 2)} … " \
           f"{first_sentence_with(target, text, max_chars // 2)}"


def _parse_reply(obj: dict, unit_id: str, text: str, counts: Counter,
                 allowed: set[str]) -> tuple[list[dict], list[dict]]:
    """Turn one validated reply into mention rows (entities typed OTHER are dropped)."""
    ents: dict[str, dict] = {}
    for raw_name, value in obj.get("entities", {}).items():
        name = " ".join(raw_name.split())
        etype = value["type"] if isinstance(value, dict) else value
        if etype == NOT_AN_ENTITY:
            counts["names_typed_other"] += 1
            continue
        if name not in allowed or not is_grounded(name, text):
            counts["ungrounded_entities_dropped"] += 1
            continue
        desc = value["description"].strip() if isinstance(value, dict) else ""
        ents[name] = {"text_unit_id": unit_id, "title": name, "type": etype.upper(),
                      "description": desc or first_sentence_with(name, text)}
    rels = _parse_relationships(obj, unit_id, ents, counts, text)
    return list(ents.values()), rels


def _parse_relationships(obj: dict, unit_id: str, ents: dict, counts: Counter,
                         text: str) -> list[dict]:
    rels, seen = [], set()
    for r in obj.get("relationships", []):
        s, t = " ".join(r["source"].split()), " ".join(r["target"].split())
        if s == t or s not in ents or t not in ents or (s, t) in seen:
            counts["relationships_dropped"] += 1
            continue
        seen.add((s, t))
        desc = r["description"].strip() if "description" in r else ""
        rels.append({"text_unit_id": unit_id, "source": s, "target": t,
                     "description": desc or evidence_for(s, t, text),
                     "strength": EXTRACTED_STRENGTH, "kind": "extracted"})
    return rels


def _co_mentions(unit_id: str, names: list[str], text: str, strength: float,
                 rels: list[dict]) -> list[dict]:
    """Co-mention edges that keep a unit's entities connected.

    With no relationship at all: edges between the (at most 5) most mentioned entities.
    Otherwise: each entity left without a relationship gets one edge to the most
    mentioned entity that has one. Descriptions are the evidence sentence (:func:`evidence_for`).
    """
    norm = normalize_for_match(text)
    ranked = sorted(names, key=lambda n: (-norm.count(normalize_for_match(n)), n))
    if not rels:
        pairs = list(itertools.combinations(ranked[:5], 2))
    else:
        linked = {r["source"] for r in rels} | {r["target"] for r in rels}
        hub = next(n for n in ranked if n in linked)  # so the unit ends up one component
        pairs = [(hub, n) for n in ranked if n not in linked]
    return [{"text_unit_id": unit_id, "source": a, "target": b,
             "description": evidence_for(a, b, text), "strength": strength,
             "kind": "co_mention"} for a, b in pairs]


def extract_unit(llm: CachedLLM, unit_id: str, text: str, settings: IndexSettings,
                 counts: Counter, vocabulary: Counter[str] | None = None,
                 ) -> tuple[list[dict], list[dict], list[dict]]:
    """Extract one text unit: returns (entity mention rows, relationship rows, failure rows).

    Rows follow ``ENTITY_MENTIONS_SCHEMA``, ``RELATIONSHIP_MENTIONS_SCHEMA`` and
    ``FAILURES_SCHEMA``. A unit with no proper name makes no LLM call and yields nothing.
    """
    names = candidate_names(text, vocabulary=vocabulary)
    if not names:
        counts["units_without_names"] += 1
        return [], [], []
    types = ", ".join(settings.entity_types)
    obj, failure = structured_call(llm, extraction_template(settings.llm_descriptions), STAGE,
                                   unit_id, settings.seed,
                                   schema=extraction_schema(names, settings), types=types,
                                   names=", ".join(names), text=text)
    if obj is None:
        return [], [], [failure]
    ents, rels = _parse_reply(obj, unit_id, text, counts, set(names))
    failures = []
    entity_names = [e["title"] for e in ents]
    for round_no in range(settings.max_gleanings if len(ents) >= 2 else 0):
        found = "; ".join(f"{r['source']} - {r['target']}" for r in rels) or "(none)"
        obj, failure = structured_call(
            llm, GLEANING_TEMPLATE, STAGE, f"{unit_id}#glean{round_no + 1}", settings.seed,
            schema=gleaning_schema(entity_names, settings), names=", ".join(entity_names),
            found=found, text=text)
        if obj is None:
            failures.append(failure)
            break
        known = {(r["source"], r["target"]) for r in rels}
        more = [r for r in _parse_relationships(obj, unit_id, {n: 1 for n in entity_names},
                                                counts, text)
                if (r["source"], r["target"]) not in known]
        counts["gleaned_relationships"] += len(more)
        rels += more
        if not more:
            break
    if len(ents) >= 2 and settings.co_mention_edges:
        extra = _co_mentions(unit_id, [e["title"] for e in ents], text,
                             settings.co_mention_strength, rels)
        counts["co_mention_edges"] += len(extra)
        rels += extra
    return ents, rels, failures


def extract_graph(text_units: pl.DataFrame, llm: CachedLLM, settings: IndexSettings,
                  progress: Callable[[int, int], None] | None = None) -> ExtractionResult:
    """Extract entity and relationship mentions from every text unit.

    Args:
        text_units: a ``TEXT_UNITS_SCHEMA`` frame (``id`` and ``text`` are used).
        llm: the cached LLM; one call per unit plus gleaning rounds (cache hits are free).
        settings: entity types, bounds, gleanings, co-mention options, seed.
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
    rows = list(text_units.select("id", "text").iter_rows(named=True))

    def one(row: dict) -> tuple[tuple[list[dict], list[dict], list[dict]], Counter]:
        own: Counter[str] = Counter()  # per unit: the calls run in threads
        return extract_unit(llm, row["id"], row["text"], settings, own, vocabulary), own

    for row, ((e, r, f), own) in zip(rows, llm.map(one, rows, progress)):
        counts.update(own)
        ents += e
        rels += r
        fails += f
        failed = bool(f) and not e
        counts["units_failed"] += failed
        status.append({"text_unit_id": row["id"], "entities": len(e), "relationships": len(r),
                       "status": "failed" if failed else "extracted"})
    counts["units"] = total
    counts["entity_mentions"] = len(ents)
    counts["relationship_mentions"] = len(rels)
    em = pl.DataFrame(ents, schema=schemas.ENTITY_MENTIONS_SCHEMA) if ents else schemas.empty(
        schemas.ENTITY_MENTIONS_SCHEMA)
    rm = pl.DataFrame(rels, schema=schemas.RELATIONSHIP_MENTIONS_SCHEMA) if rels else \
        schemas.empty(schemas.RELATIONSHIP_MENTIONS_SCHEMA)
    return ExtractionResult(em, rm, failures_frame(fails),
                            pl.DataFrame(status, schema=UNIT_STATUS_SCHEMA), dict(counts))
