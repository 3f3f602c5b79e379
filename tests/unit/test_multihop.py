"""kgloom.query.graph_bfs: DuckDB BFS over the emitted parquet agrees with networkx."""

from __future__ import annotations

import random

import networkx as nx
import polars as pl
import pytest
from conftest import carol_entity_id as eid

from kgloom.core import schemas, storage
from kgloom.core.ids import content_id
from kgloom.publish import tables
from kgloom.query import graph_bfs as multihop


def _random_graph_tables(n_nodes: int = 300, n_edges: int = 600, seed: int = 7):
    """A seeded random graph as entities / relationships / communities frames."""
    g = nx.gnm_random_graph(n_nodes, n_edges, seed=seed)
    ids = {v: content_id("node", v) for v in g.nodes}
    entities = schemas.conform(pl.DataFrame({
        "id": [ids[v] for v in g.nodes], "human_readable_id": list(g.nodes),
        "title": [f"ENTITY {v}" for v in g.nodes], "type": ["PERSON"] * n_nodes,
        "description": [""] * n_nodes, "text_unit_ids": [[] for _ in g.nodes],
        "frequency": [1] * n_nodes, "degree": [g.degree(v) for v in g.nodes],
        "weighted_degree": [float(g.degree(v)) for v in g.nodes],
        "pagerank": [1.0 / n_nodes] * n_nodes, "aliases": [[] for _ in g.nodes],
    }), schemas.ENTITIES_SCHEMA)
    edges = list(g.edges)
    relationships = schemas.conform(pl.DataFrame({
        "id": [content_id(*sorted((ids[a], ids[b]))) for a, b in edges],
        "human_readable_id": list(range(len(edges))),
        "source": [f"ENTITY {a}" for a, _ in edges], "target": [f"ENTITY {b}" for _, b in edges],
        "description": ["related"] * len(edges), "weight": [1.0] * len(edges),
        "combined_degree": [0] * len(edges), "text_unit_ids": [[] for _ in edges],
        # alternate direction so traversal must treat edges as undirected
        "source_id": [ids[a] if i % 2 else ids[b] for i, (a, b) in enumerate(edges)],
        "target_id": [ids[b] if i % 2 else ids[a] for i, (a, b) in enumerate(edges)],
        "kind": ["extracted"] * len(edges),
    }), schemas.RELATIONSHIPS_SCHEMA)
    communities = schemas.empty(schemas.COMMUNITIES_SCHEMA)
    return g, ids, entities, relationships, communities


def _write_graph(tmp_path, entities, relationships, communities):
    nodes, edges = tables.build_graph_tables(entities, relationships, communities)
    storage.write_table(nodes, tmp_path, schemas.GRAPH_NODES)
    storage.write_table(edges, tmp_path, schemas.GRAPH_EDGES)
    return tmp_path


@pytest.mark.parametrize("use_key", [True, False], ids=["using_key", "plain_cte"])
def test_depth2_bfs_matches_networkx(tmp_path, use_key):
    if use_key and not multihop.supports_using_key():
        pytest.skip("installed duckdb lacks USING KEY")
    g, ids, entities, relationships, communities = _random_graph_tables()
    graph_dir = _write_graph(tmp_path, entities, relationships, communities)
    seeds = random.Random(11).sample(sorted(g.nodes), 5)

    expected: dict[str, int] = {}
    for s in seeds:
        for v, hops in nx.single_source_shortest_path_length(g, s, cutoff=2).items():
            expected[ids[v]] = min(hops, expected.get(ids[v], hops))

    got = multihop.bfs(graph_dir, [ids[s] for s in seeds], depth=2, use_key=use_key)
    assert got.columns == ["node_key", "entity_id", "title", "hops"]
    assert set(got["entity_id"]) == set(expected)
    assert dict(zip(got["entity_id"], got["hops"])) == expected
    assert got.height == len(expected)  # one row per node
    assert len(expected) > 20  # the test graph actually branches
    # seeded by node key (a seed given twice counts once): the same nodes and hops
    nodes = pl.read_parquet(graph_dir / "graph-nodes.parquet")
    key_of = dict(zip(nodes["entity_id"], nodes["node_key"]))
    for depth in (0, 1, 2, 3):
        by_id = multihop.bfs(graph_dir, [ids[s] for s in seeds], depth=depth, use_key=use_key)
        by_key = multihop.bfs_keys(graph_dir, [key_of[ids[s]] for s in seeds + seeds[:2]],
                                   depth=depth, use_key=use_key)
        assert by_key.columns == ["node_key", "hops"]
        assert by_key.equals(by_id.select("node_key", "hops"))


@pytest.mark.parametrize("use_key", [True, False], ids=["using_key", "plain_cte"])
def test_bfs_keys_from_a_first_hop_in_hand_gives_the_same_rows(tmp_path, use_key):
    if use_key and not multihop.supports_using_key():
        pytest.skip("installed duckdb lacks USING KEY")
    g, ids, entities, relationships, communities = _random_graph_tables(seed=3)
    graph_dir = _write_graph(tmp_path, entities, relationships, communities)
    nodes = pl.read_parquet(graph_dir / "graph-nodes.parquet")
    key_of = dict(zip(nodes["entity_id"], nodes["node_key"]))
    rng = random.Random(5)
    for trial in range(6):
        seeds = [key_of[ids[v]] for v in rng.sample(sorted(g.nodes), 1 + trial)]
        node_of_key = {k: v for v in g.nodes for k in [key_of[ids[v]]]}
        # N(s) of every seed, seeds that neighbour each other included (they are ignored)
        hop1 = sorted({key_of[ids[u]] for s in seeds for u in g.neighbors(node_of_key[s])})
        for depth in (1, 2, 3):
            plain = multihop.bfs_keys(graph_dir, seeds, depth, use_key=use_key)
            given = multihop.bfs_keys(graph_dir, seeds, depth, use_key=use_key,
                                      first_hop=hop1)
            assert given.equals(plain), (trial, depth)
        assert multihop.bfs_keys(graph_dir, seeds, 0, first_hop=hop1).equals(
            multihop.bfs_keys(graph_dir, seeds, 0))


def test_bfs_on_carol_graph(carol_tables, tmp_path):
    t = carol_tables
    graph_dir = _write_graph(tmp_path, t["entities"], t["relationships"], t["communities"])
    got = multihop.bfs(graph_dir, [eid("TINY TIM")], depth=2)
    assert dict(zip(got["title"], got["hops"])) == {
        "TINY TIM": 0, "BOB CRATCHIT": 1, "EBENEZER SCROOGE": 2}
    assert multihop.bfs(graph_dir, [eid("TINY TIM")], depth=0)["title"].to_list() == ["TINY TIM"]
    assert multihop.bfs(graph_dir, ["not-an-entity"], depth=3).is_empty()
    assert multihop.bfs(graph_dir, [], depth=3).is_empty()


def test_bfs_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        multihop.bfs(tmp_path, ["x"], depth=1)
    with pytest.raises(ValueError):
        multihop.bfs(tmp_path, ["x"], depth=-1)
    with pytest.raises(FileNotFoundError, match="graph-edges"):
        multihop.bfs_keys(tmp_path, [0], depth=1)
    with pytest.raises(ValueError, match="depth"):
        multihop.bfs_keys(tmp_path, [0], depth=-1)
