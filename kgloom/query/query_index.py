"""The query side's index handle: one published build of a kgloom output folder, opened
once and read-only, shared by every retrieval mode (:mod:`kgloom.query.retrieval`) and
by search (:mod:`kgloom.query.structured_search`).

:meth:`QueryIndex.open` checks the folder (files present, tables of the same build, the
query embedder the one that made the vectors) and loads the :class:`TextUnits` (ids,
text, denormalized graph columns, vectors and the entity -> unit mentions). The
:class:`EntityGraph` (graph-nodes/edges as a CSR adjacency, entity vectors, the
unit x entity incidence and affinity, the name linker) is loaded on first use by a graph
mode, and the tables search reads besides them (:class:`SearchTables`) on first use by
search, so ``vector`` and ``one_hop`` work on a folder holding only the vector store.
It reads only the published files (LanceDB tables and parquet) of one published build
(:mod:`kgloom.core.builds`: the build ``build.json`` names when it opens, whatever is
republished meanwhile), never the stage folders, writes nothing, and imports no Dagster.

The handle holds no per-call state: any number of threads may query it at once (the
lazy loads take a lock).
"""

from __future__ import annotations

import os
import re
import threading
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from kgloom.core import schemas
from kgloom.core.builds import (
    OPEN_RETRIES,
    Build,
    IndexChangedError,
    IndexFilesMissingError,
    IndexInconsistentError,
)
from kgloom.core.layout import LANCEDB_DIR
from kgloom.embedding import query_embedder
from kgloom.embedding.sentence_embedder import Embedder
from kgloom.embedding.store import (
    EMBEDDER_MANIFEST,
    EMBEDDING_KEY,
    EXTERNAL_VECTORS_KEY,
    VECTOR_TABLES,
    ExternalVectors,
    flat_snapshot_path,
    read_flat_snapshot,
    search_vectors,
    vector_index_type,
)
from kgloom.embedding.windows import WindowedEmbedder
from kgloom.names.normalize import record_title
from kgloom.query.entity_graph import EntityGraph, load_entity_graph
from kgloom.query.lexical import LexicalIndex, titled

TITLE_MAX_WORDS = 8  # the longest document title looked for in a unit's text (words)
_WORD = re.compile(r"\w+", re.UNICODE)

QUERY_EMBED_THREADS = 1  # a question is a few tokens: one thread beats two (Embedder.embed)
UNIT_COLUMNS = ("id", "text", "document_id", "kg_node_ids", "neighbor_entity_ids",
                "neighbor_triples")


class EmbedderMismatchError(ValueError):
    """The query embedder is not the one that embedded the index; names both."""


def configured_embedder_path() -> str | None:
    """The embedder folder from ``KGLOOM_EMBEDDER_PATH``, or None for the bundled one."""
    return os.environ.get("KGLOOM_EMBEDDER_PATH") or None


@dataclass(frozen=True)
class TextUnits:
    """The index's text units, in LanceDB (or snapshot) row order; row = position.

    Attributes:
        frame: columns ``row`` (u32), ``id``, ``text``, ``document_id``, ``kg_node_ids``,
            ``neighbor_entity_ids``, ``neighbor_triples``, ``document_title``.
        ids / texts / document_ids / document_titles: per row, as Python lists.
        kg_node_ids / neighbor_entity_ids / neighbor_triples: per row, lists of str (or
            None), as Python lists (converted once, not per call).
        row_of: unit id -> row.
        mentions: entity id -> rows of the units that mention it (``kg_node_ids``).
        vectors: float32 (units, dim), as stored (not re-normalized).
        ann: the search kind of the LanceDB ``text_units`` table (``flat`` / ``ivf_pq``).
        from_snapshot: the vectors were read from the flat index's snapshot beside the
            table (:func:`kgloom.publish.vectors.read_flat_snapshot`), and a search is an
            exact numpy scan of them; False: searches go to LanceDB.
    """

    frame: pl.DataFrame
    ids: list[str]
    texts: list[str]
    document_ids: list[str]
    document_titles: list[str | None]
    kg_node_ids: list[list[str] | None]
    neighbor_entity_ids: list[list[str] | None]
    neighbor_triples: list[list[str] | None]
    row_of: dict[str, int]
    mentions: dict[str, list[int]]
    vectors: np.ndarray
    ann: str
    from_snapshot: bool

    @property
    def count(self) -> int:
        """Number of text units."""
        return self.frame.height


@dataclass(frozen=True)
class QueryIndex:
    """A read-only handle on one published build of a kgloom output folder (module doc).

    Open it with :meth:`open`. Attributes: ``output_dir``, ``db_path`` (its
    ``lancedb/``), ``build`` (:class:`kgloom.core.builds.Build`), ``embedder`` (the query
    embedder, or :class:`kgloom.publish.vectors.ExternalVectors` for an imported graph),
    ``units`` (:class:`TextUnits`). :attr:`graph` and :attr:`tables` load on first use.
    """

    output_dir: Path
    db_path: Path
    build: Build
    embedder: Embedder | ExternalVectors | WindowedEmbedder
    units: TextUnits
    _lazy: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _lock: Any = field(default_factory=threading.RLock, repr=False, compare=False)

    @classmethod
    def open(cls, output_dir: str | Path,
             embedder: Embedder | WindowedEmbedder | str | Path | None = None) -> QueryIndex:
        """Open the build ``output_dir``'s marker names now and load its text units.

        Args:
            output_dir: the folder ``kgloom index`` wrote (holds ``lancedb/`` and parquet).
            embedder: an :class:`kgloom.embedding.sentence_embedder.Embedder` (or any
                :class:`~kgloom.embedding.windows.WindowedEmbedder`), a model folder,
                or None for ``KGLOOM_EMBEDDER_PATH`` / the bundled all-MiniLM-L6-v2 (a
                folder is loaded by :func:`kgloom.embedding.query_embedder`:
                numpy when it can, no torch). It must be the embedder that built the
                index. An imported graph (embedder manifest key ``external``) opens with
                no text embedder when none is given: it is queried by vector only.

        Parquet tables are read from the build's folder and LanceDB tables checked out at
        the build's versions, so a republish while it is open changes nothing it reads.
        When the build changes while it is being opened, the new one is opened
        (:data:`kgloom.core.builds.OPEN_RETRIES` tries).

        Raises:
            IndexFilesMissingError: no LanceDB ``text_units`` table (names the path and
                the command that builds it), or a table the build lists is missing.
            IndexChangedError: the index was republished during every try to open it.
            EmbedderMismatchError: the index was embedded by another model or dimension.
            IndexInconsistentError: LanceDB and parquet text units differ (half-written),
                or a table is not the one the build recorded.
        """
        output_dir = Path(output_dir)
        db_path = output_dir / LANCEDB_DIR
        if not output_dir.is_dir():
            raise IndexFilesMissingError(f"{output_dir} is not a folder: run `kgloom index "
                                         f"--output-dir {output_dir}` first")
        if not (db_path / "text_units.lance").exists():
            raise IndexFilesMissingError(
                f"{db_path / 'text_units.lance'} is missing: this is not a finished kgloom "
                f"index (the vector_index asset writes it; run `kgloom index`)")
        for attempt in range(OPEN_RETRIES):
            build = Build.open(output_dir)
            tables = _Tables(db_path, build)
            try:
                emb = _open_embedder(build, db_path, tables, embedder)
                units = _load_units(build, db_path, tables, emb)
            except IndexChangedError:
                if attempt == OPEN_RETRIES - 1:
                    raise
                continue
            return cls(output_dir, db_path, build, emb, units, {"tables": tables})
        raise AssertionError("unreachable")

    # --- lazily loaded parts ---------------------------------------------------------
    def table(self, name: str) -> Any:
        """LanceDB table ``name`` of this build, opened (and ``lancedb`` imported) on
        first use: a flat index read through its snapshots never needs it."""
        return self._lazy["tables"].get(name)

    @property
    def graph(self) -> EntityGraph:
        """The entity graph, loaded on first use.

        Raises:
            IndexFilesMissingError: a graph file is missing (names each one).
            IndexInconsistentError: graph tables of different builds (half-written).
        """
        graph = self._lazy.get("graph")
        if graph is None:
            with self._lock:
                graph = self._lazy.get("graph")
                if graph is None:
                    graph = self._lazy["graph"] = load_entity_graph(self)
        return graph

    @property
    def loaded_graph(self) -> EntityGraph | None:
        """The entity graph when it was loaded already, else None (loads nothing)."""
        return self._lazy.get("graph")

    def entity_titles(self) -> dict[str, str]:
        """Entity id -> title from entities.parquet ({} when the index has none); read
        once. one_hop uses it only to name entities in its result."""
        titles = self._lazy.get("titles")
        if titles is None:
            with self._lock:
                titles = {}
                if self.build.has(schemas.ENTITIES):
                    e = self.build.read(schemas.ENTITIES, columns=["id", "title"])
                    titles = dict(zip(e["id"].to_list(), e["title"].to_list()))
                self._lazy["titles"] = titles
        return titles

    @property
    def tables(self) -> Any:
        """The tables search reads besides the text units
        (:class:`kgloom.query.context_builder.search_tables.SearchTables`), loaded on first use.

        Raises:
            IndexChangedError: this build was pruned meanwhile.
        """
        tables = self._lazy.get("search_tables")
        if tables is None:
            from kgloom.query.context_builder.search_tables import SearchTables

            with self._lock:
                tables = self._lazy.get("search_tables")
                if tables is None:
                    tables = self._lazy["search_tables"] = SearchTables.load(self)
        return tables

    @property
    def lexical(self) -> LexicalIndex:
        """BM25 over the text units (:class:`kgloom.query.lexical.LexicalIndex`), each
        unit's text after its document's title when the text does not start with it (a
        Wikipedia passage's title is its subject's name); built on first use (about a
        second per 6,000 units), then kept."""
        lexical = self._lazy.get("lexical")
        if lexical is None:
            with self._lock:
                lexical = self._lazy.get("lexical")
                if lexical is None:
                    u = self.units
                    lexical = self._lazy["lexical"] = LexicalIndex(
                        [titled(t, title) for t, title in zip(u.texts, u.document_titles)])
        return lexical

    def adjacent_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(before, after): int64 arrays of shape (units,), the row of the text unit
        just before and just after each one in its document (``chunk_index`` - 1 and
        + 1), -1 where there is none (a document's first or last unit, a document of one
        unit, an index without text_units.parquet). Built on first use, then kept."""
        pair = self._lazy.get("adjacent_rows")
        if pair is None:
            with self._lock:
                n = len(self.units.ids)
                before, after = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
                if self.build.has(schemas.TEXT_UNITS):
                    t = self.build.read(schemas.TEXT_UNITS,
                                        columns=["id", "document_id", "chunk_index"])
                    row_of = self.units.row_of
                    at = {(d, c): row_of[i] for i, d, c in zip(
                        t["id"].to_list(), t["document_id"].to_list(),
                        t["chunk_index"].to_list()) if i in row_of}
                    for (d, c), r in at.items():
                        before[r] = at.get((d, c - 1), -1)
                        after[r] = at.get((d, c + 1), -1)
                pair = self._lazy["adjacent_rows"] = (before, after)
        return pair

    def rows_titled(self) -> dict[str, set[int]]:
        """Case-folded document title -> the rows of the text units of the documents
        so titled (a Wikipedia passage's title is its subject's name: the unit most
        about the entity of that name); built on first use, then kept."""
        rows = self._lazy.get("rows_titled")
        if rows is None:
            with self._lock:
                rows = {}
                for r, title in enumerate(self.units.document_titles):
                    for name in {title, record_title(title)}:
                        if name:
                            rows.setdefault(name.casefold(), set()).add(r)
                self._lazy["rows_titled"] = rows
        return rows

    def titles_written(self, row: int) -> list[str]:
        """Ids (in text order) of the entities whose title or an alias is a
        document's title (with or without its trailing parenthesis,
        :func:`kgloom.names.normalize.record_title`) and which the text unit at ``row``
        writes as whole words with a capital, though extraction did not record them
        there (a film named in quotes at the end of a town's passage). A Wikipedia
        passage writes the titles of the articles it links to; these are its links.
        Titles of up to ``TITLE_MAX_WORDS`` words; the lookup is built on first use
        (one pass over the titles and aliases), each unit's answer kept."""
        found = self._lazy.setdefault("titles_written", {})
        if row in found:
            return found[row]
        keys = self._lazy.get("title_keys")
        if keys is None:
            with self._lock:
                g, titled = self.graph, self.rows_titled()
                keys = {}
                for name, eid in g.linker.forms:
                    words = _WORD.findall(unicodedata.normalize("NFKC", name).casefold())
                    if (eid in g.node_of and name.casefold() in titled
                            and 0 < len(words) <= TITLE_MAX_WORDS):
                        eids = keys.setdefault(" ".join(words), [])
                        if eid not in eids:
                            eids.append(eid)
                self._lazy["title_keys"] = keys
        raw = _WORD.findall(unicodedata.normalize("NFKC", self.units.texts[row]))
        folded = [w.casefold() for w in raw]
        have = set(self.units.kg_node_ids[row] or [])
        out: list[str] = []
        for i in range(len(raw)):
            for n in range(1, min(TITLE_MAX_WORDS, len(raw) - i) + 1):
                eids = keys.get(" ".join(folded[i:i + n]))
                if eids and any(c.isupper() for w in raw[i:i + n] for c in w):
                    out += [e for e in eids if e not in have and e not in out]
        found[row] = out
        return out

    # --- vectors ---------------------------------------------------------------------
    def embed(self, texts: list[str]) -> np.ndarray:
        """float32 (len(texts), dim): the query embedder's vectors of ``texts``.

        Raises:
            kgloom.publish.vectors.ExternalVectorsError: an imported graph's index.
        """
        return self.embedder.embed(texts, threads=QUERY_EMBED_THREADS)

    def similarities(self, qv: np.ndarray) -> np.ndarray:
        """Cosine of the query vector with every text unit (float64 (units,))."""
        vectors = self.units.vectors
        return vectors.astype(np.float64) @ qv.astype(np.float64) if \
            vectors.shape[0] else np.zeros(0)

    def ann_kind(self, table: str) -> str:
        """The search kind of ``table`` (text_units or entities): flat or ivf_pq."""
        return self.units.ann if table == "text_units" else self.graph.entity_ann

    def search(self, table: str, vector: np.ndarray, k: int, refine_rows: int | None = None
               ) -> tuple[list[str], np.ndarray]:
        """Nearest rows of ``table`` (text_units or entities) by cosine: an exact numpy
        scan of a flat table's snapshot vectors (what LanceDB's flat search computes),
        else LanceDB's search (``refine_rows``: see
        :func:`kgloom.embedding.store.search_vectors`).

        Returns:
            (row ids, float64 cosines), nearest first, at most ``k`` (and at most the
            table's rows: a larger ``k``, e.g. a huge ``top_k``, is cut to them before it
            reaches LanceDB, whose limit is a 64-bit integer).
        """
        graph = self.graph if table == "entities" else None  # loads the entity vectors
        k = min(k, self.units.count if graph is None else len(graph.entity_ids))
        if k <= 0:
            return [], np.zeros(0)
        mat, ids = None, None
        if graph is None and self.units.from_snapshot:
            mat, ids = self.units.vectors, self.units.ids
        elif graph is not None and graph.snapshot_vectors is not None:
            mat, ids = graph.snapshot_vectors, graph.snapshot_ids
        if mat is not None and ids is not None:
            v = np.asarray(vector, dtype=np.float32)
            sims = (mat @ v) / np.maximum(np.linalg.norm(mat, axis=1)
                                          * max(float(np.linalg.norm(v)), 1e-12), 1e-12)
            top = np.argsort(-sims, kind="stable")[:k]
            return [ids[i] for i in top], sims[top].astype(np.float64)
        handle = self.table("text_units") if graph is None else graph.entity_table
        return search_vectors(handle, vector, k, self.ann_kind(table), refine_rows)


class _Tables:
    """A build's LanceDB tables, each opened on first use (``lancedb`` imported then)."""

    def __init__(self, db_path: Path, build: Build) -> None:
        self.db_path, self.build = db_path, build
        self.db: Any = None
        self.opened: dict[str, Any] = {}
        self.lock = threading.Lock()

    def get(self, name: str) -> Any:
        with self.lock:
            if name not in self.opened:
                import lancedb

                if self.db is None:
                    self.db = lancedb.connect(str(self.db_path))
                self.opened[name] = self.build.lancedb_table(self.db, name)
            return self.opened[name]


# --- opening ---------------------------------------------------------------------------
def _stored_dim(build: Build, db_path: Path, tables: _Tables) -> int:
    """The vector width of the index's text units: from the manifest when it names one,
    else from the LanceDB table."""
    manifest = build.read_json(EMBEDDER_MANIFEST)
    if manifest and manifest.get("dim") and manifest.get("key") != EXTERNAL_VECTORS_KEY \
            and flat_snapshot_path(db_path, "text_units").exists():
        return int(manifest["dim"])
    return tables.get("text_units").schema.field("vector").type.list_size


def _open_embedder(build: Build, db_path: Path, tables: _Tables,
                   embedder: Embedder | WindowedEmbedder | str | Path | None
                   ) -> Embedder | ExternalVectors | WindowedEmbedder:
    manifest = build.read_json(EMBEDDER_MANIFEST)
    stored_dim = _stored_dim(build, db_path, tables)
    if embedder is None and manifest and manifest.get("key") == EXTERNAL_VECTORS_KEY:
        return ExternalVectors(stored_dim)  # an imported graph: queried by vector only
    if isinstance(embedder, WindowedEmbedder):
        emb = embedder
    else:  # same vectors as Embedder; numpy when the folder allows (no torch import)
        path = str(embedder) if embedder else configured_embedder_path()
        emb = query_embedder(path)
    configured = f"{emb.name} ({emb.dim} dims)"
    if manifest and (manifest["model"] != emb.name or int(manifest["dim"]) != emb.dim):
        raise EmbedderMismatchError(
            f"the index was embedded with {manifest['model']} ({manifest['dim']} dims) but "
            f"queries would use {configured}: open it with that embedder "
            f"(KGLOOM_EMBEDDER_PATH, --embedder-path) or rebuild the vector index")
    if stored_dim != emb.dim:
        stored = f"{manifest['model']} " if manifest else "an unrecorded embedder "
        raise EmbedderMismatchError(
            f"the index was embedded with {stored}({stored_dim} dims) but queries would "
            f"use {configured}: the dimensions differ")
    if manifest is None and EMBEDDING_KEY in tables.get("text_units").schema.names:
        _check_embedding_keys(tables.get("text_units"), emb)
    return emb


def _check_embedding_keys(unit_table: Any, emb: Any) -> None:
    """Without a manifest: recompute one row's embedding key with ``emb``."""
    from kgloom.core.ids import content_id

    row = unit_table.search().select(["text", EMBEDDING_KEY]).limit(1).to_arrow()
    if row.num_rows and content_id("embedding", emb.key, row["text"][0].as_py()) != \
            row[EMBEDDING_KEY][0].as_py():
        raise EmbedderMismatchError(
            f"the index's vectors were not made by {emb.name} with "
            f"window/stride {emb.key.split('|', 1)[1]} (an unrecorded embedder built it): "
            "rebuild the vector index or open it with the embedder that built it")


def _load_units(build: Build, db_path: Path, tables: _Tables, embedder: Any) -> TextUnits:
    cols: list[str] = list(UNIT_COLUMNS)
    parquet = build.live_path(schemas.TEXT_UNITS)
    has_parquet = build.has(schemas.TEXT_UNITS)
    flat = None
    units: pl.DataFrame | None = None
    if has_parquet:  # the snapshot holds exactly this build's rows' vectors, or is unused
        units = build.read(schemas.TEXT_UNITS, columns=cols)
        flat = read_flat_snapshot(db_path, "text_units", units,
                                  VECTOR_TABLES["text_units"][1], embedder.key)
    if flat is not None and units is not None:
        vectors, ann = flat, "flat"
    else:
        unit_table = tables.get("text_units")
        ann = vector_index_type(unit_table)
        arrow = unit_table.to_arrow().select([*cols, "vector"])
        vec = arrow.column("vector").combine_chunks()
        dim = vec.type.list_size
        if dim != embedder.dim:  # _stored_dim read the manifest's
            raise EmbedderMismatchError(
                f"the index's text unit vectors have {dim} dims but queries would use "
                f"{embedder.name} ({embedder.dim} dims)")
        vectors = (vec.flatten().to_numpy(zero_copy_only=False)
                   .reshape(len(vec), dim).astype(np.float32)) if len(vec) else \
            np.zeros((0, dim), dtype=np.float32)
        read = pl.from_arrow(arrow.drop(["vector"]))
        assert isinstance(read, pl.DataFrame)
        units = read
    if has_parquet and flat is None:
        ids = build.read(schemas.TEXT_UNITS, columns=["id"])["id"]
        if ids.len() != units.height or set(ids.to_list()) != set(units["id"].to_list()):
            raise IndexInconsistentError(
                f"half-written index: {parquet} has {ids.len()} text units but the LanceDB "
                f"text_units table has {units.height} (or other ids); re-run `kgloom index`")
    titles = {}
    if build.has(schemas.DOCUMENTS):
        d = build.read(schemas.DOCUMENTS, columns=["id", "title"])
        titles = dict(zip(d["id"].to_list(), d["title"].to_list()))
    frame = units.with_columns(
        pl.col("document_id").replace_strict(titles, default=None, return_dtype=pl.String)
        .alias("document_title")).with_row_index("row")
    ids_ = frame["id"].to_list()
    kg = frame["kg_node_ids"].to_list()
    mentions: dict[str, list[int]] = {}
    for i, ents in enumerate(kg):
        for e in ents or []:
            mentions.setdefault(e, []).append(i)
    return TextUnits(
        frame=frame, ids=ids_, texts=frame["text"].to_list(),
        document_ids=frame["document_id"].to_list(),
        document_titles=frame["document_title"].to_list(), kg_node_ids=kg,
        neighbor_entity_ids=frame["neighbor_entity_ids"].to_list(),
        neighbor_triples=frame["neighbor_triples"].to_list(),
        row_of={uid: i for i, uid in enumerate(ids_)}, mentions=mentions, vectors=vectors,
        ann=ann, from_snapshot=flat is not None)
