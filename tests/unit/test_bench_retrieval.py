"""bench/retrieval: the synthetic graph's invariants, the manifest's determinism, and one
small study end to end (setup through results) on a graph of a few thousand nodes."""

from __future__ import annotations

import gzip
import json

import igraph as ig
import numpy as np
import polars as pl
import pytest

from bench.retrieval import graphgen
from bench.retrieval.manifest import build_manifest, cells, manifest_csv, read_manifest


@pytest.fixture(scope="module")
def small():
    return graphgen.generate_graph(n_nodes=3000, n_edges=18_000, dim=32, n_coarse=5, seed=3)


def test_generated_graph_has_the_asked_shape(small):
    g = small
    assert g.vectors.shape == (3000, 32) and g.vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(g.vectors, axis=1), 1.0, atol=1e-5)
    assert g.n_edges == 18_000  # exact: the surplus draws are dropped
    assert (g.src < g.dst).all() and g.dst.max() < 3000
    pairs = g.src * 3000 + g.dst
    assert len(np.unique(pairs)) == g.n_edges and (np.diff(pairs) > 0).all()
    # a two-level hierarchy: every fine label lies inside one coarse label
    assert set(np.unique(g.coarse)) == set(range(5))
    lo, hi = graphgen.FINE_PER_COARSE
    per_coarse = np.bincount(g.fine_parent, minlength=5)
    assert ((per_coarse >= lo) & (per_coarse <= hi)).all()
    assert (g.fine_parent[g.fine] == g.coarse).all()
    # edges mostly within a fine label, a few between coarse labels
    same_fine = (g.fine[g.src] == g.fine[g.dst]).mean()
    same_coarse = (g.coarse[g.src] == g.coarse[g.dst]).mean()
    assert same_fine > 0.6 and 0.8 < same_coarse < 1.0
    # the ends of an edge are nearer in embedding space than random pairs
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 3000, (2, 5000))
    edge_cos = (g.vectors[g.src] * g.vectors[g.dst]).sum(1).mean()
    assert edge_cos > (g.vectors[a] * g.vectors[b]).sum(1).mean() + 0.1
    # clustering well above a uniform random graph of the same size (Erdos-Renyi)
    graph = ig.Graph(n=3000, edges=np.column_stack([g.src, g.dst]))
    random = ig.Graph.Erdos_Renyi(n=3000, m=18_000)
    assert graph.transitivity_avglocal_undirected(mode="zero") > \
        5 * random.transitivity_avglocal_undirected(mode="zero")


def test_generator_is_deterministic_by_seed(small):
    again = graphgen.generate_graph(n_nodes=3000, n_edges=18_000, dim=32, n_coarse=5, seed=3)
    for name in ("vectors", "coarse", "fine", "fine_parent", "src", "dst"):
        assert np.array_equal(getattr(small, name), getattr(again, name)), name
    other = graphgen.generate_graph(n_nodes=3000, n_edges=18_000, dim=32, n_coarse=5, seed=4)
    assert not np.array_equal(small.src, other.src)
    with pytest.raises(ValueError, match="cannot fill"):
        graphgen.generate_graph(n_nodes=100, n_edges=10, n_coarse=5)


def test_manifest_is_byte_identical_on_rerun_and_covers_every_cell(tmp_path):
    ids = [f"p{i:06d}" for i in range(2000)]
    first = manifest_csv(build_manifest(ids, 50, seed=16))
    again = manifest_csv(build_manifest(list(reversed(ids)), 50, seed=16))
    assert first == again  # byte-identical, whatever order the ids come in
    assert manifest_csv(build_manifest(ids, 50, seed=17)) != first
    path = tmp_path / "m.csv"
    path.write_text(first)
    cases = read_manifest(path)
    assert len(cases) == 50 * 12 and [c.case for c in cases] == list(range(600))
    assert len({c.seed_id for c in cases}) == 50
    for q in range(50):
        assert [(c.top_k, c.depth) for c in cases if c.query == q] == cells()
    with pytest.raises(ValueError, match="queries need"):
        build_manifest(ids[:10], 50)


@pytest.mark.integration
def test_small_study_end_to_end(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from bench.retrieval import cli, runner

    monkeypatch.setattr(runner, "SWEEP_OVERSAMPLE", (2,))
    monkeypatch.setattr(runner, "SWEEP_LAMBDA", (0.0, 10.0))
    work, results = tmp_path / "work", tmp_path / "results"
    app = CliRunner()
    common = ["--work", str(work), "--results", str(results)]
    out = app.invoke(cli.app, ["setup", *common, "--n-nodes", "2400", "--n-edges", "5000",
                               "--queries", "4"])
    assert out.exit_code == 0, out.output
    graph = json.loads((results / "graph.json").read_text())
    assert graph["stats"]["nodes"] == 2400 and graph["stats"]["edges"] == 5000
    assert graph["manifest"]["cases"] == 48
    for kind in ("main", "sweep"):
        out = app.invoke(cli.app, ["run", *common, "--kind", kind, "--warmup", "1"])
        assert out.exit_code == 0, out.output
    with gzip.open(results / "runs" / "main.csv.gz") as f:
        rows = pl.read_csv(f)
    assert rows.height == 48 * 2 * 3  # cases x methods x handles
    # alternation within each cell: both orders, half the queries each
    first = rows.filter(pl.col("method") == "fused").group_by("handle", "top_k", "depth").agg(
        (pl.col("order") == 0).mean().alias("fused_first"))
    assert (first["fused_first"] == 0.5).all()
    two = rows.filter(pl.col("method") == "two_step")
    assert (two["seed_overlap"] == two["baseline_seed_overlap"]).all()
    # depth 0 returns the seeds only; both handles choose the same seeds
    d0 = rows.filter(pl.col("depth") == 0)
    assert (d0["n_reached"] == d0["n_seeds"]).all()
    by_handle = rows.pivot(on="handle", index=["method", "case"], values="seeds")
    assert (by_handle["memory"] == by_handle["files"]).all()
    assert (by_handle["files"] == by_handle["files_reread"]).all()
    # the fused BFS from the rerank's neighbourhoods reaches what reading every hop does
    reached = rows.pivot(on="handle", index=["method", "case"], values="n_reached")
    assert (reached["files"] == reached["files_reread"]).all()
    assert (reached["files"] == reached["memory"]).all()
    out = app.invoke(cli.app, ["results", "--results", str(results)])
    assert out.exit_code == 0, out.output
    res = json.loads((results / "results.json").read_text())
    assert len(res["cells"]) == 36
    assert set(res["targets"]) >= {"fused_p50_le_baseline_files",
                                   "fused_p50_le_baseline_files_reread"}
    sweep = {(s["lam"], s["top_k"]): s for s in res["sweep"]}
    assert sweep[(0.0, "3")]["seed_overlap"] == pytest.approx(
        sweep[(0.0, "3")]["baseline_seed_overlap"], abs=1e-6)
    assert sweep[(10.0, "3")]["seed_overlap"] <= sweep[(0.0, "3")]["seed_overlap"]
    assert sweep[(0.0, "3")]["loss_of_sum"] == 0.0
    for png in ("latency_by_cell", "overlap_scatter", "lambda_frontier"):
        assert (results / f"{png}.png").read_bytes()[:4] == b"\x89PNG"
