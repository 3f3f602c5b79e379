"""``setup``: write the study graph's tables, import them with ``kgloom import-graph``,
describe the graph (degree distribution, clustering) and write the manifest."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

from bench.retrieval import graphgen
from bench.retrieval.manifest import build_manifest, manifest_csv, sha256_text

ROOT = Path(__file__).resolve().parents[2]
LABEL_COLUMNS = ("label", "fine_label")  # node columns the study reads, when present


def write_generated_tables(folder: Path, seed: int = 0, n_nodes: int | None = None,
                           n_edges: int | None = None) -> tuple[Path, Path, dict]:
    """Generate the graph (:func:`graphgen.generate_graph`) and write ``nodes.parquet``
    (id ``p000000``..., vector float32[dim], label, fine_label) and ``edges.parquet``
    (source, target) into ``folder``; return both paths and the generation parameters."""
    start = time.perf_counter()
    g = graphgen.generate_graph(n_nodes or graphgen.OGBN_ARXIV_NODES,
                                n_edges or graphgen.OGBN_ARXIV_EDGES, seed=seed)
    ids = pl.Series("id", [f"p{i:06d}" for i in range(g.n_nodes)], dtype=pl.String)
    nodes = pl.DataFrame([ids, pl.Series("vector", g.vectors),
                          pl.Series("label", g.coarse), pl.Series("fine_label", g.fine)])
    edges = pl.DataFrame({"source": ids.gather(g.src), "target": ids.gather(g.dst)})
    folder.mkdir(parents=True, exist_ok=True)
    nodes.write_parquet(folder / "nodes.parquet")
    edges.write_parquet(folder / "edges.parquet")
    params = {"generator": "bench/retrieval/graphgen.py", "seed": seed,
              "nodes": g.n_nodes, "edges": g.n_edges, "dim": int(g.vectors.shape[1]),
              "coarse_labels": int(g.coarse.max()) + 1, "fine_labels": len(g.fine_parent),
              "local_k": graphgen.LOCAL_K, "latent_dim": graphgen.LATENT_DIM,
              "obs_noise": graphgen.OBS_NOISE, "fitness_shape": graphgen.FITNESS_SHAPE,
              "shares": {"local": graphgen.SHARE_LOCAL, "coarse": graphgen.SHARE_COARSE,
                         "long_range": round(1 - graphgen.SHARE_LOCAL - graphgen.SHARE_COARSE,
                                             3)},
              "seconds": round(time.perf_counter() - start, 1)}
    return folder / "nodes.parquet", folder / "edges.parquet", params


def import_with_cli(nodes: Path, edges: Path, index: Path) -> dict:
    """Run ``kgloom import-graph`` (the documented path for any graph) in a subprocess
    with this interpreter; return its JSON summary.

    Raises:
        RuntimeError: the command failed (its exit code; its output was shown).
    """
    cmd = [sys.executable, "-m", "kgloom.cli", "import-graph", "--nodes", str(nodes),
           "--edges", str(edges), "--output-dir", str(index)]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    if done.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}")
    return json.loads(done.stdout)


def describe_graph(index: Path) -> dict:
    """Figures of the imported graph: nodes, edges, degree distribution (mean,
    percentiles, max, isolated nodes, counts in powers-of-two bins), average local
    clustering coefficient (igraph ``transitivity_avglocal_undirected``, mode "zero":
    nodes of degree < 2 count 0), global transitivity (``transitivity_undirected``),
    connected components, and edge homophily (share of edges whose ends share a label,
    per label column present)."""
    import igraph as ig

    nodes = pl.read_parquet(index / "graph-nodes.parquet")
    edges = pl.read_parquet(index / "graph-edges.parquet", columns=["src_key", "dst_key"])
    src, dst = edges["src_key"].to_numpy(), edges["dst_key"].to_numpy()
    n = nodes.height
    g = ig.Graph(n=n, edges=np.column_stack([src, dst]), directed=False)
    deg = np.asarray(g.degree())
    bins = {}
    for d in deg[deg > 0]:
        b = 1 << int(np.floor(np.log2(d)))
        bins[b] = bins.get(b, 0) + 1
    comps = g.connected_components()
    out = {"nodes": n, "edges": len(src),
           "degree": {"mean": round(float(deg.mean()), 3),
                      "percentiles": {str(p): float(np.percentile(deg, p))
                                      for p in (1, 10, 25, 50, 75, 90, 99, 99.9)},
                      "max": int(deg.max()), "isolated": int((deg == 0).sum()),
                      "bins_pow2": {f"{b}-{2 * b - 1}": int(bins[b]) for b in sorted(bins)}},
           "avg_local_clustering": round(g.transitivity_avglocal_undirected(mode="zero"), 4),
           "global_transitivity": round(g.transitivity_undirected(), 4),
           "components": len(comps), "largest_component": max(comps.sizes())}
    for col in LABEL_COLUMNS:
        if col in nodes.columns:
            lab = nodes[col].to_numpy()
            out[f"edge_homophily_{col}"] = round(float((lab[src] == lab[dst]).mean()), 4)
            out[f"distinct_{col}"] = int(nodes[col].n_unique())
    return out


def degree_plot(stats: dict, path: Path) -> Path:
    """PNG of the degree distribution (powers-of-two bins, log count)."""
    from kgloom.core.plots import bar_chart_png

    png = bar_chart_png(stats["degree"]["bins_pow2"], "degree distribution (synthetic "
                        "ogbn-arxiv stand-in)", "degree", "nodes", log_y=True)
    path.write_bytes(png)
    return path


def write_manifest(index: Path, path: Path, n_queries: int, seed: int) -> dict:
    """Build the manifest over the index's node ids, write it to ``path``; return its
    description (cases, queries, seed, sha256)."""
    ids = pl.read_parquet(index / "graph-nodes.parquet", columns=["entity_id"])["entity_id"]
    text = manifest_csv(build_manifest(ids.to_list(), n_queries, seed))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return {"path": str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path),
            "cases": text.count("\n") - 1, "queries": n_queries, "seed": seed,
            "sha256": sha256_text(text)}
