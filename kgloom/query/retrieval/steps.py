"""The steps every retrieval mode shares: one call's state (:class:`Call`), the vector
search, the result frames, entity linking and seeds, the BFS, the graph ranking and the
top-up with vector hits. No mode logic lives here; see the mode modules.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import numpy as np
import polars as pl

from kgloom.core import schemas
from kgloom.query import algorithms as alg
from kgloom.query.linking import LinkedEntity, linked_frame
from kgloom.query.modes import GRAPH_BACKENDS, check_question, one_of
from kgloom.query.query_index import QueryIndex
from kgloom.query.retrieval.relevance import judge_relevance
from kgloom.query.retrieval.result import (
    ENTITY_RESULT_SCHEMA,
    RELATIONSHIP_RESULT_SCHEMA,
    UNIT_RESULT_SCHEMA,
    RetrievalResult,
)
from kgloom.settings.retrieval_settings import DEFAULT_RETRIEVAL, RetrievalSettings


def adjacent_floor(scores: np.ndarray, before: np.ndarray, after: np.ndarray,
                   weight: float) -> np.ndarray:
    """float64 (units,): each unit's score, raised to ``weight`` x the better score of the
    units just before and after it in its document (``before`` / ``after``: their rows,
    -1 for none; :meth:`kgloom.query.query_index.QueryIndex.adjacent_rows`).

    A scene of a long document runs across text units (600 tokens, 100 overlapping), so
    the unit next to the one that matches the question often holds the rest of the
    answer: on the book "What did the cleaning woman pilfer from the corpse?" matched the
    unit with the shirt best and the bed-curtains were in the unit before it. Units of
    one-unit documents (a Wikipedia passage) keep their score. The idea is the
    neighbouring-window expansion of sentence-window and auto-merging retrieval, kept to
    one unit each side and as a floor rather than a merge.
    """
    near = np.full(scores.shape[0], -np.inf)
    for rows in (before, after):
        has = rows >= 0
        near[has] = np.maximum(near[has], scores[rows[has]])
    return np.maximum(scores, weight * near)


DEFAULT_SETTINGS = DEFAULT_RETRIEVAL  # the default of every mode's ``settings``


def check_settings(settings: RetrievalSettings) -> RetrievalSettings:
    """Return ``settings`` when a retrieval can run with them: a known ``graph_backend``
    and ``bfs_threads`` None or >= 1 (a copy made with ``model_copy`` is not validated).

    Raises:
        ValueError: naming the unknown graph_backend (with the known ones), or bfs_threads.
    """
    if settings.graph_backend not in GRAPH_BACKENDS:
        raise ValueError(one_of("graph_backend", settings.graph_backend, GRAPH_BACKENDS))
    if settings.bfs_threads is not None and settings.bfs_threads < 1:
        raise ValueError(f"bfs_threads must be >= 1, got {settings.bfs_threads}")
    return settings


def check_positive(name: str, value: float, strict: bool = True) -> None:
    """Raise ValueError naming ``name`` when ``value`` <= 0 (``strict``) or < 0, or is NaN
    (a NaN weight compares false with every score and silently empties a ranking)."""
    if not ((value > 0) if strict else (value >= 0)):
        raise ValueError(f"{name} must be {'>' if strict else '>='} 0, got {value}")


def check_query_args(top_k: int, depth: int | None, lam: float | None) -> None:
    """Raise ValueError naming top_k (<= 0), depth (< 0) or lambda (< 0, NaN or infinite,
    as :func:`kgloom.query.modes.check_options` words it)."""
    if not isinstance(top_k, int) or top_k <= 0:
        raise ValueError(f"top_k must be > 0, got {top_k}")
    if depth is not None and (not isinstance(depth, int) or depth < 0):
        raise ValueError(f"depth must be >= 0, got {depth}")
    if lam is not None and not 0 <= lam < math.inf:
        raise ValueError(f"lambda must be finite and >= 0, got {lam}")


@dataclass
class Call:
    """One retrieval call: the index, the settings, the query vector, when it started
    and which LanceDB searches it made (``info["ann"]``).

    Build it with :meth:`begin` (a question) or :meth:`begin_vector` (a query vector).
    """

    index: QueryIndex
    settings: RetrievalSettings
    question: str
    qv: np.ndarray
    start: float
    searched: dict[str, str] = field(default_factory=dict)
    nearest: float | None = None  # the query's cosine with its nearest unit, once searched

    @classmethod
    def begin(cls, index: QueryIndex, settings: RetrievalSettings, question: str, top_k: int,
              depth: int | None = None, lam: float | None = None) -> Call:
        """Check the question and arguments, start the clock, embed the question.

        Raises:
            ValueError: an empty question or one that is no text
                (:func:`kgloom.query.modes.check_question`), or a bad top_k / depth /
                lambda.
        """
        check_question(question)
        check_query_args(top_k, depth, lam)
        check_settings(settings)
        start = time.perf_counter()
        return cls(index, settings, question, index.embed([question])[0], start)

    @classmethod
    def begin_vector(cls, index: QueryIndex, settings: RetrievalSettings, vector: np.ndarray,
                     top_k: int, depth: int | None = None, lam: float | None = None) -> Call:
        """Check a query vector and the arguments; start the clock (question empty).

        ``vector`` is a 1-D array of the index's vector dimension (the embedder's, or the
        imported vectors'), finite and not all zero; it is scaled to unit length (the
        search is by cosine) unless it already is within 1e-6.

        Raises:
            ValueError: a vector of another shape, a non-finite or zero vector, or a bad
                top_k / depth / lambda (as for a question).
        """
        dim = index.embedder.dim
        v = np.asarray(vector, dtype=np.float32)
        if v.ndim != 1 or v.shape[0] != dim:
            raise ValueError(f"the query vector must have shape ({dim},) like "
                             f"the index's vectors, got {v.shape}")
        norm = float(np.linalg.norm(v.astype(np.float64)))
        if not np.isfinite(v).all() or norm == 0.0:
            raise ValueError("the query vector must be finite and not all zeros")
        check_query_args(top_k, depth, lam)
        check_settings(settings)
        start = time.perf_counter()
        return cls(index, settings, "", v if abs(norm - 1.0) <= 1e-6 else
                   (v / norm).astype(np.float32), start)

    # --- searches --------------------------------------------------------------------
    def search(self, table: str, vector: np.ndarray, k: int, refine_rows: int | None = None
               ) -> tuple[list[str], np.ndarray]:
        """:meth:`QueryIndex.search`, recording the search kind in this call's
        ``info["ann"]``."""
        self.searched[table] = self.index.ann_kind(table)
        return self.index.search(table, vector, k, refine_rows)

    def vector_order(self, k: int) -> tuple[list[int], np.ndarray]:
        """The ``k`` text unit rows nearest to the query, with their cosines."""
        if not self.index.units.count:  # e.g. an imported graph: no text unit to search
            return [], np.zeros(0)
        ids, sims = self.search("text_units", self.qv, k)
        if len(sims) and self.nearest is None:
            self.nearest = float(sims[0])
        row_of = self.index.units.row_of
        return [row_of[i] for i in ids], sims

    def first_hop_scores(self, sims: np.ndarray) -> np.ndarray:
        """float64 (units,): every unit's first-hop score, ``cosine + lexical_weight x
        BM25 share`` (the unit's BM25 score over the best unit's,
        :attr:`kgloom.query.query_index.QueryIndex.lexical`), or the cosine alone when
        ``settings.lexical_weight`` is 0 or the question was given as a vector (no words).

        Args:
            sims: float64 (units,), the question's cosine with every unit
                (:meth:`QueryIndex.similarities`).
        """
        weight = self.settings.lexical_weight
        if weight <= 0 or not self.question or not self.index.units.count:
            return sims
        return sims + weight * self.index.lexical.scores(self.question)

    def first_hop_order(self, k: int, sims: np.ndarray,
                        scores: np.ndarray | None = None) -> tuple[list[int], np.ndarray]:
        """The ``k`` text unit rows a graph mode starts from, with their scores: by
        ``scores`` when given (float64 (units,), the caller's first-hop scores), else the
        nearest by cosine (:meth:`vector_order`) when ``settings.lexical_weight`` is 0,
        else by :meth:`first_hop_scores`.

        Args:
            k: rows wanted (fewer when the index has fewer units).
            sims: float64 (units,), the question's cosine with every unit
                (:meth:`QueryIndex.similarities`).
            scores: float64 (units,) or None.
        """
        if scores is None:
            if self.settings.lexical_weight <= 0 or not self.question \
                    or not self.index.units.count:
                return self.vector_order(k)
            scores = self.first_hop_scores(sims)
        if self.nearest is None and len(sims):
            self.nearest = float(sims.max())
        k = min(k, len(scores))
        if k <= 0:
            return [], scores[:0]
        top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
        rows = sorted(top.tolist(), key=lambda r: (-scores[r], r))
        return rows, scores[rows]

    def nearest_similarity(self) -> float | None:
        """The query's cosine with its nearest text unit (searched once per call: reused
        from the mode's own vector search when it made one); None with no text unit."""
        if self.nearest is None:
            self.vector_order(1)
        return self.nearest

    def entity_candidates(self, k: int, refine_rows: int | None = None
                          ) -> list[tuple[int, float]]:
        """The ``k`` entities nearest to the query as (node key, cosine), nearest first:
        an exact scan on the memory backend, LanceDB otherwise (``refine_rows``: IVF_PQ's
        re-rank pool, see :func:`kgloom.embedding.store.search_vectors`)."""
        g = self.index.graph
        if self.settings.graph_backend == "memory":
            return self.memory_entity_candidates(k)
        ids, sims = self.search("entities", self.qv, k, refine_rows)
        return [(g.node_of[i], float(s)) for i, s in zip(ids, sims)]

    def memory_entity_candidates(self, k: int) -> list[tuple[int, float]]:
        """Exact cosine top ``k`` entities over the graph's entity vectors (node key,
        cosine), most similar first, ties by node key: what LanceDB's flat scan returns,
        and at or above IVF_PQ's recall on an indexed table, with no call into LanceDB."""
        # numpy's own einsum loop, not BLAS sgemv: one thread and no spinning BLAS
        # workers; 3.6 ms vs 9 ms (2 threads) per 169k x 128 scan on the loaded 2 cores
        sims = np.einsum("ij,j->i", self.index.graph.entity_vectors, self.qv.astype(np.float32))
        self.searched["entities"] = "memory"
        k = min(k, sims.shape[0])
        if k <= 0:
            return []
        top = np.argpartition(sims, sims.shape[0] - k)[sims.shape[0] - k:]
        top = top[np.lexsort((top, -sims[top]))]
        return [(int(n), float(sims[n])) for n in top]

    # --- linking -------------------------------------------------------------------------
    def link(self) -> list[LinkedEntity]:
        """The question's entities (:func:`link_question`)."""
        return link_question(self.index, self.settings, self.question, self.qv, self)

    def linked_seeds(self) -> tuple[list[LinkedEntity], list[int], dict[int, float]]:
        """Seed nodes, strongest first, with their scores: the linked entities (score =
        link score), then, when ``settings.hit_seeds`` > 0, the entities mentioned by that
        many nearest text units (score = ``settings.hit_seed_weight`` x the unit's
        similarity; recorded in the links as method ``vector_hit``)."""
        links = self.link()
        g, units, cfg = self.index.graph, self.index.units, self.settings
        if cfg.hit_seeds > 0:
            known = {x.entity_id for x in links}
            rows, sims = self.vector_order(cfg.hit_seeds)
            for row, sim in zip(rows, sims.tolist()):
                for e in units.kg_node_ids[row] or []:
                    if e not in known:
                        known.add(e)
                        links.append(LinkedEntity(e, g.titles[g.node_of[e]], "vector_hit",
                                                  units.ids[row], cfg.hit_seed_weight * sim))
        seeds, score = [], {}
        for x in sorted(links, key=lambda x: -x.score):
            n = g.node_of[x.entity_id]
            if n not in score:
                seeds.append(n)
                score[n] = x.score
        return links, seeds, score

    # --- the graph -----------------------------------------------------------------------
    def reach(self, seeds: list[int], depth: int, first_hop: np.ndarray | None = None
              ) -> alg.ReachedSet:
        """BFS from node keys ``seeds`` with the configured backend, with provenance
        (``bfs_threads`` workers: numpy threads in memory, DuckDB threads over files).

        ``first_hop``: the seeds' neighbours when the caller already read them (the fused
        retrieve's rerank); over files the BFS then starts one hop in (no query at depth
        1, one round fewer beyond). The in-memory BFS reads them from the CSR anyway."""
        adj, threads = self.index.graph.adj, self.settings.bfs_threads
        if self.settings.graph_backend == "memory":
            return alg.reach(adj, seeds, depth, threads or 1)
        levels = [np.unique(np.asarray(seeds, np.int64))]
        if first_hop is not None and depth >= 1:
            levels.append(np.setdiff1d(first_hop, levels[0]))
        if depth < len(levels):  # nothing beyond what is in hand: no edge to read
            return alg.attribute_levels(adj, levels[:depth + 1], seeds)
        from kgloom.query.graph_bfs import bfs_keys

        build = self.index.build
        try:  # over this build's graph-edges.parquet
            found = bfs_keys(build.folder, seeds, depth, threads=threads,
                             first_hop=None if first_hop is None else first_hop.tolist())
        except FileNotFoundError:
            build.gone(build.path(schemas.GRAPH_EDGES))
            raise  # unreachable: gone() raises
        levels = alg.hop_levels(found["node_key"].to_numpy(), found["hops"].to_numpy())
        return alg.attribute_levels(adj, levels, seeds)

    def unit_scores(self, node_values: np.ndarray) -> np.ndarray:
        """Per unit, the sum of ``node_values`` over the entities it mentions, each
        weighted by entity-unit affinity when ``settings.entity_affinity`` (float64 (units,))."""
        g = self.index.graph
        return (g.affinity if self.settings.entity_affinity else g.incidence) @ node_values

    # --- results -----------------------------------------------------------------------
    def top_up(self, order: list[int], via: dict[int, str], top_k: int, pool: int) -> list[int]:
        """Fill ``order`` (and ``via``) up to ``top_k`` rows with the nearest of the
        ``pool`` vector hits it lacks, each marked ``vector_fill``; returns the rows
        added. The one place a graph mode's short ranking is topped up."""
        added = []
        if len(order) < top_k:
            fill, _ = self.vector_order(pool)
            for r in fill:
                if r not in via and len(order) < top_k:
                    order.append(r)
                    via[r] = "vector_fill"
                    added.append(r)
        return added

    def unit_rows(self, order: list[int], scores: dict[int, float] | np.ndarray,
                  sims: np.ndarray, via: dict[int, str] | str,
                  hop: dict[int, int] | None = None,
                  ents: dict[int, list[str]] | None = None,
                  rels: dict[int, list[str]] | None = None) -> pl.DataFrame:
        """Build the UNIT_RESULT_SCHEMA frame for unit rows ``order`` (rank order).

        ``hop`` None means every unit is a direct hit (hop_depth 0); otherwise a unit
        missing from it has a null hop_depth (not reached by a bounded walk)."""
        u = self.index.units
        rows = []
        for rank, i in enumerate(order, 1):
            rows.append({
                "rank": rank, "id": u.ids[i], "score": float(scores[i]),
                "similarity": float(sims[i]) if len(sims) else 0.0,
                "hop_depth": 0 if hop is None else hop.get(i),
                "via": via if isinstance(via, str) else via.get(i, "vector"),
                "entity_ids": (ents or {}).get(i, []), "relationship_ids": (rels or {}).get(i, []),
                "document_id": u.document_ids[i], "document_title": u.document_titles[i],
                "text": u.texts[i]})
        return pl.DataFrame(rows, schema=UNIT_RESULT_SCHEMA) if rows else \
            schemas.empty(UNIT_RESULT_SCHEMA)

    def finish(self, mode: str, units: pl.DataFrame, entities: pl.DataFrame | None = None,
               relationships: pl.DataFrame | None = None,
               linked: list[LinkedEntity] | None = None, **info: Any) -> RetrievalResult:
        """The result: the frames (empty ones for None) and ``info`` with ``used_mode``,
        ``fallback``, the relevance judgement (``best_similarity``, ``low_relevance``,
        ``notice``: :func:`kgloom.query.retrieval.relevance.judge_relevance`), ``ann``,
        ``graph_backend``, ``build_id`` and ``seconds``."""
        info.setdefault("used_mode", mode)
        info.setdefault("fallback", None)
        info.update(judge_relevance(self.nearest_similarity(),
                                    self.settings.low_relevance_similarity, self.question))
        info["ann"] = dict(self.searched)
        info["graph_backend"] = self.settings.graph_backend
        info["build_id"] = self.index.build.build_id
        info["seconds"] = round(time.perf_counter() - self.start, 6)
        return RetrievalResult(
            self.question, mode, units,
            entities if entities is not None else schemas.empty(ENTITY_RESULT_SCHEMA),
            relationships if relationships is not None else schemas.empty(
                RELATIONSHIP_RESULT_SCHEMA),
            linked_frame(linked or []), info)

    def vector_result(self, mode: str, top_k: int, linked: list[LinkedEntity] | None = None,
                      fallback: str | None = None) -> RetrievalResult:
        """The ``vector`` mode's result under ``mode`` (a fallback says why)."""
        order, sims = self.vector_order(top_k)
        scores = dict(zip(order, sims.tolist()))
        units = self.unit_rows(order, scores, self.index.similarities(self.qv), "vector")
        return self.finish(mode, units, linked=linked, top_k=top_k, used_mode="vector",
                           fallback=fallback)

    def graph_result(self, mode: str, top_k: int, reached: alg.ReachedSet,
                     seed_score: dict[int, float], linked: list[LinkedEntity],
                     entity_via: str, **info: Any) -> RetrievalResult:
        """Rank the units of the reached entities; build the entity/relationship frames.

        An entity's activation is its seed's score for a seed, else its parent's times
        ``settings.hop_decay x (0.5 + 0.5 x edge weight / max weight)``. A unit scores
        ``settings.similarity_weight x similarity`` + the sum of activation x specificity
        over the reached entities it mentions; fewer than top_k such units are topped up
        with vector hits (:meth:`top_up`).
        """
        g, kg = self.index.graph, self.index.units.kg_node_ids
        activation = self._activation(reached, seed_score)
        weighted = activation * g.specificity
        graph_scores = self.unit_scores(weighted)
        sims = self.index.similarities(self.qv)
        scores = self.settings.similarity_weight * sims + graph_scores
        candidates = np.flatnonzero(graph_scores > 0)
        order = sorted(candidates.tolist(), key=lambda r: (-scores[r], r))[:top_k]
        via = {r: entity_via for r in order}
        self.top_up(order, via, top_k, top_k + len(order))
        by_node = {n: i for i, n in enumerate(reached.node.tolist())} if order else {}
        ents, rels, hop = {}, {}, {}
        for r in order:
            mine = [g.node_of[e] for e in kg[r] or [] if g.node_of[e] in by_node]
            mine.sort(key=lambda n: (-weighted[n], n))
            at = [by_node[n] for n in mine]
            ents[r] = [g.entity_ids[n] for n in mine]
            rels[r] = [g.relationship_ids[int(reached.edge_row[i])] for i in at
                       if reached.edge_row[i] >= 0]
            if mine:
                hop[r] = int(reached.hops[at].min())
        units = self.unit_rows(order, scores, sims, via, hop, ents, rels)
        entities, relationships = self._reached_frames(reached, activation, entity_via)
        return self.finish(mode, units, entities, relationships, linked, top_k=top_k, **info)

    def _activation(self, reached: alg.ReachedSet, seed_score: dict[int, float]
                    ) -> np.ndarray:
        """float64 (nodes,): a reached entity's activation (see :meth:`graph_result`),
        0 for the others; computed level by level, parents before children."""
        g = self.index.graph
        activation = np.zeros(g.adj.n_nodes)
        bounds = np.searchsorted(reached.hops, np.arange(int(reached.hops.max(initial=0)) + 2))
        for h, (lo, hi) in enumerate(pairwise(bounds)):
            nodes = reached.node[lo:hi]
            if h == 0:
                activation[nodes] = [seed_score.get(v, 0.0) for v in nodes.tolist()]
            else:
                edge = 0.5 + 0.5 * reached.weight[lo:hi] / g.max_weight
                activation[nodes] = (activation[reached.parent[lo:hi]] * self.settings.hop_decay
                                     * edge)
        return activation

    def _reached_frames(self, reached: alg.ReachedSet, activation: np.ndarray,
                        entity_via: str) -> tuple[pl.DataFrame, pl.DataFrame]:
        """ENTITY_RESULT_SCHEMA frame (one row per reached entity, in reached order) and
        RELATIONSHIP_RESULT_SCHEMA frame (the edge each non-seed was reached through),
        gathered column-wise from the graph tables."""
        g = self.index.graph
        ids, titles = g.nodes["entity_id"], g.nodes["title"]
        entities = pl.DataFrame({
            "entity_id": ids.gather(reached.node), "title": titles.gather(reached.node),
            "hop_depth": reached.hops, "score": activation[reached.node],
            "seed_entity_id": ids.gather(reached.seed),
            "via": pl.repeat(entity_via, len(reached), dtype=pl.String, eager=True)},
            schema=ENTITY_RESULT_SCHEMA)
        through = reached.edge_row >= 0
        e = g.edges[reached.edge_row[through]]
        relationships = pl.DataFrame({
            "relationship_id": e["relationship_id"], "source": titles.gather(e["src_key"]),
            "relation": e["relation"], "target": titles.gather(e["dst_key"]),
            "weight": e["weight"], "hop_depth": reached.hops[through]},
            schema=RELATIONSHIP_RESULT_SCHEMA)
        return entities, relationships


def link_question(index: QueryIndex, settings: RetrievalSettings, question: str,
                  qv: np.ndarray | None = None, call: Call | None = None) -> list[LinkedEntity]:
    """The question's entities: by name and alias (:class:`kgloom.query.linking.NameLinker`),
    then the candidate spans left unlinked by ANN over the LanceDB ``entities`` table (top
    hit at cosine >= ``settings.ann_link_min_similarity``), plus, when
    ``settings.ann_link_question_k`` > 0, that many entities nearest to the question.

    ``call``: the retrieval call whose ``info["ann"]`` records the searches (None: none).

    Returns links strongest first within each method (name, alias, partial_name, ann).

    Raises:
        IndexFilesMissingError: when the graph files are missing.
    """
    g = index.graph
    search = call.search if call is not None else index.search
    links, unlinked = g.linker.link(question)
    known = {x.entity_id for x in links}
    if unlinked:
        vecs = index.embed(unlinked)
        for span, v in zip(unlinked, vecs):
            ids, sims = search("entities", v, 1)
            if ids and sims[0] >= settings.ann_link_min_similarity and ids[0] not in known:
                known.add(ids[0])
                links.append(LinkedEntity(ids[0], g.titles[g.node_of[ids[0]]], "ann",
                                          span, float(sims[0])))
    if settings.ann_link_question_k > 0:
        vec = index.embed([question])[0] if qv is None else qv
        ids, sims = search("entities", vec, settings.ann_link_question_k)
        for eid, sim in zip(ids, sims):
            if eid not in known and sim >= settings.ann_link_min_similarity:
                known.add(eid)
                links.append(LinkedEntity(eid, g.titles[g.node_of[eid]], "ann",
                                          "(question)", float(sim)))
    return links
