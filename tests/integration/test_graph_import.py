"""kgloom.apps.graph_import: an outside graph (nodes with vectors, edges) imported as an index
the Retriever opens, queried by vector; and every bad input refused before anything is
written."""

from __future__ import annotations

import json

import networkx as nx
import numpy as np
import polars as pl
import pytest

from kgloom.apps.graph_import import (
    IMPORT_SUMMARY,
    GraphImportError,
    import_graph,
    read_graph_tables,
)
from kgloom.core import schemas, storage
from kgloom.embedding.store import ExternalVectorsError
from kgloom.query.retriever import Retriever


def _graph(n: int = 60, dim: int = 8, seed: int = 0) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A small random graph: nodes (id, vector, label), edges with a reciprocal pair, a
    repeated pair and a self-loop."""
    rng = np.random.default_rng(seed)
    g = nx.gnm_random_graph(n, 3 * n, seed=seed)
    vecs = rng.standard_normal((n, dim)).astype(np.float32)
    nodes = pl.DataFrame({"id": [f"v{i:03d}" for i in range(n)], "vector": vecs.tolist(),
                          "label": [i % 4 for i in range(n)]})
    src = [f"v{a:03d}" for a, _ in g.edges]
    dst = [f"v{b:03d}" for _, b in g.edges]
    a, b = src[0], dst[0]
    edges = pl.DataFrame({"source": src + [b, a, "v007"], "target": dst + [a, b, "v007"],
                          "weight": [1.0] * len(src) + [2.0, 0.5, 1.0]})
    return nodes, edges


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    nodes, edges = _graph()
    out = tmp_path_factory.mktemp("imported") / "index"
    summary = import_graph(nodes, edges, out, ann_min_rows=10_000)
    return nodes, edges, out, summary


def test_import_writes_an_index_the_retriever_opens(imported):
    nodes, edges, out, summary = imported
    assert summary["nodes"] == 60 and summary["dim"] == 8
    assert summary["self_loops_dropped"] == 1 and summary["repeated_pairs_merged"] == 2
    assert summary["relationships"] == edges.height - 3
    assert json.loads((out / IMPORT_SUMMARY).read_text())["relationships"] == \
        summary["relationships"]
    ents = storage.read_table(out, schemas.ENTITIES)
    assert ents.columns == list(schemas.ENTITIES_SCHEMA)
    assert sorted(ents["id"]) == sorted(nodes["id"])
    rels = storage.read_table(out, schemas.RELATIONSHIPS)
    # the pair given a -> b, b -> a, a -> b: one relationship, in the majority direction
    first = rels.filter((pl.col("source_id") == edges["source"][0])
                        & (pl.col("target_id") == edges["target"][0]))
    assert first["weight"].to_list() == [3.5]  # 1.0 + 2.0 + 0.5 over the three mentions
    # every other edge keeps the direction it was given in
    given = set(zip(edges["source"], edges["target"]))
    assert all(pair in given for pair in zip(rels["source_id"], rels["target_id"]))
    graph_nodes = storage.read_table(out, schemas.GRAPH_NODES)
    assert graph_nodes["node_key"].to_list() == list(range(60))
    labels = dict(zip(graph_nodes["entity_id"], graph_nodes["label"]))
    assert labels == dict(zip(nodes["id"], nodes["label"]))
    degree = dict(zip(ents["id"], ents["degree"]))
    g = nx.Graph([(a, b) for a, b in zip(edges["source"], edges["target"]) if a != b])
    assert all(degree[v] == g.degree(v) for v in g)

    r = Retriever(out, graph_backend="memory")
    assert r.embedder.dim == 8 and r.index.units.count == 0
    qv = np.asarray(nodes["vector"][11].to_list(), dtype=np.float32)
    res = r.fused_by_vector(qv, top_k=3, depth=2, lam=1.0)
    assert res.info["seeds"][0] == "v011"  # its own vector: the nearest entity
    assert res.text_units.height == 0 and res.question == ""
    # the BFS over the imported edges reaches what networkx reaches from the same seeds
    expect = {}
    for s in res.info["seeds"]:
        for v, d in nx.single_source_shortest_path_length(g, s, cutoff=2).items():
            expect[v] = min(d, expect.get(v, d))
    got = dict(zip(res.entities["entity_id"], res.entities["hop_depth"]))
    assert got == expect
    files = Retriever(out)  # duckdb over graph-edges.parquet, ANN from LanceDB
    other = files.fused_by_vector(qv, top_k=3, depth=2, lam=1.0)
    assert other.info["seeds"] == res.info["seeds"]
    assert other.entities.drop("score").equals(res.entities.drop("score"))
    assert np.allclose(other.entities["score"], res.entities["score"], atol=1e-6)
    with pytest.raises(ExternalVectorsError, match="query by vector"):
        files.retrieve("a question", "fused")


def test_reimport_replaces_and_csv_vectors_parse(imported, tmp_path):
    nodes, edges, _, _ = imported
    csv_nodes = tmp_path / "nodes.csv"
    nodes.head(20).with_columns(
        pl.col("vector").list.eval(pl.element().cast(pl.String)).list.join(" ")
    ).write_csv(csv_nodes)
    keep = set(nodes["id"].head(20))
    edge_path = tmp_path / "edges.parquet"
    edges.filter(pl.col("source").is_in(keep) & pl.col("target").is_in(keep)).write_parquet(
        edge_path)
    n, e = read_graph_tables(csv_nodes, edge_path)
    target = tmp_path / "again"
    import_graph(n, e, target)
    import_graph(n.head(10), e.filter(pl.col("source").is_in(n["id"].head(10).implode())
                                      & pl.col("target").is_in(n["id"].head(10).implode())),
                 target)
    assert storage.read_table(target, schemas.ENTITIES).height == 10
    vec = Retriever(target, graph_backend="memory").index.graph.entity_vectors
    want = np.asarray(nodes["vector"].head(10).to_list(), dtype=np.float32)
    assert np.allclose(vec, want / np.linalg.norm(want, axis=1, keepdims=True), atol=1e-6)


@pytest.mark.parametrize("change, match", [
    (lambda n, e: (n.drop("vector"), e), "lacks column"),
    (lambda n, e: (pl.concat([n, n.head(1)]), e), "repeat"),
    (lambda n, e: (n.with_columns(pl.when(pl.col("id") == "v003").then(
        pl.lit([0.0] * 8)).otherwise(pl.col("vector")).alias("vector")), e), "only zeros"),
    (lambda n, e: (n.with_columns(pl.when(pl.col("id") == "v004").then(
        pl.lit([1.0] * 3)).otherwise(pl.col("vector")).alias("vector")), e), "lengths"),
    (lambda n, e: (n, pl.concat([e, pl.DataFrame({"source": ["v001"], "target": ["zz"],
                                                  "weight": [1.0]})])), "missing from"),
    (lambda n, e: (n, e.with_columns(pl.lit(-1.0).alias("weight"))), "negative"),
    (lambda n, e: (n.with_columns(pl.lit(1).alias("node_key")), e), "clash"),
])
def test_bad_input_is_refused_and_nothing_is_written(tmp_path, change, match):
    nodes, edges = change(*_graph(20))
    out = tmp_path / "out"
    with pytest.raises(GraphImportError, match=match):
        import_graph(nodes, edges, out)
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_an_occupied_folder_is_not_overwritten_and_cli_reports_errors(tmp_path):
    from typer.testing import CliRunner

    from kgloom.cli import app

    nodes, edges = _graph(20)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    with pytest.raises(GraphImportError, match="not empty"):
        import_graph(nodes, edges, busy)
    assert [p.name for p in busy.iterdir()] == ["notes.txt"]
    nodes.write_parquet(tmp_path / "n.parquet")
    edges.write_parquet(tmp_path / "e.parquet")
    runner = CliRunner()
    ok = runner.invoke(app, ["import-graph", "--nodes", str(tmp_path / "n.parquet"),
                             "--edges", str(tmp_path / "e.parquet"),
                             "--output-dir", str(tmp_path / "idx")])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout[ok.stdout.index("{"):])["nodes"] == 20
    bad = runner.invoke(app, ["import-graph", "--nodes", str(tmp_path / "nope.parquet"),
                              "--edges", str(tmp_path / "e.parquet"),
                              "--output-dir", str(tmp_path / "idx2")])
    assert bad.exit_code == 2 and "does not exist" in bad.output


def test_imported_edges_keep_their_direction():
    from kgloom.apps.graph_import import _relationships

    entities = pl.DataFrame({"id": ["a", "b", "c"], "title": ["A", "B", "C"]})
    edges = pl.DataFrame({"source": ["c", "b", "a", "b"], "target": ["a", "a", "b", "c"],
                          "weight": [1.0, 1.0, 1.0, 1.0]})
    rels, counts = _relationships(edges, entities)
    got = {frozenset((r["source_id"], r["target_id"])): (r["source"], r["target"])
           for r in rels.iter_rows(named=True)}
    assert got[frozenset("ac")] == ("C", "A")  # given once, c -> a: not the sorted a -> c
    assert got[frozenset("ab")] == ("B", "A")  # b -> a then a -> b: a tie, the first wins
    assert got[frozenset("bc")] == ("B", "C")
    assert counts["repeated_pairs_merged"] == 1
