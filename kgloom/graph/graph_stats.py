"""The community structure at a glance: one row per community level (the ``graph_stats``
table). How many communities each level holds, how large they are, how many are a single
entity, and how well the level separates the graph (modularity, and the share of
relationship weight that stays inside a community). A GraphRAG user picks the level for
global search from it (``community_level``) without opening every community.

Vertices and edges are those :mod:`kgloom.graph.communities` clusters: one vertex per
entity, parallel relationships summed, self-loops dropped, so a level's modularity here
equals ``modularity_per_level`` in ``communities.stats.json``. No Dagster here.
"""

from __future__ import annotations

import igraph as ig
import numpy as np
import polars as pl

from kgloom.core import schemas


def community_level_stats(entities: pl.DataFrame, relationships: pl.DataFrame,
                          communities: pl.DataFrame) -> pl.DataFrame:
    """Summarize each community level of ``communities``.

    Args:
        entities: ENTITIES_SCHEMA frame (n rows; ``id`` read).
        relationships: RELATIONSHIPS_SCHEMA frame (m rows; ``source_id``, ``target_id``,
            ``weight`` read); an edge whose weight is null counts 0.
        communities: COMMUNITIES_SCHEMA frame (``level``, ``size``, ``entity_ids``
            read); each level a partition of the entities (an entity missing from a
            level counts as a community of its own for the modularity).

    Returns:
        GRAPH_STATS_SCHEMA frame, one row per level, sorted by level (0 rows when there
        is no community): ``communities``, ``singletons`` (size 1), ``min_size``,
        ``median_size``, ``mean_size``, ``max_size`` (entities per community),
        ``modularity`` (igraph's weighted Newman-Girvan modularity, resolution 1) and
        ``coverage`` (intra-community weight / total weight); both 0.0 for a graph
        without weighted edges.

    Raises:
        ValueError: a relationship endpoint or community member that is not an entity id.
    """
    if not communities.height:
        return schemas.empty(schemas.GRAPH_STATS_SCHEMA)
    ids = sorted(entities["id"].to_list())
    index = {eid: i for i, eid in enumerate(ids)}
    src, dst, weight = _edges(relationships, index)
    rows = []
    for (level,), group in communities.sort("level").group_by("level", maintain_order=True):
        membership = np.arange(len(ids), dtype=np.int64) + len(ids)  # own community each
        for number, members in enumerate(group["entity_ids"].to_list()):
            for eid in members:
                if eid not in index:
                    raise ValueError(f"community member {eid!r} at level {level} is not an "
                                     "entity id")
                membership[index[eid]] = number
        sizes = group["size"]
        rows.append({
            "level": level, "communities": group.height,
            "singletons": int((sizes == 1).sum()), "min_size": sizes.min(),
            "median_size": float(sizes.median() or 0.0),  # pyright: ignore[reportArgumentType]
            "mean_size": float(sizes.mean() or 0.0),  # pyright: ignore[reportArgumentType]
            "max_size": sizes.max(),
            **_separation(len(ids), src, dst, weight, membership)})
    return pl.DataFrame(rows, schema=schemas.GRAPH_STATS_SCHEMA)


def _edges(relationships: pl.DataFrame, index: dict[str, int]
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(source, target, weight) arrays of the relationships between two different
    entities, as vertex numbers of ``index``.

    Raises:
        ValueError: an endpoint missing from ``index``.
    """
    src, dst, weight = [], [], []
    for s, t, w in relationships.select("source_id", "target_id", "weight").iter_rows():
        if s not in index or t not in index:
            raise ValueError(f"relationship {s}->{t} names an entity missing from entities")
        if s != t:
            src.append(index[s])
            dst.append(index[t])
            weight.append(float(w or 0.0))
    return (np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64),
            np.asarray(weight, dtype=np.float64))


def _separation(n: int, src: np.ndarray, dst: np.ndarray, weight: np.ndarray,
                membership: np.ndarray) -> dict[str, float]:
    """``modularity`` and ``coverage`` of ``membership`` (n,) on the graph of n vertices
    and the edges (src, dst, weight); both 0.0 when the total weight is 0."""
    total = float(weight.sum())
    if not len(src) or total <= 0.0:
        return {"modularity": 0.0, "coverage": 0.0}
    g = ig.Graph(n=n, edges=list(zip(src.tolist(), dst.tolist())), directed=False)
    g.es["weight"] = weight.tolist()
    g.simplify(multiple=True, loops=True, combine_edges={"weight": "sum"})
    inside = float(weight[membership[src] == membership[dst]].sum())
    return {"modularity": float(g.modularity(membership.tolist(), weights="weight")),
            "coverage": inside / total}
