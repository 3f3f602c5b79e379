"""Import a graph kgloom did not extract (nodes with vectors, edges) as a kgloom index.

A user with an existing graph (a citation network, a product graph, a knowledge graph
exported elsewhere) brings two tables and gets an output folder the query side opens
like one ``kgloom index`` wrote: the same entities / relationships / graph-nodes /
graph-edges parquet, and the same LanceDB ``entities`` table (IVF_PQ-indexed above
``vectors.ANN_INDEX_MIN_ROWS`` rows). The graph has no text, so the text-unit tables are
empty, and the vectors were made by no kgloom embedder: the embedder manifest says so
(``vectors.EXTERNAL_VECTORS_KEY``) and :class:`kgloom.query.retriever.Retriever` opens
the folder without a text embedder, for the modes that query by vector
(``fused_by_vector``, ``two_step_by_vector``).

Input (parquet, CSV or any table polars reads; see :func:`read_graph_tables`):

- nodes: ``id`` (string or integer, unique, not null) and ``vector`` (a list/array of
  numbers, the same length on every row, finite, not all zero); optional ``title``
  (default: the id), ``type`` and ``description`` (default: empty). Every other column
  (labels, years, ...) is kept as it is in graph-nodes.parquet.
- edges: ``source`` and ``target`` (node ids); optional ``weight`` (number >= 0,
  default 1.0) and ``description``. Edges are undirected: a pair given more than once
  (both directions, or repeated) becomes one relationship whose weight is the sum and
  whose description is the first non-empty one; self-loops are dropped. Both are counted
  in the summary.

No Dagster here; ``kgloom import-graph`` is the command line over :func:`import_graph`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from kgloom.core import schemas, storage
from kgloom.core.builds import publish_build
from kgloom.core.ids import content_id
from kgloom.core.layout import IMPORT_SUMMARY_FILE as IMPORT_SUMMARY
from kgloom.core.layout import LANCEDB_DIR
from kgloom.embedding.store import EXTERNAL_VECTORS_KEY, write_external_manifest
from kgloom.graph.communities import compute_graph_metrics
from kgloom.publish import tables
from kgloom.publish.vectors import write_lancedb

RELATIONSHIP_KIND = "imported"  # relationships.kind of an imported edge
NODE_COLUMNS = ("id", "vector", "title", "type", "description")
EDGE_COLUMNS = ("source", "target", "weight", "description")
# graph-nodes.parquet columns an extra node column may not replace
_RESERVED = set(schemas.GRAPH_NODES_SCHEMA) | {"id"}


class GraphImportError(ValueError):
    """The input tables cannot be imported as they are; the message says what to fix."""


def read_graph_tables(nodes_path: str | Path, edges_path: str | Path
                      ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Read the nodes and edges tables (``.parquet``, ``.csv``, ``.jsonl``/``.ndjson``).

    A CSV cannot hold a list, so a CSV nodes table gives its vector as one string of
    numbers separated by spaces, commas or semicolons, brackets allowed (``"0.1 0.2 ..."``,
    ``"[0.1, 0.2, ...]"``).

    Raises:
        GraphImportError: a missing or unreadable file, or an unknown file type.
    """
    frames = []
    for path in (Path(nodes_path), Path(edges_path)):
        if not path.is_file():
            raise GraphImportError(f"{path} does not exist or is not a file")
        suffix = path.suffix.lower()
        try:
            if suffix == ".parquet":
                frames.append(storage.read_parquet(path))
            elif suffix == ".csv":
                frames.append(pl.read_csv(path, infer_schema_length=10_000))
            elif suffix in (".jsonl", ".ndjson"):
                frames.append(pl.read_ndjson(path))
            else:
                raise GraphImportError(f"{path}: unknown table type {suffix!r} "
                                       "(use .parquet, .csv or .jsonl)")
        except (pl.exceptions.PolarsError, OSError) as exc:
            raise GraphImportError(f"{path} could not be read: {exc}") from exc
    nodes, edges = frames
    if "vector" in nodes.columns and nodes.schema["vector"] == pl.String:
        nodes = nodes.with_columns(
            pl.col("vector").str.replace_all(r"[\[\],;\s]+", " ").str.strip_chars()
            .str.split(" ").cast(pl.List(pl.Float64), strict=False))
    return nodes, edges


def _examples(values: list[Any], n: int = 3) -> str:
    return ", ".join(repr(v) for v in values[:n])


def _require(df: pl.DataFrame, table: str, columns: tuple[str, ...]) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise GraphImportError(f"the {table} table lacks column(s) {missing}; it has "
                               f"{df.columns}")


def node_vectors(nodes: pl.DataFrame) -> np.ndarray:
    """The ``vector`` column as a float32 (n, dim) matrix, checked.

    Raises:
        GraphImportError: a null vector, vectors of different lengths, a non-finite
            value or an all-zero vector (cosine similarity is undefined for it); the
            message names how many rows and which ids.
    """
    col = nodes["vector"]
    if not isinstance(col.dtype, (pl.List, pl.Array)):
        raise GraphImportError(f"nodes.vector must be a list of numbers, got {col.dtype}")
    ids = nodes["id"].cast(pl.String)
    lengths = col.list.len() if isinstance(col.dtype, pl.List) else pl.Series(
        [col.dtype.size] * len(col))
    bad = ids.filter(col.is_null() | lengths.is_null() | (lengths == 0)).to_list()
    if bad:
        raise GraphImportError(f"{len(bad)} node(s) have no vector, e.g. {_examples(bad)}")
    dims = lengths.unique().sort().to_list()
    if len(dims) > 1:
        first = ids.filter(lengths != lengths[0]).to_list()
        raise GraphImportError(f"node vectors have different lengths {dims[:5]}: "
                               f"e.g. {_examples(first)} differ from the first node's "
                               f"{lengths[0]}")
    dim = int(dims[0]) if dims else 0
    if not len(col):
        return np.zeros((0, dim), dtype=np.float32)
    flat = (col.list.explode() if isinstance(col.dtype, pl.List) else col.arr.explode())
    matrix = flat.cast(pl.Float64, strict=False).to_numpy().reshape(len(col), dim)
    bad_rows = ~np.isfinite(matrix).all(axis=1) | ~(np.abs(np.nan_to_num(matrix)) > 0).any(
        axis=1)
    if bad_rows.any():
        bad = ids.filter(pl.Series(np.asarray(bad_rows))).to_list()
        raise GraphImportError(f"{len(bad)} node vector(s) hold a non-number, infinity or "
                               f"only zeros, e.g. {_examples(bad)}")
    return matrix.astype(np.float32)


def _entities(nodes: pl.DataFrame) -> pl.DataFrame:
    """ENTITIES_SCHEMA frame of the nodes (degree and PageRank filled later)."""
    ids = nodes["id"].cast(pl.String)
    if ids.null_count():
        raise GraphImportError(f"{ids.null_count()} node(s) have a null id")
    dup = ids.filter(ids.is_duplicated()).unique().sort().to_list()
    if dup:
        raise GraphImportError(f"{len(dup)} node id(s) repeat, e.g. {_examples(dup)}: "
                               "node ids must be unique")
    n = nodes.height

    def text(name: str, default: pl.Expr) -> pl.Expr:
        if name not in nodes.columns:
            return default.alias(name)
        return pl.col(name).cast(pl.String).fill_null(default).alias(name)

    empty_list = pl.lit([], dtype=pl.List(pl.String))
    out = nodes.select(
        ids.alias("id"), pl.int_range(n, dtype=pl.Int64).alias("human_readable_id"),
        text("title", pl.col("id").cast(pl.String)),
        text("type", pl.lit("")), text("description", pl.lit("")),
        empty_list.alias("text_unit_ids"), pl.lit(0, dtype=pl.Int64).alias("frequency"),
        pl.lit(0, dtype=pl.Int64).alias("degree"),
        pl.lit(0.0).alias("weighted_degree"), pl.lit(0.0).alias("pagerank"),
        empty_list.alias("aliases"))
    return schemas.conform(out, schemas.ENTITIES_SCHEMA)


def _relationships(edges: pl.DataFrame, entities: pl.DataFrame) -> tuple[pl.DataFrame, dict]:
    """RELATIONSHIPS_SCHEMA frame of the deduplicated edges (one per node pair, its id
    hashing the sorted pair; source -> target the direction most of the pair's edges
    give, a tie going to the first), and counts."""
    weight = (pl.col("weight").cast(pl.Float64, strict=False) if "weight" in edges.columns
              else pl.lit(1.0))
    desc = (pl.col("description").cast(pl.String).fill_null("")
            if "description" in edges.columns else pl.lit(""))
    e = edges.select(pl.col("source").cast(pl.String), pl.col("target").cast(pl.String),
                     weight.fill_null(1.0).alias("weight"), desc.alias("description"))
    bad_w = e.filter(~pl.col("weight").is_finite() | (pl.col("weight") < 0))
    if bad_w.height:
        raise GraphImportError(f"{bad_w.height} edge weight(s) are negative or not a "
                               f"number, e.g. {bad_w.head(3).rows()}")
    known = entities["id"].implode()
    dangling = e.filter(~pl.col("source").is_in(known) | ~pl.col("target").is_in(known)
                        | pl.col("source").is_null() | pl.col("target").is_null())
    if dangling.height:
        raise GraphImportError(
            f"{dangling.height} edge(s) name a node missing from the nodes table, e.g. "
            f"{dangling.select('source', 'target').head(3).rows()}")
    loops = e.filter(pl.col("source") == pl.col("target")).height
    e = e.filter(pl.col("source") != pl.col("target")).with_row_index("order")
    pairs = (e.with_columns(pl.min_horizontal("source", "target").alias("lo"),
                            pl.max_horizontal("source", "target").alias("hi"),
                            (pl.col("source") < pl.col("target")).alias("forward"))
             .group_by("lo", "hi")
             .agg(pl.col("weight").sum(), pl.len().alias("given"),
                  pl.col("description").filter(pl.col("description") != "").first(),
                  pl.col("order").min(), pl.col("forward").sum().alias("forward_n"),
                  pl.col("forward").first().alias("first_forward"))
             .sort("order"))
    # the direction the edges give: their majority, a tie going to the first edge's
    # (the rule of kgloom.graph.resolution for extracted relationships)
    forward = (pl.col("forward_n") * 2 > pl.col("given")) | (
        (pl.col("forward_n") * 2 == pl.col("given")) & pl.col("first_forward"))
    pairs = pairs.with_columns(
        pl.when(forward).then(pl.col("lo")).otherwise(pl.col("hi")).alias("source_id"),
        pl.when(forward).then(pl.col("hi")).otherwise(pl.col("lo")).alias("target_id"))
    title = dict(zip(entities["id"].to_list(), entities["title"].to_list()))
    rel = pairs.select(
        pl.Series("id", [content_id("relationship", a, b) for a, b in
                         zip(pairs["lo"].to_list(), pairs["hi"].to_list())],
                  dtype=pl.String),
        pl.int_range(pairs.height, dtype=pl.Int64).alias("human_readable_id"),
        pl.col("source_id").replace_strict(title, return_dtype=pl.String).alias("source"),
        pl.col("target_id").replace_strict(title, return_dtype=pl.String).alias("target"),
        pl.col("description").fill_null(""), "weight",
        pl.lit(0, dtype=pl.Int64).alias("combined_degree"),
        pl.lit([], dtype=pl.List(pl.String)).alias("text_unit_ids"),
        "source_id", "target_id", pl.lit(RELATIONSHIP_KIND).alias("kind"))
    counts = {"edges_given": edges.height, "self_loops_dropped": loops,
              "repeated_pairs_merged": int((pairs["given"] - 1).sum() or 0),
              "relationships": rel.height}
    return schemas.conform(rel, schemas.RELATIONSHIPS_SCHEMA), counts


def _check_output(output_dir: Path) -> None:
    """An output folder may be new, empty, or an earlier import; never a built index."""
    if output_dir.exists() and not output_dir.is_dir():
        raise GraphImportError(f"{output_dir} exists and is not a folder")
    if output_dir.is_dir() and any(output_dir.iterdir()) and not (
            output_dir / IMPORT_SUMMARY).exists():
        raise GraphImportError(
            f"{output_dir} is not empty and holds no earlier graph import "
            f"({IMPORT_SUMMARY}): choose a new or empty folder, so nothing there is "
            "overwritten")


def import_graph(nodes: pl.DataFrame, edges: pl.DataFrame, output_dir: str | Path,
                 source: dict[str, str] | None = None,
                 ann_min_rows: int | None = None,
                 progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Write ``nodes`` and ``edges`` as a kgloom index in ``output_dir``.

    Written: the layout of a ``kgloom index`` output, text-free (:func:`_write_tables`
    lists the tables), then ``graph-import.json``, the summary returned here.

    Everything is written into a new folder next to ``output_dir`` first, which then
    takes its place; a failure leaves ``output_dir`` as it was.

    Args:
        nodes: the nodes table (see the module doc), n rows.
        edges: the edges table, m rows.
        output_dir: a new or empty folder, or one an earlier import wrote (replaced).
        source: where the tables came from (recorded in the summary), e.g. file paths.
        ann_min_rows: row threshold for the IVF_PQ index (tests use a small one).
        progress: called with a line before each step (the CLI prints them); the
            LanceDB index build is the long one (~1 minute for 169k 128-dim vectors on
            2 cores).

    Returns:
        The summary dict: nodes, dim, edges_given, self_loops_dropped,
        repeated_pairs_merged, relationships, extra_node_columns, ann_index (bool),
        seconds, source, output_dir.

    Raises:
        GraphImportError: a missing column, a null or repeated node id, a bad vector, a
            bad weight, an edge naming an unknown node, or an output folder that holds
            something else.
    """
    start = time.perf_counter()
    say = progress or (lambda line: None)
    output_dir = Path(output_dir)
    say(f"checking {nodes.height} nodes and {edges.height} edges")
    _require(nodes, "nodes", ("id", "vector"))
    _require(edges, "edges", ("source", "target"))
    _check_output(output_dir)
    entities, relationships, vectors, counts = _checked_graph(nodes, edges, say)
    graph_nodes, graph_edges, extra = _graph_tables(nodes, entities, relationships)

    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.import-", dir=output_dir.parent))
    try:
        indexed = _write_tables(staging, entities, relationships, graph_nodes, graph_edges,
                                vectors, ann_min_rows, say)
        summary = {"nodes": entities.height, "dim": int(vectors.shape[1]), **counts,
                   "extra_node_columns": extra, "ann_index": indexed,
                   "vectors": EXTERNAL_VECTORS_KEY, "source": source or {},
                   "output_dir": str(output_dir),
                   "seconds": round(time.perf_counter() - start, 3)}
        storage.write_json(summary, staging / IMPORT_SUMMARY)
        publish_build(staging)  # readers of the new folder open this build
        _swap_in(staging, output_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return summary


def _checked_graph(nodes: pl.DataFrame, edges: pl.DataFrame, say: Callable[[str], None]
                   ) -> tuple[pl.DataFrame, pl.DataFrame, np.ndarray, dict[str, int]]:
    """(entities, relationships, node vectors (n, dim) float32, the edge counts of
    :func:`_relationships`) of the checked input tables, degree and PageRank filled in
    (``kgloom.graph.communities.compute_graph_metrics``).

    Raises:
        GraphImportError: a null or repeated node id, a bad vector, a bad weight, or an
            edge naming an unknown node.
    """
    entities = _entities(nodes)
    vectors = node_vectors(nodes)
    relationships, counts = _relationships(edges, entities)
    say(f"degree and PageRank of {entities.height} nodes, {relationships.height} edges")
    entities, relationships = compute_graph_metrics(entities, relationships)
    return entities, relationships, vectors, counts


def _graph_tables(nodes: pl.DataFrame, entities: pl.DataFrame, relationships: pl.DataFrame
                  ) -> tuple[pl.DataFrame, pl.DataFrame, list[str]]:
    """(graph-nodes, graph-edges, the extra node columns): the graph tables of the
    entities and relationships (``kgloom.publish.tables.build_graph_tables``, no
    communities), graph-nodes joined with every node column beyond
    :data:`NODE_COLUMNS`, by entity id, in graph-nodes' order.

    Raises:
        GraphImportError: an extra node column clashes with graph-nodes' own columns.
    """
    graph_nodes, graph_edges = tables.build_graph_tables(
        entities, relationships, schemas.empty(schemas.COMMUNITIES_SCHEMA))
    extra = [c for c in nodes.columns if c not in NODE_COLUMNS]
    clash = [c for c in extra if c in _RESERVED]
    if clash:
        raise GraphImportError(f"node column(s) {clash} clash with graph-nodes.parquet's own "
                               "columns: rename them")
    if extra:
        graph_nodes = graph_nodes.join(
            nodes.select(pl.col("id").cast(pl.String).alias("entity_id"), *extra),
            on="entity_id", how="left", maintain_order="left")
    return graph_nodes, graph_edges, extra


def _write_tables(staging: Path, entities: pl.DataFrame, relationships: pl.DataFrame,
                  graph_nodes: pl.DataFrame, graph_edges: pl.DataFrame, vectors: np.ndarray,
                  ann_min_rows: int | None, say: Callable[[str], None]) -> bool:
    """Write the index's tables into ``staging``: entities.parquet (ENTITIES_SCHEMA: the
    node id as entity id, title, type, description, degree, weighted_degree, PageRank by
    ``kgloom.graph.communities.compute_graph_metrics``), relationships.parquet
    (RELATIONSHIPS_SCHEMA: id = ``content_id("relationship", a, b)`` of the sorted pair
    as for extracted ones, kind ``imported``), graph-nodes.parquet (GRAPH_NODES_SCHEMA
    plus every extra node column, node_key 0..n-1 in order of sorted id) and
    graph-edges.parquet (``kgloom.publish.tables.build_graph_tables``), empty
    text_units.parquet, and ``lancedb/`` with the ``entities`` table (id, title, type,
    description, vector: ``vectors``, (n, dim) float32; IVF_PQ cosine index from
    ``ann_min_rows`` rows, default ``vectors.ANN_INDEX_MIN_ROWS``), an empty
    ``text_units`` table of the same dimension, and an embedder manifest marking the
    vectors external.

    Returns:
        whether the LanceDB entities table got its ANN index.
    """
    say("writing parquet tables")
    for df, name in [(entities, schemas.ENTITIES), (relationships, schemas.RELATIONSHIPS),
                     (graph_nodes, schemas.GRAPH_NODES), (graph_edges, schemas.GRAPH_EDGES),
                     (schemas.empty(schemas.TEXT_UNITS_SCHEMA), schemas.TEXT_UNITS)]:
        storage.write_table(df, staging, name)
    db = staging / LANCEDB_DIR
    dim = int(vectors.shape[1])
    limits = {} if ann_min_rows is None else {"ann_min_rows": ann_min_rows}
    say("writing the LanceDB entities table (and its IVF_PQ index when large)")
    written = write_lancedb(db, "entities",
                            entities.select("id", "title", "type", "description"),
                            vectors, **limits)
    write_lancedb(db, "text_units", schemas.empty(schemas.TEXT_UNITS_SCHEMA),
                  np.zeros((0, dim), dtype=np.float32))
    write_external_manifest(db, dim)
    return bool(written["indexed"])


def _swap_in(staging: Path, output_dir: Path) -> None:
    """Put the finished ``staging`` folder at ``output_dir`` (two renames; an earlier
    import there is removed only after the new one is in place)."""
    old = None
    if output_dir.exists():
        old = output_dir.with_name(f".{output_dir.name}.replaced-{os.getpid()}")
        os.replace(output_dir, old)
    os.replace(staging, output_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
