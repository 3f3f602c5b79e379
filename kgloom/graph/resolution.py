"""Entity resolution: merge the per-unit mentions of one entity into one entity row.

Three deterministic passes, each recorded in the alias table so a merge can be audited
and undone:

1. ``normalized``: titles with the same normalization key (:func:`normalize_title`) are
   one entity ("Mr Scrooge" == "Mr. Scrooge" == "MR.  SCROOGE").
2. ``name_extension``: a shorter name joins the unique longer name that contains it as
   whole tokens ("Scrooge" -> "Ebenezer Scrooge"); in a corpus of several documents, only
   when some document names both.
   ``name_context``: once every unambiguous merge is done, a short name with several
   such candidates ("Tim" with "Tiny Tim" and "Tim Cratchit") joins the candidate whose
   group shares the most text units with its own group, when that one is strictly ahead
   (local-context disambiguation); with no such candidate it stays alone.
3. ``embedding`` (optional): nearest-neighbour search over normalized embeddings of
   "title: description"; pairs of the same type with cosine >= threshold are unioned.

No pass merges across honorific gender: a "Mrs."/"Miss"/"Ms." name never joins a bare or
"Mr." name, and the other way round. Life-stage honorifics ("Master" a boy, "Mr." a
man; "Miss" an unmarried woman or girl, "Mrs." a married woman) only decide between
candidates in ``name_context``: "Mr. Cratchit" prefers "Bob Cratchit" to "Master Peter
Cratchit".

This module runs the passes and builds the tables (:func:`resolve_entities`); the keys
and evidence the passes compare (honorifics, gender, name cores, the union-find) are in
:mod:`.resolution_keys`, the ``name_extension``/``name_context`` and ``embedding`` passes
in :mod:`.name_merges`.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterable, Mapping

import numpy as np
import polars as pl

from kgloom.core import schemas
from kgloom.core.ids import content_id
from kgloom.graph.name_merges import (
    RESOLUTION_TEXT_CHARS,
    _merge_embeddings,
    _merge_name_extensions,
)
from kgloom.graph.resolution_keys import (
    UNTYPED,
    _canonical_title,
    _descriptions,
    _distinct,
    _Key,
    _UnionFind,
    _vote,
    common_words_of,
)
from kgloom.names.normalize import RESOLUTION_METHODS, normalize_title

# its own public names and what tests and other modules reach through it
__all__ = [
    "RESOLUTION_TEXT_CHARS", "UNTYPED", "_Key", "_UnionFind", "_merge_embeddings",
    "common_words_of", "resolve_entities",
]


def resolve_entities(
    entity_mentions: pl.DataFrame, relationship_mentions: pl.DataFrame,
    embed: Callable[[list[str]], np.ndarray] | None = None, similarity_threshold: float = 0.9,
    methods: frozenset[str] = RESOLUTION_METHODS,
    verify: Callable[[str, str], bool] | None = None,
    unit_documents: Mapping[str, str] | None = None, unit_texts: Iterable[str] | None = None,
    unit_positions: Mapping[str, int] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Merge entity and relationship mentions into entities, relationships and aliases.

    Args:
        entity_mentions: ``schemas.ENTITY_MENTIONS_SCHEMA`` rows, one per mention per
            text unit.
        relationship_mentions: ``schemas.RELATIONSHIP_MENTIONS_SCHEMA`` rows; source and
            target are extracted titles. Endpoints that resolve to no entity and
            self-loops (both ends one entity) are dropped. A null strength counts as 1.0.
        embed: texts -> float array of shape (len(texts), dim); used only when given and
            "embedding" is in ``methods``.
        similarity_threshold: minimum cosine similarity for an embedding merge.
        methods: which merge passes run, a subset of {"normalized", "name_extension",
            "name_context", "embedding"} ("name_context" needs "name_extension"). Without
            "normalized" the key is the title as extracted.
        verify: optional yes/no check of each embedding candidate pair, called with the
            two "title: description" texts (see ``summaries.llm_verifier``).
        unit_documents / unit_texts / unit_positions: text unit id -> document id, the
            corpus's text-unit texts, text unit id -> its ``chunk_index``: the name
            passes' evidence (:func:`_merge_names`); each None: not compared.

    Returns:
        ``(entities, relationships, entity_aliases)`` conforming to ENTITIES_SCHEMA,
        RELATIONSHIPS_SCHEMA and ENTITY_ALIASES_SCHEMA, each sorted by id (aliases by
        alias); their columns: :func:`_entity_tables` and :func:`_aggregate_relationships`.

    Raises:
        ValueError: unknown method names, or ``embed`` returning a wrongly shaped array.
        KeyError: an input frame lacking a schema column.
    """
    _check_methods(methods)
    ents = schemas.conform(entity_mentions, schemas.ENTITY_MENTIONS_SCHEMA)
    rels = schemas.conform(relationship_mentions, schemas.RELATIONSHIP_MENTIONS_SCHEMA)

    key_of = _key_function(methods)
    keys, units_of = _collect_keys(ents, key_of)
    uf = _UnionFind(keys)
    by_context: set[str] = set()
    if "name_extension" in methods:
        by_context = _merge_names(keys, uf, units_of, "name_context" in methods,
                                  unit_documents, unit_texts, unit_positions)
    ne_root = {k: uf.find(k) for k in keys}  # groups after the rule-based passes
    emb_score: dict[str, float] = {}
    if embed is not None and "embedding" in methods:
        emb_score = _merge_embeddings(keys, uf, embed, similarity_threshold, verify=verify,
                                      units_of=units_of)
    entities, aliases, entity_of_key, title_of = _entity_tables(
        keys, units_of, _groups(keys, uf), ne_root, by_context, emb_score,
        similarity_threshold)
    relationships = _aggregate_relationships(rels, lambda t: entity_of_key.get(key_of(t)),
                                             title_of)
    return entities, relationships, aliases


def _check_methods(methods: frozenset[str]) -> None:
    """Raises ValueError naming the methods not in :data:`RESOLUTION_METHODS`."""
    unknown = set(methods) - RESOLUTION_METHODS
    if unknown:
        raise ValueError(f"unknown resolution methods {sorted(unknown)}; "
                         f"use {sorted(RESOLUTION_METHODS)}")


def _groups(keys: dict[str, _Key], uf: _UnionFind) -> dict[str, list[str]]:
    """Group root -> its keys, sorted (roots in the order of their first sorted key)."""
    groups: dict[str, list[str]] = {}
    for k in sorted(keys):
        groups.setdefault(uf.find(k), []).append(k)
    return groups


def _key_function(methods: frozenset[str]) -> Callable[[str], str]:
    """Title -> its resolution key: :func:`normalize_title` (or, when that is empty, the
    NFKC casefolded stripped title) with the ``normalized`` pass, else the title as
    extracted."""
    def key_of(title: str) -> str:
        if "normalized" not in methods:
            return title
        return normalize_title(title) or unicodedata.normalize("NFKC", title).casefold().strip()
    return key_of


def _merge_names(keys: dict[str, _Key], uf: _UnionFind, units_of: dict[str, set[str]],
                 by_context: bool, unit_documents: Mapping[str, str] | None,
                 unit_texts: Iterable[str] | None,
                 unit_positions: Mapping[str, int] | None) -> set[str]:
    """Run the ``name_extension`` pass (and ``name_context`` when ``by_context``) on
    ``uf`` (:func:`_merge_name_extensions`), with the evidence the corpus gives: each
    key's documents (from ``unit_documents``), the common and determined words (from
    ``unit_texts``: :func:`common_words_of`) and each key's places (from both mappings:
    :func:`_places`). Returns the keys merged by name context.

    With documents, a shorter name joins a longer one only when some document names
    both; with texts, a longer name that adds a common word or a number to a shorter one
    is no candidate of it; with documents and positions (``chunk_index``, 0-based), a
    shorter name joins a longer one only where the longer one is introduced: written in
    one of its text units or before its first (:func:`_merge_name_extensions`)."""
    documents_of = None if unit_documents is None else {
        k: {unit_documents[u] for u in units if u in unit_documents}
        for k, units in units_of.items()}
    common, determined = (None, None) if unit_texts is None else common_words_of(
        unit_texts, {t for k in keys.values() if len(k.core) > 1 for t in k.core},
        {k.core[0] for k in keys.values() if len(k.core) == 1})
    places_of = None if unit_documents is None or unit_positions is None else {
        k: _places(units, unit_documents, unit_positions) for k, units in units_of.items()}
    return _merge_name_extensions(
        keys, uf, units_of if by_context else None, documents_of, common,
        places_of, determined)


def _places(units: set[str], unit_documents: Mapping[str, str],
            unit_positions: Mapping[str, int]) -> dict[str, tuple[int, set[str]]]:
    """{document: (the first position of ``units`` in it, those of ``units`` in it)} for
    the units both mappings know."""
    out: dict[str, tuple[int, set[str]]] = {}
    for u in units:
        if u in unit_documents and u in unit_positions:
            d, i = unit_documents[u], unit_positions[u]
            first, there = out.get(d, (i, set()))
            there.add(u)
            out[d] = (min(first, i), there)
    return out


def _collect_keys(ents: pl.DataFrame, key_of: Callable[[str], str]
                  ) -> tuple[dict[str, _Key], dict[str, set[str]]]:
    """Pass 1: one :class:`_Key` per normalization key (surface counts, types,
    descriptions with their row), and the text units that mention each key."""
    keys: dict[str, _Key] = {}
    units_of: dict[str, set[str]] = {}
    for row, (unit, title, typ, desc) in enumerate(ents.select(
            "text_unit_id", "title", "type", "description").iter_rows()):
        if title is None or not title.strip():
            continue
        k = key_of(title)
        info = keys.setdefault(k, _Key(tokens=normalize_title(k).split()))
        info.surfaces[title] += 1
        info.types.append((typ or "").strip().upper())
        info.descriptions.append((row, (desc or "").strip()))
        units_of.setdefault(k, set()).add(unit)
    return keys, units_of


def _entity_tables(keys: dict[str, _Key], units_of: dict[str, set[str]],
                   groups: dict[str, list[str]], ne_root: dict[str, str],
                   by_context: set[str], emb_score: dict[str, float],
                   similarity_threshold: float
                   ) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, str], dict[str, str]]:
    """Last pass: one entity row per merged group (canonical title, voted type, joined
    descriptions, text units) and one alias row per surface form, saying which pass
    merged it (``ne_root``: the groups after the rule-based passes; ``by_context``: keys
    merged by name context; ``emb_score``: best cosine of embedding merges). Returns
    (entities, aliases, key -> entity id, entity id -> title).

    Entity id = ``content_id("entity", canonical key)``; the canonical title is the most
    frequent surface form among the group's names with the longest core (honorifics not
    counted), ties alphabetical; type by majority vote, ties alphabetical; description =
    distinct mention descriptions joined by "\\n" in input order; frequency = distinct
    text units. degree, weighted_degree, pagerank and combined_degree are 0 here (see
    :mod:`kgloom.graph.communities`)."""
    entity_rows, alias_rows = [], []
    entity_of_key: dict[str, str] = {}
    title_of: dict[str, str] = {}
    for members in groups.values():
        canon_key, canon_title = _canonical_title(keys, members)
        eid = content_id("entity", canon_key)
        title_of[eid] = canon_title
        units = sorted(set().union(*(units_of[m] for m in members)))
        entity_rows.append({
            "id": eid, "title": canon_title,
            "type": _vote(t for m in members for t in keys[m].types),
            "description": "\n".join(_descriptions(keys, members)),
            "text_unit_ids": units, "frequency": len(units), "degree": 0,
            "weighted_degree": 0.0, "pagerank": 0.0,
            "aliases": sorted({s for m in members for s in keys[m].surfaces}),
        })
        for m in members:
            entity_of_key[m] = eid
            if ne_root[m] != ne_root[canon_key]:
                method, score = "embedding", emb_score.get(ne_root[m], similarity_threshold)
            elif m in by_context:
                method, score = "name_context", 1.0
            elif m != canon_key:
                method, score = "name_extension", 1.0
            else:
                method, score = None, 1.0
            for surface in keys[m].surfaces:
                how = method or ("exact" if surface == canon_title else "normalized")
                alias_rows.append({"alias": surface, "entity_id": eid, "method": how,
                                   "score": score})
    entities = _with_hrid(pl.DataFrame(entity_rows, schema={
        c: t for c, t in schemas.ENTITIES_SCHEMA.items() if c != "human_readable_id"}),
        schemas.ENTITIES_SCHEMA)
    aliases = (pl.DataFrame(alias_rows, schema=schemas.ENTITY_ALIASES_SCHEMA)
               .sort("alias", "entity_id"))
    return entities, aliases, entity_of_key, title_of


def _aggregate_relationships(rels: pl.DataFrame, resolve: Callable[[str], str | None],
                             title_of: dict[str, str]) -> pl.DataFrame:
    """Group relationship mentions by their undirected entity pair, keeping the direction
    the text gives.

    One relationship per pair (its id hashes the sorted id pair, so A->B and B->A are one
    edge, the choice GraphRAG makes too); every mention's description is kept, whichever
    way it ran. Its ``source``/``target`` are the direction of the pair's extracted
    mentions: the majority direction, a tie going to the direction of the first extracted
    mention in input order. A pair with co-mention edges only takes their majority
    direction the same way (extraction writes each in the order its sentence names the
    two: :func:`kgloom.extraction.evidence.text_direction`). (LightRAG issue #934: sorting
    every pair lost "Yarrow Textiles sells to Alder Retail".)

    Relationship id = ``content_id("relationship", a, b)`` of the sorted entity id pair;
    weight = sum of strengths (a null strength counts as 1.0); kind "extracted" when any
    mention was extracted, else "co_mention".
    """
    agg: dict[tuple[str, str], dict] = {}
    for unit, src, dst, desc, strength, kind in rels.select(
            "text_unit_id", "source", "target", "description", "strength", "kind").iter_rows():
        a = resolve(src) if src else None
        b = resolve(dst) if dst else None
        if a is None or b is None or a == b:
            continue
        pair = (min(a, b), max(a, b))
        row = agg.setdefault(pair, {"descriptions": [], "weight": 0.0, "units": set(),
                                    "extracted": False, "votes": {}, "co_votes": {}})
        row["descriptions"].append((desc or "").strip())
        row["weight"] += 1.0 if strength is None else float(strength)
        row["units"].add(unit)
        row["extracted"] |= kind == "extracted"
        # dict order = first-seen order, which breaks ties
        votes = row["votes"] if kind == "extracted" else row["co_votes"]
        votes[(a, b)] = votes.get((a, b), 0) + 1

    def direction(pair: tuple[str, str], votes: dict) -> tuple[str, str]:
        if not votes:
            return pair
        return max(votes, key=lambda d: votes[d])  # max keeps the first of equal counts

    rows = []
    for pair, r in agg.items():
        a, b = direction(pair, r["votes"] or r["co_votes"])
        rows.append({
            "id": content_id("relationship", *pair), "source": title_of[a],
            "target": title_of[b],
            "description": "\n".join(_distinct(r["descriptions"])), "weight": r["weight"],
            "combined_degree": 0, "text_unit_ids": sorted(r["units"]), "source_id": a,
            "target_id": b, "kind": "extracted" if r["extracted"] else "co_mention"})
    return _with_hrid(pl.DataFrame(rows, schema={
        c: t for c, t in schemas.RELATIONSHIPS_SCHEMA.items() if c != "human_readable_id"}),
        schemas.RELATIONSHIPS_SCHEMA)


def _with_hrid(df: pl.DataFrame, schema: schemas.TableSchema) -> pl.DataFrame:
    """Sort by id and number rows 0..n-1 as human_readable_id."""
    df = df.sort("id").with_row_index("human_readable_id").with_columns(
        pl.col("human_readable_id").cast(pl.Int64))
    return schemas.conform(df, schema)
