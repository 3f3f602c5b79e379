"""``one_hop``: vector hits expanded through the text units' own graph columns
(``kg_node_ids`` / ``neighbor_entity_ids`` / ``neighbor_triples``), then re-ranked; no
graph file is read."""

from __future__ import annotations

import numpy as np
import polars as pl

from kgloom.query.query_index import QueryIndex
from kgloom.query.retrieval.result import (
    ENTITY_RESULT_SCHEMA,
    RELATIONSHIP_RESULT_SCHEMA,
    RetrievalResult,
)
from kgloom.query.retrieval.steps import DEFAULT_SETTINGS, Call, RetrievalSettings, check_positive
from kgloom.settings.retrieval_settings import DEFAULT_TOP_K


def retrieve(index: QueryIndex, question: str, top_k: int = DEFAULT_TOP_K,
             settings: RetrievalSettings = DEFAULT_SETTINGS,
             unit_oversample: int | None = None) -> RetrievalResult:
    """Vector hits expanded through the text units' denormalized graph columns only.

    The ``unit_oversample x top_k`` nearest units are the hits (``unit_oversample`` None:
    ``settings.one_hop_oversample``; not fused's ``oversample``, a count of entities, so the
    query option ``oversample`` does not reach it); the entities they mention and neighbour
    are activated (:func:`_entity_activations`), and the hits and every unit mentioning an
    activated entity are scored by their similarity lifted by the entities they share with
    other hits (:func:`_lifted_units`); the ``top_k`` best, ties by row, are returned. No
    graph file is read.

    Returns entities = the activated entities that lifted a returned unit
    (:func:`_lifting_entities`), relationships = the ``neighbor_triples`` of the hits
    (:func:`_hit_triples`, relationship_id null).

    Raises:
        ValueError: an empty question, top_k <= 0 or unit_oversample <= 0.
    """
    call = Call.begin(index, settings, question, top_k)
    oversample = settings.one_hop_oversample if unit_oversample is None else unit_oversample
    check_positive("unit_oversample", oversample)
    hits, hit_sims = call.vector_order(oversample * top_k)
    sims = index.similarities(call.qv)
    act = _entity_activations(index, settings, hits, hit_sims)
    scores, lifted, via, seed_of = _lifted_units(index, settings, hits, sims, act)
    order = sorted(scores, key=lambda r: (-scores[r], r))[:top_k]
    hop = {r: (0 if r in hits else 1) for r in order}
    units = call.unit_rows(order, scores, sims, via, hop, lifted)
    ents = _lifting_entities(index, order, scores, lifted, hop, seed_of)
    return call.finish("one_hop", units, ents, _hit_triples(index, hits), top_k=top_k,
                       oversample=oversample)


def _entity_activations(index: QueryIndex, cfg: RetrievalSettings, hits: list[int],
                        hit_sims: np.ndarray) -> dict[str, list[tuple[float, int]]]:
    """The entities the hits activate: every entity a hit mentions (``kg_node_ids``)
    with the hit's similarity, every 1-hop neighbour (``neighbor_entity_ids``) with
    ``settings.neighbor_decay`` times it.

    Args:
        hits: the hits' unit rows, nearest first; hit_sims: float (len(hits),) their
            cosines.

    Returns:
        entity id -> up to two ``(activation, hit row)`` pairs from different hits, best
        first (a hit's own pair is its best activation of the entity), so a unit can
        skip its own.
    """
    u = index.units
    kg, nbr = u.kg_node_ids, u.neighbor_entity_ids
    act: dict[str, list[tuple[float, int]]] = {}

    def bump(e: str, value: float, row: int) -> None:
        best = [p for p in act.get(e, []) if p[1] != row]
        mine = max([value] + [p[0] for p in act.get(e, []) if p[1] == row])
        act[e] = sorted(best + [(mine, row)], reverse=True)[:2]

    for row, s in zip(hits, hit_sims.tolist()):
        for e in kg[row] or []:
            bump(e, s, row)
        for e in nbr[row] or []:
            bump(e, s * cfg.neighbor_decay, row)
    return act


def _lifted_units(index: QueryIndex, cfg: RetrievalSettings, hits: list[int],
                  sims: np.ndarray, act: dict[str, list[tuple[float, int]]]
                  ) -> tuple[dict[int, float], dict[int, list[str]], dict[int, str],
                             dict[int, int]]:
    """The candidate text units scored: the hits and every unit mentioning an activated
    entity.

    A unit scores ``similarity + settings.one_hop_weight x sum over its entities of
    activation x specificity``, where an entity's activation comes from the strongest
    *other* hit (:func:`_entity_activations`) and specificity is 1 / (units mentioning
    it) — so a unit is lifted by entities it shares with other hits, most by rare ones.

    Args:
        sims: float64 (units,), the question's cosine with every unit.

    Returns:
        ``(scores, lifted, via, seed_of)``, each keyed by candidate unit row: its score;
        the entities that lifted it, largest lift first; ``"vector"`` (a hit nothing
        lifted) or ``"one_hop"``; the hit row of its largest lift (lifted units only).
    """
    kg, mentions = index.units.kg_node_ids, index.units.mentions
    candidates = set(hits)
    for e in act:
        candidates.update(mentions.get(e, []))
    scores, lifted, via, seed_of = {}, {}, {}, {}
    for row in candidates:
        bonus, parts = 0.0, []
        for e in kg[row] or []:
            for value, src in act.get(e, []):
                if src != row:
                    spec = 1.0 / max(len(mentions.get(e, [])), 1)
                    bonus += value * spec
                    parts.append((value * spec, e, src))
                    break
        scores[row] = float(sims[row]) + cfg.one_hop_weight * bonus
        parts.sort(reverse=True)
        lifted[row] = [e for _, e, _ in parts]
        via[row] = "vector" if row in hits and not parts else "one_hop"
        if parts:
            seed_of[row] = parts[0][2]
    return scores, lifted, via, seed_of


def _lifting_entities(index: QueryIndex, order: list[int], scores: dict[int, float],
                      lifted: dict[int, list[str]], hop: dict[int, int],
                      seed_of: dict[int, int]) -> pl.DataFrame | None:
    """ENTITY_RESULT_SCHEMA frame of the entities that lifted the returned units
    ``order`` (first occurrence kept: the best-ranked unit's score and hop_depth, ``via``
    = ``unit:<hit id>`` of that unit's largest lift); None when none lifted any."""
    titles = index.entity_titles()
    ids = index.units.ids
    ent_rows = []
    for r in order:
        for e in lifted[r]:
            ent_rows.append({"entity_id": e, "title": titles.get(e), "hop_depth": hop[r],
                             "score": scores[r], "seed_entity_id": None,
                             "via": f"unit:{ids[seed_of[r]]}"})
    return pl.DataFrame(ent_rows, schema=ENTITY_RESULT_SCHEMA).unique(
        "entity_id", keep="first", maintain_order=True) if ent_rows else None


def _hit_triples(index: QueryIndex, hits: list[int]) -> pl.DataFrame | None:
    """RELATIONSHIP_RESULT_SCHEMA frame of the hits' ``neighbor_triples`` (``source |
    relation | target``; one of another shape is skipped), relationship_id and weight
    null, hop_depth 1, duplicates dropped; None when the hits have none."""
    triples = []
    for row in hits:
        for t in index.units.neighbor_triples[row] or []:
            parts_ = [p.strip() for p in t.split("|")]
            if len(parts_) == 3:
                triples.append({"relationship_id": None, "source": parts_[0],
                                "relation": parts_[1], "target": parts_[2],
                                "weight": None, "hop_depth": 1})
    return pl.DataFrame(triples, schema=RELATIONSHIP_RESULT_SCHEMA).unique(
        maintain_order=True) if triples else None
