"""Assets: entities / relationships / entity_aliases / covariates (from the corpus's
mentions) and communities (published level)."""

import datetime as dt
import functools
from collections import Counter
from typing import Any

import dagster as dg
import polars as pl

from kgloom.assets.corpus_assets import corpus
from kgloom.assets.metadata import (
    EmbedderTime,
    Timer,
    cost_metadata,
    embedder_time,
    endpoint_metadata,
    png_md,
    preview,
    progress,
)
from kgloom.core import schemas
from kgloom.core.layout import COMMUNITIES, ENTITIES, GRAPH_STATS, RESOLUTION, SUMMARIES, Level
from kgloom.core.plots import bar_chart_png
from kgloom.embedding.sentence_embedder import release_memory
from kgloom.embedding.tokenizer import default_tokenizer
from kgloom.embedding.windows import WindowedEmbedder
from kgloom.extraction.claims import build_covariates
from kgloom.extraction.evidence import whole_evidence
from kgloom.graph.communities import community_structure, hierarchical_leiden
from kgloom.graph.entities import (
    build_entity_tables,
    entity_table_counts,
    uses_embedding_pass,
)
from kgloom.graph.graph_stats import community_level_stats
from kgloom.llm import CachedLLM, StageStats
from kgloom.pipelines.freshness import GRAPH_INPUTS, graph_inputs_of
from kgloom.resources import EmbedderResource, IndexConfigResource, LLMResource
from kgloom.resources.index_store import IndexStore
from kgloom.settings.indexing import IndexSettings


@dg.multi_asset(
    group_name="graph", pool="llm",
    specs=[dg.AssetSpec(name, deps=[corpus], kinds={"parquet"})
           for name in ("entities", "relationships", "entity_aliases", "covariates")])
def entity_graph(context: dg.AssetExecutionContext, index: IndexConfigResource,
                 llm: LLMResource, embedder: EmbedderResource):
    """From the corpus's mentions: resolve them into entities (alias table), summarize
    long descriptions, compute degree, weighted degree, PageRank and combined degree, and
    resolve claims (GraphRAG covariates; empty unless ``extract_claims``) to entity
    titles."""
    clock = Timer.started()
    store = index.store
    s = index.settings()
    inputs = graph_inputs_of(context, "corpus")
    em = store.read(schemas.ENTITY_MENTIONS, Level.CORPUS)
    rm = store.read(schemas.RELATIONSHIP_MENTIONS, Level.CORPUS)
    units = store.read(schemas.TEXT_UNITS, Level.CORPUS,
                       columns=["id", "document_id", "chunk_index", "text"])
    cached = llm.open_for(s, store, log=context.log)  # None: method=fast
    emb = embedder.load() if uses_embedding_pass(em, s) else None
    emb_before = emb.passes() if emb else {}  # the loaded embedder is shared
    cache = store.embedding_cache()  # texts embedded by an earlier run: read
    steps: dict[str, float] = {}
    summarized: dict[str, int] = {"items": 0, "texts": 0}

    def embed_pass(texts: list[str], emb: WindowedEmbedder):
        """One embedding pass (resolution's), its own progress bar; the
        embedder's session is freed after it, so the merge check's model is not
        resident beside it."""
        try:
            return cache.embed(emb, texts, progress=progress(context, "embeddings"))
        finally:
            emb.release()

    try:
        ents, rels, aliases, failures = build_entity_tables(
            em, rm, cached, s, default_tokenizer(),
            embed=functools.partial(embed_pass, emb=emb) if emb else None,
            progress=progress(context, SUMMARIES), timings=steps,
            summary_counts=summarized, units=units, evidence=whole_evidence)
    finally:  # on failure too: the cache file closed, the model freed
        release_memory()  # the resolution's embedding passes
        cache.close()
        if cached is not None:
            cached.release()  # the model, now (CachedLLM.release)
    store.write(ents, schemas.ENTITIES)
    store.write(rels, schemas.RELATIONSHIPS)
    store.write(aliases, schemas.ENTITY_ALIASES)
    covariates = build_covariates(store.read(schemas.CLAIM_MENTIONS, Level.CORPUS), aliases, ents)
    store.write(covariates, schemas.COVARIATES)
    store.write_failures(failures, SUMMARIES)
    stats = _write_entity_stats(
        store, clock.elapsed, cached,
        embedder_time(emb, emb_before) if emb else EmbedderTime(), s, ents.height,
        rels.height, {"hits": cache.hits, "misses": cache.misses}, steps, summarized)
    yield from _entity_graph_results(inputs, s, cached, stats, summarized, ents, rels,
                                     aliases, covariates)


def _write_entity_stats(store: IndexStore, seconds: float, cached: CachedLLM | None,
                        embedder_seconds: EmbedderTime, s: IndexSettings, entities: int,
                        relationships: int, embedding_cache: dict[str, int],
                        steps: dict[str, float], summarized: dict[str, int]) -> dict:
    """Write the entities stage's stats and those of its LLM sub-stages (summaries;
    resolution: the merge check), always (no stale file survives); returns the entities
    stage's stats as written.

    The sub-stages are parts of the entities stage: their wall time is inside its wall
    time, their LLM time in its LLM time; the embedder's time is counted once, on the
    entities stage."""
    llm_stats = cached.stats if cached else {}
    stats = store.write_stats(
        ENTITIES, seconds, StageStats.merged(
            llm_stats.get(k) for k in (SUMMARIES, RESOLUTION)).as_dict(),
        **embedder_seconds,
        entities=entities, relationships=relationships, summary_method=s.summary_method,
        llm_backend=cached.backend_settings() if cached else {}, method=s.method,
        embedding_cache=embedding_cache,
        steps_seconds={k: round(v, 2) for k, v in steps.items()})
    for stage in (SUMMARIES, RESOLUTION):
        st = llm_stats.get(stage, StageStats())
        work: dict[str, Any] = (
            {"summarized_items": summarized["items"], "summary_texts": summarized["texts"]}
            if stage == SUMMARIES else {})
        store.write_stats(stage, steps.get(stage, st.seconds), st.as_dict(), part_of=ENTITIES,
                          **work)
    return stats


def _entity_graph_results(inputs: Any, s: IndexSettings, cached: CachedLLM | None,
                          stats: dict, summarized: dict[str, int], ents: pl.DataFrame,
                          rels: pl.DataFrame, aliases: pl.DataFrame,
                          covariates: pl.DataFrame):
    """The four assets' materializations, with their metadata (the tables' figures from
    :func:`entity_table_counts`)."""
    counts = entity_table_counts(ents, rels, aliases)
    st = cached.stats.get(SUMMARIES) if cached else None
    yield dg.MaterializeResult(asset_key="entities", metadata={
        GRAPH_INPUTS: inputs, "rows": ents.height, "alias_merges": counts["alias_merges"],
        "degree_distribution": png_md(bar_chart_png(
            counts["degrees"], "Degree distribution", "degree", "entities", log_y=True),
            "degrees"),
        "summary_calls": st.calls if st else 0, "summarized_items": summarized["items"],
        **cost_metadata(stats),
        **(endpoint_metadata(cached) if cached else {}), "method": s.method,
        "top_by_pagerank": preview(ents.sort("pagerank", descending=True),
                                   ["title", "type", "degree", "pagerank", "frequency"])})
    yield dg.MaterializeResult(asset_key="relationships", metadata={
        GRAPH_INPUTS: inputs, "rows": rels.height, "co_mention": counts["co_mention"],
        "evidence_rewritten": summarized.get("evidence_rewritten", 0)})
    yield dg.MaterializeResult(asset_key="covariates", metadata={
        GRAPH_INPUTS: inputs, "rows": covariates.height, "extract_claims": s.extract_claims,
        "preview": preview(covariates, ["subject_id", "object_id", "type", "status",
                                        "description"])})
    yield dg.MaterializeResult(asset_key="entity_aliases", metadata={
        GRAPH_INPUTS: inputs, "rows": aliases.height,
        "by_method": dg.MetadataValue.json(counts["aliases_by_method"])})


@dg.asset(group_name="graph", deps=["entities", "relationships"], kinds={"igraph", "parquet"},
          check_specs=[dg.AssetCheckSpec("communities_group_entities", asset="communities")])
def communities(context: dg.AssetExecutionContext, index: IndexConfigResource):
    """Hierarchical Leiden: every level a partition of all entities (igraph Leiden, seeded).
    WARN check ``communities_group_entities``: an edgeless graph, or one whose level-0
    communities are all single entities (:func:`community_structure`)."""
    clock = Timer.started()
    s = index.settings()
    store = index.store
    ents = store.read(schemas.ENTITIES)
    rels = store.read(schemas.RELATIONSHIPS)
    comms, stats = hierarchical_leiden(ents, rels, s.max_cluster_size, s.seed,
                                       period=dt.date.today().isoformat(),
                                       backend=s.community_backend)
    store.write(comms, schemas.COMMUNITIES)
    store.write_stats(COMMUNITIES, clock.elapsed, **stats)
    sizes = dict(sorted(Counter(comms.filter(pl.col("level") == 0)["size"].to_list()).items()))
    yield dg.MaterializeResult(metadata={
        GRAPH_INPUTS: graph_inputs_of(context, "entities", "relationships"),
        "rows": comms.height, "levels": stats.get("levels", 0),
        "level_0_modularity": round(stats["modularity_per_level"][0], 4) if comms.height else 0.0,
        "louvain_modularity": round(stats.get("louvain_modularity", 0.0), 4),
        "size_distribution": png_md(bar_chart_png(
            sizes, "Level-0 community sizes", "entities per community", "communities"),
            "community sizes"),
        "stats": dg.MetadataValue.json(stats),
        "sizes": preview(comms.group_by("level").agg(
            communities=pl.len(), max_size=pl.col("size").max()).sort("level"),
            ["level", "communities", "max_size"])})
    ok, meta, text = community_structure(ents, rels, comms)
    if not ok:
        context.log.warning(text)
    yield dg.AssetCheckResult(check_name="communities_group_entities", passed=ok,
                              metadata=meta, severity=dg.AssetCheckSeverity.WARN,
                              description=text)


@dg.asset(group_name="graph", deps=[communities, "entities", "relationships"],
          kinds={"igraph", "parquet"})
def graph_stats(context: dg.AssetExecutionContext,
                index: IndexConfigResource) -> dg.MaterializeResult:
    """One row per community level: communities, singletons, sizes, modularity and the
    share of relationship weight inside communities
    (:func:`kgloom.graph.graph_stats.community_level_stats`)."""
    clock = Timer.started()
    store = index.store
    table = community_level_stats(store.read(schemas.ENTITIES),
                                  store.read(schemas.RELATIONSHIPS),
                                  store.read(schemas.COMMUNITIES))
    store.write(table, schemas.GRAPH_STATS)
    store.write_stats(GRAPH_STATS, clock.elapsed, levels=table.height)
    return dg.MaterializeResult(metadata={
        GRAPH_INPUTS: graph_inputs_of(context, "communities", "entities", "relationships"),
        "levels": table.height,
        "per_level": preview(table, list(schemas.GRAPH_STATS_SCHEMA))})
