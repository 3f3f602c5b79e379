"""Retrieval over a kgloom index: one handle, six modes, one result shape.

:class:`Retriever` opens an output folder once, checks it (files present, tables of the
same build, the query embedder the one that made the vectors) and keeps in memory what a
long-lived query service would keep: the text units with their vectors and denormalized
graph columns, and (on first use by a graph mode) the entity graph as a CSR adjacency.
It reads only the published files (LanceDB tables and parquet) of one published build
(:mod:`kgloom.builds`: the build ``build.json`` names when it opens, whatever is
republished meanwhile), never the stage folders, writes nothing, and imports no Dagster.

Every mode returns a :class:`RetrievalResult`: ranked text units (id, score, text,
document) with the entities, relationships and hop depths that brought each one in, the
question's linked entities, and an ``info`` dict (which search each table used, the
fallback taken, timings).

Modes (``Retriever.retrieve(question, mode=...)`` or the method of the same name):

- ``vector``: ANN over the LanceDB ``text_units`` table; the baseline.
- ``one_hop``: vector hits expanded through the text units' own ``kg_node_ids`` /
  ``neighbor_entity_ids`` / ``neighbor_triples`` columns (no graph file is read), then
  re-ranked.
- ``multihop``: BFS to ``depth`` from the linked entities over graph-edges.parquet
  (DuckDB recursive CTE, or in memory), text units of reached entities ranked by hop
  depth, edge weight and similarity.
- ``fused``: ANN over entity vectors with oversampling, greedy Jaccard diversity rerank of
  the seeds, BFS from the chosen seeds; ``lam = 0`` equals :meth:`Retriever.two_step`.
- ``ppr``: personalized PageRank from the linked entities (HippoRAG's recipe).
- ``hybrid``: reciprocal-rank fusion of ``vector`` and ``ppr``.
- ``bridge``: the nearest text units, then the units most about the entities those
  units mention (a multi-hop question's second passage is the one about the bridge
  entity its first passage names).

``fused_by_vector`` / ``two_step_by_vector`` take a query vector instead of a question
(same code after the embedding); they are how an imported graph (``kgloom
import-graph``: entity vectors from outside kgloom, no text units) is queried.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from kgloom import schemas
from kgloom.builds import (OPEN_RETRIES, Build, IndexChangedError,  # noqa: F401 (re-exported)
                           IndexFilesMissingError, IndexInconsistentError)
from kgloom.embedding.sentence_embedder import Embedder
from kgloom.embedding.fast import query_embedder
from kgloom.embedding.store import (ANN_REFINE_FACTOR, EMBEDDER_MANIFEST, EMBEDDING_KEY,
                                    EXTERNAL_VECTORS_KEY, LANCEDB_DIR, VECTOR_TABLES,
                                    ExternalVectors, flat_snapshot_path, read_flat_snapshot,
                                    search_vectors, vector_index_type)
from kgloom.embedding.windows import WindowedEmbedder
from kgloom.query import algorithms as alg
from kgloom.query.linking import LINKED_SCHEMA, LinkedEntity, NameLinker, linked_frame
from kgloom.query.modes import GRAPH_BACKENDS, RETRIEVAL_MODES, check_mode, one_of

# the modes of the one registry (kgloom.query.modes) that take a question alone;
# retrieve() also runs two_step
MODES = tuple(m for m in RETRIEVAL_MODES if m != "two_step")

DEFAULT_TOP_K = 5
DEFAULT_DEPTH = 1
DEFAULT_OVERSAMPLE = 5  # fused: entity candidates = 5 x top_k (the fused-retrieve default)
DEFAULT_LAMBDA = 1.0  # fused: overlap penalty
DEFAULT_DAMPING = 0.5  # ppr: probability of following an edge (HippoRAG uses 0.5)
QUERY_EMBED_THREADS = 1  # a question is a few tokens: one thread beats two (Embedder.embed)


@dataclass(frozen=True)
class RetrievalConfig:
    """The scoring knobs of the graph modes (defaults chosen by bench/eval_qa.py on
    2WikiMultihopQA; see the README's retrieval figures).

    Attributes:
        hop_decay: activation kept per hop away from a seed entity (multihop, fused).
        similarity_weight: weight of the question-unit cosine in multihop/fused unit
            scores (the graph part has weight 1).
        one_hop_weight: weight of the entity bonus in one_hop unit scores.
        one_hop_oversample: one_hop expands the ``one_hop_oversample x top_k`` nearest units.
        neighbor_decay: one_hop: a neighbour entity counts this much of a mentioned one.
        ann_link_min_similarity: a question span links the nearest entity (LanceDB
            ``entities`` vectors of "title: description") at cosine >= this.
        ann_link_question_k: entities linked by whole-question ANN (0 = off).
        rrf_k: reciprocal-rank fusion constant (Cormack et al. 2009 use 60).
        hybrid_pool: hybrid fuses the best ``hybrid_pool`` units of each ranking.
        hybrid_weights: RRF weights of the (vector, ppr) rankings.
        hit_seeds: the entities of this many nearest text units also seed multihop, ppr
            and hybrid (0 = only the question's linked entities).
        hit_seed_weight: their seed score is this times the unit's similarity.
        bridge_hits: bridge expands the entities of this many nearest text units.
        bridge_keep: bridge ranks this many nearest units first, then the bridged ones.
        bridge_relevance_power: bridge weighs an entity by (question-entity cosine,
            clipped at 0) to this power (0 = every entity of a hit counts alike).
        entity_affinity: weigh an entity's contribution to a unit by how much the unit is
            about it: the cosine of the entity's vector ("title: description") and the
            unit's vector, clipped at 0 (multihop, fused, ppr, hybrid); off, every
            mention counts 1.
        seed_diagnostics: fused / two_step also report ``seed_overlap`` (and fused
            ``baseline_seed_overlap``) in ``info``: mean pairwise Jaccard of the seeds'
            neighbourhoods, O(top_k^2) set operations that answer nothing; a latency
            benchmark turns them off and computes them outside the timed call.
        fused_first_hop: the fused retrieve's BFS over files starts from the chosen
            seeds' neighbourhoods, which its rerank read from the handle's adjacency:
            no edge-file query at depth 1, one recursion round fewer beyond (the same
            rows). False: it reads every hop from graph-edges.parquet, as the two-call
            baseline's traversal call does (the retrieval bench's ``files_reread``
            handle). The in-memory BFS is the same either way.
    """

    hop_decay: float = 0.25
    similarity_weight: float = 0.5
    one_hop_weight: float = 0.5
    one_hop_oversample: int = 3
    neighbor_decay: float = 0.0
    ann_link_min_similarity: float = 0.75
    ann_link_question_k: int = 0
    rrf_k: float = 60.0
    hybrid_pool: int = 20
    hybrid_weights: tuple[float, float] = (1.0, 1.0)
    entity_affinity: bool = True
    hit_seeds: int = 0
    hit_seed_weight: float = 0.5
    bridge_hits: int = 5
    bridge_keep: int = 1
    bridge_relevance_power: float = 1.0
    bridge_link_weight: float = 0.5
    seed_diagnostics: bool = True
    fused_first_hop: bool = True


_STR_LIST = pl.List(pl.String)
UNIT_RESULT_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int64,  # 1..k
    "id": pl.String,  # text unit id
    "score": pl.Float64,  # the mode's ranking score (higher is better)
    "similarity": pl.Float64,  # cosine of question and unit vectors
    "hop_depth": pl.Int64,  # hops from a seed entity to the nearest entity that brought
                            # it in; 0 = a seed's own unit or a direct vector hit
    "via": pl.String,  # vector | one_hop | bfs | ppr | hybrid | vector_fill
    "entity_ids": _STR_LIST,  # the entities that brought it in, strongest first
    "relationship_ids": _STR_LIST,  # the edges they were reached through
    "document_id": pl.String,
    "document_title": pl.String,
    "text": pl.String,
}
ENTITY_RESULT_SCHEMA: dict[str, pl.DataType] = {
    "entity_id": pl.String, "title": pl.String, "hop_depth": pl.Int64,
    "score": pl.Float64, "seed_entity_id": pl.String, "via": pl.String}
RELATIONSHIP_RESULT_SCHEMA: dict[str, pl.DataType] = {
    "relationship_id": pl.String, "source": pl.String, "relation": pl.String,
    "target": pl.String, "weight": pl.Float64, "hop_depth": pl.Int64}


class EmbedderMismatchError(ValueError):
    """The query embedder is not the one that embedded the index; names both."""


@dataclass
class RetrievalResult:
    """What every retrieval mode returns.

    Attributes:
        question: the question as given.
        mode: the mode asked for; ``info["used_mode"]`` is the one that ran (differs on a
            fallback, e.g. no entity linked -> ``vector``).
        text_units: UNIT_RESULT_SCHEMA frame, at most top_k rows, rank 1 first.
        entities: ENTITY_RESULT_SCHEMA frame: the entities the mode reached or scored.
        relationships: RELATIONSHIP_RESULT_SCHEMA frame: the edges it went through.
        linked: LINKED_SCHEMA frame: the question's entities and how each was found.
        info: parameters, ``used_mode``, ``fallback`` (None or why), ``ann`` (flat or
            ivf_pq per LanceDB table searched), ``graph_backend``, ``seconds``, and
            mode-specific figures (fused: seed overlap and ANN-score sums).
    """

    question: str
    mode: str
    text_units: pl.DataFrame
    entities: pl.DataFrame
    relationships: pl.DataFrame
    linked: pl.DataFrame
    info: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: question, mode, info, and each frame as a list of rows."""
        return {"question": self.question, "mode": self.mode, "info": self.info,
                "text_units": self.text_units.to_dicts(), "entities": self.entities.to_dicts(),
                "relationships": self.relationships.to_dicts(),
                "linked": self.linked.to_dicts()}


def _check_positive(name: str, value: float, strict: bool = True) -> None:
    if (value <= 0) if strict else (value < 0):
        raise ValueError(f"{name} must be {'>' if strict else '>='} 0, got {value}")


def _check_query_args(top_k: int, depth: int | None, lam: float | None) -> None:
    """Raise ValueError naming top_k (<= 0), depth (< 0) or lambda (< 0)."""
    if not isinstance(top_k, int) or top_k <= 0:
        raise ValueError(f"top_k must be > 0, got {top_k}")
    if depth is not None and (not isinstance(depth, int) or depth < 0):
        raise ValueError(f"depth must be >= 0, got {depth}")
    if lam is not None and lam < 0:
        raise ValueError(f"lambda must be >= 0, got {lam}")


def configured_embedder_path() -> str | None:
    """The embedder folder from ``KGLOOM_EMBEDDER_PATH``, or None for the bundled one."""
    return os.environ.get("KGLOOM_EMBEDDER_PATH") or None


class Retriever:
    """A read-only query handle on one kgloom output folder.

    Args:
        output_dir: the folder ``kgloom index`` wrote (holds ``lancedb/`` and parquet).
        embedder: an :class:`kgloom.embedding.sentence_embedder.Embedder` (or any
            :class:`~kgloom.embedding.windows.WindowedEmbedder`), a model folder, or
            None for ``KGLOOM_EMBEDDER_PATH`` / the bundled all-MiniLM-L6-v2 (a folder is
            loaded by :func:`kgloom.embedding.fast.query_embedder`: numpy when it
            can, no torch). It must be the embedder that built the index.
        graph_backend: ``duckdb`` (BFS by DuckDB's recursive CTE straight over
            graph-edges.parquet, per call; entity ANN by LanceDB) or ``memory`` (the
            same BFS over the CSR adjacency held by this handle, and the fused /
            two_step entity search as an exact scan of the entity vectors it holds).
        config: scoring knobs (:class:`RetrievalConfig`); may be replaced between calls.
        bfs_threads: workers per BFS: memory backend, numpy threads over the frontier
            (:func:`kgloom.query.algorithms.bfs_levels`; None = 1); duckdb backend,
            DuckDB's ``threads`` for the query (None = DuckDB's default, one per core).

    Opening checks the core of the index (the LanceDB ``text_units`` table, its vectors'
    dimension and embedder, and that it matches text_units.parquet when present) and
    loads the text units; graph files are checked and loaded on first use by a graph
    mode (``multihop``, ``fused``, ``ppr``, ``hybrid``), so ``vector`` and ``one_hop``
    work on a folder holding only the vector store. An imported graph (embedder
    manifest key ``external``) opens with no text embedder when none is given: its
    modes are the ``*_by_vector`` ones. A handle serves one call at a time (use one per
    thread).

    The handle reads one published build (:mod:`kgloom.builds`): the one the output
    folder's ``build.json`` names when it is opened (``self.build``), parquet tables
    from that build's folder and LanceDB tables checked out at that build's versions,
    so a republish while it is open changes nothing it reads. Every result's
    ``info["build_id"]`` names that build (None for a folder without a marker, read
    from its live files). When the build changes while the handle is being opened, it
    opens the new one (:data:`kgloom.builds.OPEN_RETRIES` tries).

    Raises:
        IndexFilesMissingError: no LanceDB ``text_units`` table (names the path and the
            command that builds it), or a table the build lists is missing.
        IndexChangedError: the index was republished during every try to open it, or
            (later, from a graph mode's first use) this handle's build was pruned.
        EmbedderMismatchError: the index was embedded by another model or dimension.
        IndexInconsistentError: LanceDB and parquet text units differ (half-written),
            or a table is not the one the build recorded.
        ValueError: an unknown graph_backend.
    """

    def __init__(self, output_dir: str | Path, embedder: Embedder | str | Path | None = None,
                 graph_backend: str = "duckdb", config: RetrievalConfig | None = None,
                 bfs_threads: int | None = None) -> None:
        if graph_backend not in GRAPH_BACKENDS:
            raise ValueError(one_of("graph_backend", graph_backend, GRAPH_BACKENDS))
        self.output_dir = Path(output_dir)
        self.graph_backend = graph_backend
        self.config = config or RetrievalConfig()
        if bfs_threads is not None and bfs_threads < 1:
            raise ValueError(f"bfs_threads must be >= 1, got {bfs_threads}")
        self.bfs_threads = bfs_threads
        self.db_path = self.output_dir / LANCEDB_DIR
        if not self.output_dir.is_dir():
            raise IndexFilesMissingError(f"{self.output_dir} is not a folder: run `kgloom index "
                                         f"--output-dir {self.output_dir}` first")
        if not (self.db_path / "text_units.lance").exists():
            raise IndexFilesMissingError(
                f"{self.db_path / 'text_units.lance'} is missing: this is not a finished kgloom "
                f"index (the vector_index asset writes it; run `kgloom index`)")
        for attempt in range(OPEN_RETRIES):
            self.build = Build.open(self.output_dir)
            self._db = None  # LanceDB, opened on first need (its import costs seconds)
            self._tables: dict[str, Any] = {}
            # a flat index's vectors as written beside it (read_flat_snapshot); None: LanceDB
            self._flat: dict[str, np.ndarray] = {}
            self._flat_ids: dict[str, list[str]] = {}  # row ids of _flat["entities"]
            self.ann: dict[str, str] = {}
            try:
                self.embedder = self._open_embedder(embedder)
                self._load_units()
                break
            except IndexChangedError:
                if attempt == OPEN_RETRIES - 1:
                    raise
        self._graph: dict[str, Any] | None = None
        self._linker: NameLinker | None = None
        self._titles: dict[str, str] | None = None
        self._searched: dict[str, str] = {}  # this call's LanceDB searches (not thread-safe)

    # --- opening -------------------------------------------------------------------
    def _table(self, name: str):
        """LanceDB table ``name`` of the index, opened (and ``lancedb`` imported) on first
        use: a flat index read through its snapshots never needs it."""
        if name not in self._tables:
            import lancedb

            if self._db is None:
                self._db = lancedb.connect(str(self.db_path))
            self._tables[name] = self.build.lancedb_table(self._db, name)
        return self._tables[name]

    @property
    def _unit_table(self):
        return self._table("text_units")

    def _stored_dim(self) -> int:
        """The vector width of the index's text units: from the manifest when it names
        one, else from the LanceDB table."""
        manifest = self.build.read_json(EMBEDDER_MANIFEST)
        if manifest and manifest.get("dim") and manifest.get("key") != EXTERNAL_VECTORS_KEY \
                and flat_snapshot_path(self.db_path, "text_units").exists():
            return int(manifest["dim"])
        return self._unit_table.schema.field("vector").type.list_size

    def _open_embedder(self, embedder: Embedder | str | Path | None
                       ) -> Embedder | ExternalVectors:
        manifest = self.build.read_json(EMBEDDER_MANIFEST)
        stored_dim = self._stored_dim()
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
        if manifest is None and EMBEDDING_KEY in self._unit_table.schema.names:
            self._check_embedding_keys(emb)
        return emb

    def _check_embedding_keys(self, emb: Embedder) -> None:
        """Without a manifest: recompute one row's embedding key with ``emb``."""
        from kgloom.ids import content_id

        row = self._unit_table.search().select(["text", EMBEDDING_KEY]).limit(1).to_arrow()
        if row.num_rows and content_id("embedding", emb.key, row["text"][0].as_py()) != \
                row[EMBEDDING_KEY][0].as_py():
            raise EmbedderMismatchError(
                f"the index's vectors were not made by {emb.name} with "
                f"window/stride {emb.key.split('|', 1)[1]} (an unrecorded embedder built it): "
                "rebuild the vector index or open it with the embedder that built it")

    def _load_units(self) -> None:
        cols = ["id", "text", "document_id", "kg_node_ids", "neighbor_entity_ids",
                "neighbor_triples"]
        parquet = self.build.live_path(schemas.TEXT_UNITS)
        has_parquet = self.build.has(schemas.TEXT_UNITS)
        flat = None
        if has_parquet:  # the snapshot holds exactly this build's rows' vectors, or is unused
            units = self.build.read(schemas.TEXT_UNITS, columns=cols)
            flat = read_flat_snapshot(self.db_path, "text_units", units,
                                      VECTOR_TABLES["text_units"][1], self.embedder.key)
        if flat is not None:
            self.unit_vectors = flat
            self._flat["text_units"] = flat
            self.ann["text_units"] = "flat"
        else:
            self.ann["text_units"] = vector_index_type(self._unit_table)
            arrow = self._unit_table.to_arrow().select([*cols, "vector"])
            vec = arrow.column("vector").combine_chunks()
            dim = vec.type.list_size
            if dim != self.embedder.dim:  # _stored_dim read the manifest's
                raise EmbedderMismatchError(
                    f"the index's text unit vectors have {dim} dims but queries would use "
                    f"{self.embedder.name} ({self.embedder.dim} dims)")
            self.unit_vectors = (vec.flatten().to_numpy(zero_copy_only=False)
                                 .reshape(len(vec), dim).astype(np.float32)) if len(vec) else \
                np.zeros((0, dim), dtype=np.float32)
            units = pl.from_arrow(arrow.drop(["vector"]))
            assert isinstance(units, pl.DataFrame)
        if has_parquet and flat is None:
            ids = self.build.read(schemas.TEXT_UNITS, columns=["id"])["id"]
            if ids.len() != units.height or set(ids.to_list()) != set(units["id"].to_list()):
                raise IndexInconsistentError(
                    f"half-written index: {parquet} has {ids.len()} text units but the LanceDB "
                    f"text_units table has {units.height} (or other ids); re-run `kgloom index`")
        titles = {}
        if self.build.has(schemas.DOCUMENTS):
            d = self.build.read(schemas.DOCUMENTS, columns=["id", "title"])
            titles = dict(zip(d["id"].to_list(), d["title"].to_list()))
        self.units = units.with_columns(
            pl.col("document_id").replace_strict(titles, default=None, return_dtype=pl.String)
            .alias("document_title")).with_row_index("row")
        # the columns every query walks, as Python lists (converted once, not per call)
        self.col = {c: self.units[c].to_list() for c in
                    ("id", "text", "document_id", "document_title", "kg_node_ids",
                     "neighbor_entity_ids", "neighbor_triples")}
        self.unit_row = {uid: i for i, uid in enumerate(self.col["id"])}
        # entity id -> rows of the units that mention it (kg_node_ids), no graph file read
        self.mentions: dict[str, list[int]] = {}
        for i, ents in enumerate(self.col["kg_node_ids"]):
            for e in ents or []:
                self.mentions.setdefault(e, []).append(i)

    def entity_titles(self) -> dict[str, str]:
        """Entity id -> title from entities.parquet ({} when the index has none); read
        once. one_hop uses it only to name entities in its result."""
        if self._titles is None:
            self._titles = {}
            if self.build.has(schemas.ENTITIES):
                e = self.build.read(schemas.ENTITIES, columns=["id", "title"])
                self._titles = dict(zip(e["id"].to_list(), e["title"].to_list()))
        return self._titles

    def _require(self, names: list[str]) -> None:
        missing = [str(self.build.live_path(n)) for n in names if not self.build.has(n)]
        if not (self.db_path / "entities.lance").exists():
            missing.append(str(self.db_path / "entities.lance"))
        if missing:
            raise IndexFilesMissingError(
                "graph modes need files this index lacks: " + ", ".join(missing)
                + " (the entities, relationships, graph_files and vector_index assets write "
                  "them; run `kgloom index`); vector and one_hop work without them")

    @property
    def graph(self) -> dict[str, Any]:
        """The entity graph, loaded on first use (see class doc).

        Keys: ``nodes`` (graph-nodes frame joined with entity descriptions and
        text_unit_ids), ``node_of`` (entity id -> node key), ``edges`` (graph-edges
        frame), ``adj`` (:class:`kgloom.query.algorithms.Adjacency`), ``incidence``
        (scipy CSR (units x nodes) of kg_node_ids), ``affinity`` (the same entries as
        cosine(entity vector, unit vector) clipped at 0), ``specificity`` (float64 (nodes,),
        1 / number of units mentioning the node, 1 when none), ``entity_table``
        (LanceDB), ``max_weight``.

        Raises:
            IndexFilesMissingError / IndexInconsistentError: see the class doc.
        """
        if self._graph is None:
            self._graph = self._load_graph()
        return self._graph

    def _load_graph(self) -> dict[str, Any]:
        from scipy.sparse import csr_matrix

        self._require([schemas.ENTITIES, schemas.RELATIONSHIPS, schemas.GRAPH_NODES,
                       schemas.GRAPH_EDGES])
        b = self.build
        nodes = b.read(schemas.GRAPH_NODES, columns=["node_key", "entity_id", "title"])
        entities = b.read(schemas.ENTITIES, columns=["id", "title", "type", "description"])
        edges = b.read(schemas.GRAPH_EDGES)
        if nodes.height != entities.height or not nodes["node_key"].equals(
                pl.Series("node_key", range(nodes.height), dtype=pl.Int64)):
            raise IndexInconsistentError(
                f"half-written index: graph-nodes.parquet has {nodes.height} nodes but "
                f"entities.parquet has {entities.height} entities; re-run `kgloom index`")
        node_of = dict(zip(nodes["entity_id"].to_list(), nodes["node_key"].to_list()))
        unknown = [e for e in self.mentions if e not in node_of]
        if unknown:
            raise IndexInconsistentError(
                f"half-written index: text units mention {len(unknown)} entities missing from "
                f"graph-nodes.parquet (e.g. {unknown[0]}); re-run `kgloom index`")
        if not nodes["entity_id"].sort().equals(entities["id"].sort(), check_names=False):
            raise IndexInconsistentError(
                "half-written index: graph-nodes.parquet and entities.parquet hold "
                "different entity ids (tables of two builds); re-run `kgloom index`")
        flat = read_flat_snapshot(self.db_path, "entities", entities,
                                  VECTOR_TABLES["entities"][1], self.embedder.key)
        entity_table = None if flat is not None else self._table("entities")
        if entity_table is not None and entity_table.count_rows() != nodes.height:
            raise IndexInconsistentError(
                f"half-written index: the LanceDB entities table has "
                f"{entity_table.count_rows()} rows but entities.parquet has {nodes.height}")
        self.ann["entities"] = "flat" if flat is not None else vector_index_type(entity_table)
        adj = alg.Adjacency.from_edges(nodes.height, edges["src_key"].to_numpy(),
                                       edges["dst_key"].to_numpy(),
                                       edges["weight"].fill_null(1.0).to_numpy())
        rows, cols = [], []
        for e, us in self.mentions.items():
            rows += us
            cols += [node_of[e]] * len(us)
        incidence = csr_matrix((np.ones(len(rows), dtype=np.float64), (rows, cols)),
                               shape=(self.units.height, nodes.height))
        if flat is not None:
            ids, mat = entities["id"].to_list(), flat
            self._flat["entities"] = flat
            self._flat_ids["entities"] = ids
        else:
            ev = entity_table.to_arrow().select(["id", "vector"])
            ids = ev.column("id").to_pylist()
            strangers = [i for i in ids if i not in node_of]
            if strangers:  # a LanceDB entities table of another build
                raise IndexInconsistentError(
                    f"half-written index: the LanceDB entities table holds {len(strangers)} "
                    f"entities missing from entities.parquet (e.g. {strangers[0]}); its rows "
                    "come from another build; re-run `kgloom index`")
            col = ev.column("vector").combine_chunks()
            mat = col.flatten().to_numpy(zero_copy_only=False).reshape(
                len(col), col.type.list_size).astype(np.float32) if len(col) else \
                np.zeros((0, col.type.list_size), dtype=np.float32)
        dim = mat.shape[1]
        entity_vectors = np.zeros((nodes.height, dim), dtype=np.float32)  # row = node key
        entity_vectors[[node_of[i] for i in ids]] = \
            mat / np.maximum(np.linalg.norm(mat, axis=1, keepdims=True), 1e-12)
        r_idx, c_idx = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
        aff = np.einsum("ij,ij->i", self.unit_vectors[r_idx].astype(np.float64),
                        entity_vectors[c_idx].astype(np.float64)) if len(rows) else np.zeros(0)
        affinity = csr_matrix((np.clip(aff, 0.0, None), (r_idx, c_idx)),
                              shape=(self.units.height, nodes.height))
        df = np.asarray(incidence.sum(axis=0)).ravel()
        aliases = None
        if b.has(schemas.ENTITY_ALIASES):
            aliases = b.read(schemas.ENTITY_ALIASES, columns=["alias", "entity_id"])
        self._linker = NameLinker(entities.select("id", "title"), aliases)
        return {"nodes": nodes, "node_of": node_of, "edges": edges, "adj": adj,
                "entity_ids": nodes["entity_id"].to_list(), "titles": nodes["title"].to_list(),
                "relationship_ids": edges["relationship_id"].to_list(),
                "incidence": incidence, "affinity": affinity,
                "specificity": 1.0 / np.maximum(df, 1.0),
                "entity_table": entity_table, "entity_vectors": entity_vectors,
                "max_weight": float(edges["weight"].max() or 1.0) if edges.height else 1.0}

    # --- shared steps --------------------------------------------------------------
    def _embed(self, texts: list[str]) -> np.ndarray:
        return self.embedder.embed(texts, threads=QUERY_EMBED_THREADS)

    def _begin(self, question: str, top_k: int, depth: int | None = None,
               lam: float | None = None) -> tuple[float, np.ndarray]:
        if not isinstance(question, str) or not question.strip():
            raise ValueError("question must be a non-empty string")
        _check_query_args(top_k, depth, lam)
        start = time.perf_counter()
        self._searched: dict[str, str] = {}
        qv = self._embed([question])[0]
        return start, qv

    def _begin_vector(self, vector: np.ndarray, top_k: int, depth: int | None = None,
                      lam: float | None = None) -> tuple[float, np.ndarray]:
        """Check a query vector and the arguments; return (start time, unit query vector).

        ``vector`` is a 1-D array of the index's vector dimension (the embedder's, or the
        imported vectors'), finite and not all zero; it is scaled to unit length (the
        search is by cosine) unless it already is within 1e-6.

        Raises:
            ValueError: a vector of another shape, a non-finite or zero vector, or a bad
                top_k / depth / lambda (as for a question).
        """
        v = np.asarray(vector, dtype=np.float32)
        if v.ndim != 1 or v.shape[0] != self.embedder.dim:
            raise ValueError(f"the query vector must have shape ({self.embedder.dim},) like "
                             f"the index's vectors, got {v.shape}")
        norm = float(np.linalg.norm(v.astype(np.float64)))
        if not np.isfinite(v).all() or norm == 0.0:
            raise ValueError("the query vector must be finite and not all zeros")
        _check_query_args(top_k, depth, lam)
        start = time.perf_counter()
        self._searched = {}
        return start, (v if abs(norm - 1.0) <= 1e-6 else (v / norm).astype(np.float32))

    def similarities(self, qv: np.ndarray) -> np.ndarray:
        """Cosine of the query vector with every text unit (float64 (units,))."""
        return self.unit_vectors.astype(np.float64) @ qv.astype(np.float64) if \
            self.unit_vectors.shape[0] else np.zeros(0)

    def link(self, question: str, qv: np.ndarray | None = None) -> list[LinkedEntity]:
        """The question's entities: by name and alias (:class:`NameLinker`), then the
        candidate spans left unlinked by ANN over the LanceDB ``entities`` table (top
        hit at cosine >= ``config.ann_link_min_similarity``), plus, when
        ``config.ann_link_question_k`` > 0, that many entities nearest to the question.

        Returns links strongest first within each method (name, alias, partial_name, ann).

        Raises:
            IndexFilesMissingError: when the graph files are missing.
        """
        g = self.graph
        assert self._linker is not None
        links, unlinked = self._linker.link(question)
        known = {x.entity_id for x in links}
        nodes_title = g["titles"]
        if unlinked:
            vecs = self._embed(unlinked)
            for span, v in zip(unlinked, vecs):
                ids, sims = self._search("entities", v, 1)
                if ids and sims[0] >= self.config.ann_link_min_similarity and ids[0] not in known:
                    known.add(ids[0])
                    links.append(LinkedEntity(ids[0], nodes_title[g["node_of"][ids[0]]], "ann",
                                              span, float(sims[0])))
        if self.config.ann_link_question_k > 0:
            qv = self._embed([question])[0] if qv is None else qv
            ids, sims = self._search("entities", qv, self.config.ann_link_question_k)
            for eid, sim in zip(ids, sims):
                if eid not in known and sim >= self.config.ann_link_min_similarity:
                    known.add(eid)
                    links.append(LinkedEntity(eid, nodes_title[g["node_of"][eid]], "ann",
                                              "(question)", float(sim)))
        return links

    def _unit_rows(self, order: list[int], scores: dict[int, float] | np.ndarray,
                   sims: np.ndarray, via: dict[int, str] | str,
                   hop: dict[int, int] | None = None,
                   ents: dict[int, list[str]] | None = None,
                   rels: dict[int, list[str]] | None = None) -> pl.DataFrame:
        """Build the UNIT_RESULT_SCHEMA frame for unit rows ``order`` (rank order).

        ``hop`` None means every unit is a direct hit (hop_depth 0); otherwise a unit
        missing from it has a null hop_depth (not reached by a bounded walk)."""
        c = self.col
        ids, texts, docs, titles = c["id"], c["text"], c["document_id"], c["document_title"]
        rows = []
        for rank, i in enumerate(order, 1):
            rows.append({
                "rank": rank, "id": ids[i], "score": float(scores[i]),
                "similarity": float(sims[i]) if len(sims) else 0.0,
                "hop_depth": 0 if hop is None else hop.get(i),
                "via": via if isinstance(via, str) else via.get(i, "vector"),
                "entity_ids": (ents or {}).get(i, []), "relationship_ids": (rels or {}).get(i, []),
                "document_id": docs[i], "document_title": titles[i], "text": texts[i]})
        return pl.DataFrame(rows, schema=UNIT_RESULT_SCHEMA) if rows else \
            schemas.empty(UNIT_RESULT_SCHEMA)

    def _finish(self, question: str, mode: str, start: float, units: pl.DataFrame,
                entities: pl.DataFrame | None = None, relationships: pl.DataFrame | None = None,
                linked: list[LinkedEntity] | None = None, **info: Any) -> RetrievalResult:
        info.setdefault("used_mode", mode)
        info.setdefault("fallback", None)
        info["ann"] = dict(self._searched)
        info["graph_backend"] = self.graph_backend
        info["build_id"] = self.build.build_id
        info["seconds"] = round(time.perf_counter() - start, 6)
        return RetrievalResult(
            question, mode, units,
            entities if entities is not None else schemas.empty(ENTITY_RESULT_SCHEMA),
            relationships if relationships is not None else schemas.empty(
                RELATIONSHIP_RESULT_SCHEMA),
            linked_frame(linked or []), info)

    def _search(self, table: str, vector: np.ndarray, k: int, refine_rows: int | None = None
                ) -> tuple[list[str], np.ndarray]:
        """Nearest rows of ``table`` (text_units or entities) by cosine: an exact numpy scan
        of a flat table's snapshot vectors (what LanceDB's flat search computes), else
        LanceDB's search; records the search kind (flat / ivf_pq) in this call's
        ``info["ann"]`` (``refine_rows``: see :func:`kgloom.embedding.store.search_vectors`)."""
        self._searched[table] = self.ann[table]
        graph = self.graph if table == "entities" else None  # loads the entity vectors
        if table in self._flat:
            mat = self._flat[table]
            ids = self.col["id"] if table == "text_units" else self._flat_ids[table]
            v = np.asarray(vector, dtype=np.float32)
            sims = (mat @ v) / np.maximum(np.linalg.norm(mat, axis=1)
                                          * max(float(np.linalg.norm(v)), 1e-12), 1e-12)
            top = np.argsort(-sims, kind="stable")[:k]
            return [ids[i] for i in top], sims[top].astype(np.float64)
        handle = self._unit_table if graph is None else graph["entity_table"]
        return search_vectors(handle, vector, k, self.ann[table], refine_rows)

    def _vector_order(self, qv: np.ndarray, k: int) -> tuple[list[int], np.ndarray]:
        if not self.units.height:  # e.g. an imported graph: no text unit to search
            return [], np.zeros(0)
        ids, sims = self._search("text_units", qv, k)
        return [self.unit_row[i] for i in ids], sims

    # --- modes ---------------------------------------------------------------------
    def vector(self, question: str, top_k: int = DEFAULT_TOP_K) -> RetrievalResult:
        """Top ``top_k`` text units by cosine similarity of their LanceDB vectors to the
        embedded question (exact scan, or IVF_PQ when the table has the index)."""
        start, qv = self._begin(question, top_k)
        return self._vector_result(question, "vector", start, qv, top_k)

    def _vector_result(self, question: str, mode: str, start: float, qv: np.ndarray,
                       top_k: int, linked: list[LinkedEntity] | None = None,
                       fallback: str | None = None) -> RetrievalResult:
        order, sims = self._vector_order(qv, top_k)
        scores = dict(zip(order, sims.tolist()))
        all_sims = self.similarities(qv)
        units = self._unit_rows(order, scores, all_sims, "vector")
        return self._finish(question, mode, start, units, linked=linked, top_k=top_k,
                            used_mode="vector", fallback=fallback)

    def one_hop(self, question: str, top_k: int = DEFAULT_TOP_K,
                oversample: int | None = None) -> RetrievalResult:
        """Vector hits expanded through the text units' denormalized graph columns only.

        The ``oversample x top_k`` nearest units are the hits. Every entity a hit
        mentions (``kg_node_ids``) is activated with the hit's similarity, every 1-hop
        neighbour (``neighbor_entity_ids``) with ``config.neighbor_decay`` times it. A
        unit then scores ``similarity + config.one_hop_weight x sum over its entities of
        activation x specificity``,
        where an entity's activation comes from the strongest *other* hit and
        specificity is 1 / (units mentioning it) — so a unit is lifted by entities it
        shares with other hits, most by rare ones. Candidates are the hits and every unit
        mentioning an activated entity. No graph file is read.

        Returns entities = the activated entities that lifted a returned unit,
        relationships = the ``neighbor_triples`` of the hits (relationship_id null).
        """
        start, qv = self._begin(question, top_k)
        oversample = self.config.one_hop_oversample if oversample is None else oversample
        _check_positive("oversample", oversample)
        hits, hit_sims = self._vector_order(qv, oversample * top_k)
        sims = self.similarities(qv)
        kg = self.col["kg_node_ids"]
        nbr = self.col["neighbor_entity_ids"]
        # entity -> up to two (activation, hit row) pairs, best first (to skip self)
        act: dict[str, list[tuple[float, int]]] = {}

        def bump(e: str, value: float, row: int) -> None:
            best = [p for p in act.get(e, []) if p[1] != row]
            mine = max([value] + [p[0] for p in act.get(e, []) if p[1] == row])
            act[e] = sorted(best + [(mine, row)], reverse=True)[:2]

        for row, s in zip(hits, hit_sims.tolist()):
            for e in kg[row] or []:
                bump(e, s, row)
            for e in nbr[row] or []:
                bump(e, s * self.config.neighbor_decay, row)
        candidates = set(hits)
        for e in act:
            candidates.update(self.mentions.get(e, []))
        scores, lifted, via, seed_of = {}, {}, {}, {}
        for row in candidates:
            bonus, parts = 0.0, []
            for e in kg[row] or []:
                for value, src in act.get(e, []):
                    if src != row:
                        spec = 1.0 / max(len(self.mentions.get(e, [])), 1)
                        bonus += value * spec
                        parts.append((value * spec, e, src))
                        break
            scores[row] = float(sims[row]) + self.config.one_hop_weight * bonus
            parts.sort(reverse=True)
            lifted[row] = [e for _, e, _ in parts]
            via[row] = "vector" if row in hits and not parts else "one_hop"
            if parts:
                seed_of[row] = parts[0][2]
        order = sorted(candidates, key=lambda r: (-scores[r], r))[:top_k]
        hop = {r: (0 if r in hits else 1) for r in order}
        units = self._unit_rows(order, scores, sims, via, hop, lifted)
        ids = self.col["id"]
        titles = self.entity_titles()
        ent_rows = []
        for r in order:
            for e in lifted[r]:
                ent_rows.append({"entity_id": e, "title": titles.get(e), "hop_depth": hop[r],
                                 "score": scores[r], "seed_entity_id": None,
                                 "via": f"unit:{ids[seed_of[r]]}"})
        triples = []
        all_triples = self.col["neighbor_triples"]
        for row in hits:
            for t in all_triples[row] or []:
                parts_ = [p.strip() for p in t.split("|")]
                if len(parts_) == 3:
                    triples.append({"relationship_id": None, "source": parts_[0],
                                    "relation": parts_[1], "target": parts_[2],
                                    "weight": None, "hop_depth": 1})
        ents = pl.DataFrame(ent_rows, schema=ENTITY_RESULT_SCHEMA).unique(
            "entity_id", keep="first", maintain_order=True) if ent_rows else None
        rels = pl.DataFrame(triples, schema=RELATIONSHIP_RESULT_SCHEMA).unique(
            maintain_order=True) if triples else None
        return self._finish(question, "one_hop", start, units, ents, rels, top_k=top_k,
                            oversample=oversample)

    def _reach(self, seeds: list[int], depth: int, first_hop: np.ndarray | None = None
               ) -> alg.ReachedSet:
        """BFS from node keys ``seeds`` with the configured backend, with provenance
        (``bfs_threads`` workers: numpy threads in memory, DuckDB threads over files).

        ``first_hop``: the seeds' neighbours when the caller already read them (the fused
        retrieve's rerank); over files the BFS then starts one hop in (no query at depth
        1, one round fewer beyond). The in-memory BFS reads them from the CSR anyway."""
        g = self.graph
        if self.graph_backend == "memory":
            return alg.reach(g["adj"], seeds, depth, self.bfs_threads or 1)
        levels = [np.unique(np.asarray(seeds, np.int64))]
        if first_hop is not None and depth >= 1:
            levels.append(np.setdiff1d(first_hop, levels[0]))
        if depth < len(levels):  # nothing beyond what is in hand: no edge to read
            return alg.attribute_levels(g["adj"], levels[:depth + 1], seeds)
        from kgloom.query.multihop import bfs_keys

        try:  # over this build's graph-edges.parquet
            found = bfs_keys(self.build.folder, seeds, depth, threads=self.bfs_threads,
                             first_hop=None if first_hop is None else first_hop.tolist())
        except FileNotFoundError:
            self.build.gone(self.build.path(schemas.GRAPH_EDGES))
            raise  # unreachable: gone() raises
        levels = alg.hop_levels(found["node_key"].to_numpy(), found["hops"].to_numpy())
        return alg.attribute_levels(g["adj"], levels, seeds)

    def _activation(self, reached: alg.ReachedSet, seed_score: dict[int, float]
                    ) -> np.ndarray:
        """float64 (nodes,): a reached entity's activation (see :meth:`_graph_result`),
        0 for the others; computed level by level, parents before children."""
        g = self.graph
        activation = np.zeros(g["adj"].n_nodes)
        bounds = np.searchsorted(reached.hops, np.arange(int(reached.hops.max(initial=0)) + 2))
        for h, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
            nodes = reached.node[lo:hi]
            if h == 0:
                activation[nodes] = [seed_score.get(v, 0.0) for v in nodes.tolist()]
            else:
                edge = 0.5 + 0.5 * reached.weight[lo:hi] / g["max_weight"]
                activation[nodes] = (activation[reached.parent[lo:hi]] * self.config.hop_decay
                                     * edge)
        return activation

    def _reached_frames(self, reached: alg.ReachedSet, activation: np.ndarray,
                        entity_via: str) -> tuple[pl.DataFrame, pl.DataFrame]:
        """ENTITY_RESULT_SCHEMA frame (one row per reached entity, in reached order) and
        RELATIONSHIP_RESULT_SCHEMA frame (the edge each non-seed was reached through),
        gathered column-wise from the graph tables."""
        g = self.graph
        ids, titles = g["nodes"]["entity_id"], g["nodes"]["title"]
        entities = pl.DataFrame({
            "entity_id": ids.gather(reached.node), "title": titles.gather(reached.node),
            "hop_depth": reached.hops, "score": activation[reached.node],
            "seed_entity_id": ids.gather(reached.seed),
            "via": pl.repeat(entity_via, len(reached), dtype=pl.String, eager=True)},
            schema=ENTITY_RESULT_SCHEMA)
        through = reached.edge_row >= 0
        e = g["edges"][reached.edge_row[through]]
        relationships = pl.DataFrame({
            "relationship_id": e["relationship_id"], "source": titles.gather(e["src_key"]),
            "relation": e["relation"], "target": titles.gather(e["dst_key"]),
            "weight": e["weight"], "hop_depth": reached.hops[through]},
            schema=RELATIONSHIP_RESULT_SCHEMA)
        return entities, relationships

    def _graph_result(self, question: str, mode: str, start: float, qv: np.ndarray,
                      top_k: int, reached: alg.ReachedSet, seed_score: dict[int, float],
                      linked: list[LinkedEntity], entity_via: str, **info: Any
                      ) -> RetrievalResult:
        """Rank the units of the reached entities; build the entity/relationship frames.

        An entity's activation is its seed's score for a seed, else its parent's times
        ``config.hop_decay x (0.5 + 0.5 x edge weight / max weight)``. A unit scores
        ``config.similarity_weight x similarity`` + the sum of activation x specificity
        over the reached entities it mentions; fewer than top_k such units are topped up
        with vector hits.
        """
        g = self.graph
        activation = self._activation(reached, seed_score)
        weighted = activation * g["specificity"]
        graph_scores = self._unit_scores(weighted)
        sims = self.similarities(qv)
        scores = self.config.similarity_weight * sims + graph_scores
        candidates = np.flatnonzero(graph_scores > 0)
        order = sorted(candidates.tolist(), key=lambda r: (-scores[r], r))[:top_k]
        via = {r: entity_via for r in order}
        if len(order) < top_k:
            fill, _ = self._vector_order(qv, top_k + len(order))
            for r in fill:
                if r not in via and len(order) < top_k:
                    order.append(r)
                    via[r] = "vector_fill"
        kg = self.col["kg_node_ids"]
        by_node = {n: i for i, n in enumerate(reached.node.tolist())} if order else {}
        node_ids, edge_ids = g["entity_ids"], g["relationship_ids"]
        ents, rels, hop = {}, {}, {}
        for r in order:
            mine = [g["node_of"][e] for e in kg[r] or [] if g["node_of"][e] in by_node]
            mine.sort(key=lambda n: (-weighted[n], n))
            at = [by_node[n] for n in mine]
            ents[r] = [node_ids[n] for n in mine]
            rels[r] = [edge_ids[int(reached.edge_row[i])] for i in at if reached.edge_row[i] >= 0]
            if mine:
                hop[r] = int(reached.hops[at].min())
        units = self._unit_rows(order, scores, sims, via, hop, ents, rels)
        entities, relationships = self._reached_frames(reached, activation, entity_via)
        return self._finish(question, mode, start, units, entities, relationships, linked,
                            top_k=top_k, **info)

    def _unit_scores(self, node_values: np.ndarray) -> np.ndarray:
        """Per unit, the sum of ``node_values`` over the entities it mentions, each
        weighted by entity-unit affinity when ``config.entity_affinity`` (float64 (units,))."""
        g = self.graph
        return (g["affinity"] if self.config.entity_affinity else g["incidence"]) @ node_values

    def _linked_seeds(self, question: str, qv: np.ndarray
                      ) -> tuple[list[LinkedEntity], list[int], dict[int, float]]:
        """Seed nodes, strongest first, with their scores: the linked entities (score =
        link score), then, when ``config.hit_seeds`` > 0, the entities mentioned by that
        many nearest text units (score = ``config.hit_seed_weight`` x the unit's
        similarity; recorded in the links as method ``vector_hit``)."""
        links = self.link(question, qv)
        node_of = self.graph["node_of"]
        if self.config.hit_seeds > 0:
            known = {x.entity_id for x in links}
            titles = self.graph["titles"]
            rows, sims = self._vector_order(qv, self.config.hit_seeds)
            kg = self.col["kg_node_ids"]
            for row, sim in zip(rows, sims.tolist()):
                for e in kg[row] or []:
                    if e not in known:
                        known.add(e)
                        links.append(LinkedEntity(e, titles[node_of[e]], "vector_hit",
                                                  self.col["id"][row],
                                                  self.config.hit_seed_weight * sim))
        seeds, score = [], {}
        for x in sorted(links, key=lambda x: -x.score):
            n = node_of[x.entity_id]
            if n not in score:
                seeds.append(n)
                score[n] = x.score
        return links, seeds, score

    def multihop(self, question: str, top_k: int = DEFAULT_TOP_K,
                 depth: int = DEFAULT_DEPTH) -> RetrievalResult:
        """BFS to ``depth`` hops from the question's linked entities (DuckDB over
        graph-edges.parquet, or in memory), then the reached entities' text units ranked
        by hop depth, edge weight and similarity (see :meth:`_graph_result`). With no
        linked entity it returns ``vector`` results and says so in ``info["fallback"]``."""
        start, qv = self._begin(question, top_k, depth)
        links, seeds, score = self._linked_seeds(question, qv)
        if not seeds:
            return self._vector_result(question, "multihop", start, qv, top_k, links,
                                       "no entity of the question was found in the index")
        reached = self._reach(seeds, depth)
        return self._graph_result(question, "multihop", start, qv, top_k, reached, score,
                                  links, "bfs", depth=depth)

    def _entity_candidates(self, qv: np.ndarray, k: int, refine_rows: int | None = None
                           ) -> list[tuple[int, float]]:
        """The ``k`` entities nearest to ``qv`` as (node key, cosine), nearest first:
        exact scan on the memory handle, LanceDB otherwise (``refine_rows``: IVF_PQ's
        re-rank pool, see :func:`kgloom.embedding.store.search_vectors`)."""
        g = self.graph
        if self.graph_backend == "memory":
            return self._memory_entity_candidates(qv, k)
        ids, sims = self._search("entities", qv, k, refine_rows)
        return [(g["node_of"][i], float(s)) for i, s in zip(ids, sims)]

    def entity_vectors(self) -> np.ndarray:
        """The LanceDB ``entities`` vectors as float32 (nodes, dim), row = node key,
        scaled to unit length; read once with the graph (the memory handle's entity
        search and the entity-unit affinity)."""
        return self.graph["entity_vectors"]

    def _memory_entity_candidates(self, qv: np.ndarray, k: int) -> list[tuple[int, float]]:
        """Exact cosine top ``k`` entities over :meth:`entity_vectors` (node key, cosine),
        most similar first, ties by node key: what LanceDB's flat scan returns, and at
        or above IVF_PQ's recall on an indexed table, with no call into LanceDB."""
        # numpy's own einsum loop, not BLAS sgemv: one thread and no spinning BLAS
        # workers; 3.6 ms vs 9 ms (2 threads) per 169k x 128 scan on the loaded 2 cores
        sims = np.einsum("ij,j->i", self.entity_vectors(), qv.astype(np.float32))
        self._searched["entities"] = "memory"
        k = min(k, sims.shape[0])
        if k <= 0:
            return []
        top = np.argpartition(sims, sims.shape[0] - k)[sims.shape[0] - k:]
        top = top[np.lexsort((top, -sims[top]))]
        return [(int(n), float(sims[n])) for n in top]

    def fused(self, question: str, top_k: int = DEFAULT_TOP_K, depth: int = DEFAULT_DEPTH,
              lam: float = DEFAULT_LAMBDA, oversample: int = DEFAULT_OVERSAMPLE
              ) -> RetrievalResult:
        """The fused retrieve in one call: ANN over entity vectors for
        ``oversample x top_k`` candidates, greedy rerank
        ``score(c) = ann(c) - lam x max_s Jaccard(N(c), N(s))``
        (:func:`kgloom.query.algorithms.diversity_rerank`), BFS to ``depth`` from the
        ``top_k`` chosen seeds, and the reached entities' text units.

        ``info`` holds ``seed_overlap`` / ``baseline_seed_overlap`` (mean pairwise
        Jaccard of the chosen seeds' neighbourhoods, and of the plain ANN top_k's) and
        ``ann_sum`` / ``baseline_ann_sum`` (summed ANN similarity of each seed set).
        """
        return self._fused(question, self._begin(question, top_k, depth, lam), top_k, depth,
                           lam, oversample)

    def fused_by_vector(self, vector: np.ndarray, top_k: int = DEFAULT_TOP_K,
                        depth: int = DEFAULT_DEPTH, lam: float = DEFAULT_LAMBDA,
                        oversample: int = DEFAULT_OVERSAMPLE) -> RetrievalResult:
        """:meth:`fused` for a query vector instead of a question (see
        :meth:`_begin_vector`); the same result as ``fused`` gives for a question that
        embeds to ``vector``, with ``question`` empty. The way to query an imported
        graph (``kgloom import-graph``), whose vectors no text embedder made."""
        return self._fused("", self._begin_vector(vector, top_k, depth, lam), top_k, depth,
                           lam, oversample)

    def _fused(self, question: str, begun: tuple[float, np.ndarray], top_k: int, depth: int,
               lam: float, oversample: int) -> RetrievalResult:
        start, qv = begun
        _check_positive("oversample", oversample)
        g = self.graph
        # the baseline's IVF_PQ re-rank pool: its top_k come first, no more vectors read
        candidates = self._entity_candidates(qv, oversample * top_k,
                                             refine_rows=ANN_REFINE_FACTOR * top_k)
        if not candidates:
            return self._vector_result(question, "fused", start, qv, top_k, None,
                                       "the index has no entity")
        chosen = alg.diversity_rerank(candidates, None, top_k, lam, g["adj"])
        seeds = [c.node for c in chosen]
        # the rerank read the seeds' neighbourhoods (from the handle's adjacency): over
        # files the BFS starts from them instead of reading those edges again
        hop1 = (alg.first_hop(g["adj"], seeds) if depth and self.config.fused_first_hop
                and self.graph_backend != "memory" else None)
        reached = self._reach(seeds, depth, hop1)
        overlap = {}
        if self.config.seed_diagnostics:
            overlap = {"seed_overlap": alg.mean_pairwise_jaccard(seeds, g["adj"]),
                       "baseline_seed_overlap": alg.mean_pairwise_jaccard(
                           [n for n, _ in candidates[:top_k]], g["adj"])}
        return self._graph_result(
            question, "fused", start, qv, top_k, reached, {c.node: c.score for c in chosen},
            [], "fused", depth=depth, lam=lam, oversample=oversample,
            seeds=[g["entity_ids"][n] for n in seeds], **overlap,
            ann_sum=float(sum(c.ann_score for c in chosen)),
            baseline_ann_sum=float(sum(s for _, s in candidates[:top_k])))

    def two_step(self, question: str, top_k: int = DEFAULT_TOP_K,
                 depth: int = DEFAULT_DEPTH) -> RetrievalResult:
        """The two-call baseline of the fused retrieve, as a client makes it: one call for
        the ANN top_k entities (:meth:`entities_by_vector`), then a second call for the
        BFS from them (:meth:`expand_by_vector`), the question embedded once. Same rows
        as ``fused(..., lam=0)``; ``info["seconds"]`` spans both calls."""
        if not isinstance(question, str) or not question.strip():
            raise ValueError("question must be a non-empty string")
        _check_query_args(top_k, depth, None)
        start = time.perf_counter()
        res = self.two_step_by_vector(self._embed([question])[0], top_k, depth)
        res.question = question
        res.info["seconds"] = round(time.perf_counter() - start, 6)
        return res

    def two_step_by_vector(self, vector: np.ndarray, top_k: int = DEFAULT_TOP_K,
                           depth: int = DEFAULT_DEPTH) -> RetrievalResult:
        """:meth:`two_step` for a query vector (see :meth:`fused_by_vector`): the two
        public calls :meth:`entities_by_vector` and :meth:`expand_by_vector`, the second
        given the first one's entity ids and scores, as the study this baseline comes
        from sends a vector query and then a traversal query (two round trips)."""
        start = time.perf_counter()
        _check_query_args(top_k, depth, None)
        hits = self.entities_by_vector(vector, top_k)
        if not hits.entities.height:
            _, qv = self._begin_vector(vector, top_k)
            return self._vector_result("", "two_step", start, qv, top_k, None,
                                       "the index has no entity")
        seeds, scores = hits.entities["entity_id"].to_list(), hits.entities["score"].to_list()
        res = self.expand_by_vector(vector, seeds, depth, top_k, scores, entity_via="fused")
        res.mode = "two_step"
        res.info.update(ann_sum=float(sum(scores)),
                        ann={**hits.info["ann"], **res.info["ann"]},
                        seconds=round(time.perf_counter() - start, 6))
        return res

    def entities_by_vector(self, vector: np.ndarray, top_k: int = DEFAULT_TOP_K
                           ) -> RetrievalResult:
        """The ``top_k`` entities nearest to a query vector (cosine; exact scan on the
        memory handle, the LanceDB ``entities`` table otherwise): the first call of the
        two-call baseline, and a plain entity search.

        Returns:
            a result with no text units; ``entities`` holds one row per hit, nearest
            first (hop_depth 0, score = cosine, seed_entity_id = itself, via ``ann``).

        Raises:
            ValueError: a bad vector or top_k (see :meth:`_begin_vector`).
        """
        start, qv = self._begin_vector(vector, top_k)
        g = self.graph
        hits = self._entity_candidates(qv, top_k)
        ids = [g["entity_ids"][n] for n, _ in hits]
        entities = pl.DataFrame({
            "entity_id": ids, "title": [g["titles"][n] for n, _ in hits],
            "hop_depth": [0] * len(hits), "score": [s for _, s in hits], "seed_entity_id": ids,
            "via": ["ann"] * len(hits)}, schema=ENTITY_RESULT_SCHEMA)
        return self._finish("", "entities", start, schemas.empty(UNIT_RESULT_SCHEMA),
                            entities, top_k=top_k)

    def expand_by_vector(self, vector: np.ndarray, seeds: list[str], depth: int = DEFAULT_DEPTH,
                         top_k: int = DEFAULT_TOP_K, seed_scores: list[float] | None = None,
                         entity_via: str = "bfs") -> RetrievalResult:
        """BFS to ``depth`` hops from the given entities, then the reached entities' text
        units ranked as multihop ranks them (:meth:`_graph_result`) against the query
        vector: the second call of the two-call baseline, and the way to walk from seeds
        found elsewhere.

        Args:
            vector: the query vector (as for :meth:`fused_by_vector`).
            seeds: entity ids, strongest first; repeats count once.
            depth: hops, >= 0.
            top_k: text units to return.
            seed_scores: one score per seed (their activation); None = 1.0 each.
            entity_via: the ``via`` of the reached entities' rows (two_step: ``fused``,
                so that its rows equal ``fused(..., lam=0)``).

        Raises:
            ValueError: a bad vector, depth or top_k; an entity id the index lacks (names
                it); seed_scores of another length.
        """
        start, qv = self._begin_vector(vector, top_k, depth)
        g = self.graph
        scores = [1.0] * len(seeds) if seed_scores is None else list(seed_scores)
        if len(scores) != len(seeds):
            raise ValueError(f"seed_scores has {len(scores)} values for {len(seeds)} seeds")
        unknown = [e for e in seeds if e not in g["node_of"]]
        if unknown:
            raise ValueError(f"unknown entity id {unknown[0]!r}: not in this index")
        score: dict[int, float] = {}
        for e, sc in zip(seeds, scores):
            score.setdefault(g["node_of"][e], float(sc))
        keys = list(score)
        overlap = ({"seed_overlap": alg.mean_pairwise_jaccard(keys, g["adj"])}
                   if self.config.seed_diagnostics else {})
        return self._graph_result("", "expand", start, qv, top_k, self._reach(keys, depth),
                                  score, [], entity_via, depth=depth,
                                  seeds=[g["entity_ids"][n] for n in keys], **overlap)

    def _ppr_scores(self, question: str, qv: np.ndarray, damping: float
                    ) -> tuple[list[LinkedEntity], np.ndarray | None, np.ndarray | None]:
        """(links, PPR over nodes, unit scores) or Nones when nothing is linked."""
        g = self.graph
        links, seeds, score = self._linked_seeds(question, qv)
        if not seeds:
            return links, None, None
        # HippoRAG's node specificity: a seed's reset weight is divided by the number of
        # passages that mention it, so a rare entity steers the walk more than a hub.
        pers = {n: score[n] * g["specificity"][n] for n in seeds}
        pr = alg.personalized_pagerank(g["adj"], pers, damping)
        return links, pr, self._unit_scores(pr)

    def ppr(self, question: str, top_k: int = DEFAULT_TOP_K,
            damping: float = DEFAULT_DAMPING) -> RetrievalResult:
        """Personalized PageRank from the linked entities (reset weight = link score x
        specificity), over the weighted entity graph; a unit scores the sum of its
        entities' PageRank (HippoRAG, arXiv 2405.14831, section 3). With no linked
        entity it returns ``vector`` results and says so."""
        start, qv = self._begin(question, top_k)
        if not 0 <= damping < 1:
            raise ValueError(f"damping must be in [0, 1), got {damping}")
        links, pr, unit_scores = self._ppr_scores(question, qv, damping)
        if pr is None:
            return self._vector_result(question, "ppr", start, qv, top_k, links,
                                       "no entity of the question was found in the index")
        return self._ranked_graph_units(question, "ppr", start, qv, top_k, links, pr,
                                        unit_scores, dict(), damping=damping)

    def _ranked_graph_units(self, question: str, mode: str, start: float, qv: np.ndarray,
                            top_k: int, links: list[LinkedEntity], pr: np.ndarray,
                            scores: np.ndarray, rank_override: dict[int, float],
                            **info: Any) -> RetrievalResult:
        """Units ranked by ``scores`` (or ``rank_override`` when given), provenance from
        the PageRank ``pr`` of their entities."""
        g = self.graph
        sims = self.similarities(qv)
        if rank_override:
            order = sorted(rank_override, key=lambda r: (-rank_override[r], r))[:top_k]
            shown = rank_override
        else:
            cand = np.flatnonzero(scores > 0).tolist()
            order = sorted(cand, key=lambda r: (-scores[r], -sims[r], r))[:top_k]
            shown = {r: float(scores[r]) for r in order}
        via = {r: mode for r in order}
        if len(order) < top_k:
            fill, _ = self._vector_order(qv, 2 * top_k)
            for r in fill:
                if r not in via and len(order) < top_k:
                    order.append(r)
                    via[r] = "vector_fill"
                    shown[r] = float(sims[r])
        node_ids = g["entity_ids"]
        titles = g["titles"]
        kg = self.col["kg_node_ids"]
        seeds = [g["node_of"][x.entity_id] for x in links]
        hops = alg.bfs_hops(g["adj"], seeds, 3)
        ents, hop = {}, {}
        for r in order:
            mine = sorted((g["node_of"][e] for e in kg[r] or []), key=lambda n: (-pr[n], n))
            ents[r] = [node_ids[n] for n in mine if pr[n] > 0]
            reached = [hops[n] for n in mine if n in hops]
            if reached:
                hop[r] = min(reached)
        units = self._unit_rows(order, shown, sims, via, hop, ents)
        top = np.argsort(-pr, kind="stable")[:max(5 * top_k, 20)]
        entity_rows = [{"entity_id": node_ids[n], "title": titles[n],
                        "hop_depth": hops.get(int(n)), "score": float(pr[n]),
                        "seed_entity_id": None, "via": "ppr"} for n in top if pr[n] > 0]
        return self._finish(question, mode, start, units,
                            pl.DataFrame(entity_rows, schema=ENTITY_RESULT_SCHEMA)
                            if entity_rows else None, None, links, top_k=top_k, **info)

    def hybrid(self, question: str, top_k: int = DEFAULT_TOP_K,
               damping: float = DEFAULT_DAMPING) -> RetrievalResult:
        """Reciprocal-rank fusion (k = ``config.rrf_k``) of the ``config.hybrid_pool``
        best units of ``vector`` and of ``ppr``, weighted by ``config.hybrid_weights``
        (vector, ppr). With no linked entity it returns ``vector`` results and says so."""
        start, qv = self._begin(question, top_k)
        pool, weights = self.config.hybrid_pool, self.config.hybrid_weights
        links, pr, unit_scores = self._ppr_scores(question, qv, damping)
        if pr is None:
            return self._vector_result(question, "hybrid", start, qv, top_k, links,
                                       "no entity of the question was found in the index")
        vec, _ = self._vector_order(qv, pool)
        sims = self.similarities(qv)
        graph_rank = sorted(np.flatnonzero(unit_scores > 0).tolist(),
                            key=lambda r: (-unit_scores[r], -sims[r], r))[:pool]
        fused = alg.reciprocal_rank_fusion([[str(r) for r in vec], [str(r) for r in graph_rank]],
                                           self.config.rrf_k, weights)
        override = {int(r): s for r, s in fused}
        return self._ranked_graph_units(question, "hybrid", start, qv, top_k, links, pr,
                                        unit_scores, override, damping=damping, pool=pool,
                                        weights=list(weights))

    def bridge(self, question: str, top_k: int = DEFAULT_TOP_K) -> RetrievalResult:
        """Vector hits, then the text units about the entities they (and the question)
        mention.

        A two-hop question ("where was the director of film X born?") has a first
        passage that vector search finds (about X, naming the director D) and a second
        one about D, which shares few words with the question. The ``config.bridge_hits``
        nearest units are the hits; every entity ``e`` a hit ``h`` mentions scores each
        other unit ``u`` that mentions it by
        ``sim(q, h) x max(0, cos(q, e)) ** config.bridge_relevance_power x affinity(u, e)``
        (affinity: cosine of the entity's vector, "title: description", and the unit's
        vector, clipped at 0 — how much ``u`` is about ``e``). The question's linked
        entities (:meth:`link`) count as named by a hit of similarity
        ``config.bridge_link_weight``, so the units about the entities a question names
        come in too. A unit keeps its best score. The ranking is the
        ``config.bridge_keep`` nearest units, then bridged units by score, then further
        vector hits. The idea is HippoRAG's (arXiv 2405.14831: passages reached through
        the entities of the question) reduced to one hop and the passage-entity
        affinity; the knobs were chosen by bench/eval_qa.py on half of its questions.
        Last, every entity the question names by title or alias keeps one of its own
        units in the ``top_k`` (:meth:`_named_units`; a unit about it replaces the last
        unit that names none): a weak link weight alone let "How is Scrooge related to
        Fezziwig?" return five units without Fezziwig.

        Returns units with ``via`` vector (hop_depth 0) or bridge (hop_depth 1, its
        entity_ids = the bridging entity); entities = the bridging entities with their
        best score and ``via`` = the hit unit id (``question`` for a linked entity);
        ``linked`` = the question's linked entities.

        Raises:
            ValueError: an empty question, top_k < 1, bridge_hits < 1, bridge_keep < 0 or
                bridge_link_weight < 0.
            IndexFilesMissingError / IndexInconsistentError: see the class doc.
        """
        start, qv = self._begin(question, top_k)
        cfg = self.config
        _check_positive("bridge_hits", cfg.bridge_hits)
        _check_positive("bridge_keep", cfg.bridge_keep, strict=False)
        _check_positive("bridge_link_weight", cfg.bridge_link_weight, strict=False)
        g = self.graph
        if "affinity_csc" not in g:
            g["affinity_csc"] = g["affinity"].tocsc()
        aff = g["affinity_csc"]
        sims = self.similarities(qv)
        hits, hit_sims = self._vector_order(qv, max(cfg.bridge_hits, top_k + cfg.bridge_keep))
        relevance = np.clip(g["entity_vectors"] @ qv.astype(np.float32), 0.0, None)
        kg = self.col["kg_node_ids"]
        links = self.link(question, qv)
        sources = [(h, max(s, 0.0), kg[h] or [])
                   for h, s in list(zip(hits, hit_sims.tolist()))[:cfg.bridge_hits]]
        if cfg.bridge_link_weight > 0 and links:
            sources.append((-1, cfg.bridge_link_weight, [x.entity_id for x in links]))
        best: dict[int, tuple[float, int, int]] = {}  # unit row -> (score, node, source)
        for h, s, mentioned in sources:
            for e in mentioned:
                n = g["node_of"][e]
                weight = s * float(relevance[n]) ** cfg.bridge_relevance_power
                col = slice(aff.indptr[n], aff.indptr[n + 1])
                for u, a in zip(aff.indices[col].tolist(), aff.data[col].tolist()):
                    value = weight * a
                    if u != h and value > best.get(u, (0.0, -1, -1))[0]:
                        best[u] = (value, n, h)
        order = list(hits[:min(cfg.bridge_keep, top_k)])
        via = {r: "vector" for r in order}
        for u in sorted(best, key=lambda u: (-best[u][0], u)):
            if len(order) >= top_k:
                break
            if u not in via:
                order.append(u)
                via[u] = "bridge"
        for r in hits:
            if len(order) >= top_k:
                break
            if r not in via:
                order.append(r)
                via[r] = "vector"
        named = self._named_units(links, order, top_k - min(cfg.bridge_keep, top_k), sims)
        for u, n in named.items():  # replaces the last unit no named entity holds
            if u in via:
                continue
            free = [r for r in order[min(cfg.bridge_keep, top_k):] if r not in named]
            if len(order) >= top_k:
                if not free:
                    break
                order.remove(free[-1])
                via.pop(free[-1])
            order.append(u)
            via[u] = "bridge"
            best[u] = (max(best.get(u, (0.0,))[0], float(sims[u])), n, -1)
        scores = {r: (best[r][0] if via[r] == "bridge" else float(sims[r])) for r in order}
        hop = {r: (1 if via[r] == "bridge" else 0) for r in order}
        ids = g["entity_ids"]
        ents = {r: [ids[best[r][1]]] for r in order if via[r] == "bridge"}
        ent_rows = [{"entity_id": ids[best[r][1]], "title": g["titles"][best[r][1]],
                     "hop_depth": 1, "score": best[r][0], "seed_entity_id": None,
                     "via": "question" if best[r][2] < 0 else f"unit:{self.col['id'][best[r][2]]}"}
                    for r in order if via[r] == "bridge"]
        units = self._unit_rows(order, scores, sims, via, hop, ents)
        entities = pl.DataFrame(ent_rows, schema=ENTITY_RESULT_SCHEMA).unique(
            "entity_id", keep="first", maintain_order=True) if ent_rows else None
        return self._finish(question, "bridge", start, units, entities, linked=links,
                            top_k=top_k, hits=cfg.bridge_hits, keep=cfg.bridge_keep)

    def _named_units(self, links: list[LinkedEntity], order: list[int], room: int,
                     sims: np.ndarray) -> dict[int, int]:
        """Unit rows to hold so each entity the question names is in the result.

        The entities linked by ``name`` or ``alias`` (the question wrote their title or
        an alias), in question order, at most ``room`` of them: for each whose own
        text units (``kg_node_ids``) are not among ``order``, its best unit: the one
        naming most of the other named entities, then the most about it (the
        entity-unit affinity of :meth:`graph`), then nearest to the question. A unit
        of ``order`` that names one is held too, so it is not replaced.

        Returns:
            unit row -> node key of the named entity it stands for, in question order.
        """
        g = self.graph
        named = [x.entity_id for x in links if x.method in ("name", "alias")]
        named = [e for e in dict.fromkeys(named) if e in g["node_of"]][:max(room, 0)]
        if not named:
            return {}
        aff = g["affinity"]
        kg = self.col["kg_node_ids"]
        held: dict[int, int] = {}
        for e in named:
            n = g["node_of"][e]
            mine = self.mentions.get(e, [])
            have = [r for r in order if r in set(mine)]
            if have:
                held.setdefault(have[0], n)
                continue
            if not mine:
                continue
            others = set(named) - {e}

            def key(r: int) -> tuple:
                return (-len(others.intersection(kg[r] or [])), -float(aff[r, n]),
                        -float(sims[r]), r)

            held.setdefault(min(mine, key=key), n)
        return held

    def retrieve(self, question: str, mode: str = "vector", **params: Any) -> RetrievalResult:
        """Run one mode by name (:data:`kgloom.query.modes.RETRIEVAL_MODES`) with its
        keyword parameters.

        Raises:
            ValueError: an unknown mode (every retrieval mode listed), or a bad parameter
                of the mode.
        """
        check_mode(mode, RETRIEVAL_MODES)
        return getattr(self, mode)(question, **params)
