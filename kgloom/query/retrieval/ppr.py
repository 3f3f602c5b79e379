"""``ppr``: personalized PageRank from the linked entities (HippoRAG's recipe,
arXiv 2405.14831, section 3)."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from kgloom.query import algorithms as alg
from kgloom.query.linking import LinkedEntity
from kgloom.query.query_index import QueryIndex
from kgloom.query.retrieval.multihop import NO_LINK
from kgloom.query.retrieval.result import ENTITY_RESULT_SCHEMA, RetrievalResult
from kgloom.query.retrieval.steps import DEFAULT_SETTINGS, Call, RetrievalSettings
from kgloom.settings.retrieval_settings import DEFAULT_DAMPING, DEFAULT_TOP_K


def retrieve(index: QueryIndex, question: str, top_k: int = DEFAULT_TOP_K,
             settings: RetrievalSettings = DEFAULT_SETTINGS,
             damping: float = DEFAULT_DAMPING) -> RetrievalResult:
    """Personalized PageRank from the linked entities (reset weight = link score x
    specificity), over the weighted entity graph; a unit scores the sum of its
    entities' PageRank (HippoRAG, arXiv 2405.14831, section 3). With no linked
    entity it returns ``vector`` results and says so.

    Raises:
        ValueError: an empty question, top_k <= 0, damping outside [0, 1).
        IndexFilesMissingError / IndexInconsistentError: the graph files.
    """
    call = Call.begin(index, settings, question, top_k)
    if not 0 <= damping < 1:
        raise ValueError(f"damping must be in [0, 1), got {damping}")
    links, pr, unit_scores = ppr_scores(call, damping)
    if pr is None or unit_scores is None:
        return call.vector_result("ppr", top_k, links, NO_LINK)
    return ranked_graph_units(call, "ppr", top_k, links, pr, unit_scores, {}, damping=damping)


def ppr_scores(call: Call, damping: float
               ) -> tuple[list[LinkedEntity], np.ndarray | None, np.ndarray | None]:
    """(links, PageRank over nodes float64 (nodes,), unit scores float64 (units,)), or
    Nones for the last two when nothing is linked."""
    g = call.index.graph
    links, seeds, score = call.linked_seeds()
    if not seeds:
        return links, None, None
    # HippoRAG's node specificity: a seed's reset weight is divided by the number of
    # passages that mention it, so a rare entity steers the walk more than a hub.
    pers = {n: score[n] * g.specificity[n] for n in seeds}
    pr = alg.personalized_pagerank(g.adj, pers, damping)
    return links, pr, call.unit_scores(pr)


def ranked_graph_units(call: Call, mode: str, top_k: int, links: list[LinkedEntity],
                       pr: np.ndarray, scores: np.ndarray, rank_override: dict[int, float],
                       **info: Any) -> RetrievalResult:
    """Units ranked by ``scores`` (or ``rank_override`` when given), topped up with
    vector hits (:meth:`Call.top_up`), provenance from the PageRank ``pr`` of their
    entities (ppr and hybrid)."""
    g, kg = call.index.graph, call.index.units.kg_node_ids
    sims = call.index.similarities(call.qv)
    if rank_override:
        order = sorted(rank_override, key=lambda r: (-rank_override[r], r))[:top_k]
        shown = rank_override
    else:
        cand = np.flatnonzero(scores > 0).tolist()
        order = sorted(cand, key=lambda r: (-scores[r], -sims[r], r))[:top_k]
        shown = {r: float(scores[r]) for r in order}
    via = {r: mode for r in order}
    for r in call.top_up(order, via, top_k, 2 * top_k):
        shown[r] = float(sims[r])
    seeds = [g.node_of[x.entity_id] for x in links]
    hops = alg.bfs_hops(g.adj, seeds, 3)
    ents, hop = {}, {}
    for r in order:
        mine = sorted((g.node_of[e] for e in kg[r] or []), key=lambda n: (-pr[n], n))
        ents[r] = [g.entity_ids[n] for n in mine if pr[n] > 0]
        reached = [hops[n] for n in mine if n in hops]
        if reached:
            hop[r] = min(reached)
    units = call.unit_rows(order, shown, sims, via, hop, ents)
    top = np.argsort(-pr, kind="stable")[:max(5 * top_k, 20)]
    entity_rows = [{"entity_id": g.entity_ids[n], "title": g.titles[n],
                    "hop_depth": hops.get(int(n)), "score": float(pr[n]),
                    "seed_entity_id": None, "via": "ppr"} for n in top if pr[n] > 0]
    return call.finish(mode, units, pl.DataFrame(entity_rows, schema=ENTITY_RESULT_SCHEMA)
                       if entity_rows else None, None, links, top_k=top_k, **info)
