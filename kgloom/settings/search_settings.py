"""The ``search`` section: :class:`SearchSettings`, the one class of search knobs.
pydantic and the standard library only.
"""

from __future__ import annotations

from pydantic import Field

from kgloom.settings.section import Section

# GraphRAG's local search shares, in packing order (its local search defaults)
LOCAL_SHARES: dict[str, float] = {"entities": 0.15, "relationships": 0.2, "reports": 0.15,
                                  "text_units": 0.5}
DEFAULT_THRESHOLD = 1  # dynamic global search: a report is relevant at rating >= this


class SearchSettings(Section):
    """The ``search`` section: the knobs of local, direct and global search (tokens are the
    counter's: the model's own when a GGUF is loaded). Frozen; change a copy with
    ``settings.model_copy(update={...})``. A :class:`kgloom.query.searcher.Searcher` holds
    one as its ``config`` (``Searcher.from_settings``).

    Raises (on construction): pydantic ``ValidationError`` (a ``ValueError``) for an
    unknown key or a value of the wrong type (``lazy_reports_per_search`` < 0).

    Attributes:
        budget: tokens of a local or direct context.
        shares: local context shares per section, in packing order (GraphRAG's local
            search defaults; see :mod:`kgloom.query.context_builder.context`).
        retrieval_mode: the Retriever mode that ranks local search's text units.
        top_k: text units asked of the retrieval (local and direct).
        max_neighbors: neighbour entities considered around the seeds.
        seed_units: when no entity links, the entities of this many best units seed.
        threshold: dynamic selection: a report is relevant at rating >= this (0-5).
        rate_shortlist: dynamic selection rates at most this many communities at each
            step (roots, children of the relevant ones, a fallback level): the ones
            whose report title and summary are nearest to the question by the index's
            embedder (cosine); the others are pruned unrated. 0: rate every one
            (GraphRAG's behaviour: one call per root).
        rate_max_tokens: dynamic selection rates each report on one line, ``[C5] title:
            summary`` (the full content when it has no summary), cut to this many
            tokens (per report, title included).
        rate_budget: tokens of the report lines of one rating call (several reports are
            rated per call: kgloom's change to GraphRAG's one report per call); 650
            holds 8 full lines of 80 tokens.
        rate_batch: reports per rating call at most.
        keep_parent: dynamic selection keeps a relevant community beside its relevant
            children (GraphRAG's ``keep_parent``, off by default there too).
        map_fallback: when dynamic selection's reports give no key point above 0, map
            the relevant communities their children replaced (broader reports), once.
        map_budget: tokens of one map batch of reports.
        map_report_max_tokens: a report is cut to this many tokens in a map batch.
        reduce_budget: tokens of the key points the global answer reads.
        answer_max_chars: the longest answer the schema allows (characters).
        default_level: static global search's level when none is given (falls back to
            the deepest level when the index has fewer).
        seed: the LLM sampler's seed.
        lazy_reports: on an index built with ``llm_reports: lazy``, global search with a
            model writes the LLM report of each community awaiting one the first time
            it reaches it, and keeps it for the next query
            (:mod:`kgloom.query.context_builder.lazy_reports`); off: it reads the rule
            reports as published (no report call).
        lazy_reports_per_search: write at most this many lazy reports (model calls) in
            one global search, the first reached first (static: by report rank); the
            others keep their rule report until a later search reaches them. 0: no
            limit (a static search then writes every lazy report of its level).
    """

    budget: int = 2000
    shares: tuple[tuple[str, float], ...] = tuple(LOCAL_SHARES.items())
    retrieval_mode: str = "bridge"
    top_k: int = 10
    max_neighbors: int = 30
    seed_units: int = 3
    threshold: int = DEFAULT_THRESHOLD
    rate_shortlist: int = 8
    rate_max_tokens: int = 80
    rate_budget: int = 650
    rate_batch: int = 8
    keep_parent: bool = False
    map_fallback: bool = True
    map_budget: int = 1500
    map_report_max_tokens: int = 500
    reduce_budget: int = 1500
    answer_max_chars: int = 200
    default_level: int = 1
    seed: int = 0xDEADBEEF
    lazy_reports: bool = True
    lazy_reports_per_search: int = Field(default=0, ge=0)
