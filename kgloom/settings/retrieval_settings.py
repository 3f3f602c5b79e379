"""The ``retrieval`` section: :class:`RetrievalSettings`, the one class of retrieval knobs
(per-query defaults, graph backend, scoring). pydantic and the standard library only.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from kgloom.settings.section import Section

# the retrieval options each query may also give (`kgloom query`'s flags, serve's and MCP's
# request fields); their defaults are RetrievalSettings' fields of the same names
QUERY_OPTIONS: tuple[str, ...] = ("top_k", "depth", "lam", "oversample", "damping",
                                  "graph_backend")


class RetrievalSettings(Section):
    """The ``retrieval`` section, every knob of a retrieval in one class: the per-query
    options' defaults, how a call runs (graph backend, BFS threads) and the scoring knobs
    of the graph modes (defaults chosen by bench/eval_qa.py on 2WikiMultihopQA;
    docs/measurements.md has the figures). Frozen; change a copy with
    ``settings.model_copy(update={...})``. A :class:`kgloom.query.retriever.Retriever`
    holds one (``Retriever.from_settings``), every mode's ``retrieve`` reads one.

    Raises (on construction): pydantic ``ValidationError`` (a ``ValueError``) for an
    unknown key, a value of the wrong type or out of its range (``bfs_threads`` < 1,
    ``lexical_weight`` < 0, ``adjacent_unit_weight`` or ``low_relevance_similarity``
    outside theirs). ``graph_backend`` and the per-query options' ranges are checked where
    they are used (:func:`kgloom.query.modes.check_options`, the Retriever), so ``kgloom
    query`` names the settings section in its message.

    Attributes:
        top_k: text units a retrieval returns when the call gives none (``kgloom query``
            without ``--top-k``, serve's and MCP's requests without ``top_k``).
        depth: BFS hops (multihop, fused, two_step) when the call gives none.
        lam: fused: the neighbourhood-overlap penalty when the call gives none.
        oversample: fused: entity candidates per seed when the call gives none.
        damping: ppr / hybrid: the probability of following an edge when the call gives
            none (HippoRAG's 0.5).
        graph_backend: ``duckdb`` (BFS by DuckDB's recursive CTE straight over
            graph-edges.parquet, per call; entity ANN by LanceDB) or ``memory`` (the
            same BFS over the index's CSR adjacency, and the fused / two_step entity
            search as an exact scan of the entity vectors it holds). The results agree.
        bfs_threads: workers per BFS: memory backend, numpy threads over the frontier
            (:func:`kgloom.query.algorithms.bfs_levels`; None = 1); duckdb backend,
            DuckDB's ``threads`` for the query (None = DuckDB's default, one per core).
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
        bridge_specificity_power: bridge weighs an entity by its specificity, 1 / (text
            units mentioning it), to this power (0 = a nationality named in every
            biography bridges like a person named in two units).
        bridge_vector_weight: after the kept nearest units, a further vector hit competes
            with the bridged units at its cosine with the question times this times the
            largest share of the text units one of the question's linked entities is
            mentioned in (0 = every bridged unit comes first). A question about a
            narrative's main character (in 90 % of the book's units) bridges through
            every neighbour of a hub, so the units nearest the question come back; a
            film named in two of 6,119 passages leaves bridging as it was. 0.5: the
            smallest value at which the book's 30 development questions
            (bench/data/book-questions.jsonl) stop gaining (R@5 60.0 -> 70.0; vector
            73.3), while the 2Wiki slice and the HotpotQA sample do not move up to 2
            (bench/eval_sets.py, bench/results/eval_sets.json).
        bridge_match_power: bridge weighs a unit it reaches within the hit's own
            document (or from the question's linked entities), other than the bridging
            entity's own titled one, by its first-hop score over the best unit's, to this
            power (0 = every unit that names the entity counts alike). A unit of another
            document is a hop and is not weighed so. 1 was chosen on the development sets
            (bench/eval_sets.py, bench/results/eval_sets-match.json): the book's bridge
            R@2 / R@5 70.0 / 80.0 -> 73.3 / 83.3 at 0 -> 1 (no change from 1 to 4), the
            Wikipedia sets unchanged (each passage a document of its own).
        lexical_weight: bridge and hybrid rank their first hop (bridge's nearest units
            and the hits it follows, hybrid's vector list) by the question's cosine with
            a unit plus this times the unit's BM25 score over the best unit's
            (:mod:`kgloom.query.lexical`; 0 = cosine alone, as the ``vector`` mode).
            The bundled embedder misses units a word of the question finds (a name, a
            rare noun): on the book's 30 development questions BM25 alone finds the
            answer in the top 5 for 25, the embedder for 22. 0.5 was chosen on the
            development sets (bench/eval_sets.py): bridge R@2 / R@5 on the book 50.0 /
            70.0 -> 66.7 / 80.0, on the HotpotQA sample 68.0 / 87.0 -> 69.5 / 89.0, on
            the 2Wiki slice 69.4 / 91.9 -> 68.1 / 91.2; the sweep with bridge's later
            rules is in bench/results/eval_sets-lexical.json (docs/query.md).
        adjacent_unit_weight: bridge scores a unit in its first hop at least this times
            the first-hop score of the unit just before or after it in its document (0 =
            off; a one-unit document, a Wikipedia passage, is never raised): a long
            document's scene runs across units, and the unit next to the best match
            often holds the rest of the answer. 0.9 was chosen on the book's 30
            development questions (bench/eval_sets.py, bench/results/
            eval_sets-adjacent.json): bridge R@2 / R@5 73.3 / 83.3 -> 73.3 / 90.0 (0.8:
            70.0 / 86.7, 0.95: 70.0 / 90.0); the Wikipedia sets do not move. Hybrid
            went 60.0 / 76.7 -> 50.0 / 80.0 on the book with it, so hybrid does not
            use it.
        entity_affinity: weigh an entity's contribution to a unit by how much the unit is
            about it: the cosine of the entity's vector ("title: description") and the
            unit's vector, clipped at 0 (multihop, fused, ppr, hybrid); off, every
            mention counts 1.
        seed_diagnostics: fused / two_step also report ``seed_overlap`` (and fused
            ``baseline_seed_overlap``) in ``info``: mean pairwise Jaccard of the seeds'
            neighbourhoods, O(top_k^2) set operations that answer nothing; a latency
            benchmark turns them off and computes them outside the timed call.
        low_relevance_similarity: a result says that nothing in the index is relevant
            (``info["low_relevance"]`` and ``info["notice"]``, every retrieval and search
            mode) when the question's cosine with its nearest text unit is under this
            (-1: never); a corpus-wide question (a thematic cue) is not judged
            (:mod:`kgloom.query.retrieval.relevance`). Calibrated by
            bench/eval_relevance.py (bench/results/relevance.json) with the bundled
            embedder (all-MiniLM-L6-v2) on development questions only (bench/data): 180
            questions asked of their own corpus (the book, the 2Wiki slice, the HotpotQA
            sample) score 0.338 and up (the lowest, "Who is Fred?" on the book's
            600-token units); 0.31 is that, rounded down, less 0.02. It flags 46 of 50
            2Wiki and 99 of 100 HotpotQA questions asked of the book, but only 14 of 30
            book and 34 of 100 HotpotQA questions asked of the 2Wiki slice (Wikipedia
            passages are near any short factual question). Another embedder needs its own
            value.
        fused_first_hop: the fused retrieve's BFS over files starts from the chosen
            seeds' neighbourhoods, which its rerank read from the handle's adjacency:
            no edge-file query at depth 1, one recursion round fewer beyond (the same
            rows). False: it reads every hop from graph-edges.parquet, as the two-call
            baseline's traversal call does (the retrieval bench's ``files_reread``
            handle). The in-memory BFS is the same either way.
    """

    # the per-query options' defaults (QUERY_OPTIONS), written here only
    top_k: int = Field(default=5, description="text units returned")
    depth: int = Field(default=1, description="BFS hops (multihop, fused, two_step)")
    lam: float = Field(default=1.0, description="fused: neighbourhood-overlap penalty")
    oversample: int = Field(default=5, description="fused: entity candidates per seed")
    damping: float = Field(default=0.5,
                           description="ppr / hybrid: probability of following an edge")
    graph_backend: str = Field(default="duckdb", description="duckdb | memory")
    bfs_threads: int | None = Field(default=None, ge=1, description="workers per BFS")
    # the scoring knobs
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
    bridge_specificity_power: float = 0.25
    bridge_vector_weight: float = 0.5
    bridge_match_power: float = 1.0
    lexical_weight: float = Field(default=0.5, ge=0.0)
    adjacent_unit_weight: float = Field(default=0.9, ge=0.0, le=1.0)
    seed_diagnostics: bool = True
    fused_first_hop: bool = True
    low_relevance_similarity: float = Field(default=0.31, ge=-1.0, le=1.0)

    def options(self) -> dict[str, Any]:
        """The per-query options (:data:`QUERY_OPTIONS`) as ``name -> value``."""
        return {name: getattr(self, name) for name in QUERY_OPTIONS}


DEFAULT_RETRIEVAL = RetrievalSettings()  # the default of every mode's ``settings``
# the per-call defaults of the mode functions, named (the fields above are their one source)
DEFAULT_TOP_K: int = DEFAULT_RETRIEVAL.top_k
DEFAULT_DEPTH: int = DEFAULT_RETRIEVAL.depth
DEFAULT_OVERSAMPLE: int = DEFAULT_RETRIEVAL.oversample  # fused: entity candidates x top_k
DEFAULT_LAMBDA: float = DEFAULT_RETRIEVAL.lam  # fused: overlap penalty
DEFAULT_DAMPING: float = DEFAULT_RETRIEVAL.damping  # ppr: P(follow an edge), HippoRAG's 0.5
