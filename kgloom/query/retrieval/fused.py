"""``fused``: ANN over entity vectors with oversampling, a greedy Jaccard diversity
rerank of the seeds, BFS from the chosen seeds; ``lam = 0`` equals ``two_step``."""

from __future__ import annotations

import numpy as np

from kgloom.embedding.store import ANN_REFINE_FACTOR
from kgloom.query import algorithms as alg
from kgloom.query.query_index import QueryIndex
from kgloom.query.retrieval.result import RetrievalResult
from kgloom.query.retrieval.steps import DEFAULT_SETTINGS, Call, RetrievalSettings, check_positive
from kgloom.settings.retrieval_settings import (
    DEFAULT_DEPTH,
    DEFAULT_LAMBDA,
    DEFAULT_OVERSAMPLE,
    DEFAULT_TOP_K,
)


def retrieve(index: QueryIndex, question: str, top_k: int = DEFAULT_TOP_K,
             settings: RetrievalSettings = DEFAULT_SETTINGS, depth: int = DEFAULT_DEPTH,
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

    Raises:
        ValueError: an empty question, top_k <= 0, depth < 0, lam < 0, oversample <= 0.
        IndexFilesMissingError / IndexInconsistentError: the graph files.
    """
    return _fused(Call.begin(index, settings, question, top_k, depth, lam), top_k, depth,
                  lam, oversample)


def retrieve_by_vector(index: QueryIndex, vector: np.ndarray, top_k: int = DEFAULT_TOP_K,
                       settings: RetrievalSettings = DEFAULT_SETTINGS,
                       depth: int = DEFAULT_DEPTH, lam: float = DEFAULT_LAMBDA,
                       oversample: int = DEFAULT_OVERSAMPLE) -> RetrievalResult:
    """:func:`retrieve` for a query vector instead of a question (see
    :meth:`Call.begin_vector`); the same result as for a question that embeds to
    ``vector``, with ``question`` empty. The way to query an imported graph (``kgloom
    import-graph``), whose vectors no text embedder made."""
    return _fused(Call.begin_vector(index, settings, vector, top_k, depth, lam), top_k,
                  depth, lam, oversample)


def _fused(call: Call, top_k: int, depth: int, lam: float, oversample: int
           ) -> RetrievalResult:
    check_positive("oversample", oversample)
    g = call.index.graph
    # the baseline's IVF_PQ re-rank pool: its top_k come first, no more vectors read
    candidates = call.entity_candidates(oversample * top_k,
                                        refine_rows=ANN_REFINE_FACTOR * top_k)
    if not candidates:
        return call.vector_result("fused", top_k, None, "the index has no entity")
    chosen = alg.diversity_rerank(candidates, None, top_k, lam, g.adj)
    seeds = [c.node for c in chosen]
    # the rerank read the seeds' neighbourhoods (from the handle's adjacency): over
    # files the BFS starts from them instead of reading those edges again
    hop1 = (alg.first_hop(g.adj, seeds) if depth and call.settings.fused_first_hop
            and call.settings.graph_backend != "memory" else None)
    reached = call.reach(seeds, depth, hop1)
    overlap = {}
    if call.settings.seed_diagnostics:
        overlap = {"seed_overlap": alg.mean_pairwise_jaccard(seeds, g.adj),
                   "baseline_seed_overlap": alg.mean_pairwise_jaccard(
                       [n for n, _ in candidates[:top_k]], g.adj)}
    return call.graph_result(
        "fused", top_k, reached, {c.node: c.score for c in chosen},
        [], "fused", depth=depth, lam=lam, oversample=oversample,
        seeds=[g.entity_ids[n] for n in seeds], **overlap,
        ann_sum=float(sum(c.ann_score for c in chosen)),
        baseline_ann_sum=float(sum(s for _, s in candidates[:top_k])))
