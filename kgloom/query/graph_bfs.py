"""Multi-hop traversal with DuckDB straight over graph-nodes.parquet / graph-edges.parquet.

The zero-ops multi-hop path: an embedded engine querying the files the pipeline already
wrote, read-only, per call (no graph server).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import duckdb
import polars as pl

from kgloom.core import schemas
from kgloom.core.storage import table_path

# DuckDB's USING KEY recursive CTEs ("WITH RECURSIVE t(...) USING KEY (k) AS ...", with
# ``recurring.t`` naming the whole result so far) arrived in 1.3.0.
USING_KEY_MIN_VERSION = (1, 3, 0)

_ADJ = """
    adj(a, b) AS (
        SELECT src_key, dst_key FROM read_parquet($edges)
        UNION ALL
        SELECT dst_key, src_key FROM read_parquet($edges)
    ),"""
_SEEDS_BY_ID = """
    seeds AS (
        SELECT node_key FROM read_parquet($nodes)
        WHERE list_contains($seeds, entity_id)
    ),
    start(node_key, hops) AS (SELECT node_key, 0 FROM seeds)"""
# a caller holding node keys (the Retriever) skips the scan of graph-nodes.parquet that
# maps ids to keys, and the one that maps keys back: about 50 ms per call on a
# 169k-node graph (measured beside bfs, same rows)
_SEEDS_BY_KEY = """
    seeds AS (SELECT DISTINCT unnest($keys)::BIGINT AS node_key),
    start(node_key, hops) AS (SELECT node_key, 0 FROM seeds)"""
# a caller that already holds the seeds' neighbours (the fused retrieve: its rerank read
# them) starts one hop in: the hop-1 nodes join the anchor and rounds expand only rows
# of hops >= $from_hop, so the seeds' edges are not read again
_START_AT_HOP1 = """
    seeds AS (SELECT DISTINCT unnest($keys)::BIGINT AS node_key),
    start(node_key, hops) AS (
        SELECT node_key, 0 FROM seeds
        UNION ALL
        SELECT DISTINCT h.node_key, 1
        FROM (SELECT unnest($hop1)::BIGINT AS node_key) AS h ANTI JOIN seeds USING (node_key)
    )"""
_EDGES = _ADJ + _SEEDS_BY_ID

# Level-synchronous BFS: the keyed result holds one row per reached node; each round
# expands only last round's rows and keeps nodes not reached before, so every node is
# settled at its minimum distance and the recursion stops when a round adds nothing.
# ``adj JOIN bfs`` with the join-order optimizers off (see FIXED_JOIN_ORDER) builds the
# hash table on the frontier and streams the edges past it; left to itself DuckDB builds
# it on the 2m adjacency rows every call, even at depth 0.
_USING_KEY_BFS = """
    bfs(node_key, hops) USING KEY (node_key) AS (
        SELECT node_key, hops FROM start
        UNION
        SELECT adj.b, min(bfs.hops + 1)
        FROM adj
        JOIN bfs ON adj.a = bfs.node_key
        LEFT JOIN recurring.bfs AS seen ON seen.node_key = adj.b
        WHERE bfs.hops < $depth AND bfs.hops >= $from_hop AND seen.node_key IS NULL
        GROUP BY adj.b
    )"""
_USING_KEY_SQL = f"WITH RECURSIVE {_EDGES},{_USING_KEY_BFS}"

# Portable fallback: enumerate (node, hops) pairs up to depth (UNION drops duplicate
# pairs, so it terminates) and take min(hops) per node afterwards.
_PLAIN_BFS = """
    walk(node_key, hops) AS (
        SELECT node_key, hops FROM start
        UNION
        SELECT adj.b, walk.hops + 1
        FROM walk JOIN adj ON adj.a = walk.node_key
        WHERE walk.hops < $depth AND walk.hops >= $from_hop
    ),
    bfs AS (SELECT node_key, min(hops) AS hops FROM walk GROUP BY node_key)"""
_PLAIN_SQL = f"WITH RECURSIVE {_EDGES},{_PLAIN_BFS}"

_RESULT_SCHEMA = {"node_key": pl.Int64, "entity_id": pl.String, "title": pl.String,
                  "hops": pl.Int64}

_SELECT = """
SELECT n.node_key, n.entity_id, n.title, bfs.hops::BIGINT AS hops
FROM bfs JOIN read_parquet($nodes) AS n USING (node_key)
ORDER BY hops, n.node_key"""
_SELECT_KEYS = """
SELECT node_key::BIGINT AS node_key, hops::BIGINT AS hops FROM bfs ORDER BY hops, node_key"""
_KEYS_SCHEMA = {"node_key": pl.Int64, "hops": pl.Int64}


# DuckDB optimizers switched off for the USING KEY query, so its joins run as written
# (build side = right side). Measured on a 169k-node / 1.17m-edge graph, 5 seeds, 2 cores
# under load: depth 0 / 1 / 2 in 38 / 88 / 184 ms instead of 218 / 405 / 524 ms; the
# same rows (tests/unit/test_multihop.py checks them against networkx).
FIXED_JOIN_ORDER = "join_order,build_side_probe_side"


def supports_using_key() -> bool:
    """True when the installed duckdb has ``USING KEY`` recursive CTEs (>= 1.3.0)."""
    parts = [int(p) for p in duckdb.__version__.split(".")[:3] if p.isdigit()]
    return tuple(parts) >= USING_KEY_MIN_VERSION


def bfs(graph_dir: str | Path, seed_entity_ids: list[str], depth: int,
        use_key: bool | None = None, threads: int | None = None) -> pl.DataFrame:
    """Breadth-first search from seed entities over the emitted graph, edges undirected.

    Reads ``<graph_dir>/graph-nodes.parquet`` and ``<graph_dir>/graph-edges.parquet``
    (as written by ``kgloom.publish.tables.build_graph_tables``) directly from the files with one
    DuckDB recursive CTE.

    With duckdb >= 1.3 (kgloom pins a newer one; 2.0.1 when written) the CTE is
    ``WITH RECURSIVE bfs(node_key, hops) USING KEY (node_key) AS (...)``: the result is
    a dictionary keyed by node_key, each round expands only the previous round's rows and
    skips nodes already in ``recurring.bfs``, so work is O(edges reached), not O(paths)
    (DuckDB docs, "WITH Clause" -> "Recursive CTEs with USING KEY"). On an older duckdb it
    falls back to a plain ``UNION`` recursive CTE over (node, hops) pairs followed by
    ``min(hops)`` per node: same answer, more work on dense graphs.

    Args:
        graph_dir: folder holding the two parquet files.
        seed_entity_ids: entity ids to start from; ids not in graph-nodes are ignored.
        depth: maximum hops (0 returns the seeds themselves).
        use_key: force the USING KEY form (True) or the fallback (False); None picks
            by the installed duckdb version.
        threads: DuckDB worker threads for the query (``SET threads``); None keeps
            DuckDB's default (one per core).

    Returns:
        One row per reached node, columns node_key (Int64), entity_id (String), title
        (String), hops (Int64, minimum number of edges from any seed), sorted by hops
        then node_key. Empty (same columns) when no seed is found.

    Raises:
        ValueError: when ``depth`` < 0.
        FileNotFoundError: when either parquet file is missing.
    """
    nodes, edges = _graph_files(graph_dir, depth, schemas.GRAPH_NODES, schemas.GRAPH_EDGES)
    if not seed_entity_ids:
        return schemas.empty(_RESULT_SCHEMA)
    if use_key is None:
        use_key = supports_using_key()
    sql = (_USING_KEY_SQL if use_key else _PLAIN_SQL) + _SELECT
    params = {"nodes": str(nodes), "edges": str(edges), "seeds": [str(s) for s in seed_entity_ids],
              "depth": int(depth), "from_hop": 0}
    found = _run(sql, params, use_key, threads)
    return schemas.conform(found, _RESULT_SCHEMA) if found.height else schemas.empty(
        _RESULT_SCHEMA)


def bfs_keys(graph_dir: str | Path, seed_keys: list[int], depth: int,
             use_key: bool | None = None, threads: int | None = None,
             first_hop: list[int] | None = None) -> pl.DataFrame:
    """:func:`bfs` for a caller that holds node keys (graph-nodes.parquet's
    ``node_key``, as the Retriever does): the same recursive CTE over
    graph-edges.parquet alone, seeded by key and returning keys, so graph-nodes.parquet
    is not scanned to map ids to keys and back.

    Args:
        graph_dir: folder holding graph-edges.parquet.
        seed_keys: node keys to start from (repeats count once); a key no edge names is
            returned at hop 0 with nothing reached from it.
        depth, use_key, threads: as for :func:`bfs`.
        first_hop: the seeds' neighbours when the caller already holds them (every node
            one edge from a seed; seeds among them are ignored): they are returned at
            hop 1 and the query reads the edges only from hop 1 on, one recursion round
            fewer (the fused retrieve, whose rerank read them). None: from the seeds.
            Wrong neighbours give a wrong answer; nothing here checks them.

    Returns:
        One row per reached node, columns node_key (Int64) and hops (Int64), sorted by
        hops then node_key; empty (same columns) when ``seed_keys`` is.

    Raises:
        ValueError: when ``depth`` < 0.
        FileNotFoundError: when graph-edges.parquet is missing.
    """
    (edges,) = _graph_files(graph_dir, depth, schemas.GRAPH_EDGES)
    if not seed_keys:
        return schemas.empty(_KEYS_SCHEMA)
    if use_key is None:
        use_key = supports_using_key()
    params = {"edges": str(edges), "keys": [int(k) for k in seed_keys], "depth": int(depth),
              "from_hop": 0}
    start = _SEEDS_BY_KEY
    if first_hop is not None and depth >= 1:
        start = _START_AT_HOP1
        params.update(hop1=[int(k) for k in first_hop], from_hop=1)
    sql = (f"WITH RECURSIVE {_ADJ}{start},"
           f"{_USING_KEY_BFS if use_key else _PLAIN_BFS}{_SELECT_KEYS}")
    found = _run(sql, params, use_key, threads)
    return schemas.conform(found, _KEYS_SCHEMA) if found.height else schemas.empty(
        _KEYS_SCHEMA)


def _graph_files(graph_dir: str | Path, depth: int, *tables: str) -> list[Path]:
    """The paths of ``tables`` under ``graph_dir``, after checking ``depth`` >= 0
    (ValueError) and that each file exists (FileNotFoundError naming it)."""
    if depth < 0:
        raise ValueError(f"depth must be >= 0, got {depth}")
    paths = [table_path(graph_dir, t) for t in tables]
    for path in paths:
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist: run the emit stage first")
    return paths


def _run(sql: str, params: dict, use_key: bool, threads: int | None) -> pl.DataFrame:
    """Run one BFS query on a fresh in-memory DuckDB connection (FIXED_JOIN_ORDER for
    the USING KEY form, ``threads`` when given)."""
    with duckdb.connect() as con:
        if use_key:
            # a DuckDB without these optimizer names: plan as it likes
            with contextlib.suppress(duckdb.Error):
                con.execute(f"SET disabled_optimizers = '{FIXED_JOIN_ORDER}'")
        if threads is not None:
            con.execute(f"SET threads = {int(threads)}")
        return con.sql(sql, params=params).pl()
