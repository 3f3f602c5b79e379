"""What an extraction call asks: the reply schemas (one unit; gleaning), the prompt
templates with their worked example, and the named sentences a unit is shown by.
"""

from __future__ import annotations

import json

from kgloom.core import layout
from kgloom.extraction.evidence import NOT_AN_ENTITY, sentences
from kgloom.llm import PromptTemplate
from kgloom.names.normalize import normalize_for_match
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
