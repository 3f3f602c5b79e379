"""From extracted mentions to the final entities and relationships tables (no Dagster).

One function, :func:`build_entity_tables`, runs the three steps in order: entity
resolution (:mod:`kgloom.graph.resolution`, with the optional LLM yes/no check of embedding
candidates), description summaries (:mod:`kgloom.graph.summaries`), and graph metrics
(:mod:`kgloom.graph.communities`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import polars as pl

from kgloom.embedding.tokenizer import Tokenizer
from kgloom.graph.communities import compute_graph_metrics
from kgloom.graph.resolution import resolve_entities
from kgloom.graph.summaries import llm_verifier, summarize_descriptions
from kgloom.llm import CachedLLM
from kgloom.settings.indexing import IndexSettings


def resolution_options(settings: IndexSettings, llm: CachedLLM | None,
                       tokenizer: Tokenizer) -> dict:
    """``methods`` and ``verify`` of :func:`kgloom.graph.resolution.resolve_entities` for
    ``settings``: its ``resolution_methods``, the LLM merge check when
    ``verify_merges_with_llm`` and a model is given; with ``method=fast`` (no model) the
    embedding pass is left out, because its safeguard against merging two different
    names is that check (untyped OTHER names share evidence sentences)."""
    methods = frozenset(settings.resolution_methods)
    if not settings.uses_model:
        methods -= {"embedding"}
    verify = (llm_verifier(llm, settings, tokenizer)
              if settings.verify_merges_with_llm and llm is not None else None)
    return {"methods": methods, "verify": verify}


def build_entity_tables(entity_mentions: pl.DataFrame, relationship_mentions: pl.DataFrame,
                        llm: CachedLLM | None, settings: IndexSettings, tokenizer: Tokenizer,
                        embed: Callable[[list[str]], np.ndarray] | None = None,
                        progress: Callable[[int, int], None] | None = None,
                        timings: dict[str, float] | None = None,
                        summary_counts: dict[str, int] | None = None,
                        units: pl.DataFrame | None = None,
                        evidence: Callable[[pl.DataFrame, pl.DataFrame, Mapping[str, str]],
                                           tuple[pl.DataFrame, int]] | None = None,
                        ) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Resolve, summarize and measure.

    Args:
        entity_mentions / relationship_mentions: the extraction's mention tables.
        llm: the cached LLM (stages ``resolution`` and ``summaries``); None with
            ``method=fast``: no merge check, and the embedding pass (which that check
            guards) is skipped; summaries are extractive (``IndexSettings`` refuses
            ``fast`` with ``summary_method=llm``). Its model is released
            (:meth:`CachedLLM.release`) once resolution is done unless the summaries
            are ``llm`` ones; a later call would load it again.
        settings: resolution methods and threshold, LLM verification, summary options.
        tokenizer: budgets of the summary and verification prompts (tokens).
        embed: texts -> (n, dim) array for the embedding pass (when "embedding" is among
            the resolution methods); None skips it.
        progress: ``progress(done, total)`` over the summarized items.
        timings: when given, filled with the wall seconds of each step:
            ``resolution``, ``summaries`` and ``graph_metrics``.
        summary_counts: when given, filled with the summaries' ``items`` and ``texts``
            over entities and relationships (:func:`summarize_descriptions`), and with
            ``evidence_rewritten`` when ``evidence`` ran.
        units / evidence: the corpus's text units and the evidence reader of
            :func:`_resolved_graph`; None: not used.

    Returns:
        (entities, relationships, entity_aliases, failures) conforming to
        ENTITIES_SCHEMA (degree, weighted degree, PageRank filled), RELATIONSHIPS_SCHEMA
        (combined_degree filled), ENTITY_ALIASES_SCHEMA and FAILURES_SCHEMA.
    """
    timings = {} if timings is None else timings
    t0 = time.perf_counter()
    ents, rels, aliases = _resolved_graph(entity_mentions, relationship_mentions, llm,
                                          settings, tokenizer, embed, summary_counts, units,
                                          evidence)
    t1 = time.perf_counter()
    if llm is not None and settings.summary_method != "llm":
        # the merge check was the stage's last model call: free the weights (about 420 MB
        # for the bundled model; CachedLLM.release)
        llm.release()
    ents, f1 = summarize_descriptions(ents, "title", llm, settings, tokenizer, progress,
                                      summary_counts)
    rels, f2 = summarize_descriptions(rels, "source", llm, settings, tokenizer, progress,
                                      summary_counts)
    t2 = time.perf_counter()
    ents, rels = compute_graph_metrics(ents, rels)
    timings.update(resolution=t1 - t0, summaries=t2 - t1, graph_metrics=time.perf_counter() - t2)
    return ents, rels, aliases, pl.concat([f1, f2])


def _resolved_graph(entity_mentions: pl.DataFrame, relationship_mentions: pl.DataFrame,
                    llm: CachedLLM | None, settings: IndexSettings, tokenizer: Tokenizer,
                    embed: Callable[[list[str]], np.ndarray] | None,
                    summary_counts: dict[str, int] | None, units: pl.DataFrame | None,
                    evidence: Callable[[pl.DataFrame, pl.DataFrame, Mapping[str, str]],
                                       tuple[pl.DataFrame, int]] | None,
                    ) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(entities, relationships, entity_aliases) of
    :func:`kgloom.graph.resolution.resolve_entities` (its options:
    :func:`resolution_options`), the relationships' descriptions then read again by
    ``evidence``.

    Args:
        units: the corpus's text units (``id``, ``document_id``, ``chunk_index``,
            ``text``): resolution compares the documents of a short name and its longer
            candidate, their order in a document, and which words the corpus writes in
            lower case (:func:`kgloom.graph.resolution.resolve_entities`); None: none of
            that.
        evidence: ``evidence(relationships, aliases, unit text by id) -> (relationships,
            rewritten)``, called after resolution and before the summaries unless
            ``settings.llm_descriptions`` or ``units`` is None: the relationships'
            descriptions read again with every alias of their ends (the entity_graph
            asset passes :func:`kgloom.extraction.evidence.whole_evidence`, which this
            layer may not import). None: descriptions as extracted. ``rewritten`` goes
            to ``summary_counts["evidence_rewritten"]`` when ``summary_counts`` is given.
        the others: as for :func:`build_entity_tables`.
    """
    ids = [] if units is None else units["id"].to_list()
    ents, rels, aliases = resolve_entities(
        entity_mentions, relationship_mentions, embed=embed,
        similarity_threshold=settings.embedding_merge_threshold,
        unit_documents=None if units is None else dict(zip(ids, units["document_id"])),
        unit_texts=None if units is None else units["text"],
        unit_positions=None if units is None else dict(zip(ids, units["chunk_index"])),
        **resolution_options(settings, llm, tokenizer))
    if evidence is not None and units is not None and not settings.llm_descriptions:
        rels, rewritten = evidence(rels, aliases, dict(zip(ids, units["text"])))
        if summary_counts is not None:
            summary_counts["evidence_rewritten"] = rewritten
    return ents, rels, aliases


def uses_embedding_pass(entity_mentions: pl.DataFrame, settings: IndexSettings) -> bool:
    """Whether building the entity tables embeds text: only resolution's embedding pass
    does (summaries rank by TF-IDF), and only with mentions to resolve, a model
    (``method=fast`` has no such pass: see :func:`build_entity_tables`) and
    ``embedding`` among ``settings.resolution_methods``."""
    return (entity_mentions.height > 0 and settings.uses_model
            and "embedding" in settings.resolution_methods)


def entity_table_counts(entities: pl.DataFrame, relationships: pl.DataFrame,
                        aliases: pl.DataFrame) -> dict[str, Any]:
    """Figures of the built entity tables (the entities stage's metadata).

    Args:
        entities: ENTITIES frame (``degree`` used); relationships: RELATIONSHIPS frame
            (``kind`` used); aliases: ENTITY_ALIASES frame (``method`` used).

    Returns:
        ``alias_merges`` (int: aliases merged by a method other than ``exact``),
        ``degrees`` (dict degree -> entities, by degree), ``co_mention`` (int:
        co-mention relationships) and ``aliases_by_method`` (dict method -> aliases, by
        method).
    """
    return {"alias_merges": aliases.filter(pl.col("method") != "exact").height,
            "degrees": dict(sorted(Counter(entities["degree"].to_list()).items())),
            "co_mention": relationships.filter(pl.col("kind") == "co_mention").height,
            "aliases_by_method": dict(
                aliases.group_by("method").len().sort("method").iter_rows())}
