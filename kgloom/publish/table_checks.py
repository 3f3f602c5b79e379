"""Pure checks for the publish asset checks, each returning ``(passed, metadata)``:
edge endpoints, text units' kg node ids, vectors, row counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa


def edges_endpoints_exist(nodes: pl.DataFrame, edges: pl.DataFrame) -> tuple[bool, dict]:
    """Every edge's src_key and dst_key is a node_key of ``nodes``.

    Returns ``(passed, {"edges": int, "dangling_edges": int, "examples": [...]})``.
    """
    keys = nodes["node_key"].implode()
    bad = edges.filter(~pl.col("src_key").is_in(keys) | ~pl.col("dst_key").is_in(keys))
    return bad.height == 0, {"edges": edges.height, "dangling_edges": bad.height,
                             "examples": bad["relationship_id"].head(5).to_list()}


def kg_node_ids_exist(text_units: pl.DataFrame, entities: pl.DataFrame) -> tuple[bool, dict]:
    """Every id in text_units.kg_node_ids (and neighbor_entity_ids) is an entity id.

    Returns ``(passed, {"references": int, "unknown": int, "examples": [...]})``.
    """
    refs = (pl.concat([text_units.select(pl.col("kg_node_ids").alias("eid")),
                       text_units.select(pl.col("neighbor_entity_ids").alias("eid"))])
            .explode("eid").drop_nulls())
    unknown = refs.join(entities.select(pl.col("id").alias("eid")), on="eid", how="anti")
    return unknown.height == 0, {"references": refs.height, "unknown": unknown.height,
                                 "examples": unknown["eid"].unique().sort().head(5).to_list()}


def _as_matrix(vectors: Any) -> np.ndarray:
    if isinstance(vectors, np.ndarray):
        return vectors
    arrow = vectors.to_arrow() if hasattr(vectors, "to_arrow") else vectors  # LanceDB table
    column = arrow.column("vector").combine_chunks()
    if pa.types.is_fixed_size_list(column.type) and column.null_count == 0:
        values = column.flatten().to_numpy(zero_copy_only=False)
        return values.reshape(len(column), column.type.list_size)
    return np.asarray(column.to_pylist(), dtype=np.float32)  # ragged lists: dims differ


def vectors_valid(vectors: Any, expected_dim: int,
                  expected_rows: int | None = None) -> tuple[bool, dict]:
    """Vectors have ``expected_dim`` columns, no NaN/inf, no all-zero row (and n rows).

    Args:
        vectors: a 2-D numpy array (n, dim), or a LanceDB table / pyarrow table with a
            ``vector`` column.
        expected_dim: the embedder's dimension (e.g. 384 for all-MiniLM-L6-v2).
        expected_rows: when given, the row count must equal it.

    Returns ``(passed, {"rows", "dim", "nan_rows", "zero_rows"})``.
    """
    try:
        m = _as_matrix(vectors)
    except ValueError as exc:  # ragged: rows of different lengths
        return False, {"expected_dim": expected_dim, "error": str(exc)[:200]}
    rows = int(m.shape[0])
    dim = int(m.shape[1]) if m.ndim == 2 else -1
    nan_rows = int((~np.isfinite(m)).any(axis=1).sum()) if m.ndim == 2 else rows
    zero_rows = int((np.abs(m).sum(axis=1) == 0).sum()) if m.ndim == 2 and dim > 0 else 0
    passed = ((dim == expected_dim or rows == 0) and nan_rows == 0 and zero_rows == 0
              and (expected_rows is None or rows == expected_rows))
    return passed, {"rows": rows, "dim": dim, "expected_dim": expected_dim,
                    "nan_rows": nan_rows, "zero_rows": zero_rows}


def row_counts_match(expected: Mapping[str, int],
                     actual: Mapping[str, int]) -> tuple[bool, dict]:
    """Each name's actual row count equals its expected one (a missing name fails).

    Example: ``row_counts_match({"graph-nodes": len(entities)}, {"graph-nodes": len(nodes)})``.
    Returns ``(passed, {name: {"expected": int, "actual": int | None}})``.
    """
    meta = {k: {"expected": int(v), "actual": None if actual.get(k) is None else int(actual[k])}
            for k, v in expected.items()}
    return all(m["expected"] == m["actual"] for m in meta.values()), meta
