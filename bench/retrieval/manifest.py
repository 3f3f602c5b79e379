"""The study's query manifest: seed nodes x (top_k, depth) cells, fixed by one seed.

A manifest is a CSV (one row per case) plus the query vectors it implies: query q is
its seed node's own embedding plus Gaussian noise of norm ~``query_noise``, scaled to
unit length (the write-up this study reproduces queried by a node's embedding; the
noise keeps the seed from being a trivially exact hit). Everything is derived from
``seed`` and the graph, so a rerun gives byte-identical files and vectors.
"""

from __future__ import annotations

import csv
import hashlib
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

TOP_KS = (1, 3, 5, 10)
DEPTHS = (0, 1, 2)
N_QUERIES = 500
MANIFEST_SEED = 16
QUERY_NOISE = 0.2
COLUMNS = ["case", "query", "seed_id", "top_k", "depth"]


@dataclass(frozen=True)
class Case:
    """One manifest row: ``case`` (0..n-1), ``query`` (0..N_QUERIES-1), the seed node's
    id, top_k and depth."""

    case: int
    query: int
    seed_id: str
    top_k: int
    depth: int


def cells() -> list[tuple[int, int]]:
    """The 12 (top_k, depth) cells, top_k-major."""
    return [(k, d) for k in TOP_KS for d in DEPTHS]


def build_manifest(node_ids: list[str], n_queries: int = N_QUERIES,
                   seed: int = MANIFEST_SEED) -> list[Case]:
    """``n_queries`` distinct seed nodes drawn uniformly without replacement (numpy
    Generator ``seed``) from the sorted ``node_ids``, each crossed with every cell.

    Returns cases in query order, cells in :func:`cells` order within a query.

    Raises:
        ValueError: when there are fewer nodes than queries.
    """
    ids = sorted(node_ids)
    if len(ids) < n_queries:
        raise ValueError(f"{n_queries} queries need as many nodes, the graph has {len(ids)}")
    picks = np.random.default_rng(seed).choice(len(ids), size=n_queries, replace=False)
    out, case = [], 0
    for q, i in enumerate(picks.tolist()):
        for top_k, depth in cells():
            out.append(Case(case, q, ids[i], top_k, depth))
            case += 1
    return out


def manifest_csv(cases: list[Case]) -> str:
    """The manifest as CSV text (header COLUMNS, ``\\n`` line ends)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    w.writerows((c.case, c.query, c.seed_id, c.top_k, c.depth) for c in cases)
    return buf.getvalue()


def read_manifest(path: str | Path) -> list[Case]:
    """Cases from a CSV written by :func:`manifest_csv`.

    Raises:
        FileNotFoundError: no such file (run ``setup`` first).
        ValueError: the header is not COLUMNS.
    """
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    if not rows or rows[0] != COLUMNS:
        raise ValueError(f"{path} is not a study manifest (header {rows[:1]})")
    return [Case(int(a), int(b), c, int(d), int(e)) for a, b, c, d, e in rows[1:]]


def query_vectors(cases: list[Case], vector_of: dict[str, np.ndarray],
                  noise: float = QUERY_NOISE, seed: int = MANIFEST_SEED) -> np.ndarray:
    """float32 (queries, dim): query q = unit(v_seed + noise x z / sqrt(dim)), z standard
    normal from Generator(seed + 1), drawn for queries in order."""
    seeds = {}
    for c in cases:
        seeds.setdefault(c.query, c.seed_id)
    base = np.stack([np.asarray(vector_of[seeds[q]], dtype=np.float64) for q in sorted(seeds)])
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    z = np.random.default_rng(seed + 1).standard_normal(base.shape)
    q = base + noise * z / np.sqrt(base.shape[1])
    return (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)


def sha256_text(text: str) -> str:
    """Hex SHA-256 of UTF-8 text (the manifest's fingerprint in the results)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
