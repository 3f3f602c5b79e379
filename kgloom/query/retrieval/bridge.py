"""``bridge``: the nearest text units, then the units most about the entities those
units (and the question) mention: a multi-hop question's second passage is the one
about the bridge entity its first passage names."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from kgloom.query.entity_graph import EntityGraph
from kgloom.query.linking import LinkedEntity
from kgloom.query.query_index import QueryIndex
from kgloom.query.retrieval.result import ENTITY_RESULT_SCHEMA, RetrievalResult
from kgloom.query.retrieval.steps import (
    DEFAULT_SETTINGS,
    Call,
    RetrievalSettings,
    adjacent_floor,
    check_positive,
)
from kgloom.settings.retrieval_settings import DEFAULT_TOP_K


def retrieve(index: QueryIndex, question: str, top_k: int = DEFAULT_TOP_K,
             settings: RetrievalSettings = DEFAULT_SETTINGS) -> RetrievalResult:
    """Vector hits, then the text units about the entities they (and the question)
    mention.

    A two-hop question ("where was the director of film X born?") has a first
    passage that vector search finds (about X, naming the director D) and a second
    one about D, which shares few words with the question. The steps:

    1. the first hop (:func:`_first_hop`): every unit's first-hop score and the hits;
    2. the bridges (:func:`_bridge_sources`): the entities each hit mentions or names
       by title, and the question's linked entities;
    3. the weighing (:func:`_bridged_units`): each unit mentioning a bridge entity
       scored by the hit, the entity's relevance and specificity, and the unit's
       affinity with it; a unit keeps its best score;
    4. the merge (:func:`_merged_order`): the kept nearest units, then bridged units
       and further vector hits by score, then the remaining vector hits;
    5. the named entities (:func:`_with_named_units`): every entity the question names
       keeps one of its own units, right after the kept units.

    The idea is HippoRAG's (arXiv 2405.14831: passages reached through the entities of
    the question) reduced to one hop and the passage-entity affinity; the knobs were
    chosen by bench/eval_qa.py on half of its questions.

    Returns units with ``via`` vector (hop_depth 0) or bridge (hop_depth 1, its
    entity_ids = the bridging entity); entities = the bridging entities with their
    best score and ``via`` = the hit unit id (``question`` for a linked entity);
    ``linked`` = the question's linked entities (:func:`_bridge_result`).

    Raises:
        ValueError: an empty question, top_k < 1, bridge_hits < 1, bridge_keep < 0,
            bridge_link_weight < 0, bridge_specificity_power < 0,
            bridge_vector_weight < 0 or bridge_match_power < 0.
        IndexFilesMissingError / IndexInconsistentError: the graph files.
    """
    call = Call.begin(index, settings, question, top_k)
    _check_bridge_settings(settings)
    graph = index.graph
    sims, first, hits, hit_sims = _first_hop(call, index, settings, top_k)
    match = question_match(first, settings.bridge_match_power)
    links = call.link()
    sources = _bridge_sources(index, settings, hits, hit_sims, links)
    best = _bridged_units(index, graph, settings, call.qv, sources, match)
    order, via = _merged_order(index, settings, hits, hit_sims, best, links, top_k)
    order = _with_named_units(index, settings, links, order, via, best, sims, top_k)
    return _bridge_result(call, index, graph, settings, order, via, best, sims, links, top_k)


def _check_bridge_settings(cfg: RetrievalSettings) -> None:
    """Refuse bridge's out-of-range settings, in this order.

    Raises:
        ValueError: bridge_hits < 1, bridge_keep < 0, bridge_link_weight < 0,
            bridge_specificity_power < 0, bridge_vector_weight < 0 or
            bridge_match_power < 0 (naming the setting).
    """
    check_positive("bridge_hits", cfg.bridge_hits)
    check_positive("bridge_keep", cfg.bridge_keep, strict=False)
    check_positive("bridge_link_weight", cfg.bridge_link_weight, strict=False)
    check_positive("bridge_specificity_power", cfg.bridge_specificity_power, strict=False)
    check_positive("bridge_vector_weight", cfg.bridge_vector_weight, strict=False)
    check_positive("bridge_match_power", cfg.bridge_match_power, strict=False)


def _first_hop(call: Call, index: QueryIndex, cfg: RetrievalSettings, top_k: int
               ) -> tuple[np.ndarray, np.ndarray, list[int], np.ndarray]:
    """The first hop: the question's cosine with every text unit, every unit's first-hop
    score, and the units ranked by it (the kept units, the hits whose entities are
    followed, and the further vector hits).

    The first-hop score is :meth:`Call.first_hop_scores`: the question's cosine with a
    unit plus ``settings.lexical_weight`` times its BM25 share, so a unit that shares the
    question's rare words (a name, "milliner") is a hit even where the embedder does not
    place it near; then raised to ``settings.adjacent_unit_weight`` times the score of
    the unit just before or after it in its document
    (:func:`kgloom.query.retrieval.steps.adjacent_floor`: a scene runs across units).
    The ``max(bridge_hits, top_k + bridge_keep)`` best units are ranked
    (:meth:`Call.first_hop_order`).

    Returns:
        ``(sims, first, hits, hit_sims)``: float64 (units,) cosines; float64 (units,)
        first-hop scores (``sims`` itself when neither the lexical nor the adjacent
        weight changes it); the ranked unit rows (list[int], best first); float64
        (len(hits),) their first-hop scores.
    """
    sims = index.similarities(call.qv)
    first = call.first_hop_scores(sims)
    if cfg.adjacent_unit_weight > 0 and len(first):
        first = adjacent_floor(first, *index.adjacent_rows(), cfg.adjacent_unit_weight)
    hits, hit_sims = call.first_hop_order(max(cfg.bridge_hits, top_k + cfg.bridge_keep), sims,
                                          None if first is sims else first)
    return sims, first, hits, hit_sims


def _bridge_sources(index: QueryIndex, cfg: RetrievalSettings, hits: list[int],
                    hit_sims: np.ndarray, links: list[LinkedEntity]
                    ) -> list[tuple[int, float, list[str]]]:
    """The bridges: the entities each of the ``settings.bridge_hits`` best first-hop hits
    mentions, with the hit's score, and the question's linked entities.

    A hit ``h`` bridges through its ``kg_node_ids`` plus the entities titled as a
    document whose title ``h`` writes (:meth:`QueryIndex.titles_written`, the links of a
    Wikipedia passage, which the extraction may miss: on the HotpotQA sample R@5
    93.0 -> 95.0, on the 2Wiki pool 91.9 -> 93.1). The question's linked entities
    (:func:`kgloom.query.retrieval.steps.link_question`) count as named by a hit of
    similarity ``settings.bridge_link_weight`` (row -1), so the units about the entities
    a question names come in too.

    Returns:
        ``(hit row or -1 for the question, score clipped at 0, entity ids)`` per source,
        hits first in rank order, the question last.
    """
    kg = index.units.kg_node_ids
    sources = [(h, max(s, 0.0), (kg[h] or []) + index.titles_written(h))
               for h, s in list(zip(hits, hit_sims.tolist()))[:cfg.bridge_hits]]
    if cfg.bridge_link_weight > 0 and links:
        sources.append((-1, cfg.bridge_link_weight, [x.entity_id for x in links]))
    return sources


def _bridged_units(index: QueryIndex, g: EntityGraph, cfg: RetrievalSettings, qv: np.ndarray,
                   sources: list[tuple[int, float, list[str]]], match: np.ndarray
                   ) -> dict[int, tuple[float, int, int]]:
    """The weighing: every text unit reached through a bridge entity, with its best score.

    Every entity ``e`` a source ``h`` names scores each other unit ``u`` that mentions
    it by ``sim(q, h) x max(0, cos(q, e)) ** settings.bridge_relevance_power x
    specificity(e) ** settings.bridge_specificity_power x affinity(u, e)`` (affinity:
    cosine of the entity's vector, "title: description", and the unit's vector, clipped
    at 0 — how much ``u`` is about ``e``; 1 for a unit of the document titled with
    ``e``'s title, with or without a trailing disambiguator ("Richard Wright
    (author)"), as a Wikipedia passage is titled with its subject's name: on the
    development sets R@2 / R@5 went from 70.6 / 91.2 to 74.4 / 95.6 on the 2Wiki slice
    and from 76.5 / 91.0 to 79.0 / 92.0 on the HotpotQA sample, the book unchanged;
    specificity: 1 / the units mentioning ``e``, HippoRAG's node specificity, so a
    nationality or a country named in hundreds of units does not bridge to all of
    them), and, for a unit not titled with ``e``'s title that is in the hit's own
    document (or reached from the question), also by how well it answers the question
    itself, ``match(u)`` (:func:`question_match`: its first-hop score over the best
    unit's, to ``settings.bridge_match_power``). A unit of another document is a hop,
    which need not share the question's words; one of the same document is the same
    text going on, where every unit that names a minor character was a candidate at the
    weight of how much it is about that character ("How is the plump sister in the lace
    tucker related to Fred's wife?" on the book: rank 2 by first hop, 13 by bridge, 3
    now). A unit keeps its best score (the first source to reach it wins a tie).

    Args:
        g: the index's entity graph (``index.graph``).
        qv: float32 (dim,), the question's vector.
        sources: as :func:`_bridge_sources`.
        match: float64 (units,), :func:`question_match`.

    Returns:
        unit row -> ``(score, entity node, source hit row or -1)``.
    """
    aff = g.affinity_csc
    relevance = np.clip(g.entity_vectors @ qv.astype(np.float32), 0.0, None)
    spec = g.specificity ** cfg.bridge_specificity_power
    titled = index.rows_titled()
    docs = index.units.document_ids
    best: dict[int, tuple[float, int, int]] = {}  # unit row -> (score, node, source)
    for h, s, mentioned in sources:
        for e in mentioned:
            n = g.node_of[e]
            weight = s * float(relevance[n]) ** cfg.bridge_relevance_power * float(spec[n])
            col = slice(aff.indptr[n], aff.indptr[n + 1])
            own = titled.get(g.titles[n].casefold(), set())
            for row, a in zip(aff.indices[col].tolist(), aff.data[col].tolist()):
                value = weight * (1.0 if row in own else a if h >= 0 and docs[row] != docs[h]
                                  else a * float(match[row]))
                if row != h and value > best.get(row, (0.0, -1, -1))[0]:
                    best[row] = (value, n, h)
    return best


def _merged_order(index: QueryIndex, cfg: RetrievalSettings, hits: list[int],
                  hit_sims: np.ndarray, best: dict[int, tuple[float, int, int]],
                  links: list[LinkedEntity], top_k: int) -> tuple[list[int], dict[int, str]]:
    """The merge and top-up: at most ``top_k`` text unit rows.

    The ranking is the ``settings.bridge_keep`` nearest units, then bridged units and
    further vector hits by score (ties by row), a vector hit scoring ``sim(q, u) x
    settings.bridge_vector_weight x coverage`` (:func:`question_coverage`: the largest
    share of units that a linked entity, or with no linked entity one of the nearest
    unit's, is in), then the remaining vector hits. On a narrative, where the main
    character is in nearly every unit, bridging through the neighbours of that hub
    ranked arbitrary units above the nearest ones ("Who was Scrooge's partner?" came
    back with four units about his nephew; a question naming no one, as "What did the
    cleaning woman pilfer from the corpse?", with four units bridged through whoever the
    nearest unit named); on a Wikipedia pool the coverage is about 0.001 and bridging
    ranks as before.

    Returns:
        ``(order, via)``: the unit rows in rank order, and unit row -> ``"vector"`` or
        ``"bridge"``.
    """
    order = list(hits[:min(cfg.bridge_keep, top_k)])
    via = {r: "vector" for r in order}
    # after the kept units, bridged units and further vector hits by one score
    compete = {r: (v[0], "bridge") for r, v in best.items()}
    weight = cfg.bridge_vector_weight * question_coverage(index, links, [] if links else hits[:1])
    if weight > 0:
        for r, s in zip(hits, hit_sims.tolist()):
            v = weight * max(s, 0.0)
            if v > compete.get(r, (0.0, ""))[0]:
                compete[r] = (v, "vector")
    for row in sorted(compete, key=lambda r: (-compete[r][0], r)):
        if len(order) >= top_k:
            break
        if row not in via:
            order.append(row)
            via[row] = compete[row][1]
    for r in hits:
        if len(order) >= top_k:
            break
        if r not in via:
            order.append(r)
            via[r] = "vector"
    return order, via


def _with_named_units(index: QueryIndex, cfg: RetrievalSettings, links: list[LinkedEntity],
                      order: list[int], via: dict[int, str],
                      best: dict[int, tuple[float, int, int]], sims: np.ndarray, top_k: int
                      ) -> list[int]:
    """The ranking with every entity the question names by title or alias holding one
    of its own text units in the ``top_k`` (:func:`named_units`; a unit about it
    replaces the last unit that names none): a weak link weight alone let "How is
    Scrooge related to Fezziwig?" return five units without Fezziwig. Those units, in
    question order, then come right after the kept nearest units: a comparison ("Which
    band was formed first, X or Y?") needs both units at the top, and on the HotpotQA
    sample's development questions R@2 went from 69.5 to 73.0 (R@5 unchanged).

    Updates ``via`` (an added unit is ``"bridge"``, a replaced one is dropped) and
    ``best`` (an added unit scores the larger of its bridge score and its cosine,
    ``sims[row]``, with the named entity's node and source -1) in place.

    Returns:
        the new rank order of unit rows (``order`` itself is changed too).
    """
    keep = min(cfg.bridge_keep, top_k)
    named = named_units(index, links, order, top_k - keep, sims)
    for row, n in named.items():  # replaces the last unit no named entity holds
        if row in via:
            continue
        free = [r for r in order[keep:] if r not in named]
        if len(order) >= top_k:
            if not free:
                break
            order.remove(free[-1])
            via.pop(free[-1])
        order.append(row)
        via[row] = "bridge"
        best[row] = (max(best.get(row, (0.0,))[0], float(sims[row])), n, -1)
    # the named entities' units come next
    front = [r for r in named if r in via and r not in order[:keep]]
    return order[:keep] + front + [r for r in order[keep:] if r not in front]


def _bridge_result(call: Call, index: QueryIndex, g: EntityGraph, cfg: RetrievalSettings,
                   order: list[int], via: dict[int, str],
                   best: dict[int, tuple[float, int, int]], sims: np.ndarray,
                   links: list[LinkedEntity], top_k: int) -> RetrievalResult:
    """The result of ranking ``order``: units with ``via`` vector (hop_depth 0, scored by
    their cosine) or bridge (hop_depth 1, scored by ``best``, entity_ids = the bridging
    entity); entities = the bridging entities (ENTITY_RESULT_SCHEMA, first occurrence
    kept) with their best score and ``via`` = ``unit:<hit unit id>`` (``question`` for a
    linked entity); ``linked`` = the question's linked entities; info ``hits`` and
    ``keep``.
    """
    scores = {r: (best[r][0] if via[r] == "bridge" else float(sims[r])) for r in order}
    hop = {r: (1 if via[r] == "bridge" else 0) for r in order}
    ids, unit_ids = g.entity_ids, index.units.ids
    ents = {r: [ids[best[r][1]]] for r in order if via[r] == "bridge"}
    ent_rows = [{"entity_id": ids[best[r][1]], "title": g.titles[best[r][1]],
                 "hop_depth": 1, "score": best[r][0], "seed_entity_id": None,
                 "via": "question" if best[r][2] < 0 else f"unit:{unit_ids[best[r][2]]}"}
                for r in order if via[r] == "bridge"]
    units = call.unit_rows(order, scores, sims, via, hop, ents)
    entities = pl.DataFrame(ent_rows, schema=ENTITY_RESULT_SCHEMA).unique(
        "entity_id", keep="first", maintain_order=True) if ent_rows else None
    return call.finish("bridge", units, entities, linked=links, top_k=top_k,
                       hits=cfg.bridge_hits, keep=cfg.bridge_keep)


def question_match(first: np.ndarray, power: float) -> np.ndarray:
    """float64 (units,) in [0, 1]: each unit's first-hop score (``first``: bridge's,
    :meth:`Call.first_hop_scores` raised by :func:`adjacent_floor`) clipped at 0, over the
    best unit's, to ``power`` (all 1.0 when ``power`` is 0 or no unit scores above 0).
    """
    top = float(first.max()) if first.size else 0.0
    if power <= 0 or top <= 0:
        return np.ones(first.shape[0])
    return (np.clip(first, 0.0, None) / top) ** power


def question_coverage(index: QueryIndex, links: list[LinkedEntity],
                      nearest: Sequence[int] = ()) -> float:
    """The largest share of the index's text units that one entity is mentioned in,
    among the question's linked entities and those the ``nearest`` unit rows mention
    (0.0 with neither; bridge passes the nearest unit when the question links no
    entity): 0.9 for "Scrooge" in the book (named by the question, or by the unit
    nearest to a question that names no one), about 0.001 for a film in a Wikipedia
    pool."""
    u = index.units
    total = len(u.ids)
    entities = [x.entity_id for x in links] + [e for r in nearest for e in u.kg_node_ids[r] or []]
    if not total or not entities:
        return 0.0
    return max(len(u.mentions.get(e, [])) for e in entities) / total


def named_units(index: QueryIndex, links: list[LinkedEntity], order: list[int], room: int,
                sims: np.ndarray) -> dict[int, int]:
    """Unit rows to hold so each entity the question names is in the result.

    The entities linked by ``name`` or ``alias`` (the question wrote their title or
    an alias), in question order, at most ``room`` of them. An entity with units of a
    document titled with its title (:meth:`QueryIndex.rows_titled`) among those that
    mention it holds one of them: the first in ``order``, else the nearest to the
    question (on the HotpotQA sample, R@2 73.0 -> 76.5: a compared entity was held by
    another passage naming it). Any other, whose own text units (``kg_node_ids``) are
    not among ``order``, holds its best unit: the one naming most of the other named
    entities, then the most about it (the entity-unit affinity of
    :class:`kgloom.query.query_index.EntityGraph`), then nearest to the question. A unit
    of ``order`` that names one is held too, so it is not replaced.

    Returns:
        unit row -> node key of the named entity it stands for, in question order.
    """
    g, u = index.graph, index.units
    named = [x.entity_id for x in links if x.method in ("name", "alias")]
    named = [e for e in dict.fromkeys(named) if e in g.node_of][:max(room, 0)]
    if not named:
        return {}
    aff, kg = g.affinity, u.kg_node_ids
    held: dict[int, int] = {}
    for e in named:
        n = g.node_of[e]
        mine = u.mentions.get(e, [])
        titled = index.rows_titled().get(g.titles[n].casefold(), set())
        own = [r for r in mine if r in titled]
        if own:  # the entity's own document (a Wikipedia passage titled with its name)
            have = [r for r in order if r in titled]
            held.setdefault(have[0] if have else min(
                own, key=lambda r: (-float(sims[r]), r)), n)
            continue
        mentioning = set(mine)
        have = [r for r in order if r in mentioning]
        if have:
            held.setdefault(have[0], n)
            continue
        if not mine:
            continue
        others = set(named) - {e}
        held.setdefault(min(mine, key=lambda r, n=n, others=others: (
            -len(others.intersection(kg[r] or [])), -float(aff[r, n]), -float(sims[r]), r)), n)
    return held
