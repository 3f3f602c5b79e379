"""``hybrid``: reciprocal-rank fusion of ``vector`` and ``ppr``."""

from __future__ import annotations

import numpy as np

from kgloom.query import algorithms as alg
from kgloom.query.query_index import QueryIndex
from kgloom.query.retrieval.multihop import NO_LINK
from kgloom.query.retrieval.ppr import ppr_scores, ranked_graph_units
from kgloom.query.retrieval.result import RetrievalResult
from kgloom.query.retrieval.steps import DEFAULT_SETTINGS, Call, RetrievalSettings
from kgloom.settings.retrieval_settings import DEFAULT_DAMPING, DEFAULT_TOP_K


def retrieve(index: QueryIndex, question: str, top_k: int = DEFAULT_TOP_K,
             settings: RetrievalSettings = DEFAULT_SETTINGS,
             damping: float = DEFAULT_DAMPING) -> RetrievalResult:
    """Reciprocal-rank fusion (k = ``settings.rrf_k``) of the ``settings.hybrid_pool``
    best units of ``vector`` and of ``ppr``, weighted by ``settings.hybrid_weights``
    (vector, ppr). With no linked entity it returns ``vector`` results and says so.

    Raises:
        ValueError: an empty question or top_k <= 0.
        IndexFilesMissingError / IndexInconsistentError: the graph files.
    """
    call = Call.begin(index, settings, question, top_k)
    pool, weights = settings.hybrid_pool, settings.hybrid_weights
    links, pr, unit_scores = ppr_scores(call, damping)
    if pr is None or unit_scores is None:
        return call.vector_result("hybrid", top_k, links, NO_LINK)
    sims = index.similarities(call.qv)
    vec, _ = call.first_hop_order(pool, sims)
    graph_rank = sorted(np.flatnonzero(unit_scores > 0).tolist(),
                        key=lambda r: (-unit_scores[r], -sims[r], r))[:pool]
    fused = alg.reciprocal_rank_fusion([[str(r) for r in vec], [str(r) for r in graph_rank]],
                                       settings.rrf_k, weights)
    override = {int(r): s for r, s in fused}
    return ranked_graph_units(call, "hybrid", top_k, links, pr, unit_scores, override,
                              damping=damping, pool=pool, weights=list(weights))
