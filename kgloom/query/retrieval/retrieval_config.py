"""The retrieval knobs: :class:`RetrievalConfig` (scoring) and the per-call defaults.

Every name and default here is a knob the settings expose; change one only with the
measurement that chose it (bench/eval_qa.py).
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_TOP_K = 5
DEFAULT_DEPTH = 1
DEFAULT_OVERSAMPLE = 5  # fused: entity candidates = 5 x top_k (the fused-retrieve default)
DEFAULT_LAMBDA = 1.0  # fused: overlap penalty
DEFAULT_DAMPING = 0.5  # ppr: probability of following an edge (HippoRAG uses 0.5)


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
        bridge_link_weight: the question's linked entities count as named by a hit of
            this similarity (bridge).
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
