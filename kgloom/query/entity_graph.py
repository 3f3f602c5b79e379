"""The entity graph of one published build, as the graph retrieval modes read it: the
graph-nodes/edges as a CSR adjacency, entity vectors, the unit x entity incidence and
affinity, and the name linker. :attr:`kgloom.query.query_index.QueryIndex.graph` loads it
on first use (:func:`load_entity_graph`); it reads published files only and writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from kgloom.core import schemas
from kgloom.core.builds import IndexFilesMissingError, IndexInconsistentError
from kgloom.embedding.store import VECTOR_TABLES, read_flat_snapshot, vector_index_type
from kgloom.query import algorithms as alg
from kgloom.query.linking import NameLinker

if TYPE_CHECKING:
    from kgloom.query.query_index import QueryIndex


@dataclass(frozen=True)
class EntityGraph:
    """The entity graph of an index (node key = row of graph-nodes.parquet).

    Attributes:
        nodes: graph-nodes frame (``node_key``, ``entity_id``, ``title``).
        edges: graph-edges frame (``src_key``, ``dst_key``, ``relationship_id``,
            ``relation``, ``weight``, ...); row = edge row of :attr:`adj`.
        node_of: entity id -> node key.
        entity_ids / titles: per node key.
        relationship_ids: per edge row.
        adj: the undirected weighted CSR adjacency (:class:`kgloom.query.algorithms.Adjacency`).
        incidence: scipy CSR float64 (units x nodes), 1 where a unit's ``kg_node_ids``
            names the node.
        affinity: the same entries as cosine(entity vector, unit vector) clipped at 0.
        specificity: float64 (nodes,), 1 / number of units mentioning the node (1 when none).
        entity_vectors: float32 (nodes, dim), row = node key, unit length.
        entity_table: the LanceDB ``entities`` table, or None when its flat snapshot
            holds the vectors (searches are then an exact scan of :attr:`entity_vectors`'
            source rows, :attr:`snapshot_ids` order).
        snapshot_ids / snapshot_vectors: the snapshot's entity ids and raw vectors (None
            without a snapshot).
        entity_ann: the search kind of the entities table (``flat`` / ``ivf_pq``).
        max_weight: the largest edge weight (1.0 without edges).
        linker: the :class:`kgloom.query.linking.NameLinker` over titles and aliases.
    """

    nodes: pl.DataFrame
    edges: pl.DataFrame
    node_of: dict[str, int]
    entity_ids: list[str]
    titles: list[str]
    relationship_ids: list[str]
    adj: alg.Adjacency
    incidence: Any
    affinity: Any
    specificity: np.ndarray
    entity_vectors: np.ndarray
    entity_table: Any
    snapshot_ids: list[str] | None
    snapshot_vectors: np.ndarray | None
    entity_ann: str
    max_weight: float
    linker: NameLinker

    @cached_property
    def affinity_csc(self) -> Any:
        """:attr:`affinity` as scipy CSC (column = node), converted on first use."""
        return self.affinity.tocsc()



def _require(index: QueryIndex, names: list[str]) -> None:
    build = index.build
    missing = [str(build.live_path(n)) for n in names if not build.has(n)]
    if not (index.db_path / "entities.lance").exists():
        missing.append(str(index.db_path / "entities.lance"))
    if missing:
        raise IndexFilesMissingError(
            "graph modes need files this index lacks: " + ", ".join(missing)
            + " (the entities, relationships, graph_files and vector_index assets write "
              "them; run `kgloom index`); vector and one_hop work without them")


def _check_nodes(nodes: pl.DataFrame, entities: pl.DataFrame,
                 mentions: dict[str, list[int]]) -> dict[str, int]:
    """Entity id -> node key, after checking graph-nodes, entities.parquet and the text
    units' mentions are of one build.

    Raises:
        IndexInconsistentError: node keys not 0..n-1, a mentioned entity without a node,
            or the two tables holding different entity ids (a half-written index).
    """
    if nodes.height != entities.height or not nodes["node_key"].equals(
            pl.Series("node_key", range(nodes.height), dtype=pl.Int64)):
        raise IndexInconsistentError(
            f"half-written index: graph-nodes.parquet has {nodes.height} nodes but "
            f"entities.parquet has {entities.height} entities; re-run `kgloom index`")
    node_of = dict(zip(nodes["entity_id"].to_list(), nodes["node_key"].to_list()))
    unknown = [e for e in mentions if e not in node_of]
    if unknown:
        raise IndexInconsistentError(
            f"half-written index: text units mention {len(unknown)} entities missing from "
            f"graph-nodes.parquet (e.g. {unknown[0]}); re-run `kgloom index`")
    if not nodes["entity_id"].sort().equals(entities["id"].sort(), check_names=False):
        raise IndexInconsistentError(
            "half-written index: graph-nodes.parquet and entities.parquet hold "
            "different entity ids (tables of two builds); re-run `kgloom index`")
    return node_of


def _stored_entity_vectors(entity_table: Any, node_of: dict[str, int]
                           ) -> tuple[list[str], np.ndarray]:
    """The LanceDB ``entities`` table's ids and float32 (rows, dim) vectors.

    Raises:
        IndexInconsistentError: an id missing from graph-nodes (a table of another build).
    """
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
    return ids, mat


def _unit_entity_matrices(units: Any, node_of: dict[str, int], n_nodes: int,
                          entity_vectors: np.ndarray) -> tuple[Any, Any]:
    """The units x nodes incidence (scipy CSR float64, 1 where a unit mentions the node)
    and affinity (the same entries as cosine(entity vector, unit vector) clipped at 0)."""
    from scipy.sparse import csr_matrix

    rows, cols = [], []
    for e, us in units.mentions.items():
        rows += us
        cols += [node_of[e]] * len(us)
    incidence = csr_matrix((np.ones(len(rows), dtype=np.float64), (rows, cols)),
                           shape=(units.count, n_nodes))
    r_idx, c_idx = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
    aff = np.einsum("ij,ij->i", units.vectors[r_idx].astype(np.float64),
                    entity_vectors[c_idx].astype(np.float64)) if len(rows) else np.zeros(0)
    affinity = csr_matrix((np.clip(aff, 0.0, None), (r_idx, c_idx)),
                          shape=(units.count, n_nodes))
    return incidence, affinity


def load_entity_graph(index: QueryIndex) -> EntityGraph:
    """Read the :class:`EntityGraph` of ``index``'s build (graph-nodes/edges,
    entities.parquet, the entity vectors of the LanceDB table or its flat snapshot,
    entity_aliases.parquet when present).

    Raises:
        IndexFilesMissingError: a graph file is missing (names each one).
        IndexInconsistentError: graph tables of different builds (half-written).
    """
    _require(index, [schemas.ENTITIES, schemas.RELATIONSHIPS, schemas.GRAPH_NODES,
                     schemas.GRAPH_EDGES])
    b, units = index.build, index.units
    nodes = b.read(schemas.GRAPH_NODES, columns=["node_key", "entity_id", "title"])
    entities = b.read(schemas.ENTITIES, columns=["id", "title", "type", "description"])
    edges = b.read(schemas.GRAPH_EDGES)
    node_of = _check_nodes(nodes, entities, units.mentions)
    flat = read_flat_snapshot(index.db_path, "entities", entities,
                              VECTOR_TABLES["entities"][1], index.embedder.key)
    entity_table = None if flat is not None else index.table("entities")
    if entity_table is not None and entity_table.count_rows() != nodes.height:
        raise IndexInconsistentError(
            f"half-written index: the LanceDB entities table has "
            f"{entity_table.count_rows()} rows but entities.parquet has {nodes.height}")
    adj = alg.Adjacency.from_edges(nodes.height, edges["src_key"].to_numpy(),
                                   edges["dst_key"].to_numpy(),
                                   edges["weight"].fill_null(1.0).to_numpy())
    if flat is not None:
        ids, mat = entities["id"].to_list(), flat
    else:
        ids, mat = _stored_entity_vectors(entity_table, node_of)
    entity_vectors = np.zeros((nodes.height, mat.shape[1]), dtype=np.float32)  # row = node key
    entity_vectors[[node_of[i] for i in ids]] = \
        mat / np.maximum(np.linalg.norm(mat, axis=1, keepdims=True), 1e-12)
    incidence, affinity = _unit_entity_matrices(units, node_of, nodes.height, entity_vectors)
    df = np.asarray(incidence.sum(axis=0)).ravel()
    aliases = None
    if b.has(schemas.ENTITY_ALIASES):
        aliases = b.read(schemas.ENTITY_ALIASES, columns=["alias", "entity_id"])
    return EntityGraph(
        nodes=nodes, edges=edges, node_of=node_of, entity_ids=nodes["entity_id"].to_list(),
        titles=nodes["title"].to_list(), relationship_ids=edges["relationship_id"].to_list(),
        adj=adj, incidence=incidence, affinity=affinity,
        specificity=1.0 / np.maximum(df, 1.0), entity_vectors=entity_vectors,
        entity_table=entity_table, snapshot_ids=ids if flat is not None else None,
        snapshot_vectors=flat,
        entity_ann="flat" if flat is not None else vector_index_type(entity_table),
        max_weight=float(edges["weight"].max() or 1.0) if edges.height else 1.0,  # type: ignore[arg-type]
        linker=NameLinker(entities.select("id", "title"), aliases))
