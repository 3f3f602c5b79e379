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
import numpy as np
import polars as pl

from kgloom.core import schemas
from kgloom.core.ids import content_id

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
        ValueError: an unknown ``backend``
            (see :data:`kgloom.settings.indexing.COMMUNITY_BACKENDS`).
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
    communities = _community_frame(g, levels, ids, entities, relationships, period, stats)
    stats["levels"] = len(levels)
    stats["oversized_at_last_level"] = sum(len(c) > max_cluster_size for c in levels[-1])
    return communities, stats


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


def _community_frame(g: ig.Graph, levels: list[list[list[int]]], ids: list[str],
                     entities: pl.DataFrame, relationships: pl.DataFrame, period: str,
                     stats: dict) -> pl.DataFrame:
    """Step 3: one row per community per level (COMMUNITIES_SCHEMA: numbers 0..N-1 in
    level order, ``human_readable_id`` the same; parent one level up; children one
    level down, sorted; relationships with both ends inside and text units of the
    members, sorted), and each level's modularity, community count and largest size
    appended to ``stats``.

    The list columns are grouped by polars from flat (community, value) pairs, never
    built as Python lists per row: per row, converting the 44,069 communities of the
    2Wiki pool's 31,198 entities to a frame took 0.7 s, and the text-unit sets of its
    large level-0 communities (1,892 entities) made the step grow faster than the
    entities (exponent 1.24 from the pool's 600 passages to all 6,119)."""
    index = {eid: v for v, eid in enumerate(ids)}
    id_series = pl.Series("id", ids, dtype=pl.String)
    pairs = entities.select(pl.col("id").replace_strict(index, return_dtype=pl.Int64)
                            .alias("v"), pl.col("text_unit_ids").alias("u")
                            ).explode("u").drop_nulls("u")
    unit_vertex, unit_id = pairs["v"].to_numpy(), pairs["u"]
    rel_id = relationships["id"]
    rel_s = relationships["source_id"].replace_strict(index, return_dtype=pl.Int64).to_numpy()
    rel_t = relationships["target_id"].replace_strict(index, return_dtype=pl.Int64).to_numpy()
    frames, number, owner = [], 0, None  # owner[vertex]: community number one level up
    for level, communities in enumerate(levels):
        k = len(communities)
        numbers = np.arange(number, number + k, dtype=np.int64)
        membership = np.zeros(len(ids), dtype=np.int64)
        for i, members in enumerate(communities):
            membership[members] = i
        level_owner = membership + number
        stats["modularity_per_level"].append(_modularity(g, membership.tolist()))
        stats["communities_per_level"].append(k)
        stats["max_size_per_level"].append(max(len(c) for c in communities))
        sizes = np.fromiter((len(c) for c in communities), dtype=np.int64, count=k)
        first = np.fromiter((c[0] for c in communities), dtype=np.int64, count=k)
        members = id_series.gather(np.concatenate(communities))  # each community's, in order
        same = level_owner[rel_s] == level_owner[rel_t]
        frame = (pl.DataFrame({"community": np.repeat(numbers, sizes), "entity_ids": members})
                 .group_by("community", maintain_order=True).agg("entity_ids")
                 .join(_grouped(level_owner[rel_s][same], rel_id.filter(pl.Series(same)),
                                "relationship_ids"), on="community", how="left")
                 .join(_grouped(level_owner[unit_vertex], unit_id, "text_unit_ids"),
                       on="community", how="left")
                 .with_columns(level=pl.lit(level, dtype=pl.Int64),
                               parent=pl.Series(owner[first] if owner is not None
                                                else np.full(k, -1, dtype=np.int64)),
                               size=pl.Series(sizes)))
        frame = frame.with_columns(id=pl.Series([
            content_id("community", level, *m) for m in frame["entity_ids"].to_list()],
            dtype=pl.String))
        frames.append(frame)
        owner, number = level_owner, number + k
    return _with_children(pl.concat(frames), period)


def _with_children(df: pl.DataFrame, period: str) -> pl.DataFrame:
    """The communities ``df`` (every level's rows of :func:`_community_frame`) as
    COMMUNITIES_SCHEMA rows sorted by number: ``children`` (the communities whose
    ``parent`` is it, sorted; [] for none), null relationship and text unit lists as [],
    ``human_readable_id`` = ``community``, ``title`` "Community N", ``period``."""
    children = (df.filter(pl.col("parent") >= 0).group_by("parent")
                .agg(pl.col("community").sort().alias("children"))
                .rename({"parent": "community"}))
    empty = pl.lit([], dtype=pl.List(pl.String))
    return (df.join(children, on="community", how="left")
            .with_columns(pl.col("children").fill_null(pl.lit([], dtype=pl.List(pl.Int64))),
                          pl.col("relationship_ids").fill_null(empty),
                          pl.col("text_unit_ids").fill_null(empty),
                          human_readable_id=pl.col("community"),
                          title=pl.format("Community {}", pl.col("community")),
                          period=pl.lit(period, dtype=pl.String))
            .sort("community").select(list(schemas.COMMUNITIES_SCHEMA))
            .cast({k: v for k, v in schemas.COMMUNITIES_SCHEMA.items()}))


def _grouped(keys: np.ndarray, values: pl.Series, name: str) -> pl.DataFrame:
    """(community int64, ``name`` list of the distinct ``values`` with that key, sorted)
    for int64 keys (n,) and a string Series of the same length."""
    return (pl.DataFrame({"community": keys, name: values}, schema={"community": pl.Int64,
                                                                   name: pl.String})
            .group_by("community").agg(pl.col(name).unique().sort()))


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
