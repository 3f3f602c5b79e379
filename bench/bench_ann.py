"""When does an IVF_PQ index pay? Flat scan vs IVF_PQ on LanceDB tables of growing size.

For each table size n, a deterministic set of unit vectors (384 dims, as all-MiniLM-L6-v2;
clustered around 50 random centres so that neighbours are meaningful) is written twice
with kgloom.publish.vectors.write_lancedb: once flat, once with the IVF_PQ index kgloom builds at
ANN_INDEX_MIN_ROWS. Queries are 100 perturbed rows; each table answers them through
kgloom.embedding.store.search_vectors (the retriever's path). Reported per size: p50 query
latency of each, their ratio (measured in the same run), recall@10 of IVF_PQ against the
exact flat answer, and the index build time.

Usage: python bench/bench_ann.py [--sizes 2000,10000,50000] [--save bench/results/ann.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.stamp import save_result
from kgloom.embedding.store import search_vectors, vector_index_type
from kgloom.publish.vectors import ANN_INDEX_MIN_ROWS, write_lancedb

ROOT = Path(__file__).resolve().parent.parent
DIM = 384


def clustered_vectors(n: int, seed: int = 0) -> np.ndarray:
    """n unit vectors (float32, DIM) around 50 random centres."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(50, DIM))
    vecs = centres[rng.integers(0, 50, n)] + 0.6 * rng.normal(size=(n, DIM))
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return vecs.astype(np.float32)


def measure(n: int, queries: int = 100, k: int = 10) -> dict:
    import lancedb

    vecs = clustered_vectors(n)
    df = pl.DataFrame({"id": [f"row-{i:07d}" for i in range(n)]})
    rng = np.random.default_rng(1)
    picks = rng.integers(0, n, queries)
    qs = vecs[picks] + 0.05 * rng.normal(size=(queries, DIM)).astype(np.float32)
    qs /= np.linalg.norm(qs, axis=1, keepdims=True)
    with tempfile.TemporaryDirectory() as tmp:
        write_lancedb(Path(tmp) / "flat", "t", df, vecs, ann_min_rows=n + 1)
        start = time.perf_counter()
        write_lancedb(Path(tmp) / "ivf", "t", df, vecs, ann_min_rows=1)
        build = time.perf_counter() - start
        flat = lancedb.connect(str(Path(tmp) / "flat")).open_table("t")
        ivf = lancedb.connect(str(Path(tmp) / "ivf")).open_table("t")
        kinds = {"flat": vector_index_type(flat), "ivf": vector_index_type(ivf)}
        times: dict[str, list[float]] = {"flat": [], "ivf": []}
        hits = []
        for q in qs[:3]:  # warm-up
            search_vectors(flat, q, k, kinds["flat"])
            search_vectors(ivf, q, k, kinds["ivf"])
        for q in qs:  # alternate, so neither profits from a warmer cache
            t = time.perf_counter()
            exact, _ = search_vectors(flat, q, k, kinds["flat"])
            times["flat"].append(time.perf_counter() - t)
            t = time.perf_counter()
            approx, _ = search_vectors(ivf, q, k, kinds["ivf"])
            times["ivf"].append(time.perf_counter() - t)
            hits.append(len(set(exact) & set(approx)) / k)
    p50 = {key: statistics.median(v) for key, v in times.items()}
    return {"rows": n, "flat_p50_ms": round(1000 * p50["flat"], 2),
            "ivf_pq_p50_ms": round(1000 * p50["ivf"], 2),
            "ivf_over_flat": round(p50["ivf"] / p50["flat"], 3),
            "ivf_pq_recall@10": round(float(np.mean(hits)), 3),
            "index_build_s": round(build, 1), "search_kinds": kinds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="2000,10000,50000")
    ap.add_argument("--save", type=Path, default=ROOT / "bench" / "results" / "ann.json")
    args = ap.parse_args()
    rows = []
    for n in [int(x) for x in args.sizes.split(",")]:
        rows.append(measure(n))
        print(json.dumps(rows[-1]), flush=True)
    out = {"dim": DIM, "threshold_rows": ANN_INDEX_MIN_ROWS, "sizes": rows}
    save_result(args.save, out, args)


if __name__ == "__main__":
    main()
