"""Graph metrics (degree, PageRank) and hierarchical Leiden communities (igraph).

Vertices are always laid out in sorted entity-id order and every output is sorted, so
the same tables and seed give byte-identical results.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import cast

import igraph as ig
import polars as pl

from kgloom import schemas
from kgloom.ids import content_id

MAX_LEVELS = 6


def _build_graph(entities: pl.DataFrame, relationships: pl.DataFrame) -> tuple[ig.Graph, list[str]]:
    """Undirected weighted graph, vertex i = i-th sorted entity id; parallel edges summed,
    self-loops dropped.

    Raises:
        ValueError: a relationship endpoint that is not an entity id.
    """
    ids = sorted(entities["id"].to_list())
    index = {eid: i for i, eid in enumerate(ids)}
    edges, weights = [], []
    for src, dst, w in relationships.select("source_id", "target_id", "weight").iter_rows():
        if src not in index or dst not in index:
            raise ValueError(f"relationship {src}->{dst} names an entity missing from "
                             "entities; rebuild relationships with resolve_entities")
        if src != dst:
            edges.append((index[src], index[dst]))
            weights.append(float(w or 0.0))
    g = ig.Graph(n=len(ids), edges=edges, directed=False)
    g.es["weight"] = weights
    g.simplify(multiple=True, loops=True, combine_edges={"weight": "sum"})
    if g.ecount() == 0:
        g.es["weight"] = []
    return g, ids


PAGERANK_DECIMALS = 12


def compute_graph_metrics(entities: pl.DataFrame,
                          relationships: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Fill degree, weighted_degree, pagerank and combined_degree.

    Args:
        entities: ENTITIES_SCHEMA frame (n rows); isolated entities are kept.
        relationships: RELATIONSHIPS_SCHEMA frame whose source_id/target_id are entity ids.

    Returns:
        ``(entities, relationships)`` with the same rows and order, conforming to their
        schemas: degree (Int64) = number of distinct neighbours; weighted_degree (Float64)
        = sum of incident edge weights; pagerank (Float64, sums to 1 over all entities) =
        igraph ``Graph.pagerank(weights="weight", damping=0.85, directed=False)`` (Brin &
        Page 1998, "The anatomy of a large-scale hypertextual Web search engine"), rounded
        to :data:`PAGERANK_DECIMALS` decimals so an unchanged graph gives equal bytes;
        combined_degree (Int64) = degree(source) + degree(target), as in GraphRAG.

    Raises:
        ValueError: a relationship endpoint that is not an entity id.
    """
    g, ids = _build_graph(entities, relationships)
    if not ids:
        return (schemas.conform(entities, schemas.ENTITIES_SCHEMA),
                schemas.conform(relationships, schemas.RELATIONSHIPS_SCHEMA))
    weight = "weight" if g.ecount() else None
    metrics = pl.DataFrame({
        "id": ids,
        "degree": g.degree(),
        "weighted_degree": [float(x) for x in g.strength(weights=weight)],
        # rounded to 12 decimals: PRPACK's last bits vary from run to run (seen: 5e-20 on
        # 2,024 of 2,025 entities of one graph), which made a recompute of an unchanged
        # graph rewrite every entity and text unit row in LanceDB
        "pagerank": [round(x, PAGERANK_DECIMALS)
                     for x in g.pagerank(weights=weight, damping=0.85, directed=False)],
    }, schema={"id": pl.String, "degree": pl.Int64, "weighted_degree": pl.Float64,
               "pagerank": pl.Float64})
    entities = entities.drop("degree", "weighted_degree", "pagerank").join(
        metrics, on="id", how="left", maintain_order="left")
    deg = dict(zip(ids, g.degree()))
    relationships = relationships.with_columns(
        (pl.col("source_id").replace_strict(deg, return_dtype=pl.Int64)
         + pl.col("target_id").replace_strict(deg, return_dtype=pl.Int64)).alias("combined_degree"))
    return (schemas.conform(entities, schemas.ENTITIES_SCHEMA),
            schemas.conform(relationships, schemas.RELATIONSHIPS_SCHEMA))


LEIDEN_ITERATIONS = 2


@contextmanager
def _seeded_rng(seed: int) -> Iterator[None]:
    """igraph's random numbers drawn from ``random.Random(seed)`` inside the block (its
    Leiden and Louvain visit nodes in a random order), the default restored after."""
    ig.set_random_number_generator(random.Random(seed))
    try:
        yield
    finally:
        ig.set_random_number_generator(random)


def _leiden(g: ig.Graph, seed: int, resolution: float = 1.0, backend: str = "igraph"
            ) -> list[int]:
    """Leiden membership of ``g`` (undirected; float edge attribute "weight" when it has
    edges): one community number (int) per vertex, in vertex order, maximising modularity
    with resolution ``resolution`` (1.0 = Newman-Girvan modularity, higher = smaller
    communities; the RB-configuration quality of Reichardt & Bornholdt 2006).

    igraph's C implementation (``Graph.community_leiden(objective_function="modularity")``,
    Traag, Waltman & van Eck 2019) with :data:`LEIDEN_ITERATIONS` passes (igraph's and
    leidenalg's default) and igraph's RNG seeded with ``seed``. Not "until nothing moves":
    the number of passes that takes grows with the graph, so its time grew faster than
    the edges, for little modularity (bench/bench_scale.py --part leiden, planted
    partitions: at 10^6 edges igraph to convergence took 23.0 s CPU for modularity
    0.75722, two passes 1.8 s for 0.75675; leidenalg to convergence, kgloom's call
    before, took 23.0 s at 10^5 edges against 0.09 s, for 0.75276 against 0.75270).

    ``backend="leidenalg"``: the leidenalg package instead (``find_partition`` with
    ``RBConfigurationVertexPartition``, which is modularity at resolution 1.0, its own RNG
    seeded with ``seed``, iterated until no move improves it): the same algorithm, a
    different implementation and stopping rule, so a valid partition that need not equal
    igraph's.

    Raises:
        ValueError: an unknown ``backend`` (see :data:`kgloom.config.COMMUNITY_BACKENDS`).
    """
    weights = "weight" if g.ecount() else None
    if backend == "leidenalg":
        import leidenalg

        partition = leidenalg.find_partition(
            g, leidenalg.RBConfigurationVertexPartition, weights=weights,
            resolution_parameter=resolution, seed=seed, n_iterations=-1)
        return list(partition.membership)
    if backend != "igraph":
        raise ValueError(f"community backend must be igraph or leidenalg, got {backend!r}")
    with _seeded_rng(seed):
        clustering = g.community_leiden(objective_function="modularity", weights=weights,
                                        resolution=resolution,
                                        n_iterations=LEIDEN_ITERATIONS)
    return list(clustering.membership)


def _groups(members: list[int], membership: list[int]) -> list[list[int]]:
    """Split ``members`` (sorted vertex ids) by ``membership``; each group stays sorted."""
    out: dict[int, list[int]] = {}
    for v, c in zip(members, membership):
        out.setdefault(c, []).append(v)
    return sorted(out.values())


def _split(sub: ig.Graph, members: list[int], seed: int, backend: str = "igraph"
           ) -> tuple[list[list[int]], str]:
    """Split one oversized community into >= 2 parts; returns (parts, how).

    ``sub`` is the community's induced subgraph (vertex i = ``members[i]``, sorted).
    Leiden on it; if that keeps it whole, its connected components; then Leiden at rising
    RB-configuration resolutions (a result of all singletons is refused: on a near-clique
    it means "no structure"); last, halves in sorted-id order, so the recursion always
    terminates.
    """
    parts = _groups(members, _leiden(sub, seed, backend=backend))
    if len(parts) > 1:
        return parts, "leiden"
    parts = _groups(members, sub.connected_components().membership)
    if len(parts) > 1:
        return parts, "components"
    for resolution in (1.5, 2.0, 4.0, 8.0):
        parts = _groups(members, _leiden(sub, seed, resolution, backend))
        if 1 < len(parts) < len(members):  # all singletons says "no structure", not a split
            return parts, "resolution"
    half = len(members) // 2
    return [members[:half], members[half:]], "halves"


def _modularity(g: ig.Graph, membership: list[int]) -> float:
    # Modularity is undefined without edges; report 0.0 rather than NaN.
    if g.ecount() == 0 or sum(g.es["weight"]) == 0:
        return 0.0
    return float(g.modularity(membership, weights="weight"))


def hierarchical_leiden(entities: pl.DataFrame, relationships: pl.DataFrame,
                        max_cluster_size: int = 10, seed: int = 0xDEADBEEF,
                        period: str = "", backend: str = "igraph"
                        ) -> tuple[pl.DataFrame, dict]:
    """Hierarchical communities: Leiden on the whole graph, then Leiden again inside every
    community larger than ``max_cluster_size``, until none is.

    Algorithm: Traag, Waltman & van Eck 2019, "From Louvain to Leiden: guaranteeing
    well-connected communities" (igraph's ``community_leiden`` on modularity,
    :data:`LEIDEN_ITERATIONS` passes, fixed ``seed``: :func:`_leiden`); the recursion on
    oversized communities and ``max_cluster_size=10`` follow GraphRAG's
    ``hierarchical_leiden``. Unlike GraphRAG, a community at or below the size limit is
    carried down unchanged, so EVERY level is a partition of all entities (isolated
    entities and all connected components included). At most ``MAX_LEVELS`` levels.

    Args:
        entities: ENTITIES_SCHEMA frame (uses id, text_unit_ids).
        relationships: RELATIONSHIPS_SCHEMA frame (uses id, source_id, target_id, weight).
        max_cluster_size: split communities with more entities than this (>= 1).
        seed: Leiden seed (and igraph's RNG seed for the Louvain baseline).
        period: date string written to every row (YYYY-MM-DD).
        backend: who runs each Leiden pass, ``igraph`` (default) or ``leidenalg``
            (:func:`_leiden`; the setting ``IndexSettings.community_backend``).

    Returns:
        ``(communities, stats)``. ``communities`` conforms to COMMUNITIES_SCHEMA, one row
        per community per level, sorted by community number; numbers are 0..N-1, assigned
        by (level, smallest member entity id); parent is the containing community one
        level up (-1 at level 0); children the sorted numbers one level down;
        relationship_ids the relationships with both ends inside; id =
        ``content_id("community", level, *sorted member ids)``. ``stats`` holds
        "levels", "modularity_per_level" (igraph ``Graph.modularity`` of each level's
        membership), "communities_per_level", "max_size_per_level", "louvain_modularity"
        (igraph ``community_multilevel`` on the same graph, a baseline for level 0),
        "splits" (how many oversized communities were split by each method) and
        "oversized_at_last_level".

    Raises:
        ValueError: ``max_cluster_size < 1``, a relationship endpoint not in entities, or
            an unknown ``backend``.
    """
    if max_cluster_size < 1:
        raise ValueError(f"max_cluster_size must be >= 1, got {max_cluster_size}")
    g, ids = _build_graph(entities, relationships)
    stats: dict = {"levels": 0, "modularity_per_level": [], "communities_per_level": [],
                   "max_size_per_level": [], "louvain_modularity": 0.0,
                   "splits": {"leiden": 0, "components": 0, "resolution": 0, "halves": 0},
                   "oversized_at_last_level": 0, "max_cluster_size": max_cluster_size,
                   "seed": seed}
    if not ids:
        return schemas.empty(schemas.COMMUNITIES_SCHEMA), stats
    levels = _split_levels(g, len(ids), max_cluster_size, seed, stats["splits"], backend)
    stats["louvain_modularity"] = _louvain_modularity(g, seed)
    rows = _community_rows(g, levels, ids, entities, relationships, period, stats)
    stats["levels"] = len(levels)
    stats["oversized_at_last_level"] = sum(len(c) > max_cluster_size for c in levels[-1])
    _link_children(rows)
    return pl.DataFrame(rows, schema=schemas.COMMUNITIES_SCHEMA), stats


def _split_levels(g: ig.Graph, n: int, max_cluster_size: int, seed: int,
                  splits: dict[str, int], backend: str = "igraph"
                  ) -> list[list[list[int]]]:
    """Step 1: the levels as lists of communities, each a sorted list of vertex ids:
    Leiden on the whole graph, then every community over ``max_cluster_size`` split
    (:func:`_split`, counted in ``splits`` by method) into the next level, the others
    carried down, until none is oversized or ``MAX_LEVELS`` is reached.

    A part's induced subgraph is cut from its parent's, not from ``g``: igraph's
    ``induced_subgraph`` costs time in proportion to the vertices of the graph it cuts
    from, whatever the part's size, so cutting each of the ~E/80 parts from ``g`` grew
    as edges squared (0.06 ms per 30-vertex cut at 2x10^5 vertices, 0.67 ms at 2x10^6).
    """
    levels = [_groups(list(range(n)), _leiden(g, seed, backend=backend))]
    subgraphs: dict[int, ig.Graph] = {}  # smallest member -> subgraph, oversized parts only
    while len(levels) < MAX_LEVELS and any(len(c) > max_cluster_size for c in levels[-1]):
        nxt, cut = [], {}
        for members in levels[-1]:
            if len(members) <= max_cluster_size:
                nxt.append(members)
                continue
            sub = subgraphs.get(members[0]) or g.induced_subgraph(members)  # keeps order
            parts, how = _split(sub, members, seed, backend)
            splits[how] += 1
            nxt.extend(parts)
            local = {v: i for i, v in enumerate(members)}
            for part in parts:
                if len(part) > max_cluster_size:
                    cut[part[0]] = sub.induced_subgraph([local[v] for v in part])
        subgraphs = cut
        levels.append(sorted(nxt))
    return levels


def _louvain_modularity(g: ig.Graph, seed: int) -> float:
    """Step 2: the modularity of igraph's Louvain (``community_multilevel``) on the same
    graph, a baseline for level 0, with igraph's RNG seeded (:func:`_seeded_rng`)."""
    with _seeded_rng(seed):
        # one clustering: a list of them comes only with return_levels=True
        louvain = cast(ig.VertexClustering,
                       g.community_multilevel(weights="weight" if g.ecount() else None))
    return _modularity(g, louvain.membership)


def _community_rows(g: ig.Graph, levels: list[list[list[int]]], ids: list[str],
                    entities: pl.DataFrame, relationships: pl.DataFrame, period: str,
                    stats: dict) -> list[dict]:
    """Step 3: one row per community per level (numbers 0..N-1 in level order; parent
    one level up; relationships with both ends inside; text units of the members), and
    each level's modularity, community count and largest size appended to ``stats``."""
    units = dict(zip(entities["id"].to_list(), entities["text_unit_ids"].to_list()))
    index = {eid: v for v, eid in enumerate(ids)}
    rel_ends = [(rid, index[s], index[t]) for rid, s, t in
                relationships.select("id", "source_id", "target_id").iter_rows()]
    rows, number, owner = [], 0, []  # owner[k][vertex] = community number at level k
    for level, communities in enumerate(levels):
        membership = [0] * len(ids)
        level_owner = [0] * len(ids)
        for i, members in enumerate(communities):
            for v in members:
                membership[v] = i
                level_owner[v] = number + i
        owner.append(level_owner)
        stats["modularity_per_level"].append(_modularity(g, membership))
        stats["communities_per_level"].append(len(communities))
        stats["max_size_per_level"].append(max(len(c) for c in communities))
        inside: dict[int, list[str]] = {}  # community number -> relationship ids within
        for rid, s, t in rel_ends:
            if level_owner[s] == level_owner[t]:
                inside.setdefault(level_owner[s], []).append(rid)
        for i, members in enumerate(communities):
            member_ids = [ids[v] for v in members]
            rows.append({
                "id": content_id("community", level, *member_ids),
                "community": number + i, "level": level,
                "parent": owner[level - 1][members[0]] if level else -1,
                "title": f"Community {number + i}", "entity_ids": member_ids,
                "relationship_ids": sorted(inside.get(number + i, [])),
                "text_unit_ids": sorted({u for e in member_ids for u in (units[e] or [])}),
                "period": period, "size": len(members),
            })
        number += len(communities)
    return rows


def _link_children(rows: list[dict]) -> None:
    """Step 4: each row's sorted ``children`` (the communities one level down whose parent
    it is) and ``human_readable_id`` (= its community number), in place."""
    children: dict[int, list[int]] = {}
    for r in rows:
        children.setdefault(r["parent"], []).append(r["community"])
    for r in rows:
        r["children"] = sorted(children.get(r["community"], []))
        r["human_readable_id"] = r["community"]


def community_structure(entities: pl.DataFrame, relationships: pl.DataFrame,
                        communities: pl.DataFrame) -> tuple[bool, dict, str]:
    """Whether the communities group anything: the check behind the ``communities``
    asset's WARN check ``communities_group_entities``.

    Args:
        entities: ENTITIES_SCHEMA frame (n rows).
        relationships: RELATIONSHIPS_SCHEMA frame (m rows).
        communities: COMMUNITIES_SCHEMA frame of :func:`hierarchical_leiden`.

    Returns:
        (passed, metadata, description). Fails when there are entities but no
        relationship (an edgeless graph: Leiden can only put each entity alone), or
        when every level-0 community holds one entity; then each community report
        describes a single entity and global search has no cross-entity summary to
        read. An empty graph passes here (the extraction checks and the CLI say so).
    """
    level0 = communities.filter(pl.col("level") == 0) if communities.height else communities
    singletons = level0.filter(pl.col("size") <= 1).height if level0.height else 0
    meta = {"entities": entities.height, "relationships": relationships.height,
            "level_0_communities": level0.height, "singleton_communities": singletons}
    if not entities.height:
        return True, meta, "no entity"
    if not relationships.height:
        return False, meta, (
            f"the graph has {entities.height} entities and no relationship: every "
            "community is a single entity, so community reports and global search "
            "summarize nothing across entities (the text named no related pair)")
    if level0.height and singletons == level0.height:
        return False, meta, (
            f"all {level0.height} level-0 communities hold a single entity "
            f"({relationships.height} relationships link none of them into groups): "
            "community reports and global search summarize nothing across entities")
    return True, meta, (f"{level0.height} level-0 communities, {singletons} of a single "
                        "entity")
