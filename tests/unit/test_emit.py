"""kgloom.publish.tables on a small Christmas Carol graph."""

from __future__ import annotations

import csv

import networkx as nx
import numpy as np
import polars as pl
import pytest
from conftest import carol_entity_id as eid
from conftest import carol_unit_id as uid

from kgloom.core import schemas, storage
from kgloom.publish import tables


def _by_unit(text_units: pl.DataFrame) -> dict[str, dict]:
    return {row["id"]: row for row in text_units.iter_rows(named=True)}


def test_graph_tables_keys_levels_and_edges(carol_tables):
    t = carol_tables
    nodes, edges = tables.build_graph_tables(t["entities"], t["relationships"], t["communities"])

    assert list(nodes.columns) == [*schemas.GRAPH_NODES_SCHEMA, "community_level_0",
                                   "community_level_1"]
    assert nodes["node_key"].to_list() == list(range(t["entities"].height))
    assert nodes["entity_id"].to_list() == sorted(t["entities"]["id"].to_list())
    levels = dict(zip(nodes["entity_id"], zip(nodes["community_level_0"],
                                               nodes["community_level_1"])))
    assert levels[eid("TINY TIM")] == (1, 4)
    assert levels[eid("FEZZIWIG")] == (0, 3)

    assert edges.schema == pl.Schema(schemas.GRAPH_EDGES_SCHEMA)
    assert edges.height == t["relationships"].height
    key = dict(zip(nodes["entity_id"], nodes["node_key"]))
    # each edge runs from its relationship's source to its target (direction kept)
    direction = {r["id"]: (key[r["source_id"]], key[r["target_id"]])
                 for r in t["relationships"].iter_rows(named=True)}
    assert {r["relationship_id"]: (r["src_key"], r["dst_key"])
            for r in edges.iter_rows(named=True)} == direction
    tim = edges.filter(pl.col("relation").str.starts_with("Tiny Tim")).row(0, named=True)
    assert {tim["src_key"], tim["dst_key"]} == {key[eid("BOB CRATCHIT")], key[eid("TINY TIM")]}
    assert tables.edges_endpoints_exist(nodes, edges)[0]


def test_graph_tables_round_trip_parquet(carol_tables, tmp_path):
    t = carol_tables
    nodes, edges = tables.build_graph_tables(t["entities"], t["relationships"], t["communities"])
    storage.write_table(nodes, tmp_path, schemas.GRAPH_NODES)
    storage.write_table(edges, tmp_path, schemas.GRAPH_EDGES)
    assert storage.read_table(tmp_path, schemas.GRAPH_NODES).equals(nodes)
    assert storage.read_table(tmp_path, schemas.GRAPH_EDGES).equals(edges)


def test_dangling_relationship_raises(carol_tables):
    t = carol_tables
    rels = t["relationships"].with_columns(
        pl.when(pl.col("target") == "TINY TIM").then(pl.lit("no-such-entity"))
        .otherwise(pl.col("target_id")).alias("target_id"))
    with pytest.raises(ValueError, match="unknown entity ids"):
        tables.build_graph_tables(t["entities"], rels, t["communities"])


def test_edges_endpoints_check_reports_dangling(carol_tables):
    t = carol_tables
    nodes, edges = tables.build_graph_tables(t["entities"], t["relationships"], t["communities"])
    passed, meta = tables.edges_endpoints_exist(nodes.filter(pl.col("node_key") != 0), edges)
    assert not passed and meta["dangling_edges"] > 0


def test_denormalized_kg_columns(carol_tables):
    t = carol_tables
    tu = tables.denormalize_text_units(t["text_units"], t["entities"], t["relationships"],
                                       t["communities"])
    assert tu.schema == pl.Schema(schemas.TEXT_UNITS_SCHEMA)
    assert tu["id"].to_list() == t["text_units"]["id"].to_list()
    units = _by_unit(tu)

    u3 = units[uid("u3")]
    assert u3["kg_node_ids"] == sorted(eid(x) for x in ("EBENEZER SCROOGE", "BOB CRATCHIT",
                                                         "TINY TIM"))
    assert u3["entity_ids"] == u3["kg_node_ids"]
    assert u3["neighbor_entity_ids"] == sorted(eid(x) for x in (
        "JACOB MARLEY", "FRED", "GHOST OF CHRISTMAS PAST", "FEZZIWIG"))
    assert not set(u3["neighbor_entity_ids"]) & set(u3["kg_node_ids"])
    assert len(u3["relationship_ids"]) == 1
    assert u3["centrality"] == pytest.approx(0.30)

    u2 = units[uid("u2")]
    assert ("EBENEZER SCROOGE | Fred is Scrooge's nephew / he invites him to dinner | FRED"
            in u2["neighbor_triples"])
    assert ("EBENEZER SCROOGE | Marley was Scrooge's late business partner. | JACOB MARLEY"
            in u2["neighbor_triples"])  # first line of the description only
    assert u2["neighbor_triples"] == sorted(u2["neighbor_triples"])
    assert all(t.count(" | ") == 2 for row in tu["neighbor_triples"] for t in row)

    empty = units[uid("u5")]
    assert empty["kg_node_ids"] == [] and empty["neighbor_triples"] == []
    assert empty["centrality"] == 0.0

    assert tables.kg_node_ids_exist(tu, t["entities"])[0]


def test_community_ids_per_level(carol_tables):
    t = carol_tables
    tu = tables.denormalize_text_units(t["text_units"], t["entities"], t["relationships"],
                                       t["communities"])
    got = {row["id"]: row["community_ids"] for row in tu.iter_rows(named=True)}
    assert got[uid("u1")] == [0, 2]  # Scrooge + Marley
    assert got[uid("u2")] == [0, 2]  # Scrooge, Fred (0/2) outvote Bob (1/4)
    assert got[uid("u3")] == [1, 4]  # Bob, Tim outvote Scrooge
    assert got[uid("u4")] == [0, 3]
    assert got[uid("u5")] == [-1, -1]  # no entities
    assert got[uid("u6")] == [0, 2]  # Marley vs Tim: a tie, the smaller number wins


def test_neighbor_triples_cap(carol_tables, monkeypatch):
    t = carol_tables
    monkeypatch.setattr(tables, "NEIGHBOR_TRIPLES_CAP", 2)
    tu = tables.denormalize_text_units(t["text_units"], t["entities"], t["relationships"],
                                       t["communities"])
    u4 = _by_unit(tu)[uid("u4")]["neighbor_triples"]
    # the three edges among u4's own entities rank first; the two heaviest of them stay
    assert u4 == ["EBENEZER SCROOGE | Scrooge was apprenticed to Fezziwig | FEZZIWIG",
                  "GHOST OF CHRISTMAS PAST | The Ghost shows Fezziwig's Christmas ball | FEZZIWIG"]


def test_kg_node_ids_check_catches_unknown(carol_tables):
    t = carol_tables
    tu = tables.denormalize_text_units(t["text_units"], t["entities"], t["relationships"],
                                       t["communities"])
    passed, meta = tables.kg_node_ids_exist(tu, t["entities"].filter(pl.col("title") != "FRED"))
    assert not passed and meta["examples"] == [eid("FRED")]


def test_graphml_round_trip(carol_tables, tmp_path):
    t = carol_tables
    path = tables.write_graphml(t["entities"], t["relationships"], tmp_path / "graph.graphml")
    g = nx.read_graphml(path)
    assert g.number_of_nodes() == t["entities"].height
    assert g.number_of_edges() == t["relationships"].height
    assert g.nodes[eid("TINY TIM")]["title"] == "TINY TIM"
    assert not list(tmp_path.glob(".*.tmp"))


def test_neo4j_import_csv(carol_tables, tmp_path):
    t = carol_tables
    nodes_csv, rels_csv = tables.write_neo4j_import(t["entities"], t["relationships"], tmp_path)
    assert nodes_csv.read_text().splitlines()[0] == (
        "entityId:ID(Entity),title,type,description,degree:long,pagerank:double,:LABEL")
    assert rels_csv.read_text().splitlines()[0] == (
        ":START_ID(Entity),:END_ID(Entity),:TYPE,relationshipId,description,weight:double")
    with nodes_csv.open(newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == tables.NEO4J_NODES_HEADER
    assert len(rows) == t["entities"].height + 1 and rows[1][-1] == "Entity;PERSON"
    with rels_csv.open(newline="") as fh:
        rels = list(csv.DictReader(fh))
    assert len(rels) == t["relationships"].height
    clerk = next(r for r in rels if "clerk" in r["description"])
    assert clerk["description"] == "Bob Cratchit is Scrooge's underpaid \"clerk\""  # quotes survive
    assert '""clerk""' in rels_csv.read_text()  # doubled, as neo4j-admin expects
    marley = next(r for r in rels if "Marley" in r["description"])
    assert "\n" in marley["description"]  # multiline field kept (import with --multiline-fields)


def test_graph_edges_graphml_and_neo4j_keep_each_relationships_direction(carol_tables,
                                                                         tmp_path):
    # every relationship turned around, so each way (smaller id first or not) is tested
    t = carol_tables
    rels = t["relationships"].with_columns(
        source=pl.col("target"), target=pl.col("source"),
        source_id=pl.col("target_id"), target_id=pl.col("source_id"))
    want = {(r["source_id"], r["target_id"]) for r in rels.iter_rows(named=True)}
    for frame in (t["relationships"], rels):
        direction = {(r["source_id"], r["target_id"]) for r in frame.iter_rows(named=True)}
        nodes, edges = tables.build_graph_tables(t["entities"], frame, t["communities"])
        ids = nodes["entity_id"].to_list()
        assert {(ids[a], ids[b]) for a, b in edges.select("src_key", "dst_key").iter_rows()} \
            == direction
        g = nx.read_graphml(tables.write_graphml(t["entities"], frame, tmp_path / "g.graphml"))
        assert g.is_directed() and set(g.edges()) == direction
        _, rels_csv = tables.write_neo4j_import(t["entities"], frame, tmp_path)
        with rels_csv.open(newline="") as fh:
            assert {(r[":START_ID(Entity)"], r[":END_ID(Entity)"])
                    for r in csv.DictReader(fh)} == direction
    assert want != {(r["source_id"], r["target_id"])
                    for r in t["relationships"].iter_rows(named=True)}


def test_vectors_valid_and_row_counts():
    good = np.eye(3, 4, dtype=np.float32)
    assert tables.vectors_valid(good, 4, expected_rows=3)[0]
    assert not tables.vectors_valid(good, 5)[0]
    assert not tables.vectors_valid(good, 4, expected_rows=2)[0]
    nan = good.copy()
    nan[1, 2] = np.nan
    assert tables.vectors_valid(nan, 4)[1]["nan_rows"] == 1
    zero = good.copy()
    zero[2] = 0
    passed, meta = tables.vectors_valid(zero, 4)
    assert not passed and meta["zero_rows"] == 1

    assert tables.row_counts_match({"nodes": 7}, {"nodes": 7})[0]
    passed, meta = tables.row_counts_match({"nodes": 7, "edges": 7}, {"nodes": 7})
    assert not passed and meta["edges"]["actual"] is None


def _random_hub_graph(seed: int = 5):
    """(units: {unit: [entity titles]}, text units, entities, relationships, communities)
    of a random graph where E0-E3 are hubs mentioned in many units (ids = titles)."""
    import random

    rng = random.Random(seed)
    titles = [f"E{i}" for i in range(30)]
    units = {f"u{i}": rng.sample(titles[:4], 1) + rng.sample(titles, rng.randint(0, 4))
             for i in range(40)}
    pairs = {tuple(sorted(rng.sample(titles[:4], 1) + rng.sample(titles, 1))) for _ in range(90)}
    pairs = sorted(p for p in pairs if p[0] != p[1])
    rels = pl.DataFrame({
        "id": [f"r{i}" for i in range(len(pairs))], "human_readable_id": range(len(pairs)),
        "source": [a for a, _ in pairs], "target": [b for _, b in pairs],
        "description": [f"rel {i % 7}" for i in range(len(pairs))],
        "weight": [float(rng.randint(1, 4)) for _ in pairs], "combined_degree": [0] * len(pairs),
        "text_unit_ids": [[] for _ in pairs], "source_id": [a for a, _ in pairs],
        "target_id": [b for _, b in pairs], "kind": ["extracted"] * len(pairs)},
        schema=schemas.RELATIONSHIPS_SCHEMA)
    ents = pl.DataFrame({
        "id": titles, "human_readable_id": range(len(titles)), "title": titles,
        "type": ["PERSON"] * len(titles), "description": [""] * len(titles),
        "text_unit_ids": [[u for u, es in units.items() if t in es] for t in titles],
        "frequency": [1] * len(titles), "degree": [0] * len(titles),
        "weighted_degree": [0.0] * len(titles), "pagerank": [0.0] * len(titles),
        "aliases": [[] for _ in titles]}, schema=schemas.ENTITIES_SCHEMA)
    tu = pl.DataFrame([
        {"id": u, "human_readable_id": i, "text": u, "n_tokens": 1, "document_id": "d",
         "entity_ids": [], "relationship_ids": [], "covariate_ids": [], "chunk_index": i,
         "start_char": 0, "end_char": 1, "kg_node_ids": [], "neighbor_entity_ids": [],
         "neighbor_triples": [], "community_ids": [], "centrality": 0.0}
        for i, u in enumerate(units)], schema=schemas.TEXT_UNITS_SCHEMA)
    return units, tu, ents, rels, pl.DataFrame(schema=schemas.COMMUNITIES_SCHEMA)


def test_neighbor_triples_of_hub_entities_match_the_definition(monkeypatch):
    """The cap is applied per entity before units are joined (memory), and units are
    ranked a chunk at a time; a brute-force reading of the definition on a random graph
    with hubs gives the same triples."""
    monkeypatch.setattr(tables, "NEIGHBOR_TRIPLES_CAP", 3)
    monkeypatch.setattr(tables, "CHUNK_ROWS", 7)  # chunks end inside the 40 units
    units, tu, ents, rels, comms = _random_hub_graph()
    got = {r["id"]: r["neighbor_triples"] for r in tables.denormalize_text_units(
        tu, ents, rels, comms).iter_rows(named=True)}
    for u, members in units.items():
        mine = set(members)
        touching = [r for r in rels.iter_rows(named=True)
                    if r["source_id"] in mine or r["target_id"] in mine]
        ranked = sorted(touching, key=lambda r: (
            not (r["source_id"] in mine and r["target_id"] in mine), -r["weight"],
            f"{r['source']} | {r['description']} | {r['target']}"))
        triples = list(dict.fromkeys(f"{r['source']} | {r['description']} | {r['target']}"
                                     for r in ranked))
        assert got[u] == sorted(triples[:3]), u


def test_neighbor_entity_ids_keep_the_most_linked_neighbours_over_the_cap(monkeypatch):
    """Under the cap every 1-hop neighbour is listed; over it, the neighbours with the most
    summed relationship weight to the unit's entities (ties: by id), emitted sorted; the
    same whatever the chunk size and whichever entities are summed as hubs, with two
    relationships on one pair (both directions), and with a negative weight (no hubs)."""
    units, tu, ents, rels, comms = _random_hub_graph()
    first = rels.row(0, named=True)
    reverse = {**first, "id": "r-back", "source": first["target"], "target": first["source"],
               "source_id": first["target_id"], "target_id": first["source_id"], "weight": 3.0}
    with_reverse = pl.concat([rels, pl.DataFrame([reverse], schema=rels.schema)])
    negative = rels.with_columns(weight=pl.when(pl.col("id") == "r1").then(-2.0)
                                 .otherwise(pl.col("weight")))

    def expected(rels: pl.DataFrame, cap: int) -> dict[str, list[str]]:
        out = {}
        for u, members in units.items():
            mine, weight = set(members), {}
            for r in rels.iter_rows(named=True):
                for a, b in ((r["source_id"], r["target_id"]), (r["target_id"], r["source_id"])):
                    if a in mine and b not in mine:
                        weight[b] = weight.get(b, 0.0) + r["weight"]
            out[u] = sorted(sorted(weight, key=lambda e: (-weight[e], e))[:cap])
        return out

    assert max(len(v) for v in expected(rels, 10**6).values()) > 6  # the cap below really cuts
    for graph in (rels, with_reverse, negative):
        for cap, chunk, hub_min in ((10**6, 10**6, 256), (6, 10**6, 256), (6, 5, 256),
                                    (6, 10**6, 0), (6, 40, 3), (10**6, 10**6, 0), (2, 9, 5)):
            monkeypatch.setattr(tables, "NEIGHBOR_ENTITIES_CAP", cap)
            monkeypatch.setattr(tables, "CHUNK_ROWS", chunk)
            monkeypatch.setattr(tables, "HUB_MIN_NEIGHBOURS", hub_min)
            got = {r["id"]: r["neighbor_entity_ids"] for r in tables.denormalize_text_units(
                tu, ents, graph, comms).iter_rows(named=True)}
            assert got == expected(graph, cap), (cap, chunk, hub_min)
