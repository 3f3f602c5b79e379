"""The single place that names every table and column kgloom writes.

Column names and order of the six GraphRAG tables follow Microsoft GraphRAG's
``packages/graphrag/graphrag/data_model/schemas.py`` (v3); kgloom's own columns come
after theirs, never instead of them. Every other module imports these names.

Each ``*_SCHEMA`` is an ordered ``dict[str, polars.DataType]``; :func:`empty` builds an
empty frame of it and :func:`conform` casts and orders a frame to it.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

# a column's dtype as polars takes it: a class (pl.String) or an instance (pl.List(...))
ColumnType = pl.DataType | type[pl.DataType]
TableSchema = dict[str, ColumnType]

# --- file names under the output folder -------------------------------------------
DOCUMENTS = "documents"
TEXT_UNITS = "text_units"
ENTITY_MENTIONS = "entity_mentions"
RELATIONSHIP_MENTIONS = "relationship_mentions"
ENTITIES = "entities"
RELATIONSHIPS = "relationships"
ENTITY_ALIASES = "entity_aliases"
CLAIM_MENTIONS = "claim_mentions"
COVARIATES = "covariates"
COMMUNITIES = "communities"
COMMUNITY_REPORTS = "community_reports"
GRAPH_NODES = "graph-nodes"
GRAPH_EDGES = "graph-edges"
FAILURES = "failures"
UNIT_STATUS = "extraction_units"  # table name: extraction status per text unit
GRAPH_STATS = "graph_stats"  # one row per community level: counts, sizes, modularity
# status: "extracted" (maybe with no entity), "no_names" (no candidate name: no call), "failed"
UNIT_STATUS_SCHEMA = {"text_unit_id": pl.String, "status": pl.String,
                      "entities": pl.Int64, "relationships": pl.Int64}

_STR_LIST = pl.List(pl.String)
_INT_LIST = pl.List(pl.Int64)
_FINDING = pl.Struct({"summary": pl.String, "explanation": pl.String})

# --- GraphRAG tables (their columns first, in their order) ---------------------------
DOCUMENTS_SCHEMA: TableSchema = {
    "id": pl.String,  # sha256 of the normalized text
    "human_readable_id": pl.Int64,
    "title": pl.String,
    "text": pl.String,
    "text_unit_ids": _STR_LIST,
    "creation_date": pl.String,  # ISO 8601, the file's mtime (UTC)
    "raw_data": pl.String,  # JSON of the source record (JSONL/CSV), else null
    # kgloom
    "source": pl.String,  # input file path relative to the input folder
    "encoding": pl.String,  # the file's text encoding (Python codec name, e.g. "utf-8")
    "encoding_confidence": pl.Float64,  # 0..1 (kgloom.ingest.decoding); 1.0 for valid UTF-8
    "boilerplate_cut": pl.String,  # JSON of the licence header/footer cut, null: none
}

TEXT_UNITS_SCHEMA: TableSchema = {
    "id": pl.String,  # sha256 of (document_id, chunk text)
    "human_readable_id": pl.Int64,
    "text": pl.String,
    "n_tokens": pl.Int64,  # tokens of the chunking tokenizer
    "document_id": pl.String,
    "entity_ids": _STR_LIST,
    "relationship_ids": _STR_LIST,
    "covariate_ids": _STR_LIST,
    # kgloom
    "chunk_index": pl.Int64,  # position within its document, from 0
    "start_char": pl.Int64,  # character offsets into the document text, [start, end)
    "end_char": pl.Int64,
    "kg_node_ids": _STR_LIST,  # entity ids mentioned in this unit
    "neighbor_entity_ids": _STR_LIST,  # 1-hop neighbours of kg_node_ids, minus themselves
    "neighbor_triples": _STR_LIST,  # "source | relation | target" strings
    "community_ids": _INT_LIST,  # per level, the community holding most of its entities (-1: none)
    "centrality": pl.Float64,  # max PageRank over kg_node_ids (0.0 when none)
}

# The graph columns of a text unit: computed once, from the graph, when the published
# text_units.parquet is written (kgloom.publish.tables.denormalize_text_units).
TEXT_UNIT_GRAPH_COLUMNS: tuple[str, ...] = (
    "entity_ids", "relationship_ids", "covariate_ids", "kg_node_ids", "neighbor_entity_ids",
    "neighbor_triples", "community_ids", "centrality")
# A text unit as chunking makes it (the partition level): no graph columns and no
# human_readable_id, which is numbered once, over the corpus (kgloom.corpus.partitions).
CHUNKS_SCHEMA: TableSchema = {
    c: t for c, t in TEXT_UNITS_SCHEMA.items()
    if c not in TEXT_UNIT_GRAPH_COLUMNS and c != "human_readable_id"}
# The corpus level: the live partitions' text units, numbered.
CORPUS_UNITS_SCHEMA: TableSchema = {
    c: t for c, t in TEXT_UNITS_SCHEMA.items() if c not in TEXT_UNIT_GRAPH_COLUMNS}

ENTITIES_SCHEMA: TableSchema = {
    "id": pl.String,  # sha256 of the canonical normalized title
    "human_readable_id": pl.Int64,
    "title": pl.String,
    "type": pl.String,
    "description": pl.String,
    "text_unit_ids": _STR_LIST,
    "frequency": pl.Int64,  # number of text units mentioning it
    "degree": pl.Int64,
    # kgloom
    "weighted_degree": pl.Float64,
    "pagerank": pl.Float64,
    "aliases": _STR_LIST,
}

RELATIONSHIPS_SCHEMA: TableSchema = {
    "id": pl.String,  # sha256 of the sorted (source_id, target_id) pair
    # source -> target: the direction the text gives (kgloom.graph.resolution)
    "human_readable_id": pl.Int64,
    "source": pl.String,  # entity title
    "target": pl.String,
    "description": pl.String,
    "weight": pl.Float64,  # sum of mention strengths
    "combined_degree": pl.Int64,  # degree(source) + degree(target)
    "text_unit_ids": _STR_LIST,
    # kgloom
    "source_id": pl.String,
    "target_id": pl.String,
    "kind": pl.String,  # "extracted" | "co_mention"
}

COMMUNITIES_SCHEMA: TableSchema = {
    "id": pl.String,  # sha256 of (level, sorted member entity ids)
    "human_readable_id": pl.Int64,
    "community": pl.Int64,  # unique across levels
    "level": pl.Int64,  # 0 = coarsest
    "parent": pl.Int64,  # community number of the parent, -1 at level 0
    "children": _INT_LIST,
    "title": pl.String,
    "entity_ids": _STR_LIST,
    "relationship_ids": _STR_LIST,
    "text_unit_ids": _STR_LIST,
    "period": pl.String,  # date of the run (YYYY-MM-DD)
    "size": pl.Int64,  # number of entities
}

COMMUNITY_REPORTS_SCHEMA: TableSchema = {
    "id": pl.String,
    "human_readable_id": pl.Int64,
    "community": pl.Int64,
    "level": pl.Int64,
    "parent": pl.Int64,
    "children": _INT_LIST,
    "title": pl.String,
    "summary": pl.String,
    "full_content": pl.String,  # markdown
    "rank": pl.Float64,  # the LLM's 0-10 rating
    "rating_explanation": pl.String,
    "findings": pl.List(_FINDING),
    "full_content_json": pl.String,
    "period": pl.String,
    "size": pl.Int64,
    # kgloom
    "report_key": pl.String,  # reports.report_key: the same key keeps the same report
    # "llm"; "rules" for a small community (report_writer.rule_report); "lazy": the rule
    # report of a community awaiting its LLM report (llm_reports: lazy), which global
    # search writes on first use (query.context_builder.lazy_reports)
    "generated_by": pl.String,
}

# GraphRAG's claims table (data_model/schemas.py COVARIATES_FINAL_COLUMNS); optional
COVARIATES_SCHEMA: TableSchema = {
    "id": pl.String,
    "human_readable_id": pl.Int64,
    "covariate_type": pl.String,  # "claim"
    "type": pl.String,
    "description": pl.String,
    "subject_id": pl.String,  # entity title, as in GraphRAG
    "object_id": pl.String,  # entity title or "NONE"
    "status": pl.String,  # TRUE | FALSE | SUSPECTED
    "start_date": pl.String,
    "end_date": pl.String,
    "source_text": pl.String,
    "text_unit_id": pl.String,
}

# --- kgloom's own tables ------------------------------------------------------------
CLAIM_MENTIONS_SCHEMA: TableSchema = {
    "text_unit_id": pl.String,
    "subject": pl.String,  # extracted titles of the same unit
    "object": pl.String,  # an extracted title or "NONE"
    "type": pl.String,
    "status": pl.String,
    "description": pl.String,
}

ENTITY_MENTIONS_SCHEMA: TableSchema = {
    "text_unit_id": pl.String,
    "title": pl.String,  # as extracted, grounded in the unit's text
    "type": pl.String,
    "description": pl.String,
}

RELATIONSHIP_MENTIONS_SCHEMA: TableSchema = {
    "text_unit_id": pl.String,
    "source": pl.String,  # extracted titles of two entities of the same unit
    "target": pl.String,
    "description": pl.String,
    "strength": pl.Float64,  # 1-10 from the LLM; co-mention edges get a configured value
    "kind": pl.String,  # "extracted" | "co_mention"
}

ENTITY_ALIASES_SCHEMA: TableSchema = {
    "alias": pl.String,  # a title as extracted
    "entity_id": pl.String,  # the canonical entity it resolved to
    "method": pl.String,  # "exact" | "normalized" | "name_extension" | "embedding"
    "score": pl.Float64,  # 1.0 for rule-based merges, cosine similarity for embedding
}

GRAPH_NODES_SCHEMA: TableSchema = {
    "node_key": pl.Int64,  # dense 0..n-1
    "entity_id": pl.String,
    "title": pl.String,
    "type": pl.String,
    "degree": pl.Int64,
    "weighted_degree": pl.Float64,
    "pagerank": pl.Float64,
    # plus one Int64 column "community_level_<k>" per level, added at emit time
}

GRAPH_EDGES_SCHEMA: TableSchema = {
    "src_key": pl.Int64,
    "dst_key": pl.Int64,
    "relationship_id": pl.String,
    "relation": pl.String,  # the relationship description
    "weight": pl.Float64,
}

FAILURES_SCHEMA: TableSchema = {
    "stage": pl.String,  # documents | extraction | summaries | community_reports | ...
    "item_id": pl.String,  # file path, text unit id, entity id or community number
    "reason": pl.String,  # one line a person can act on
    "detail": pl.String,  # raw reply excerpt or exception text (<= 500 chars)
}

GRAPH_STATS_SCHEMA: TableSchema = {
    "level": pl.Int64,  # the community level (0 = the finest, as in communities)
    "communities": pl.Int64,  # communities at this level
    "singletons": pl.Int64,  # of them, those of one entity
    "min_size": pl.Int64,  # entities in the smallest community
    "median_size": pl.Float64,
    "mean_size": pl.Float64,
    "max_size": pl.Int64,
    "modularity": pl.Float64,  # weighted Newman-Girvan modularity of the level (0.0: no edge)
    "coverage": pl.Float64,  # share of relationship weight inside communities (0.0: no edge)
}

GRAPHRAG_TABLES: dict[str, TableSchema] = {
    DOCUMENTS: DOCUMENTS_SCHEMA,
    TEXT_UNITS: TEXT_UNITS_SCHEMA,
    ENTITIES: ENTITIES_SCHEMA,
    RELATIONSHIPS: RELATIONSHIPS_SCHEMA,
    COMMUNITIES: COMMUNITIES_SCHEMA,
    COMMUNITY_REPORTS: COMMUNITY_REPORTS_SCHEMA,
}

# Every parquet table kgloom publishes in the output folder (``<name>.parquet``), in the
# order docs/outputs.md describes them; tests/unit/test_outputs_doc.py checks that the document
# lists exactly these columns and types. covariates is written only with claims on;
# graph-nodes adds one ``community_level_<k>`` column per level.
PUBLISHED_TABLES: dict[str, TableSchema] = {
    **GRAPHRAG_TABLES,
    COVARIATES: COVARIATES_SCHEMA,
    ENTITY_ALIASES: ENTITY_ALIASES_SCHEMA,
    GRAPH_NODES: GRAPH_NODES_SCHEMA,
    GRAPH_EDGES: GRAPH_EDGES_SCHEMA,
    GRAPH_STATS: GRAPH_STATS_SCHEMA,
    FAILURES: FAILURES_SCHEMA,
}

# Microsoft GraphRAG's own column lists (data_model/schemas.py), for the compatibility test.
GRAPHRAG_COLUMNS: dict[str, list[str]] = {
    DOCUMENTS: ["id", "human_readable_id", "title", "text", "text_unit_ids", "creation_date",
                "raw_data"],
    TEXT_UNITS: ["id", "human_readable_id", "text", "n_tokens", "document_id", "entity_ids",
                 "relationship_ids", "covariate_ids"],
    ENTITIES: ["id", "human_readable_id", "title", "type", "description", "text_unit_ids",
               "frequency", "degree"],
    RELATIONSHIPS: ["id", "human_readable_id", "source", "target", "description", "weight",
                    "combined_degree", "text_unit_ids"],
    COMMUNITIES: ["id", "human_readable_id", "community", "level", "parent", "children", "title",
                  "entity_ids", "relationship_ids", "text_unit_ids", "period", "size"],
    COMMUNITY_REPORTS: ["id", "human_readable_id", "community", "level", "parent", "children",
                        "title", "summary", "full_content", "rank", "rating_explanation",
                        "findings", "full_content_json", "period", "size"],
}


def empty(schema: Mapping[str, ColumnType]) -> pl.DataFrame:
    """Return an empty frame with exactly ``schema``'s columns and dtypes (0 rows)."""
    return pl.DataFrame(schema=schema)


def conform(df: pl.DataFrame, schema: Mapping[str, ColumnType]) -> pl.DataFrame:
    """Cast ``df`` to ``schema`` and put its columns in schema order.

    Columns of ``df`` not in ``schema`` are kept after the schema's (so an emit step may
    add e.g. ``community_level_<k>``).

    Raises:
        KeyError: when a schema column is missing from ``df``.
    """
    missing = [c for c in schema if c not in df.columns]
    if missing:
        raise KeyError(f"frame lacks columns {missing}; has {df.columns}")
    extra = [c for c in df.columns if c not in schema]
    return df.select([pl.col(c).cast(t) for c, t in schema.items()] + extra)
