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

This module runs the stage over a table of text units (:func:`extract_graph`) and is the
door to the rest, which it re-exports: :mod:`.extraction_prompts` (reply schemas,
prompts, named sentences), :mod:`.unit_names` (a unit's candidate names, the open source,
record titles and subjects), :mod:`.unit_calls` (one unit's call or a packed call, gleaning)
and :mod:`.mentions` (mention rows from a reply, co-mention edges).
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import polars as pl

from kgloom.core import schemas
from kgloom.core.storage import failures_frame
from kgloom.embedding.tokenizer import default_tokenizer
from kgloom.extraction.evidence import sentences
from kgloom.extraction.extraction_prompts import (
    _USER,
    DESCRIPTION_MAX_CHARS,
    GAP,
    GLEANING_TEMPLATE,
    STAGE,
    _example_reply,
    extraction_schema,
    extraction_template,
    gleaning_schema,
    named_sentences,
)
from kgloom.extraction.mentions import (
    _co_mentions,
    _parse_reply,
    _unit_cues,
    described_by,
    evidence_for,
)
from kgloom.extraction.records import record_edge_mentions
from kgloom.extraction.unit_calls import (
    PACK_SEPARATOR,
    extract_pack,
    extract_unit,
    pack_label,
    pack_units,
    unit_schema,
)
from kgloom.extraction.unit_names import (
    OPEN_TEMPLATE,
    inside_title,
    is_short_form,
    open_candidates,
    open_schema,
    record_subject,
    subject_forms,
    title_spans,
    unit_candidates,
)
from kgloom.llm import CachedLLM
from kgloom.names.candidates import word_counts
from kgloom.names.normalize import normalize_title, record_title
from kgloom.settings.indexing import IndexSettings

# its own names and those it re-exports from the modules it was split into
__all__ = [
    "DESCRIPTION_MAX_CHARS", "GAP", "GLEANING_TEMPLATE", "OPEN_TEMPLATE", "PACK_SEPARATOR",
    "STAGE", "_USER", "ExtractionResult", "_co_mentions", "_example_reply", "_parse_reply",
    "_unit_cues", "described_by", "evidence_for", "extract_graph", "extract_pack",
    "extract_unit", "extraction_schema", "extraction_template", "gleaning_schema",
    "inside_title", "is_short_form", "named_sentences", "open_candidates", "open_schema",
    "pack_label", "pack_units", "record_subject", "record_titles", "sentences",
    "subject_forms", "title_spans", "unit_candidates", "unit_schema", "vote_types",
]


@dataclass
class ExtractionResult:
    """What :func:`extract_graph` returns: three tables and counters."""

    entity_mentions: pl.DataFrame  # ENTITY_MENTIONS_SCHEMA
    relationship_mentions: pl.DataFrame  # RELATIONSHIP_MENTIONS_SCHEMA
    failures: pl.DataFrame  # FAILURES_SCHEMA
    units: pl.DataFrame  # schemas.UNIT_STATUS_SCHEMA: one row per text unit
    counts: dict[str, int] = field(default_factory=dict)


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
    total = text_units.height
    vocabulary = word_counts(text_units["text"].to_list())
    titles = record_titles(documents) if settings.title_candidates else {}
    rows = list(text_units.select("id", "text", "document_id", "chunk_index")
                .iter_rows(named=True))
    budget = settings.extraction_pack_tokens
    packs = pack_units(_unit_sizes(text_units, budget), budget)
    per_unit = _extract_packs(llm, settings, rows, titles, vocabulary, packs, counts,
                              progress)
    ents, rels, fails, status = _unit_rows(rows, per_unit, counts)

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


# what :func:`kgloom.extraction.unit_calls.extract_unit` returns for one unit: entity
# mention rows, relationship mention rows, failure rows
UnitRows = tuple[list[dict], list[dict], list[dict]]


def _unit_sizes(text_units: pl.DataFrame, budget: int) -> list[int]:
    """Chunking tokens per text unit, for :func:`pack_units`: the ``n_tokens`` column
    when there is one, else counted with the default tokenizer; all 0 when ``budget``
    is 0 (one unit per call: no need to count)."""
    if not budget:
        return [0] * text_units.height
    if "n_tokens" in text_units.columns:
        return text_units["n_tokens"].to_list()
    return [default_tokenizer().count(t) for t in text_units["text"]]


def _extract_packs(llm: CachedLLM, settings: IndexSettings, rows: list[dict],
                   titles: dict[str, str], vocabulary: Counter, packs: list[list[int]],
                   counts: Counter, progress: Callable[[int, int], None] | None,
                   ) -> list[tuple[UnitRows, bool]]:
    """Run :func:`extract_pack` on every pack of row positions, ``llm.concurrency`` at a
    time (:meth:`CachedLLM.map`).

    ``rows``: dicts with ``id``, ``text``, ``document_id``, ``chunk_index``; a unit of
    chunk 0 is shown its document's record title (``titles``). ``progress(done, total)``
    counts units, not packs. Each pack's counters go to ``counts`` in pack order.

    Returns:
        per row, in order: (its rows as :func:`extract_unit` returns them, whether it
        had no candidate name).
    """
    total = len(rows)
    done = [0]  # units finished, for ``progress`` (the map counts packs)
    lock = threading.Lock()

    def one(pack: list[int]) -> tuple[list[UnitRows], list[bool], Counter]:
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

    per_unit: list[tuple[UnitRows, bool]] = []
    for pack_out, pack_nameless, own in llm.map(one, packs, units_done):
        counts.update(own)
        per_unit += list(zip(pack_out, pack_nameless))
    return per_unit


def _unit_rows(rows: list[dict], per_unit: list[tuple[UnitRows, bool]], counts: Counter,
               ) -> tuple[list[dict], list[dict], list[dict], list[dict]]:
    """The units' entity mention, relationship mention and failure rows concatenated in
    unit order, and one ``UNIT_STATUS_SCHEMA`` row per unit (``extracted``, ``failed``:
    failure rows and no entity, counted in ``units_failed``; ``no_names``)."""
    ents: list[dict] = []
    rels: list[dict] = []
    fails: list[dict] = []
    status: list[dict] = []
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
    return ents, rels, fails, status
