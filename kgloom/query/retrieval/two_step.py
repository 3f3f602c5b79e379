"""``two_step``: the two-call baseline of the fused retrieve, as a client makes it: one
call for the ANN top_k entities (:func:`entities_by_vector`), a second for the BFS from
them (:func:`expand_by_vector`). Both calls are public: a plain entity search, and the
walk from seeds found elsewhere."""

from __future__ import annotations

import time

import numpy as np
import polars as pl

from kgloom.core import schemas
from kgloom.query import algorithms as alg
from kgloom.query.modes import check_question
from kgloom.query.query_index import QueryIndex
from kgloom.query.retrieval.relevance import judge_relevance
from kgloom.query.retrieval.result import ENTITY_RESULT_SCHEMA, UNIT_RESULT_SCHEMA, RetrievalResult
from kgloom.query.retrieval.steps import DEFAULT_SETTINGS, Call, RetrievalSettings, check_query_args
from kgloom.settings.retrieval_settings import DEFAULT_DEPTH, DEFAULT_TOP_K


def retrieve(index: QueryIndex, question: str, top_k: int = DEFAULT_TOP_K,
             settings: RetrievalSettings = DEFAULT_SETTINGS,
             depth: int = DEFAULT_DEPTH) -> RetrievalResult:
    """:func:`retrieve_by_vector` for the embedded question (embedded once). Same rows
    as ``fused(..., lam=0)``; ``info["seconds"]`` spans both calls.

    Raises:
        ValueError: an empty question or one that is no text
            (:func:`kgloom.query.modes.check_question`), top_k <= 0 or depth < 0.
    """
    check_question(question)
    check_query_args(top_k, depth, None)
    start = time.perf_counter()
    res = retrieve_by_vector(index, index.embed([question])[0], top_k, settings, depth)
    res.question = question  # and judged as a question (a corpus-wide one is not flagged)
    res.info.update(judge_relevance(res.info["best_similarity"],
                                    settings.low_relevance_similarity, question))
    res.info["seconds"] = round(time.perf_counter() - start, 6)
    return res


def retrieve_by_vector(index: QueryIndex, vector: np.ndarray, top_k: int = DEFAULT_TOP_K,
                       settings: RetrievalSettings = DEFAULT_SETTINGS,
                       depth: int = DEFAULT_DEPTH) -> RetrievalResult:
    """The two public calls :func:`entities_by_vector` and :func:`expand_by_vector`, the
    second given the first one's entity ids and scores, as the study this baseline
    comes from sends a vector query and then a traversal query (two round trips)."""
    start = time.perf_counter()
    check_query_args(top_k, depth, None)
    hits = entities_by_vector(index, vector, top_k, settings)
    if not hits.entities.height:
        call = Call.begin_vector(index, settings, vector, top_k)
        call.start = start
        return call.vector_result("two_step", top_k, None, "the index has no entity")
    seeds, scores = hits.entities["entity_id"].to_list(), hits.entities["score"].to_list()
    res = expand_by_vector(index, vector, seeds, top_k, settings, depth, scores,
                           entity_via="fused")
    res.mode = "two_step"
    res.info.update(ann_sum=float(sum(scores)), ann={**hits.info["ann"], **res.info["ann"]},
                    seconds=round(time.perf_counter() - start, 6))
    return res


def entities_by_vector(index: QueryIndex, vector: np.ndarray, top_k: int = DEFAULT_TOP_K,
                       settings: RetrievalSettings = DEFAULT_SETTINGS) -> RetrievalResult:
    """The ``top_k`` entities nearest to a query vector (cosine; exact scan on the
    memory backend, the LanceDB ``entities`` table otherwise): the first call of the
    two-call baseline, and a plain entity search.

    Returns:
        a result with no text units; ``entities`` holds one row per hit, nearest
        first (hop_depth 0, score = cosine, seed_entity_id = itself, via ``ann``).

    Raises:
        ValueError: a bad vector or top_k (see :meth:`Call.begin_vector`).
    """
    call = Call.begin_vector(index, settings, vector, top_k)
    g = index.graph
    hits = call.entity_candidates(top_k)
    ids = [g.entity_ids[n] for n, _ in hits]
    entities = pl.DataFrame({
        "entity_id": ids, "title": [g.titles[n] for n, _ in hits],
        "hop_depth": [0] * len(hits), "score": [s for _, s in hits], "seed_entity_id": ids,
        "via": ["ann"] * len(hits)}, schema=ENTITY_RESULT_SCHEMA)
    return call.finish("entities", schemas.empty(UNIT_RESULT_SCHEMA), entities, top_k=top_k)


def expand_by_vector(index: QueryIndex, vector: np.ndarray, seeds: list[str],
                     top_k: int = DEFAULT_TOP_K,
                     settings: RetrievalSettings = DEFAULT_SETTINGS,
                     depth: int = DEFAULT_DEPTH, seed_scores: list[float] | None = None,
                     entity_via: str = "bfs") -> RetrievalResult:
    """BFS to ``depth`` hops from the given entities, then the reached entities' text
    units ranked as multihop ranks them (:meth:`Call.graph_result`) against the query
    vector: the second call of the two-call baseline, and the way to walk from seeds
    found elsewhere.

    Args:
        index: the index.
        vector: the query vector (as for :meth:`Call.begin_vector`).
        seeds: entity ids, strongest first; repeats count once.
        top_k: text units to return.
        settings: the retrieval settings.
        depth: hops, >= 0.
        seed_scores: one score per seed (their activation); None = 1.0 each.
        entity_via: the ``via`` of the reached entities' rows (two_step: ``fused``,
            so that its rows equal ``fused(..., lam=0)``).

    Raises:
        ValueError: a bad vector, depth or top_k; an entity id the index lacks (names
            it); seed_scores of another length.
    """
    call = Call.begin_vector(index, settings, vector, top_k, depth)
    g = index.graph
    scores = [1.0] * len(seeds) if seed_scores is None else list(seed_scores)
    if len(scores) != len(seeds):
        raise ValueError(f"seed_scores has {len(scores)} values for {len(seeds)} seeds")
    unknown = [e for e in seeds if e not in g.node_of]
    if unknown:
        raise ValueError(f"unknown entity id {unknown[0]!r}: not in this index")
    score: dict[int, float] = {}
    for e, sc in zip(seeds, scores):
        score.setdefault(g.node_of[e], float(sc))
    keys = list(score)
    overlap = ({"seed_overlap": alg.mean_pairwise_jaccard(keys, g.adj)}
               if settings.seed_diagnostics else {})
    return call.graph_result("expand", top_k, call.reach(keys, depth), score, [], entity_via,
                             depth=depth, seeds=[g.entity_ids[n] for n in keys], **overlap)
