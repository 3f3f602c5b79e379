"""Where an index's vectors live and how they are read: the LanceDB folder and its tables
(:data:`VECTOR_TABLES`), the embedder manifest, the flat snapshots a cold query scans,
and nearest-neighbour search. The writer is :mod:`kgloom.publish.vectors`. No Dagster here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from kgloom.core import schemas
from kgloom.core.ids import content_id
from kgloom.embedding.windows import WindowedEmbedder

# LanceDB table -> (parquet table it mirrors, the text embedded for each row)
VECTOR_TABLES: dict[str, tuple[str, pl.Expr]] = {
    "text_units": (schemas.TEXT_UNITS, pl.col("text")),
    "entities": (schemas.ENTITIES, pl.col("title") + pl.lit(": ") + pl.col("description")),
    "community_reports": (schemas.COMMUNITY_REPORTS, pl.when(
        pl.col("generated_by").is_in(["rules", "lazy"])).then(
        pl.col("title") + pl.lit("\n\n") + pl.col("summary")).otherwise(pl.col("full_content"))),
}
# A report built by rules (report_writer.rule_report; generated_by rules, or lazy while it
# awaits its LLM report) embeds its title and summary: its findings
# quote the summary's first sentences and its rating explanation is the same sentence for
# every community, so its full_content holds nothing more to embed. On the 6,119-passage
# 2Wiki pool (fast method) that is 0.62 M tokens for 8,333 distinct reports instead of
# 1.84 M for full_content (the embedder's cost is linear in tokens).

from kgloom.core.layout import EMBEDDER_MANIFEST  # noqa: E402

# Query-time IVF_PQ knobs: partitions probed, and rows re-ranked by exact distance per
# result (LanceDB docs, "Querying an ANN index": nprobes, refine_factor).
ANN_NPROBES = 20
ANN_REFINE_FACTOR = 10


EMBEDDING_KEY = "embedding_key"  # LanceDB column: content_id(embedder key, embedded text)


def vector_index_type(table) -> str:
    """``"ivf_pq"`` (or another LanceDB index type, lower case) when the ``vector``
    column of LanceDB ``table`` has an ANN index, else ``"flat"`` (exhaustive scan)."""
    for idx in table.list_indices():
        if "vector" in idx.columns:
            return str(idx.index_type).lower().replace("ivfpq", "ivf_pq")
    return "flat"


def search_vectors(table, vector: np.ndarray, k: int, index_type: str | None = None,
                   refine_rows: int | None = None) -> tuple[list[str], np.ndarray]:
    """Nearest rows of LanceDB ``table`` to ``vector`` by cosine similarity.

    A flat table is scanned exactly; an indexed one is searched with IVF_PQ, probing
    ANN_NPROBES partitions and re-ranking ANN_REFINE_FACTOR x k candidates by exact
    distance (LanceDB docs, "Querying an ANN index").

    Args:
        table: a LanceDB table with ``id`` and ``vector`` columns.
        vector: float32 array (dim,), unit length.
        k: rows wanted (> 0).
        index_type: :func:`vector_index_type` of the table, if the caller knows it.
        refine_rows: IVF_PQ only: re-rank at least this many candidates instead of
            ANN_REFINE_FACTOR x k (the refine factor becomes ceil(refine_rows / k), at
            least 1). The fused retrieve asks for its oversampled candidates with the
            baseline's refine pool (ANN_REFINE_FACTOR x top_k), so its first top_k
            rows are the baseline's exactly and its search reads no more vectors.

    Returns:
        (ids, cosine similarities float64 (len(ids),)), most similar first; fewer than
        ``k`` when the table is smaller.
    """
    query = (table.search(np.asarray(vector, dtype=np.float32), vector_column_name="vector")
             .distance_type("cosine").limit(k).select(["id", "_distance"]))
    if (index_type or vector_index_type(table)) != "flat":
        factor = ANN_REFINE_FACTOR if refine_rows is None else max(1, -(-refine_rows // k))
        query = query.nprobes(ANN_NPROBES).refine_factor(factor)
    found = query.to_arrow()
    return (found["id"].to_pylist(),
            1.0 - np.asarray(found["_distance"].to_numpy(), dtype=np.float64))


def embedder_manifest(embedder: WindowedEmbedder) -> dict:
    """What identifies the vectors an embedder makes: ``{"model": embedder.name,
    "model_path": str, "key": embedder.key, "dim": int}``."""
    return {"model": embedder.name, "model_path": embedder.model_path,
            "key": embedder.key, "dim": embedder.dim}


def write_embedder_manifest(db_path: str | Path, embedder: WindowedEmbedder) -> Path:
    """Record :func:`embedder_manifest` in ``<db_path>/embedder.json`` (atomically), so
    a reader can check that it embeds queries with the same model."""
    from kgloom.core.storage import write_json

    return write_json(embedder_manifest(embedder), Path(db_path) / EMBEDDER_MANIFEST)


EXTERNAL_VECTORS_KEY = "external"  # manifest key: vectors brought in by import-graph


class ExternalVectorsError(ValueError):
    """A text query on an index whose vectors no kgloom embedder made."""


class ExternalVectors:
    """Stands in for the :class:`~kgloom.embedding.sentence_embedder.Embedder` of an index whose
    vectors came from outside kgloom (``kgloom import-graph``): it knows their dimension
    but cannot embed text.

    Args:
        dim: the vectors' dimension.

    ``embed`` raises :class:`ExternalVectorsError` (query such an index by vector).
    """

    name = EXTERNAL_VECTORS_KEY
    key = EXTERNAL_VECTORS_KEY
    model_path = ""

    def __init__(self, dim: int) -> None:
        self.dim = int(dim)

    def embed(self, texts: list[str], threads: int | None = None) -> np.ndarray:
        """Always raises :class:`ExternalVectorsError`: no model made these vectors."""
        raise ExternalVectorsError(
            "this index's vectors were imported from outside kgloom (kgloom import-graph), "
            "so no text embedder can query them: query by vector (Retriever.fused_by_vector, "
            "Retriever.two_step_by_vector)")


def write_external_manifest(db_path: str | Path, dim: int) -> Path:
    """Record in the embedder manifest that the vectors (``dim`` wide) were imported,
    not embedded by kgloom: model and key are ``EXTERNAL_VECTORS_KEY``."""
    from kgloom.core.storage import write_json

    return write_json({"model": EXTERNAL_VECTORS_KEY, "model_path": "",
                       "key": EXTERNAL_VECTORS_KEY, "dim": int(dim)},
                      Path(db_path) / EMBEDDER_MANIFEST)


def read_embedder_manifest(db_path: str | Path) -> dict | None:
    """The manifest written by :func:`write_embedder_manifest`, or None when absent
    (an index built before kgloom recorded its embedder)."""
    import json

    path = Path(db_path) / EMBEDDER_MANIFEST
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


from kgloom.core.layout import FLAT_SNAPSHOT_SUFFIX  # noqa: E402


def flat_snapshot_path(db_path: str | Path, table_name: str) -> Path:
    """``<db_path>/<table_name>.flat.parquet`` (written by
    :func:`kgloom.publish.vectors.write_flat_snapshot`)."""
    return Path(db_path) / f"{table_name}{FLAT_SNAPSHOT_SUFFIX}"



def read_flat_snapshot(db_path: str | Path, table_name: str, rows: pl.DataFrame,
                       text: pl.Expr, embedder_key: str) -> np.ndarray | None:
    """The vectors of ``rows`` (a frame with ``id`` and the columns ``text`` reads, in
    any order) from ``<table>.flat.parquet``, as float32 (len(rows), dim) in ``rows``'
    order; None when the file is absent or does not hold exactly these rows with the
    embedding key ``content_id("embedding", embedder_key, text)`` of each (a stale or
    half-written snapshot, another embedder): the caller then reads LanceDB. The file is
    read through one open handle: read by path, a replacement published between the
    reader's opens once gave "File out of specification" (tests/unit/test_builds.py's loop)."""
    path = flat_snapshot_path(db_path, table_name)
    try:  # one open file: a publish that replaces the snapshot meanwhile (os.replace) cannot
        with open(path, "rb") as fh:  # mix its footer with the old file's pages
            snap = pl.read_parquet(fh)
    except FileNotFoundError:
        return None
    keys = rows.select("id", t=text.fill_null(""))
    if snap.height != keys.height:
        return None
    want = [content_id("embedding", embedder_key, t) for t in keys["t"].to_list()]
    joined = keys.select("id").with_columns(pl.Series("want", want, dtype=pl.String)).join(
        snap, on="id", how="left", maintain_order="left")
    if not joined[EMBEDDING_KEY].equals(joined["want"], check_names=False):
        return None
    vec = joined["vector"]
    width = vec.dtype.size if isinstance(vec.dtype, pl.Array) else None
    if width is None or vec.null_count():
        return None
    return vec.to_numpy().reshape(len(vec), width).astype(np.float32, copy=False)
