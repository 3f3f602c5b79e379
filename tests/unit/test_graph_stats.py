"""kgloom.graph.graph_stats: one row per community level (the graph_stats table)."""

from __future__ import annotations

import polars as pl
import pytest

from kgloom.core import schemas
from kgloom.graph.communities import hierarchical_leiden
from kgloom.graph.graph_stats import community_level_stats

# two triangles joined by one edge (c-d), every weight 1: m = 7, each triangle's degree 7
EDGES = [("a", "b"), ("b", "c"), ("a", "c"), ("d", "e"), ("e", "f"), ("d", "f"), ("c", "d")]
ENTITIES = pl.DataFrame({"id": list("abcdef")})


def _relationships(edges=EDGES, weight: float | None = 1.0) -> pl.DataFrame:
    return pl.DataFrame({"source_id": [s for s, _ in edges], "target_id": [t for _, t in edges],
                         "weight": [weight] * len(edges)},
                        schema={"source_id": pl.String, "target_id": pl.String,
                                "weight": pl.Float64})


def _communities(levels: list[list[list[str]]]) -> pl.DataFrame:
    rows = [{"level": level, "size": len(members), "entity_ids": members}
            for level, groups in enumerate(levels) for members in groups]
    return pl.DataFrame(rows, schema={"level": pl.Int64, "size": pl.Int64,
                                      "entity_ids": pl.List(pl.String)})


def test_two_levels_of_two_triangles():
    comms = _communities([[["a", "b", "c"], ["d", "e", "f"]], [list("abcdef")]])
    got = community_level_stats(ENTITIES, _relationships(), comms)
    assert got.schema == pl.Schema(schemas.GRAPH_STATS_SCHEMA)
    assert got.to_dicts() == [
        {"level": 0, "communities": 2, "singletons": 0, "min_size": 3, "median_size": 3.0,
         "mean_size": 3.0, "max_size": 3, "modularity": pytest.approx(5 / 14),
         "coverage": pytest.approx(6 / 7)},
        {"level": 1, "communities": 1, "singletons": 0, "min_size": 6, "median_size": 6.0,
         "mean_size": 6.0, "max_size": 6, "modularity": pytest.approx(0.0),
         "coverage": pytest.approx(1.0)}]


def test_sizes_singletons_and_a_self_loop():
    comms = _communities([[["a", "b", "c", "d"], ["e"], ["f"]]])
    rels = _relationships([*EDGES, ("a", "a")])  # a self-loop counts nowhere
    row = community_level_stats(ENTITIES, rels, comms).row(0, named=True)
    assert (row["communities"], row["singletons"], row["min_size"], row["max_size"]) == \
        (3, 2, 1, 4)
    assert row["median_size"] == 1.0 and row["mean_size"] == 2.0
    assert row["coverage"] == pytest.approx(4 / 7)


def test_no_edge_or_no_community():
    comms = _communities([[["a", "b", "c"], ["d", "e", "f"]]])
    for rels in (_relationships([]), _relationships(weight=None)):
        row = community_level_stats(ENTITIES, rels, comms).row(0, named=True)
        assert (row["modularity"], row["coverage"]) == (0.0, 0.0)
    empty = community_level_stats(ENTITIES, _relationships(), _communities([]))
    assert empty.height == 0 and empty.schema == pl.Schema(schemas.GRAPH_STATS_SCHEMA)


def test_unknown_ids_are_refused():
    with pytest.raises(ValueError, match="not an entity id"):
        community_level_stats(ENTITIES, _relationships(), _communities([[["a", "zz"]]]))
    with pytest.raises(ValueError, match="missing from entities"):
        community_level_stats(ENTITIES, _relationships([("a", "zz")]),
                              _communities([[["a"]]]))


def test_modularity_equals_the_communities_stage_stats(carol_tables):
    ents, rels = carol_tables["entities"], carol_tables["relationships"]
    comms, stats = hierarchical_leiden(ents, rels, max_cluster_size=3, seed=7)
    got = community_level_stats(ents, rels, comms)
    assert got["level"].to_list() == list(range(stats["levels"]))
    assert got["communities"].to_list() == stats["communities_per_level"]
    assert got["max_size"].to_list() == stats["max_size_per_level"]
    assert got["modularity"].to_list() == pytest.approx(stats["modularity_per_level"])
