"""Emit: graph traversal tables, denormalized text-unit KG columns, GraphML and Neo4j CSV.

Polars in, polars out; no Dagster. The emitted products: graph-nodes / graph-edges
parquet for DuckDB multi-hop, and 1-hop KG columns on every text unit so any vector
store can expand a hit with no graph at all. The ``*_exist`` / ``*_valid`` / ``*_match``
functions at the end are pure checks for the asset checks: each returns ``(passed,
metadata)``.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np
import polars as pl
import pyarrow as pa

from kgloom.core import schemas
from kgloom.core.storage import write_text

# neighbor_triples per text unit are capped so one hub entity cannot bloat every row it
# touches; over the cap, relationships between two of the unit's own entities come first,
# then the heaviest (weight), then alphabetical; the kept ones are emitted sorted.
NEIGHBOR_TRIPLES_CAP = 50
# neighbor_entity_ids per text unit are capped too: on a 12 MB document whose units all touch
# a few hub entities (Christmas, London, ...) the uncapped lists averaged 904 of the 2,025
# entities per unit (5.5 M ids, ~0.35 GB in memory, the largest allocation of the index).
# Over the cap, the neighbours joined to the unit's entities by the most relationship weight
# (summed over the relationships linking them) are kept, then by entity id. The bundled book
# (at most 98 neighbours per unit) and the 354-passage 2Wiki slice (at most 221) never reach
# it; on the 6,119-passage 2Wiki pool 2,382 of 6,173 units do.
NEIGHBOR_ENTITIES_CAP = 256
# Entities with more neighbours than this are summed once per set of them a unit mentions
# when ranking a unit's neighbours (_neighbor_ids); any value gives the same lists.
HUB_MIN_NEIGHBOURS = 256
# A triple's relation is the first line of the relationship description, cut to this.
RELATION_MAX_CHARS = 120

COMMUNITY_LEVEL_PREFIX = "community_level_"

_STR_LIST = pl.List(pl.String)


# --- graph-nodes / graph-edges --------------------------------------------------------
def _membership(communities: pl.DataFrame) -> pl.DataFrame:
    """(level, community, entity_id) rows, one per entity per level."""
    return (communities.select("level", "community", pl.col("entity_ids").alias("entity_id"))
            .explode("entity_id").drop_nulls("entity_id"))


def _levels(communities: pl.DataFrame) -> list[int]:
    return sorted(communities["level"].unique().to_list())


def community_levels(communities: pl.DataFrame) -> pl.DataFrame:
    """Each entity's community per level: ``entity_id`` (String) then one Int64 column
    ``community_level_<k>`` per level k of ``communities`` (COMMUNITIES_SCHEMA), null
    where the entity is in no community of that level; one row per entity that is in
    some community. The one place graph-nodes, GraphML and Neo4j take these from."""
    membership = _membership(communities)
    out = membership.select("entity_id").unique().sort("entity_id")
    for level in _levels(communities):
        col = f"{COMMUNITY_LEVEL_PREFIX}{level}"
        at_level = (membership.filter(pl.col("level") == level)
                    .select("entity_id", pl.col("community").cast(pl.Int64).alias(col))
                    .unique("entity_id", keep="first"))
        out = out.join(at_level, on="entity_id", how="left", maintain_order="left")
    return out


def build_graph_tables(entities: pl.DataFrame, relationships: pl.DataFrame,
                       communities: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Build the compact traversal tables graph-nodes and graph-edges.

    Args:
        entities: ENTITIES_SCHEMA frame (n rows, degree / weighted_degree / pagerank filled).
        relationships: RELATIONSHIPS_SCHEMA frame (m rows, source_id / target_id filled).
        communities: COMMUNITIES_SCHEMA frame; levels 0..L-1, each a partition of entities.

    Returns:
        ``(nodes, edges)``. ``nodes``: n rows, GRAPH_NODES_SCHEMA then one Int64 column
        ``community_level_<k>`` per level k (-1 for an entity missing from that level);
        ``node_key`` is dense 0..n-1 in order of sorted entity id. ``edges``: m rows,
        GRAPH_EDGES_SCHEMA, one per relationship, stored once in its direction
        (``src_key`` the source's node key, ``dst_key`` the target's: the direction the
        text gives); traversal reads each edge both ways; ``relation`` is the
        relationship description.
        Both are sorted by their keys.

    Raises:
        ValueError: when a relationship endpoint is not an entity id (a dangling edge
            would make traversal silently wrong).
    """
    nodes = (entities.sort("id").with_row_index("node_key")
             .with_columns(pl.col("node_key").cast(pl.Int64), pl.col("id").alias("entity_id")))
    nodes = nodes.join(community_levels(communities), on="entity_id", how="left",
                       maintain_order="left")
    nodes = nodes.with_columns(pl.col(c).fill_null(-1) for c in nodes.columns
                               if c.startswith(COMMUNITY_LEVEL_PREFIX))
    level_cols = [c for c in nodes.columns if c.startswith(COMMUNITY_LEVEL_PREFIX)]
    nodes = nodes.select(*schemas.GRAPH_NODES_SCHEMA, *level_cols)
    nodes = schemas.conform(nodes, schemas.GRAPH_NODES_SCHEMA)

    keys = nodes.select("entity_id", "node_key")
    edges = (relationships
             .join(keys.rename({"entity_id": "source_id", "node_key": "a"}), on="source_id",
                   how="left", maintain_order="left")
             .join(keys.rename({"entity_id": "target_id", "node_key": "b"}), on="target_id",
                   how="left", maintain_order="left"))
    dangling = edges.filter(pl.col("a").is_null() | pl.col("b").is_null())
    if dangling.height:
        raise ValueError(
            f"{dangling.height} relationships point at unknown entity ids, e.g. "
            f"{dangling.select('id', 'source_id', 'target_id').head(3).to_dicts()}; "
            "rebuild entities and relationships together")
    edges = edges.select(
        pl.col("a").alias("src_key"),
        pl.col("b").alias("dst_key"),
        pl.col("id").alias("relationship_id"),
        pl.col("description").alias("relation"),
        "weight",
    ).sort("src_key", "dst_key", "relationship_id")
    return nodes, schemas.conform(edges, schemas.GRAPH_EDGES_SCHEMA)


# --- denormalized text-unit columns ---------------------------------------------------
def _relation_text(description: pl.Expr) -> pl.Expr:
    """First line of a description, '|' replaced (it separates triple fields), cut."""
    return (description.fill_null("").str.split("\n").list.first().str.strip_chars()
            .str.replace_all("|", "/", literal=True).str.slice(0, RELATION_MAX_CHARS))


def denormalize_text_units(text_units: pl.DataFrame, entities: pl.DataFrame,
                           relationships: pl.DataFrame, communities: pl.DataFrame,
                           covariates: pl.DataFrame | None = None) -> pl.DataFrame:
    """Fill the KG columns of ``text_units`` so 1-hop expansion needs no graph store.

    Args:
        text_units: CORPUS_UNITS_SCHEMA frame (u rows; graph columns, if any, are
            replaced): the one place the graph columns are computed.
        entities: ENTITIES_SCHEMA frame; ``text_unit_ids`` says which units mention each.
        relationships: RELATIONSHIPS_SCHEMA frame with ``source_id`` / ``target_id``.
        communities: COMMUNITIES_SCHEMA frame, levels 0..L-1.
        covariates: COVARIATES_SCHEMA frame (claims) or None; fills ``covariate_ids``.

    Returns:
        ``text_units`` (same rows, same order) conformed to TEXT_UNITS_SCHEMA with:
        ``entity_ids`` = ``kg_node_ids``: sorted ids of entities whose text_unit_ids
        contain the unit; ``relationship_ids``: sorted ids of relationships whose
        text_unit_ids contain it; ``neighbor_entity_ids``: sorted 1-hop neighbours of the
        kg nodes, minus the kg nodes, at most NEIGHBOR_ENTITIES_CAP (over it: the
        neighbours with the most summed relationship weight to the kg nodes, then by id);
        ``neighbor_triples``: ``"source | relation | target"`` (titles; relation = first
        line of the description, ``|`` -> ``/``, at most RELATION_MAX_CHARS chars) for
        every relationship touching a kg node, sorted,
        at most NEIGHBOR_TRIPLES_CAP (over it: edges inside the unit first, then by
        weight descending); ``community_ids``: L ints, index = level, the
        community holding most of the unit's entities at that level (ties: smallest
        number; -1 when the unit has none); ``centrality``: max PageRank of its entities
        (0.0 when none). Units with no entities get empty lists.
    """
    unit_ents = (entities.select(pl.col("id").alias("entity_id"),
                                 pl.col("text_unit_ids").alias("unit_id"))
                 .explode("unit_id").drop_nulls("unit_id").unique())
    kg = unit_ents.group_by("unit_id").agg(pl.col("entity_id").sort().alias("kg_node_ids"))
    rel_ids = (relationships.select(pl.col("text_unit_ids").alias("unit_id"), "id")
               .explode("unit_id").drop_nulls("unit_id").unique()
               .group_by("unit_id").agg(pl.col("id").sort().alias("relationship_ids")))
    neighbors, triples = _neighbourhood_columns(text_units, entities, relationships, unit_ents)
    levels = _levels(communities)
    community_ids = _community_id_column(text_units, communities, unit_ents, levels)
    centrality = (unit_ents.join(entities.select(pl.col("id").alias("entity_id"), "pagerank"),
                                 on="entity_id")
                  .group_by("unit_id").agg(pl.col("pagerank").max().alias("centrality")))

    out = text_units.drop(*schemas.TEXT_UNIT_GRAPH_COLUMNS, strict=False)
    for part in (kg, rel_ids, neighbors, triples, community_ids, centrality):
        out = out.join(part.rename({"unit_id": "id"}), on="id", how="left", maintain_order="left")
    empty_list = pl.lit([], dtype=_STR_LIST)
    out = out.with_columns(
        pl.col("kg_node_ids").fill_null(empty_list),
        pl.col("kg_node_ids").fill_null(empty_list).alias("entity_ids"),
        *(pl.col(c).fill_null(empty_list)
          for c in ("relationship_ids", "neighbor_entity_ids", "neighbor_triples")),
        pl.col("community_ids").fill_null(pl.lit([-1] * len(levels), dtype=pl.List(pl.Int64))),
        pl.col("centrality").fill_null(0.0),
    )
    cov = (covariates if covariates is not None else schemas.empty(schemas.COVARIATES_SCHEMA)
           ).group_by("text_unit_id").agg(pl.col("id").sort().alias("cov"))
    out = out.join(cov.rename({"text_unit_id": "id"}), on="id", how="left",
                   maintain_order="left").with_columns(
        covariate_ids=pl.col("cov").fill_null(empty_list)).drop("cov")
    return schemas.conform(out, schemas.TEXT_UNITS_SCHEMA).select(list(schemas.TEXT_UNITS_SCHEMA))


def _neighbourhood_columns(text_units: pl.DataFrame, entities: pl.DataFrame,
                           relationships: pl.DataFrame, unit_ents: pl.DataFrame
                           ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Step of :func:`denormalize_text_units`: per unit id (``unit_id``), the sorted
    1-hop neighbours of its entities minus themselves (``neighbor_entity_ids``) and its
    capped neighbour triples (``neighbor_triples``).

    The joins run on integer codes of units, entities and relationships: a hub entity in
    U units with R relationships touches U x R (unit, edge) pairs, which as 64-character
    ids would take gigabytes for a document of a few megabytes.
    """
    ucode = text_units.select(pl.col("id").alias("unit_id")).unique().with_row_index("u")
    # codes in id order, so ordering by code is ordering by id (deterministic ties)
    ecode = (entities.select(pl.col("id").alias("entity_id")).unique().sort("entity_id")
             .with_row_index("e"))
    ue = (unit_ents.join(ucode, on="unit_id").join(ecode, on="entity_id")
          .select("u", "e").unique())
    rel = (relationships.select("id", "source_id", "target_id",
                                weight=pl.col("weight").fill_null(0.0)).with_row_index("r")
           .join(ecode.rename({"entity_id": "source_id", "e": "se"}), on="source_id")
           .join(ecode.rename({"entity_id": "target_id", "e": "te"}), on="target_id"))
    # each relationship once per endpoint: (entity, neighbour, relationship)
    ends = pl.concat([rel.select(pl.col("se").alias("e"), pl.col("te").alias("nb"), "r"),
                      rel.select(pl.col("te").alias("e"), pl.col("se").alias("nb"), "r")])
    neighbors = _neighbor_ids(ue, ends, rel.select("r", "weight"), ecode)
    triples = _neighbor_triples(relationships, rel, ends, ue)
    return (neighbors.join(ucode, on="u").drop("u"), triples.join(ucode, on="u").drop("u"))


CHUNK_ROWS = 1_000_000  # candidate rows per chunk when ranking units' neighbourhoods


def _per_unit_chunk(ue: pl.DataFrame, rank: Callable[[pl.DataFrame], pl.DataFrame],
                    schema: dict, cost: pl.DataFrame) -> pl.DataFrame:
    """``rank(own)`` for each chunk of units of ``ue`` (its (u, e) rows of those units),
    concatenated; an empty ``schema`` frame when there is none.

    Chunks are cut by ``cost`` (columns ``u``, ``cost``: the candidate rows ``rank``
    makes for that unit), at most CHUNK_ROWS a chunk (a unit over it alone is one chunk).
    A unit touching hub entities has thousands of candidate (neighbour, relationship)
    pairs: ranking all units of a 12 MB document at once held ~0.3 GB of them. Each chunk
    also joins the whole edge list once, so chunks of a fixed number of units made the
    stage grow with the square of the corpus (2Wiki pool, 2,000 -> 6,119 passages:
    ``_neighbor_ids`` 0.13 -> 0.80 s); by cost, a corpus without hubs is one chunk."""
    if ue.is_empty():
        return pl.DataFrame(schema=schema)
    per_unit = (ue.select("u").unique().join(cost, on="u", how="left")
                .with_columns(pl.col("cost").fill_null(0)).sort("u"))
    # a unit's chunk: the candidate rows of the units before it, in CHUNK_ROWS
    bounds = per_unit.select("u", chunk=(pl.col("cost").cum_sum() - pl.col("cost"))
                             // CHUNK_ROWS)
    chunks = ue.join(bounds, on="u").partition_by("chunk", as_dict=True, include_key=False)
    return pl.concat([rank(chunks[key]) for key in sorted(chunks)])


def _neighbor_ids(ue: pl.DataFrame, ends: pl.DataFrame, weights: pl.DataFrame,
                  ecode: pl.DataFrame) -> pl.DataFrame:
    """Per unit code ``u``: its ``neighbor_entity_ids``, at most NEIGHBOR_ENTITIES_CAP
    (see there), emitted sorted.

    A unit's score for a neighbour ``n`` is ``s(n) = sum over its entities e of w(e, n)``.
    Listing every neighbour of every entity of every unit grows with the square of the
    corpus where hub entities are mentioned in a share of all units ("American": 1,382
    neighbours and ~2.5 M (unit, neighbour) rows at the 2Wiki pool's 6,119 passages).
    So the entities with more than HUB_MIN_NEIGHBOURS neighbours (hubs) are summed once
    per distinct set H of hubs a unit mentions (``s_H``), and a unit takes only the first
    ``cap + |its entities|`` of ``s_H`` in rank order (score descending, then id) beside
    every neighbour of its other entities (``s_L``), each scored exactly as
    ``s_H + s_L``. Exact when weights are >= 0 (otherwise no entity is a hub): a
    neighbour ``n`` outside both has ``s(n) = s_H(n)``, and each of the taken ``s_H``
    entries ranks above it with ``s >= s_H``, so at least ``cap`` of them that are not
    the unit's own entities rank above ``n``. A unit's rows are then at most about
    ``(cap + 1) x its entities`` (plus its hubs' neighbours once per set and chunk); on
    the pool the time follows the lists written (2,000 / 6,119 passages: 176 k / 853 k
    neighbour ids, 0.11 / 0.63 s; was 0.80 s at 6,119), which grow faster than the units
    until the units' lists reach the cap.
    """
    cap = NEIGHBOR_ENTITIES_CAP
    # (e, nb, w): the summed weight of the relationships between an entity and a neighbour
    links = (ends.join(weights, on="r").group_by("e", "nb")
             .agg(pl.col("weight").sum().alias("w")))
    if links.is_empty():
        return pl.DataFrame(schema={"u": pl.UInt32, "neighbor_entity_ids": _STR_LIST})
    degree = links.group_by("e").len("d")
    # a negative weight breaks the head's bound (s >= s_H): then no entity is a hub
    hubs = (degree.clear() if (links["w"] < 0).any()
            else degree.filter(pl.col("d") > HUB_MIN_NEIGHBOURS))
    hub_ue = ue.join(hubs.select("e"), on="e", how="semi")
    light_ue = ue.join(hubs.select("e"), on="e", how="anti")
    # each unit's hub set, numbered, with the most entities a unit of that set has
    unit_hubs = (hub_ue.group_by("u").agg(pl.col("e").sort().alias("hubs"))
                 .join(ue.group_by("u").len("own"), on="u"))
    sets = (unit_hubs.group_by("hubs").agg(pl.col("own").max())
            .with_row_index("hs"))
    unit_set = unit_hubs.join(sets.select("hubs", "hs"), on="hubs").select("u", "hs")

    def rank(own: pl.DataFrame) -> pl.DataFrame:
        mine = own.select("u").unique().join(unit_set, on="u", how="left")
        # s_H of this chunk's hub sets; a set's head: its first cap + own entities
        s_h = (sets.join(mine.select("hs").drop_nulls().unique(), on="hs")
               .select("hs", "own", e=pl.col("hubs")).explode("e").join(links, on="e")
               .group_by("hs", "nb").agg(pl.col("w").sum(), pl.col("own").first())
               .sort("hs", "w", "nb", descending=[False, True, False])
               .with_columns(rank=pl.int_range(pl.len()).over("hs")))
        heads = s_h.filter(pl.col("rank") < cap + pl.col("own")).select("hs", "nb")
        light = (own.join(light_ue, on=["u", "e"], how="semi").join(links, on="e")
                 .group_by("u", "nb").agg(pl.col("w").sum().alias("w_l")))
        from_hubs = mine.drop_nulls("hs").join(heads, on="hs")
        return (pl.concat([light.select("u", "nb"), from_hubs.select("u", "nb")]).unique()
                .join(own.rename({"e": "nb"}), on=["u", "nb"], how="anti")
                .join(mine, on="u", how="left")
                .join(light, on=["u", "nb"], how="left")
                .join(s_h.select("hs", "nb", "w"), on=["hs", "nb"], how="left")
                .select("u", "nb", w=pl.col("w_l").fill_null(0.0) + pl.col("w").fill_null(0.0))
                .sort("u", "w", "nb", descending=[False, True, False])
                .group_by("u", maintain_order=True).head(cap)
                .join(ecode.rename({"e": "nb"}), on="nb")
                .group_by("u").agg(pl.col("entity_id").sort().alias("neighbor_entity_ids")))
    # rank's rows for a unit: its light entities' neighbours, the head of its hub set and
    # (at most, once per set in a chunk) its hubs' neighbours
    cost = pl.concat([
        ue.join(degree, on="e").select("u", c=pl.col("d").cast(pl.Int64)),
        unit_set.join(sets.select("hs", "own"), on="hs")
        .select("u", c=(pl.col("own") + cap).cast(pl.Int64))]
    ).group_by("u").agg(pl.col("c").sum().alias("cost"))
    return _per_unit_chunk(ue, rank, {"u": pl.UInt32, "neighbor_entity_ids": _STR_LIST},
                           cost)


def _neighbor_triples(relationships: pl.DataFrame, rel: pl.DataFrame, ends: pl.DataFrame,
                      ue: pl.DataFrame) -> pl.DataFrame:
    """Per unit code ``u``: its ``neighbor_triples``, at most NEIGHBOR_TRIPLES_CAP. Over
    the cap, edges inside the unit first, then the heaviest; emitted sorted. An edge
    outside the unit can only make its cap if it is among the cap best (by weight, then
    triple) of the entity it touches, so only those are candidates.

    The ranking runs on ``t``, the dense rank of each triple's text (so ``t`` orders and
    deduplicates exactly as the text does); the texts join only the chosen triples, at
    most the cap per unit. Joining them to every candidate first held one string per
    (unit, candidate edge): ~0.2 GB for a 4 MB document."""
    triple_of = relationships.select(
        "id", pl.col("weight").fill_null(0.0),
        pl.concat_str([pl.col("source").fill_null(""), _relation_text(pl.col("description")),
                       pl.col("target").fill_null("")], separator=" | ").alias("triple")
    ).join(rel.select("id", "r"), on="id").drop("id").with_columns(
        t=pl.col("triple").rank("dense").cast(pl.UInt32))
    texts = triple_of.select("t", "triple").unique("t")
    codes = triple_of.select("r", "weight", "t")
    best = (ends.select("e", "r").join(codes, on="r")
            .sort("weight", "t", descending=[True, False])
            .unique(["e", "t"], keep="first", maintain_order=True)
            .group_by("e", maintain_order=True).head(NEIGHBOR_TRIPLES_CAP).select("e", "r"))

    def rank(own: pl.DataFrame) -> pl.DataFrame:
        pairs = own.join(own.rename({"e": "nb"}), on="u").filter(pl.col("e") != pl.col("nb"))
        candidates = pl.concat([
            own.join(best, on="e").select("u", "r", inside=pl.lit(False)),
            pairs.join(ends, on=["e", "nb"]).select("u", "r", inside=pl.lit(True)),
        ]).group_by("u", "r").agg(pl.col("inside").any())
        chosen = (candidates.join(codes, on="r")
                  .sort("inside", "weight", "t", descending=[True, True, False])
                  .unique(["u", "t"], keep="first", maintain_order=True)
                  .group_by("u", maintain_order=True)
                  .agg(pl.col("t").head(NEIGHBOR_TRIPLES_CAP).sort()))
        return (chosen.explode("t").join(texts, on="t", maintain_order="left")
                .group_by("u", maintain_order=True)
                .agg(pl.col("triple").alias("neighbor_triples")))
    # rank's rows for a unit of n entities: their best edges and its n(n-1) entity pairs
    cost = (ue.join(best.group_by("e").len("d"), on="e", how="left")
            .group_by("u").agg(pl.col("d").fill_null(0).sum() + pl.len() * (pl.len() - 1))
            .rename({"d": "cost"}))
    return _per_unit_chunk(ue, rank, {"u": pl.UInt32, "neighbor_triples": _STR_LIST}, cost)


def _community_id_column(text_units: pl.DataFrame, communities: pl.DataFrame,
                         unit_ents: pl.DataFrame, levels: list[int]) -> pl.DataFrame:
    """Step of :func:`denormalize_text_units`: per ``unit_id``, ``community_ids``: one int
    per level, the community holding most of the unit's entities (ties: the smallest
    number; -1 when the unit has none)."""
    votes = (unit_ents.join(_membership(communities), on="entity_id")
             .group_by("unit_id", "level", "community").agg(pl.len().alias("n"))
             .sort("unit_id", "level", pl.col("n"), "community",
                   descending=[False, False, True, False])
             .unique(["unit_id", "level"], keep="first"))
    grid = text_units.select(pl.col("id").alias("unit_id")).unique().join(
        pl.DataFrame({"level": levels}, schema={"level": pl.Int64}), how="cross")
    return (grid.join(votes.select("unit_id", "level", "community"),
                      on=["unit_id", "level"], how="left")
            .group_by("unit_id")
            .agg(pl.col("community").fill_null(-1).sort_by("level").alias("community_ids")))


# --- interchange files ----------------------------------------------------------------
def write_graphml(entities: pl.DataFrame, relationships: pl.DataFrame,
                  path: str | Path, communities: pl.DataFrame | None = None) -> Path:
    """Write the entity graph as GraphML (networkx), atomically; return the path.

    Nodes are entity ids with attributes ``label`` (the title, which Gephi and yEd show
    as the node's name), title, type, description (strings), degree (int),
    weighted_degree, pagerank (float) and, when ``communities`` (COMMUNITIES_SCHEMA) is
    given, ``community_level_<k>`` (int, -1: in no community at level k) per level;
    edges carry relationship_id, description (string) and weight (float). List columns
    are left out (GraphML has no list type). The graph is directed
    (``edgedefault="directed"``): each relationship is one edge from its source to its
    target, as the text gives it. Source: networkx ``generate_graphml``.
    """
    levels = (community_levels(communities) if communities is not None
              else pl.DataFrame(schema={"entity_id": pl.String}))
    level_cols = [c for c in levels.columns if c != "entity_id"]
    rows = (entities.select("id", "title", "type", "description", "degree",
                            "weighted_degree", "pagerank")
            .join(levels.rename({"entity_id": "id"}), on="id", how="left",
                  maintain_order="left")
            .with_columns(pl.col(c).fill_null(-1) for c in level_cols))
    g = nx.DiGraph()
    for row in rows.iter_rows(named=True):
        g.add_node(row["id"], label=row["title"] or "", title=row["title"] or "",
                   type=row["type"] or "", description=row["description"] or "",
                   degree=int(row["degree"] or 0),
                   weighted_degree=float(row["weighted_degree"] or 0.0),
                   pagerank=float(row["pagerank"] or 0.0),
                   **{c: int(row[c]) for c in level_cols})
    for row in relationships.select("id", "source_id", "target_id", "description",
                                    "weight").iter_rows(named=True):
        g.add_edge(row["source_id"], row["target_id"], relationship_id=row["id"],
                   description=row["description"] or "", weight=float(row["weight"] or 0.0))
    return write_text("\n".join(nx.generate_graphml(g)) + "\n", path)


# Neo4j bulk import (neo4j-admin database import full). Each node kind has its own ID
# space (``:ID(Entity)``...), so a document and an entity whose ids happen to be equal
# hashes stay apart; headers follow the Operations Manual's "Import header format".
NEO4J_NODES_HEADER = ["entityId:ID(Entity)", "title", "type", "description", "degree:long",
                      "pagerank:double", ":LABEL"]
NEO4J_RELATIONSHIPS_HEADER = [":START_ID(Entity)", ":END_ID(Entity)", ":TYPE",
                              "relationshipId", "description", "weight:double"]
NEO4J_RELATIONSHIP_TYPE = "RELATED"
NEO4J_TEXT_UNITS_HEADER = ["textUnitId:ID(TextUnit)", "human_readable_id:long", "text",
                           "n_tokens:long", "chunk_index:long", ":LABEL"]
NEO4J_DOCUMENTS_HEADER = ["documentId:ID(Document)", "human_readable_id:long", "title",
                          "source", ":LABEL"]
NEO4J_COMMUNITIES_HEADER = ["communityId:ID(Community)", "community:long", "level:long",
                            "title", "size:long", ":LABEL"]
NEO4J_MENTIONS_HEADER = [":START_ID(TextUnit)", ":END_ID(Entity)", ":TYPE"]
NEO4J_PART_OF_HEADER = [":START_ID(TextUnit)", ":END_ID(Document)", ":TYPE"]
NEO4J_IN_COMMUNITY_HEADER = [":START_ID(Entity)", ":END_ID(Community)", ":TYPE", "level:long"]
NEO4J_CHILD_OF_HEADER = [":START_ID(Community)", ":END_ID(Community)", ":TYPE"]
NEO4J_IMPORT_SCRIPT = "import.sh"


def _csv_text(header: list[str], rows) -> str:
    buf = io.StringIO()
    # Fields holding a comma, quote or newline are quoted with inner quotes doubled (""),
    # which neo4j-admin import reads by default; numbers stay bare for the typed columns.
    writer = csv.writer(buf, quoting=csv.QUOTE_MINIMAL, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue()


def _neo4j_label(entity_type: str | None) -> str:
    clean = re.sub(r"[^A-Za-z0-9_]", "_", (entity_type or "").strip())
    return f"Entity;{clean}" if clean else "Entity"


def neo4j_import_command(nodes: list[str], relationships: list[str],
                         database: str = "neo4j") -> str:
    """The ``neo4j-admin database import full`` command line (Neo4j 5 / 2025) for the
    given node and relationship file names: the database name first (from Neo4j 5.19 a
    name after ``--nodes`` is read as a file), ``--multiline-fields=true`` (text and
    descriptions hold newlines), ``--overwrite-destination`` (a full import needs an
    empty database). Source: Neo4j Operations Manual, "Full import" and "Import header
    format"."""
    parts = [f"neo4j-admin database import full {database}",
             *(f"--nodes=\"$DIR/{n}\"" for n in nodes),
             *(f"--relationships=\"$DIR/{r}\"" for r in relationships),
             "--multiline-fields=true", "--overwrite-destination=true"]
    return " \\\n    ".join(parts)


def write_neo4j_import(entities: pl.DataFrame, relationships: pl.DataFrame,
                       folder: str | Path, text_units: pl.DataFrame | None = None,
                       documents: pl.DataFrame | None = None,
                       communities: pl.DataFrame | None = None) -> tuple[Path, Path]:
    """Write CSV files for ``neo4j-admin database import full`` and ``import.sh``, the
    command that imports them.

    Files (each with its header line; ``(X)`` is the ID space)::

        nodes.csv
            entityId:ID(Entity),title,type,description,degree:long,pagerank:double,:LABEL
        relationships.csv
            :START_ID(Entity),:END_ID(Entity),:TYPE,relationshipId,description,weight:double
        text_units.csv
            textUnitId:ID(TextUnit),human_readable_id:long,text,n_tokens:long,chunk_index:long,:LABEL
        documents.csv
            documentId:ID(Document),human_readable_id:long,title,source,:LABEL
        communities.csv
            communityId:ID(Community),community:long,level:long,title,size:long,:LABEL
        mentions.csv       :START_ID(TextUnit),:END_ID(Entity),:TYPE            (MENTIONS)
        part_of.csv        :START_ID(TextUnit),:END_ID(Document),:TYPE          (PART_OF)
        in_community.csv   :START_ID(Entity),:END_ID(Community),:TYPE,level:long (IN_COMMUNITY)
        child_of.csv       :START_ID(Community),:END_ID(Community),:TYPE
            (CHILD_OF: child -> parent)

    ``text_units.csv``, ``mentions.csv`` (from entities' ``text_unit_ids``),
    ``documents.csv`` / ``part_of.csv`` and ``communities.csv`` / ``in_community.csv`` /
    ``child_of.csv`` are written when ``text_units`` (TEXT_UNITS_SCHEMA),
    ``documents`` (DOCUMENTS_SCHEMA) and ``communities`` (COMMUNITIES_SCHEMA) are given;
    a link whose end is not among the written nodes is left out (e.g. a text unit of a
    document not given). ``RELATED`` edges run ``source_id -> target_id`` as the
    relationships table stores them: the direction the text gives (one per entity pair).

    A field holding a comma, quote or newline is quoted with inner quotes doubled (RFC
    4180, Python's ``csv``); text holds newlines, so ``import.sh`` passes
    ``--multiline-fields=true``. An empty string or null becomes an empty field, which
    neo4j-admin skips (no property). Entity labels are ``Entity`` plus the entity type
    (characters outside ``[A-Za-z0-9_]`` become ``_``). Each file is written atomically.

    Returns:
        ``(nodes_path, relationships_path)``: the entity files; the others sit beside them.
    """
    folder = Path(folder)
    written_nodes: list[str] = []
    written_rels: list[str] = []

    def put(name: str, header: list[str], rows, kind: list[str]) -> Path:
        kind.append(name)
        return write_text(_csv_text(header, rows), folder / name)

    ents = entities.sort("id")
    entity_ids = set(ents["id"].to_list())
    nodes_path = put("nodes.csv", NEO4J_NODES_HEADER, (
        (r["id"], r["title"], r["type"], r["description"], r["degree"], r["pagerank"],
         _neo4j_label(r["type"])) for r in ents.iter_rows(named=True)), written_nodes)
    rels_path = put("relationships.csv", NEO4J_RELATIONSHIPS_HEADER, (
        (r["source_id"], r["target_id"], NEO4J_RELATIONSHIP_TYPE, r["id"], r["description"],
         r["weight"]) for r in relationships.sort("id").iter_rows(named=True)), written_rels)
    unit_ids: set[str] = set()
    if text_units is not None:
        units = text_units.sort("id")
        unit_ids = set(units["id"].to_list())
        put("text_units.csv", NEO4J_TEXT_UNITS_HEADER, (
            (r["id"], r.get("human_readable_id"), r["text"], r["n_tokens"], r.get("chunk_index"),
             "TextUnit") for r in units.iter_rows(named=True)), written_nodes)
        mentions = (ents.select(pl.col("text_unit_ids").alias("unit"), pl.col("id").alias("e"))
                    .explode("unit").drop_nulls("unit").unique()
                    .filter(pl.col("unit").is_in(list(unit_ids))).sort("unit", "e"))
        put("mentions.csv", NEO4J_MENTIONS_HEADER,
            ((u, e, "MENTIONS") for u, e in mentions.iter_rows()), written_rels)
    if documents is not None:
        docs = documents.sort("id")
        put("documents.csv", NEO4J_DOCUMENTS_HEADER, (
            (r["id"], r["human_readable_id"], r["title"], r.get("source"), "Document")
            for r in docs.iter_rows(named=True)), written_nodes)
        if text_units is not None:
            doc_ids = set(docs["id"].to_list())
            put("part_of.csv", NEO4J_PART_OF_HEADER, (
                (r["id"], r["document_id"], "PART_OF")
                for r in text_units.sort("id").iter_rows(named=True)
                if r["document_id"] in doc_ids), written_rels)
    if communities is not None:
        comms = communities.sort("level", "community")
        put("communities.csv", NEO4J_COMMUNITIES_HEADER, (
            (r["id"], r["community"], r["level"], r["title"], r["size"], "Community")
            for r in comms.iter_rows(named=True)), written_nodes)
        members = (comms.select("id", "level", pl.col("entity_ids").alias("e"))
                   .explode("e").drop_nulls("e")
                   .filter(pl.col("e").is_in(list(entity_ids))).sort("level", "id", "e"))
        put("in_community.csv", NEO4J_IN_COMMUNITY_HEADER, (
            (e, c, "IN_COMMUNITY", level) for c, level, e in members.iter_rows()),
            written_rels)
        id_of = dict(zip(comms["community"].to_list(), comms["id"].to_list()))
        put("child_of.csv", NEO4J_CHILD_OF_HEADER, (
            (r["id"], id_of[r["parent"]], "CHILD_OF") for r in comms.iter_rows(named=True)
            if r["parent"] is not None and r["parent"] in id_of), written_rels)
    script = ("#!/bin/sh\n# Import this folder into an empty Neo4j database (stop the "
              "database first; Neo4j 5 / 2025).\n# Usage: sh import.sh  (neo4j-admin on "
              "PATH, or run it from $NEO4J_HOME/bin)\nset -e\nDIR=\"$(cd \"$(dirname \"$0\")\" "
              "&& pwd)\"\n" + neo4j_import_command(written_nodes, written_rels) + "\n")
    write_text(script, folder / NEO4J_IMPORT_SCRIPT)
    return nodes_path, rels_path


# --- pure checks for the asset checks: (passed, metadata) -----------------------------
def edges_endpoints_exist(nodes: pl.DataFrame, edges: pl.DataFrame) -> tuple[bool, dict]:
    """Every edge's src_key and dst_key is a node_key of ``nodes``.

    Returns ``(passed, {"edges": int, "dangling_edges": int, "examples": [...]})``.
    """
    keys = nodes["node_key"].implode()
    bad = edges.filter(~pl.col("src_key").is_in(keys) | ~pl.col("dst_key").is_in(keys))
    return bad.height == 0, {"edges": edges.height, "dangling_edges": bad.height,
                             "examples": bad["relationship_id"].head(5).to_list()}


def kg_node_ids_exist(text_units: pl.DataFrame, entities: pl.DataFrame) -> tuple[bool, dict]:
    """Every id in text_units.kg_node_ids (and neighbor_entity_ids) is an entity id.

    Returns ``(passed, {"references": int, "unknown": int, "examples": [...]})``.
    """
    refs = (pl.concat([text_units.select(pl.col("kg_node_ids").alias("eid")),
                       text_units.select(pl.col("neighbor_entity_ids").alias("eid"))])
            .explode("eid").drop_nulls())
    unknown = refs.join(entities.select(pl.col("id").alias("eid")), on="eid", how="anti")
    return unknown.height == 0, {"references": refs.height, "unknown": unknown.height,
                                 "examples": unknown["eid"].unique().sort().head(5).to_list()}


def _as_matrix(vectors: Any) -> np.ndarray:
    if isinstance(vectors, np.ndarray):
        return vectors
    arrow = vectors.to_arrow() if hasattr(vectors, "to_arrow") else vectors  # LanceDB table
    column = arrow.column("vector").combine_chunks()
    if pa.types.is_fixed_size_list(column.type) and column.null_count == 0:
        values = column.flatten().to_numpy(zero_copy_only=False)
        return values.reshape(len(column), column.type.list_size)
    return np.asarray(column.to_pylist(), dtype=np.float32)  # ragged lists: dims differ


def vectors_valid(vectors: Any, expected_dim: int,
                  expected_rows: int | None = None) -> tuple[bool, dict]:
    """Vectors have ``expected_dim`` columns, no NaN/inf, no all-zero row (and n rows).

    Args:
        vectors: a 2-D numpy array (n, dim), or a LanceDB table / pyarrow table with a
            ``vector`` column.
        expected_dim: the embedder's dimension (e.g. 384 for all-MiniLM-L6-v2).
        expected_rows: when given, the row count must equal it.

    Returns ``(passed, {"rows", "dim", "nan_rows", "zero_rows"})``.
    """
    try:
        m = _as_matrix(vectors)
    except ValueError as exc:  # ragged: rows of different lengths
        return False, {"expected_dim": expected_dim, "error": str(exc)[:200]}
    rows = int(m.shape[0])
    dim = int(m.shape[1]) if m.ndim == 2 else -1
    nan_rows = int((~np.isfinite(m)).any(axis=1).sum()) if m.ndim == 2 else rows
    zero_rows = int((np.abs(m).sum(axis=1) == 0).sum()) if m.ndim == 2 and dim > 0 else 0
    passed = ((dim == expected_dim or rows == 0) and nan_rows == 0 and zero_rows == 0
              and (expected_rows is None or rows == expected_rows))
    return passed, {"rows": rows, "dim": dim, "expected_dim": expected_dim,
                    "nan_rows": nan_rows, "zero_rows": zero_rows}


def row_counts_match(expected: Mapping[str, int],
                     actual: Mapping[str, int]) -> tuple[bool, dict]:
    """Each name's actual row count equals its expected one (a missing name fails).

    Example: ``row_counts_match({"graph-nodes": len(entities)}, {"graph-nodes": len(nodes)})``.
    Returns ``(passed, {name: {"expected": int, "actual": int | None}})``.
    """
    meta = {k: {"expected": int(v), "actual": None if actual.get(k) is None else int(actual[k])}
            for k, v in expected.items()}
    return all(m["expected"] == m["actual"] for m in meta.values()), meta
