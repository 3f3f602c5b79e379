"""Edges a record states itself: fields of a JSONL/CSV record (tags, links, authors)
that become relationships of the record's title, under both index methods (no model,
no Dagster here).

The user names the fields with the setting ``record_edges``, a list of
``field:RELATION`` or ``field:RELATION:TYPE`` items (``--set
record_edges=authors:AUTHORED_BY:PERSON,tags:TAGGED``). For each record (document) with a
``title`` and such a field, each value of the field (a string, or a list of strings) is
an entity (type ``TYPE`` when given and one of ``entity_types``, else its cue,
:func:`kgloom.extraction.type_cues.type_cue`, else ``OTHER``), joined to the record's title
entity by a relationship (``kind = extracted``, strength
:data:`kgloom.extraction.evidence.EXTRACTED_STRENGTH`: the record states it) whose
description is ``"<title> RELATION <value>"``. The mentions belong to the record's first
text unit, so provenance, deletion and incremental runs treat them as any other mention.
"""

from __future__ import annotations

import json
from collections import Counter

import polars as pl

from kgloom.extraction.evidence import (
    EXTRACTED_STRENGTH,
    NOT_AN_ENTITY,
    first_sentence_with,
)
from kgloom.extraction.type_cues import type_cue
from kgloom.names.candidates import MAX_NAME_CHARS
from kgloom.names.normalize import record_title
from kgloom.settings.indexing import IndexSettings, parse_record_edges


def _values(raw) -> list[str]:
    """A field's value as names: a string, or the strings of a list (others skipped)."""
    items = raw if isinstance(raw, list) else [raw]
    return [" ".join(v.split()) for v in items if isinstance(v, str) and v.strip()]


def record_edge_mentions(documents: pl.DataFrame | None, text_units: pl.DataFrame,
                         settings: IndexSettings, counts: Counter
                         ) -> tuple[list[dict], list[dict]]:
    """The entity and relationship mention rows of ``settings.record_edges`` (module
    docstring): entity rows carry a ``cue`` key for
    :func:`kgloom.extraction.extract.vote_types`.

    Args:
        documents: ``DOCUMENTS_SCHEMA`` frame (``id``, ``raw_data``: the record's JSON).
        text_units: the documents' ``CHUNKS_SCHEMA`` frame (``id``, ``document_id``,
            ``chunk_index``, ``text``).
        counts: gets ``record_edges`` (relationships made) and
            ``record_values_dropped`` (empty or longer than ``MAX_NAME_CHARS``).
    """
    fields = parse_record_edges(settings.record_edges)
    if not fields or documents is None or documents.is_empty():
        return [], []
    first = {d: (u, t) for u, d, i, t in text_units.select(
        "id", "document_id", "chunk_index", "text").iter_rows() if i == 0}
    ents: list[dict] = []
    rels: list[dict] = []
    for doc_id, raw in documents.select("id", "raw_data").iter_rows():
        if doc_id not in first or not raw:
            continue
        try:
            rec = json.loads(raw)
        except json.JSONDecodeError:
            continue
        title = record_title(rec.get("title")) if isinstance(rec, dict) and isinstance(
            rec.get("title"), str) else None
        if not title:
            continue
        unit_id, text = first[doc_id]
        own = [(f, v) for f in fields if f in rec for v in _values(rec[f])]
        if own:
            cue = type_cue(title, text)
            cue = cue if cue in settings.entity_types else ""
            ents.append({"text_unit_id": unit_id, "title": title, "type": cue or NOT_AN_ENTITY,
                         "description": first_sentence_with(title, text), "cue": cue})
        for field_name, value in own:
            if len(value) > MAX_NAME_CHARS or value == title:
                counts["record_values_dropped"] += 1
                continue
            relation, given = fields[field_name]
            cue = given if given in settings.entity_types else type_cue(value, text)
            cue = cue if cue in settings.entity_types else ""
            ents.append({"text_unit_id": unit_id, "title": value, "type": cue or NOT_AN_ENTITY,
                         "description": f"{field_name} of {title}", "cue": cue})
            rels.append({"text_unit_id": unit_id, "source": title, "target": value,
                         "description": f"{title} {relation} {value}",
                         "strength": EXTRACTED_STRENGTH, "kind": "extracted"})
            counts["record_edges"] += 1
    return ents, rels
