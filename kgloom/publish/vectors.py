"""The LanceDB writer: idempotent tables that mirror the published parquet, each row with
its vector (embedded by :class:`kgloom.embedding.sentence_embedder.Embedder` only when its text
changed), and the flat snapshots a cold query scans. The layout it writes, and the read
side, are :mod:`kgloom.embedding.store`. No Dagster here.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import numpy as np
import polars as pl
import pyarrow as pa

from kgloom.core import schemas
from kgloom.core.ids import content_id
from kgloom.core.layout import LANCEDB_DIR
from kgloom.embedding.embedding_cache import EmbeddingCache, open_embedding_cache
from kgloom.embedding.sentence_embedder import release_memory
from kgloom.embedding.store import (
    EMBEDDING_KEY,
    VECTOR_TABLES,
    embedder_manifest,
    flat_snapshot_path,
    read_embedder_manifest,
    vector_index_type,
    write_embedder_manifest,
)
from kgloom.embedding.windows import WindowedEmbedder

# IVF_PQ trains k-means on the vectors (256 centroids per PQ sub-vector, ~sqrt(n)
# partitions). It needs >= 256 rows to train at all, and on the 2-core machine its build
# took 37.6 s at 10,000 rows and 338 s at 50,000, for recall@10 0.975 and 0.889
# (bench/results/ann.json), while the exact numpy scan of a flat table's snapshot that
# the query side runs (Retriever._search) took 1.8 ms at 10,000 rows, 18 ms at 50,000,
# 19 ms at 100,000 and 40 ms at 200,000 (one thread, 384 dims, p50 of 20). So tables are
# kept flat, exact and free to build up to 100,000 rows (LanceDB docs, "ANN indexes":
# "for small datasets ... brute-force search is fast enough").
ANN_INDEX_MIN_ROWS = 100_000


ROW_HASH = "row_hash"  # LanceDB column: SHA-256 of the row's other columns (JSON)
BATCH_ROWS = 256  # rows embedded per batch (a progress step)
# rows per Lance write (one table version each): the memory a sync holds at once
WRITE_ROWS = 8_192


def _row_hashes(df: pl.DataFrame, chunk_rows: int = 512) -> pl.Series:
    """SHA-256 of each row's JSON (polars ``struct.json_encode``), ``chunk_rows`` rows at
    a time so no copy of the whole frame is made."""
    out: list[str] = []
    for start in range(0, df.height, chunk_rows):
        rows = df.slice(start, chunk_rows).select(pl.struct(pl.all()).struct.json_encode())
        out += [hashlib.sha256(r.encode("utf-8")).hexdigest() for r in rows.to_series()]
    return pl.Series(ROW_HASH, out, dtype=pl.String)


def _to_arrow(df: pl.DataFrame, vectors: np.ndarray) -> pa.Table:
    """Polars frame + (n, dim) vectors -> arrow table with a fixed_size_list vector column."""
    # The oldest compat level gives large_string / large_list, which Lance reads everywhere
    # (string_view support varies by version).
    table = df.to_arrow(compat_level=pl.CompatLevel.oldest())
    flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).ravel(), type=pa.float32())
    return table.append_column("vector", pa.FixedSizeListArray.from_arrays(flat, vectors.shape[1]))


def _sql_in(ids: list[str]) -> str:
    return ", ".join("'" + i.replace("'", "''") + "'" for i in ids)


Source = pl.DataFrame | str | Path  # a frame, or a parquet file read a batch at a time


def _frame(data: pa.Table | pa.RecordBatch) -> pl.DataFrame:
    """``pl.from_arrow`` of a table or record batch."""
    # cast: polars annotates from_arrow as DataFrame | Series for every input, but a
    # table or a record batch always gives a DataFrame
    return cast(pl.DataFrame, pl.from_arrow(data))


def _slices(source: Source, rows: int) -> Callable[[], Iterator[pl.DataFrame]]:
    """A function that yields ``source`` in order, ``rows`` rows at a time (a parquet
    file through ``pyarrow.parquet.ParquetFile.iter_batches``: the whole table is never
    in memory); it can be called more than once."""
    if isinstance(source, pl.DataFrame):
        return lambda: (source.slice(i, rows) for i in range(0, source.height, rows))

    def read() -> Iterator[pl.DataFrame]:
        import pyarrow.parquet as pq

        from kgloom.core.storage import named_parquet

        with named_parquet(source):
            for batch in pq.ParquetFile(str(source)).iter_batches(batch_size=rows):
                yield _frame(batch)
    return read


def _empty_frame(source: Source) -> pl.DataFrame:
    if isinstance(source, pl.DataFrame):
        return source.head(0)
    import pyarrow.parquet as pq

    from kgloom.core.storage import named_parquet

    with named_parquet(source):
        return _frame(pq.read_schema(str(source)).empty_table())


def _sync_table(db_path: str | Path, table_name: str, source: Source, dim: int,
                prepare: Callable[[pl.DataFrame], pl.DataFrame],
                vectors_for: Callable[[pl.DataFrame, pa.Table | None], np.ndarray],
                batch_rows: int, ann_min_rows: int,
                progress: Callable[[int, int], None] | None) -> dict:
    """The one LanceDB write path (see :func:`sync_lancedb`). ``source`` is read twice, a
    batch at a time: once for the ids and row hashes, once for the rows to write.
    ``prepare`` adds columns to a batch (e.g. ``embedding_key``); ``vectors_for(rows,
    stored)`` returns the (len(rows), dim) vectors of a batch; ``stored`` is the table's
    (embedding_key, vector) arrow table when it has one, for reuse.

    Returns :func:`_finish`'s counters. Raises ValueError when ids repeat or
    ``vectors_for`` returns another shape."""
    import lancedb

    slices = _slices(source, batch_rows)
    index = _row_index(slices, prepare, table_name)
    empty = prepare(_empty_frame(source)).with_columns(pl.lit(None, pl.String).alias(ROW_HASH))
    schema = _to_arrow(empty, np.zeros((0, dim), dtype=np.float32)).schema
    db = lancedb.connect(str(db_path))
    try:
        table = db.open_table(table_name)
    except ValueError:  # "Table ... was not found"
        table = None
    # the stored table when its schema is this one (rows kept), else None (rewritten)
    kept = table if table is not None and table.schema == schema else None
    todo, stale = _rows_to_write(kept, index)
    stored_keys = None
    if table is not None and EMBEDDING_KEY in table.schema.names and todo.height:
        stored_keys = table.search().select([EMBEDDING_KEY, "vector"]).limit(None).to_arrow()
    counts = {"written": todo.height, "deleted": len(stale), "embedded": 0}
    if kept is not None and not todo.height and not stale:  # nothing changed: no new version
        return _finish(kept, dim, ann_min_rows, counts, changed=False)
    batches = functools.partial(_arrow_batches, slices, prepare, todo, dim, schema,
                                lambda part: vectors_for(part, stored_keys), progress)

    def reader(part: list[pa.RecordBatch]) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(schema, iter(part))

    if kept is None:
        parts = _write_chunks(batches())
        written = db.create_table(table_name, data=reader(next(parts, [])), schema=schema,
                                  mode="overwrite" if table is not None else "create")
        for part in parts:
            written.add(reader(part))
    else:
        written = kept
        if todo.height:
            for part in _write_chunks(batches()):
                (written.merge_insert("id").when_matched_update_all()
                 .when_not_matched_insert_all().execute(reader(part)))
        for i in range(0, len(stale), 1000):  # keep each SQL predicate small
            written.delete(f"id IN ({_sql_in(stale[i:i + 1000])})")
    return _finish(written, dim, ann_min_rows, counts, changed=True)


def _row_index(slices: Callable[[], Iterator[pl.DataFrame]],
               prepare: Callable[[pl.DataFrame], pl.DataFrame], table_name: str,
               ) -> pl.DataFrame:
    """``id`` and ``row_hash`` (String) of every prepared row of ``slices()``, in order.

    Raises:
        ValueError: when ids repeat (an upsert by id would be ambiguous).
    """
    index = pl.concat([b.select("id").with_columns(_row_hashes(b))
                       for b in map(prepare, slices())] or
                      [pl.DataFrame(schema={"id": pl.String, ROW_HASH: pl.String})])
    if index["id"].n_unique() != index.height:
        raise ValueError(f"{table_name}: ids are not unique; an upsert by id would be ambiguous")
    return index


def _rows_to_write(kept, index: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """(todo, stale): the rows of ``index`` (id, row_hash) that the stored table ``kept``
    lacks with that hash (all of them when ``kept`` is None: the table is rewritten), and
    the sorted stored ids no longer in ``index``."""
    if kept is None:
        return index, []
    stored = _frame(kept.search().select(["id", ROW_HASH]).limit(None).to_arrow())
    todo = index.join(stored, on=["id", ROW_HASH], how="anti")
    stale = sorted(set(stored["id"].to_list()) - set(index["id"].to_list()))
    return todo, stale


def _arrow_batches(slices: Callable[[], Iterator[pl.DataFrame]],
                   prepare: Callable[[pl.DataFrame], pl.DataFrame], todo: pl.DataFrame,
                   dim: int, schema: pa.Schema,
                   vectors_for: Callable[[pl.DataFrame], np.ndarray],
                   progress: Callable[[int, int], None] | None) -> Iterator[pa.RecordBatch]:
    """The record batches (``schema``) of the prepared rows of ``slices()`` listed in
    ``todo`` (id, row_hash), in source order, each with its (rows, ``dim``) vectors;
    ``progress(done, todo.height)`` after each source batch that had such rows.

    Raises:
        ValueError: ``vectors_for`` returned another shape.
    """
    wanted = todo.select("id", ROW_HASH)
    done = 0
    for part in map(prepare, slices()):
        part = part.join(wanted, on="id", how="inner", maintain_order="left")
        if not part.height:
            continue
        vectors = vectors_for(part)
        if vectors.shape != (part.height, dim):
            raise ValueError(f"need vectors of shape ({part.height}, {dim}), "
                             f"got {vectors.shape}")
        yield from _to_arrow(part, vectors).cast(schema).to_batches()
        done += part.height
        del part, vectors
        if progress:
            progress(done, todo.height)


def _write_chunks(batches: Iterator[pa.RecordBatch]) -> Iterator[list[pa.RecordBatch]]:
    """``batches`` grouped into lists of at least :data:`WRITE_ROWS` rows (the last one
    fewer), one Lance write each.

    Vectors are computed here, in the calling thread, WRITE_ROWS rows at a time, and each
    finished chunk is handed to Lance. Handing Lance a reader that embeds as it is
    pulled ran the embedder on Lance's reader thread while the calling thread stayed
    busy too: 2,000 pool entities took 24.4 s against 17.7 s embedded alone."""
    pending, rows = [], 0
    for batch in batches:
        pending.append(batch)
        rows += batch.num_rows
        if rows >= WRITE_ROWS:
            yield pending
            pending, rows = [], 0
            release_memory()  # per chunk, not per batch: a full collection of a big
            # process's heap is slow (the pool's vector stage spent 166 s outside the
            # embedder with one per 256 rows)
    if pending:
        yield pending


def _finish(table, dim: int, ann_min_rows: int, counts: dict, changed: bool) -> dict:
    rows = table.count_rows()
    indexed = rows >= ann_min_rows
    if indexed and (changed or not table.list_indices()):
        from lancedb.index import IvfPq

        # ~sqrt(n) partitions; sub-vectors of 8 dims (dim must divide evenly)
        sub = next(s for s in (dim // 8, dim // 4, dim // 2, 1) if s >= 1 and dim % s == 0)
        table.create_index("vector", replace=True, config=IvfPq(
            distance_type="cosine", num_partitions=max(1, int(rows ** 0.5)),
            num_sub_vectors=sub))
    return {"rows": rows, "version": table.version, "dim": dim, "indexed": indexed, **counts}


def write_lancedb(db_path: str | Path, table_name: str, df: pl.DataFrame,
                  vectors: np.ndarray, ann_min_rows: int = ANN_INDEX_MIN_ROWS,
                  batch_rows: int = BATCH_ROWS) -> dict:
    """Make LanceDB table ``table_name`` mirror ``df`` plus the given ``vectors``
    (row i for ``df`` row i); see :func:`sync_lancedb` for how, and what it returns.

    Raises:
        ValueError: when ``vectors`` does not have one row per ``df`` row, or ids repeat.
    """
    if vectors.ndim != 2 or vectors.shape[0] != df.height:
        raise ValueError(f"need vectors of shape ({df.height}, dim), got {vectors.shape}")
    position = {k: i for i, k in enumerate(df["id"].to_list())}

    def given(rows: pl.DataFrame, _stored) -> np.ndarray:
        return vectors[[position[k] for k in rows["id"].to_list()]]

    return _sync_table(db_path, table_name, df, int(vectors.shape[1]), lambda b: b, given,
                       batch_rows, ann_min_rows, None)


def sync_lancedb(db_path: str | Path, table_name: str, source: Source, text: pl.Expr,
                 embedder: WindowedEmbedder, ann_min_rows: int = ANN_INDEX_MIN_ROWS,
                 batch_rows: int = BATCH_ROWS,
                 progress: Callable[[int, int], None] | None = None,
                 cache: EmbeddingCache | None = None) -> dict:
    """Make LanceDB table ``table_name`` mirror ``source`` (a frame, or a parquet file
    read a batch at a time) with a vector of ``text`` per row (an expression over its
    columns, e.g. ``pl.col("text")``), embedding only what changed and streaming in
    batches, so memory does not grow with the table.

    - Every row gets ``embedding_key`` (hash of :attr:`Embedder.key` and its text) and
      ``row_hash`` (SHA-256 of the row's other columns). Rows whose id and row hash are
      already stored are left alone; the others are written (upsert by ``id``:
      ``merge_insert("id").when_matched_update_all().when_not_matched_insert_all()``)
      and stored ids no longer in ``source`` are deleted. Nothing changed: nothing is
      written and the table gains no version.
    - A row to write gets its vector from :class:`_RowVectors` (stored, cached or
      embedded, ``batch_rows`` rows at a time, ``progress(done, total)`` after each
      batch); every :data:`WRITE_ROWS` rows go to Lance through a
      ``pyarrow.RecordBatchReader`` (one table version per write).
    - A table whose schema differs (older layout, another dimension) is rewritten as a
      new version. Earlier versions stay readable with ``table.checkout(version)`` until
      ``cleanup_old_versions`` runs.
    - An IVF_PQ cosine index is (re)built after a write when the table has at least
      ``ann_min_rows`` rows; smaller tables are scanned flat.

    Sources: LanceDB docs, "Merge insert" / "Versioning" / "ANN indexes"; polars
    ``Expr.struct.json_encode``; pyarrow ``ParquetFile.iter_batches``.

    Args:
        db_path: LanceDB folder (created when absent).
        table_name: e.g. "text_units", "entities", "community_reports".
        source: rows with a unique String ``id`` column; every column is stored.
        text: the text embedded for each row (nulls embed as "").
        embedder: the :class:`Embedder`.
        cache: the index's embedding cache, or None (every new text embedded).

    Returns:
        ``{"rows", "version", "dim", "indexed", "written", "deleted", "embedded",
        "reused", "cached"}``: rows in the table, its version, the vector size, whether
        it has an ANN index, rows written, rows deleted, distinct texts embedded (rows
        with the same text, e.g. a community report repeated on several levels, share
        one pass), vectors reused (stored, from the cache, or embedded for an earlier
        row of this call), and of those, distinct texts read from ``cache``.

    Raises:
        ValueError: when ids repeat.
    """
    vectors = _RowVectors(text, embedder, cache)
    result = _sync_table(db_path, table_name, source, embedder.dim, vectors.keyed,
                         vectors.vectors, batch_rows, ann_min_rows, progress)
    result["embedded"], result["cached"] = vectors.counts["embedded"], vectors.counts["cached"]
    result["reused"] = result["written"] - vectors.counts["embedded"]
    return result


class _RowVectors:
    """The vectors of one :func:`sync_lancedb` call's rows, each text embedded once.

    A row to write reuses the stored vector of its ``embedding_key`` when there is one,
    else one embedded earlier in this call, else the vector ``cache`` holds for its text
    (another stage embedded the same text, :mod:`kgloom.embedding.embedding_cache`);
    otherwise its text is embedded (in the calling thread). ``counts``: ``embedded``
    (distinct texts embedded) and ``cached`` (distinct texts read from ``cache``).
    """

    def __init__(self, text: pl.Expr, embedder: WindowedEmbedder,
                 cache: EmbeddingCache | None) -> None:
        self.text, self.embedder, self.cache = text, embedder, cache
        self.counts = {"embedded": 0, "cached": 0}
        # the stored vectors as a matrix, and embedding key -> its row: read at the first
        # batch
        self.reuse_index: dict[str, int] | None = None
        self.reuse_matrix = np.zeros((0, embedder.dim), dtype=np.float32)
        self.fresh: dict[str, np.ndarray] = {}  # embedding key -> vector embedded this sync

    def keyed(self, rows: pl.DataFrame) -> pl.DataFrame:
        """``rows`` with ``embedding_key`` (String): the content id of the embedder's key
        and the row's text."""
        texts = rows.select(self.text.fill_null("").alias("t"))["t"].to_list()
        return rows.with_columns(pl.Series(EMBEDDING_KEY, [
            content_id("embedding", self.embedder.key, t) for t in texts], dtype=pl.String))

    def _read_stored(self, stored: pa.Table | None) -> dict[str, int]:
        """Embedding key -> row of ``reuse_matrix`` (set from ``stored``'s vectors when
        they are non-null fixed-size lists of the embedder's dimension; else empty)."""
        dim = self.embedder.dim
        column = stored["vector"].combine_chunks() if stored is not None else None
        if (stored is not None and column is not None
                and pa.types.is_fixed_size_list(column.type)
                and column.type.list_size == dim and column.null_count == 0):
            self.reuse_matrix = (column.flatten().to_numpy(zero_copy_only=False)
                                 .reshape(len(column), dim))
            return {k: i for i, k in enumerate(stored[EMBEDDING_KEY].to_pylist())}
        return {}

    def vectors(self, rows: pl.DataFrame, stored: pa.Table | None) -> np.ndarray:
        """(rows.height, dim) float32 vectors of keyed ``rows``; ``stored``: the table's
        (embedding_key, vector) arrow table or None, read at the first call."""
        if self.reuse_index is None:
            self.reuse_index = self._read_stored(stored)
        reuse_index = self.reuse_index
        out = np.zeros((rows.height, self.embedder.dim), dtype=np.float32)
        todo: dict[str, list[int]] = {}  # key -> its rows, each distinct text embedded once
        for row, key in enumerate(rows[EMBEDDING_KEY].to_list()):
            if key in reuse_index:
                out[row] = self.reuse_matrix[reuse_index[key]]
            elif key in self.fresh:
                out[row] = self.fresh[key]
            else:
                todo.setdefault(key, []).append(row)
        if todo:
            texts = rows.select(self.text.fill_null("").alias("t"))["t"].to_list()
            vectors = self._embed([texts[rs[0]] for rs in todo.values()])
            for (key, rs), vector in zip(todo.items(), vectors):
                out[rs] = vector
                self.fresh[key] = vector
        return out

    def _embed(self, distinct: list[str]):
        """The vectors of ``distinct`` texts, through ``cache`` when there is one;
        ``counts`` updated."""
        cache = self.cache
        if cache is None:
            vectors = self.embedder.embed(distinct)
            self.counts["embedded"] += len(distinct)
        else:
            misses = cache.misses
            vectors = cache.embed(self.embedder, distinct)
            self.counts["embedded"] += cache.misses - misses
            self.counts["cached"] += len(distinct) - (cache.misses - misses)
        return vectors


def write_flat_snapshot(db_path: str | Path, table_name: str) -> Path | None:
    """Copy the ``id``, ``embedding_key`` and ``vector`` columns of a flat (not ANN
    indexed) LanceDB table to ``<table>.flat.parquet`` beside it, atomically; for an
    indexed table remove any such file and return None.

    Why: a query process that reads the vectors from this file scans them exactly with
    numpy (what LanceDB does for a flat table) without importing ``lancedb``, whose
    import took 2.4-3.4 s of a cold ``kgloom query`` on the 2-core machine (lancedb 0.40
    builds the pydantic models of ``lance_namespace``'s REST client at import). The
    reader (:func:`kgloom.embedding.store.read_flat_snapshot`) trusts it only when every
    row's embedding key matches the published parquet's text under the query embedder.
    """
    import lancedb

    from kgloom.core.storage import _atomic

    path = flat_snapshot_path(db_path, table_name)
    table = lancedb.connect(str(db_path)).open_table(table_name)
    if vector_index_type(table) != "flat" or EMBEDDING_KEY not in table.schema.names:
        path.unlink(missing_ok=True)
        return None
    # the three columns only: ``to_arrow().select`` read every column first (the pool's
    # community reports: 459 MB resident against 288 MB, the process included)
    frame = _frame(table.search().select(["id", EMBEDDING_KEY, "vector"]).limit(None)
                   .to_arrow())
    return _atomic(path, lambda tmp: frame.write_parquet(tmp))


def sync_index(output_dir: str | Path, embedder: WindowedEmbedder,
               progress: Callable[[str], Callable[[int, int], None] | None] | None = None,
               log: Callable[[str], None] | None = None) -> tuple[dict, dict]:
    """Mirror the published tables of :data:`VECTOR_TABLES` (``text_units.parquet``,
    ``entities.parquet``, ``community_reports.parquet`` under ``output_dir``) into the
    LanceDB folder ``<output_dir>/lancedb`` with :func:`sync_lancedb` (only changed rows
    embedded and written, in batches; a text another stage embedded is read from the
    index's embedding cache, :mod:`kgloom.embedding.embedding_cache`), refresh each flat table's
    :func:`write_flat_snapshot`, and record the embedder's manifest when it changed.

    A missing ``community_reports.parquet`` (an index built without reports) gives an
    empty table, said through ``log``.

    Args:
        output_dir: the index's output folder.
        embedder: the loaded embedder.
        progress: ``progress(table name)`` -> a ``progress(done, total)`` callback (or
            None) for that table's batches.
        log: receives one line per table (rows written, embedded, reused, deleted).

    Returns:
        (written, expected): per table, :func:`sync_lancedb`'s counters, and the source's
        row count (int).

    Raises:
        FileNotFoundError: when ``text_units.parquet`` or ``entities.parquet`` is missing.
        sqlite3.DatabaseError: ``embedding_cache.sqlite`` is not a SQLite database.
    """
    out = Path(output_dir)
    db_path = out / LANCEDB_DIR
    cache = open_embedding_cache(out)
    written, expected = {}, {}
    try:
        for table, (parquet, text_expr) in VECTOR_TABLES.items():
            source, expected[table] = _vector_source(out, parquet, log)
            written[table] = w = sync_lancedb(db_path, table, source, text_expr, embedder,
                                              progress=progress(table) if progress else None,
                                              cache=cache)
            write_flat_snapshot(db_path, table)  # what a cold query reads instead of LanceDB
            if log:
                log(f"{table}: {w['written']} rows written ({w['embedded']} embedded, "
                    f"{w['reused']} vectors reused, {w['cached']} of them from the embedding "
                    f"cache), {w['deleted']} deleted, "
                    f"{w['rows'] - w['written']} unchanged")
    finally:
        cache.close()
    if read_embedder_manifest(db_path) != embedder_manifest(embedder):
        write_embedder_manifest(db_path, embedder)
    return written, expected


def _vector_source(out: Path, parquet: str, log: Callable[[str], None] | None,
                   ) -> tuple[Source, int]:
    """(source, rows) of published table ``parquet`` under ``out``: its path (read a
    batch at a time: a big index's text units never sit in memory) and row count, or an
    empty community reports frame and 0 when ``community_reports.parquet`` is missing
    (said through ``log``).

    Raises:
        FileNotFoundError: any other table is missing.
    """
    from kgloom.core.storage import parquet_rows, table_path

    path = table_path(out, parquet)
    if parquet == schemas.COMMUNITY_REPORTS and not path.exists():
        if log:
            log("no community_reports.parquet: its LanceDB table is empty")
        return schemas.empty(schemas.COMMUNITY_REPORTS_SCHEMA), 0
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: materialize its asset first")
    return path, parquet_rows(path)
