"""Emit: graph traversal tables, denormalized text-unit KG columns, GraphML and Neo4j CSV.

Polars in, polars out; no Dagster. The emitted products: graph-nodes / graph-edges
parquet for DuckDB multi-hop, and 1-hop KG columns on every text unit so any vector
store can expand a hit with no graph at all. The ``*_exist`` / ``*_valid`` / ``*_match``
functions (:mod:`.table_checks`) are pure checks for the asset checks: each returns
``(passed, metadata)``.

The interchange files are written by :mod:`.interchange`, the checks live in
:mod:`.table_checks` and the community levels in :mod:`.levels`; this module
re-exports them, so ``kgloom.publish.tables.X`` keeps working.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import polars as pl

from kgloom.core import schemas
from kgloom.publish.interchange import (
    NEO4J_CHILD_OF_HEADER,
    NEO4J_COMMUNITIES_HEADER,
    NEO4J_DOCUMENTS_HEADER,
    NEO4J_IMPORT_SCRIPT,
    NEO4J_IN_COMMUNITY_HEADER,
    NEO4J_MENTIONS_HEADER,
    NEO4J_NODES_HEADER,
    NEO4J_PART_OF_HEADER,
    NEO4J_RELATIONSHIP_TYPE,
    NEO4J_RELATIONSHIPS_HEADER,
    NEO4J_TEXT_UNITS_HEADER,
    neo4j_import_command,
    write_graphml,
    write_neo4j_import,
)
from kgloom.publish.levels import COMMUNITY_LEVEL_PREFIX, _levels, _membership, community_levels
from kgloom.publish.table_checks import (
    edges_endpoints_exist,
    kg_node_ids_exist,
    row_counts_match,
    vectors_valid,
)

# its own public names and those it re-exports from the modules it was split into
__all__ = [
    "CHUNK_ROWS", "COMMUNITY_LEVEL_PREFIX", "HUB_MIN_NEIGHBOURS", "NEIGHBOR_ENTITIES_CAP",
    "NEIGHBOR_TRIPLES_CAP", "NEO4J_CHILD_OF_HEADER", "NEO4J_COMMUNITIES_HEADER",
    "NEO4J_DOCUMENTS_HEADER", "NEO4J_IMPORT_SCRIPT", "NEO4J_IN_COMMUNITY_HEADER",
    "NEO4J_MENTIONS_HEADER", "NEO4J_NODES_HEADER", "NEO4J_PART_OF_HEADER",
    "NEO4J_RELATIONSHIPS_HEADER", "NEO4J_RELATIONSHIP_TYPE", "NEO4J_TEXT_UNITS_HEADER",
    "RELATION_MAX_CHARS", "build_graph_tables", "community_levels",
    "denormalize_text_units", "edges_endpoints_exist", "kg_node_ids_exist",
    "neo4j_import_command", "row_counts_match", "vectors_valid", "write_graphml",
    "write_neo4j_import",
]


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


_STR_LIST = pl.List(pl.String)


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
    rel_ids = _unit_relationship_ids(relationships)
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
    out = out.join(_unit_covariate_ids(covariates), on="id", how="left",
                   maintain_order="left").with_columns(
        covariate_ids=pl.col("cov").fill_null(empty_list)).drop("cov")
    return schemas.conform(out, schemas.TEXT_UNITS_SCHEMA).select(list(schemas.TEXT_UNITS_SCHEMA))


def _unit_relationship_ids(relationships: pl.DataFrame) -> pl.DataFrame:
    """Per text unit id (``unit_id``): the sorted ids of the relationships whose
    ``text_unit_ids`` hold it (``relationship_ids``, list of String)."""
    return (relationships.select(pl.col("text_unit_ids").alias("unit_id"), "id")
            .explode("unit_id").drop_nulls("unit_id").unique()
            .group_by("unit_id").agg(pl.col("id").sort().alias("relationship_ids")))


def _unit_covariate_ids(covariates: pl.DataFrame | None) -> pl.DataFrame:
    """Per text unit id (``id``): the sorted ids of its covariates (claims) (``cov``,
    list of String); no rows when ``covariates`` is None."""
    cov = (covariates if covariates is not None else schemas.empty(schemas.COVARIATES_SCHEMA)
           ).group_by("text_unit_id").agg(pl.col("id").sort().alias("cov"))
    return cov.rename({"text_unit_id": "id"})


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
    light_ue, sets, unit_set = _hub_sets(ue, links, degree)
    rank = functools.partial(_ranked_neighbor_ids, links=links, light_ue=light_ue, sets=sets,
                             unit_set=unit_set, ecode=ecode, cap=cap)
    # rank's rows for a unit: its light entities' neighbours, the head of its hub set and
    # (at most, once per set in a chunk) its hubs' neighbours
    cost = pl.concat([
        ue.join(degree, on="e").select("u", c=pl.col("d").cast(pl.Int64)),
        unit_set.join(sets.select("hs", "own"), on="hs")
        .select("u", c=(pl.col("own") + cap).cast(pl.Int64))]
    ).group_by("u").agg(pl.col("c").sum().alias("cost"))
    return _per_unit_chunk(ue, rank, {"u": pl.UInt32, "neighbor_entity_ids": _STR_LIST},
                           cost)


def _hub_sets(ue: pl.DataFrame, links: pl.DataFrame, degree: pl.DataFrame,
              ) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(light_ue, sets, unit_set) of :func:`_neighbor_ids`: the (u, e) rows of ``ue``
    whose entity is no hub (HUB_MIN_NEIGHBOURS neighbours or fewer in ``degree``: e, d;
    no entity is a hub when a weight of ``links`` is negative, which breaks the head's
    bound s >= s_H); the distinct hub sets of units (``hubs``: sorted entity codes),
    numbered ``hs``, with ``own``, the most entities a unit of that set has; and each
    unit's set (u, hs)."""
    hubs = (degree.clear() if (links["w"] < 0).any()
            else degree.filter(pl.col("d") > HUB_MIN_NEIGHBOURS))
    hub_ue = ue.join(hubs.select("e"), on="e", how="semi")
    light_ue = ue.join(hubs.select("e"), on="e", how="anti")
    unit_hubs = (hub_ue.group_by("u").agg(pl.col("e").sort().alias("hubs"))
                 .join(ue.group_by("u").len("own"), on="u"))
    sets = (unit_hubs.group_by("hubs").agg(pl.col("own").max())
            .with_row_index("hs"))
    unit_set = unit_hubs.join(sets.select("hubs", "hs"), on="hubs").select("u", "hs")
    return light_ue, sets, unit_set


def _ranked_neighbor_ids(own: pl.DataFrame, *, links: pl.DataFrame, light_ue: pl.DataFrame,
                         sets: pl.DataFrame, unit_set: pl.DataFrame, ecode: pl.DataFrame,
                         cap: int) -> pl.DataFrame:
    """``neighbor_entity_ids`` (sorted, at most ``cap``) per unit code ``u`` of one chunk
    ``own`` (its (u, e) rows): each neighbour scored ``s_H + s_L`` (the unit's hub set's
    sum over the head of that set: its first ``cap + own`` neighbours, plus its light
    entities' sum; :func:`_neighbor_ids`), the unit's own entities left out, best first
    (score descending, then id)."""
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
