"""``run``: time the fused retrieve and the two-step baseline over the manifest.

Three kinds of run, each writing ``runs/<kind>.csv.gz`` (one row per call) and
``runs/<kind>.json`` (parameters, machine load before and after, wall time):

- ``main``: every manifest case, ``fused_by_vector`` and ``two_step_by_vector`` on each
  handle: ``memory`` (graph_backend="memory": the graph, its CSR adjacency and the
  entity vectors held by one long-lived Retriever, exact in-memory entity search) and
  ``files`` (graph_backend="duckdb": the entity ANN from the LanceDB table and the BFS
  as a DuckDB recursive CTE over graph-edges.parquet, per call; the fused BFS starts
  from the neighbourhoods its rerank read, one edge-file round fewer) and
  ``files_reread`` (the same, the fused BFS reading every hop). Warm-up calls are not
  recorded; with ``alternate`` half of each cell's queries run the baseline first
  (:func:`swapped`), so neither
  method profits from the other warming a cache.
- ``sweep``: the rerank's seeds only (depth 0) for oversample x lambda x top_k on the
  memory handle: seed overlap and ANN-similarity loss against the plain ANN top_k.
- ``threads``: the depth-2 cells with BFS parallelism 1 and 2 on both handles (threads
  order alternating by case), plus the in-memory BFS kernel alone at depth 2 and 3 with
  every level split across the threads.
"""

from __future__ import annotations

import csv
import gzip
import math
import os
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from bench.retrieval.manifest import Case, query_vectors, read_manifest, sha256_text

# handle name -> graph_backend; ``files_reread``: the files handle with the fused BFS
# reading every hop from the edge file (RetrievalSettings.fused_first_hop off), as the
# two-call baseline's traversal does, so the two methods differ only by the call
HANDLES = {"memory": "memory", "files": "duckdb", "files_reread": "duckdb"}
SWEEP_OVERSAMPLE = (2, 5, 10)
SWEEP_LAMBDA = (0.0, 0.5, 1.0, 2.0, 5.0, 10.0)
SWEEP_TOP_K = (3, 5, 10)


def machine_load() -> dict:
    """Cores, load averages (bench/stamp.py) and available memory (GiB, /proc/meminfo)."""
    from bench.stamp import load_average

    one, five, fifteen = load_average()
    avail = 0.0
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) / 2**20
    except OSError:
        pass
    return {"cores": os.cpu_count(), "load_1m": one, "load_5m": five,
            "load_15m": fifteen, "mem_available_gib": round(avail, 2)}


def entropy_bits(labels: np.ndarray) -> float:
    """Shannon entropy (bits) of the label distribution of ``labels``; 0.0 when empty."""
    if not len(labels):
        return 0.0
    counts = np.bincount(labels)
    p = counts[counts > 0] / len(labels)
    return float(-(p * np.log2(p)).sum())


@dataclass
class Study:
    """What every run needs: the index, the manifest's cases and query vectors, node
    labels by node key, and entity id -> node key."""

    index: Path
    cases: list[Case]
    queries: np.ndarray
    manifest_sha256: str
    node_of: dict[str, int]
    labels: dict[str, np.ndarray]

    @classmethod
    def open(cls, index: Path, manifest: Path) -> Study:
        """Read the manifest and the index's node table; derive the query vectors from
        the LanceDB entity vectors.

        Raises:
            FileNotFoundError: no index or manifest (run setup).
            ValueError: the manifest names nodes the index lacks.
        """
        import lancedb

        if not (index / "graph-import.json").exists():
            raise FileNotFoundError(f"no imported graph at {index}: run setup first")
        cases = read_manifest(manifest)
        nodes = pl.read_parquet(index / "graph-nodes.parquet")
        node_of = dict(zip(nodes["entity_id"].to_list(), nodes["node_key"].to_list()))
        missing = {c.seed_id for c in cases} - node_of.keys()
        if missing:
            raise ValueError(f"the manifest names {len(missing)} nodes the index lacks "
                             f"(e.g. {sorted(missing)[:3]}): rerun setup")
        import pyarrow.compute as pc

        table = lancedb.connect(str(index / "lancedb")).open_table("entities")
        arrow = table.to_arrow().select(["id", "vector"])
        rows = arrow.filter(pc.is_in(arrow["id"], value_set=pa.array(
            sorted({c.seed_id for c in cases}), type=arrow.schema.field("id").type)))
        vector_of = dict(zip(rows["id"].to_pylist(),
                             (np.asarray(v, dtype=np.float32) for v in rows["vector"].to_pylist())))
        labels = {c: nodes[c].to_numpy().astype(np.int64)
                  for c in ("label", "fine_label") if c in nodes.columns}
        return cls(index, cases, query_vectors(cases, vector_of),
                   sha256_text(Path(manifest).read_text(encoding="utf-8")), node_of, labels)

    def describe(self, entity_ids: list[str]) -> dict[str, Any]:
        """Unique labels and label entropy of a result's entities, per label column."""
        keys = np.fromiter((self.node_of[e] for e in entity_ids), dtype=np.int64,
                           count=len(entity_ids))
        out = {}
        for col, lab in self.labels.items():
            name = "coarse" if col == "label" else "fine"
            out[f"unique_{name}"] = len(np.unique(lab[keys]))
            out[f"{name}_entropy"] = round(entropy_bits(lab[keys]), 5)
        return out


def _open(study: Study, handle: str, bfs_threads: int | None = None,
          seed_diagnostics: bool = True):
    """A Retriever on the study's index; ``seed_diagnostics`` False for timed runs (the
    seed-overlap figures are then computed outside the timed call, :func:`_overlaps`)."""
    from kgloom.query.retriever import RetrievalSettings, Retriever

    r = Retriever(study.index, graph_backend=HANDLES[handle], bfs_threads=bfs_threads,
                  settings=RetrievalSettings(seed_diagnostics=seed_diagnostics,
                                             fused_first_hop=handle != "files_reread"))
    r.index.graph  # noqa: B018 - load the graph (and its entity vectors) now, not timed
    return r


def _call(r, method: str, qv: np.ndarray, top_k: int, depth: int, lam: float,
          oversample: int):
    """One call: (result, wall seconds, CPU seconds of this process over the call, all
    its threads: what the call cost when it had the cores, whatever else ran)."""
    cpu, t = time.process_time(), time.perf_counter()
    if method == "fused":
        res = r.fused_by_vector(qv, top_k=top_k, depth=depth, lam=lam, oversample=oversample)
    else:
        res = r.two_step_by_vector(qv, top_k=top_k, depth=depth)
    return res, time.perf_counter() - t, time.process_time() - cpu


def _row(study: Study, res, seconds: float, cpu: float, **fields: Any) -> dict[str, Any]:
    info = res.info
    ents = res.entities["entity_id"].to_list()
    return {**fields, "seconds": round(seconds, 7), "cpu_seconds": round(cpu, 7),
            "n_seeds": len(info.get("seeds", [])), "n_reached": len(ents),
            "seed_overlap": info.get("seed_overlap", 0.0), "ann_sum": info.get("ann_sum"),
            "baseline_ann_sum": info.get("baseline_ann_sum", info.get("ann_sum")),
            "baseline_seed_overlap": info.get("baseline_seed_overlap",
                                              info.get("seed_overlap", 0.0)),
            **study.describe(ents), "seeds": " ".join(info.get("seeds", []))}


def _overlaps(r, got: dict[str, tuple]) -> None:
    """Fill in the seed-overlap figures a timed call left out (seed_diagnostics off):
    each method's ``seed_overlap`` from its seeds, and fused's ``baseline_seed_overlap``
    from the two-step seeds of the same case (the plain ANN top_k)."""
    from kgloom.query.algorithms import mean_pairwise_jaccard

    g = r.index.graph
    for res, *_ in got.values():
        res.info["seed_overlap"] = mean_pairwise_jaccard(
            [g.node_of[e] for e in res.info.get("seeds", [])], g.adj)
    got["fused"][0].info["baseline_seed_overlap"] = got["two_step"][0].info["seed_overlap"]


def swapped(c: Case) -> bool:
    """Whether case ``c`` runs its pair in the second order (baseline first, or 2 threads
    first): every other query *within each cell*. (Case parity alone would not do: a
    query's 12 cells are consecutive cases, so each cell would always run one order, and
    the call that runs second finds the query's index pages warm.)"""
    return (c.query + c.case) % 2 == 1


def _progress(total: int, desc: str):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="call", mininterval=5.0)


def run_main(study: Study, handles: list[str], limit: int | None, warmup: int,
             alternate: bool, lam: float, oversample: int) -> list[dict[str, Any]]:
    """Every case (or the first ``limit`` queries' cases) x (fused, two_step) x handle."""
    cases = [c for c in study.cases if limit is None or c.query < limit]
    rows = []
    for handle in handles:
        r = _open(study, handle, seed_diagnostics=False)
        for c in study.cases[:warmup]:  # warm-up: not recorded
            for method in ("fused", "two_step"):
                _call(r, method, study.queries[c.query], c.top_k, c.depth, lam, oversample)
        bar = _progress(2 * len(cases), f"{handle} handle")
        for c in cases:
            order = (("two_step", "fused") if alternate and swapped(c)
                     else ("fused", "two_step"))
            got = {}
            for position, method in enumerate(order):
                res, sec, cpu = _call(r, method, study.queries[c.query], c.top_k, c.depth,
                                      lam, oversample)
                got[method] = (res, sec, cpu, position)
                bar.update()
            _overlaps(r, got)
            sets = {m: set(got[m][0].entities["entity_id"].to_list()) for m in got}
            union = len(sets["fused"] | sets["two_step"])
            paired = len(sets["fused"] & sets["two_step"]) / union if union else 1.0
            for method, (res, sec, cpu, position) in got.items():
                rows.append(_row(study, res, sec, cpu, handle=handle, method=method, case=c.case,
                                 query=c.query, seed_id=c.seed_id, top_k=c.top_k,
                                 depth=c.depth, lam=lam if method == "fused" else 0.0,
                                 oversample=oversample if method == "fused" else 1,
                                 order=position, paired_jaccard=round(paired, 6)))
        bar.close()
    return rows


def run_sweep(study: Study, limit: int | None) -> list[dict[str, Any]]:
    """Seeds only (depth 0) for every (oversample, lambda, top_k) on the memory handle."""
    r = _open(study, "memory")
    queries = range(len(study.queries) if limit is None else min(limit, len(study.queries)))
    grid = [(o, lam, k) for o in SWEEP_OVERSAMPLE for lam in SWEEP_LAMBDA for k in SWEEP_TOP_K]
    rows = []
    bar = _progress(len(grid) * len(queries), "sweep")
    for o, lam, k in grid:
        for q in queries:
            res, sec, cpu = _call(r, "fused", study.queries[q], k, 0, lam, o)
            info = res.info
            rows.append({"oversample": o, "lam": lam, "top_k": k, "query": q,
                         "seconds": round(sec, 7), "cpu_seconds": round(cpu, 7),
                         "seed_overlap": info["seed_overlap"],
                         "baseline_seed_overlap": info["baseline_seed_overlap"],
                         "ann_sum": info["ann_sum"], "baseline_ann_sum": info["baseline_ann_sum"]})
            bar.update()
    bar.close()
    return rows


def run_threads(study: Study, limit: int | None, warmup: int, lam: float,
                oversample: int) -> list[dict[str, Any]]:
    """Depth-2 cells with bfs_threads 1 and 2 on both handles (end to end), then the
    in-memory BFS kernel alone (depth 2 and 3, every level split across the threads)."""
    from kgloom.query import algorithms as alg

    cases = [c for c in study.cases if c.depth == 2 and (limit is None or c.query < limit)]
    rows = []
    for handle in HANDLES:
        handles = {t: _open(study, handle, bfs_threads=t, seed_diagnostics=False)
                   for t in (1, 2)}
        for c in cases[:warmup]:
            for r in handles.values():
                _call(r, "fused", study.queries[c.query], c.top_k, c.depth, lam, oversample)
        bar = _progress(4 * len(cases), f"threads, {handle} handle")
        for c in cases:
            for method in ("fused", "two_step"):
                for t in ((2, 1) if swapped(c) else (1, 2)):
                    res, sec, cpu = _call(handles[t], method, study.queries[c.query],
                                          c.top_k, c.depth, lam, oversample)
                    rows.append({"part": "end_to_end", "handle": handle, "method": method,
                                 "threads": t, "case": c.case, "top_k": c.top_k,
                                 "depth": c.depth, "seconds": round(sec, 7),
                                 "cpu_seconds": round(cpu, 7),
                                 "n_reached": res.entities.height})
                    bar.update()
        bar.close()
    # the kernel alone: seeds = the fused seeds of the top_k-10 cases, every level split
    r = _open(study, "memory")
    adj = r.index.graph.adj
    saved = alg.PARALLEL_MIN_FRONTIER
    alg.PARALLEL_MIN_FRONTIER = 1
    try:
        for c in [c for c in cases if c.top_k == 10]:
            seeds = [r.index.graph.node_of[s] for s in r.fused_by_vector(
                study.queries[c.query], top_k=10, depth=0, lam=lam,
                oversample=oversample).info["seeds"]]
            for depth in (2, 3):
                for t in ((2, 1) if swapped(c) else (1, 2)):
                    cpu, start = time.process_time(), time.perf_counter()
                    levels = alg.bfs_levels(adj, seeds, depth, threads=t)
                    sec = time.perf_counter() - start
                    rows.append({"part": "bfs_kernel", "handle": "memory", "method": "fused",
                                 "threads": t, "case": c.case, "top_k": 10, "depth": depth,
                                 "seconds": round(sec, 7),
                                 "cpu_seconds": round(time.process_time() - cpu, 7),
                                 "n_reached": int(sum(len(x) for x in levels))})
    finally:
        alg.PARALLEL_MIN_FRONTIER = saved
    return rows


def write_rows(rows: list[dict[str, Any]], path: Path) -> Path:
    """Write rows as gzip'd CSV (gzip mtime 0, so the same rows give the same bytes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        text = _csv_text(rows)
        gz.write(text.encode("utf-8"))
    os.replace(tmp, path)
    return path


def _csv_text(rows: list[dict[str, Any]]) -> str:
    import io

    buf = io.StringIO()
    if rows:
        w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        for row in rows:
            w.writerow({k: ("" if v is None or (isinstance(v, float) and math.isnan(v)) else v)
                        for k, v in row.items()})
    return buf.getvalue()


def label_counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Rows per (handle, method), for the run's JSON."""
    return dict(Counter(f"{r.get('handle', 'memory')}/{r.get('method', 'fused')}" for r in rows))
