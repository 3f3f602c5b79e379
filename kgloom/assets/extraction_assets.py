"""Asset: extracted_graph, the LLM's entity and relationship mentions per text unit, one
partition per input file."""

import dagster as dg

from kgloom.assets.ingest_assets import documents, text_units
from kgloom.assets.metadata import Timer, cost_metadata, endpoint_metadata, preview, progress
from kgloom.core import schemas
from kgloom.core.layout import CLAIMS, EXTRACTION, Level
from kgloom.corpus.partitions import settings_fingerprint
from kgloom.extraction.checks import extraction_yield
from kgloom.extraction.extract import ExtractionResult
from kgloom.extraction.partition_graph import (
    extract_partition_claims,
    extract_partition_graph,
    failed_units_rate,
)
from kgloom.pipelines.input_files import input_files_partitions
from kgloom.resources import IndexConfigResource, LLMResource
from kgloom.resources.model import NO_MODEL

FAILED_UNITS_MAX_RATE = 0.05


@dg.asset(group_name="extraction", partitions_def=input_files_partitions,
          deps=[documents, text_units],
          pool="llm", kinds={"llama_cpp", "parquet"},
          check_specs=[dg.AssetCheckSpec("failed_units_rate", asset="extracted_graph"),
                       dg.AssetCheckSpec("entities_found", asset="extracted_graph")])
def extracted_graph(context: dg.AssetExecutionContext, index: IndexConfigResource,
                    llm: LLMResource):
    """Entities and relationships per text unit of one input file, JSON-schema-constrained
    and cached (an unchanged unit costs no LLM call); with ``method=fast``, from the
    candidate names and their co-occurrence, no model opened
    (:mod:`kgloom.extraction.cooccurrence`)."""
    clock = Timer.started()
    key = index.partition(context.partition_key)
    store = index.store
    units = store.read(schemas.TEXT_UNITS, Level.PARTITION, key)
    docs = store.read(schemas.DOCUMENTS, Level.PARTITION, key)
    s = index.settings()
    cached = llm.open_for(s, store, log=context.log)  # None: method=fast, no model
    with Timer() as t:
        result = extract_partition_graph(units, cached, s, progress(context, EXTRACTION),
                                         documents=docs)
    store.write(result.entity_mentions, schemas.ENTITY_MENTIONS, Level.PARTITION, key)
    store.write(result.relationship_mentions, schemas.RELATIONSHIP_MENTIONS, Level.PARTITION,
                key)
    store.write_failures(result.failures, EXTRACTION, key)
    store.write(result.units, schemas.UNIT_STATUS, Level.PARTITION, key)
    # claims (optional): always written, so turning them off leaves no stale rows
    with Timer() as claims_t:
        claims, claim_failures = extract_partition_claims(
            units, result.entity_mentions, cached, s, progress(context, CLAIMS))
        store.write(claims, schemas.CLAIM_MENTIONS, Level.PARTITION, key)
        store.write_failures(claim_failures, CLAIMS, key)
    if cached is not None:
        cached.release()  # the model, now: the next partition loads its own
    claim_stats = cached.stats.get(CLAIMS) if cached else None
    store.write_stats(CLAIMS, claims_t.seconds, claim_stats.as_dict() if claim_stats else {},
                      partition=key, claims=claims.height)
    llm_stats = cached.stats.get(EXTRACTION) if cached else None
    # the stage's wall time: the whole asset but the claims step (its own stage)
    stats = store.write_stats(EXTRACTION, clock.elapsed - claims_t.seconds,
                              llm_stats.as_dict() if llm_stats else {}, partition=key,
                              llm_backend=cached.backend_settings() if cached else {},
                              # counter names ("units_failed" ...), never a parameter's
                              method=s.method, **result.counts)
    store.mark_stage(key, EXTRACTION,
                     settings=settings_fingerprint(s, cached.model_id if cached else NO_MODEL))
    yield dg.MaterializeResult(metadata={
        "method": s.method,
        "entity_mentions": result.entity_mentions.height,
        "relationship_mentions": result.relationship_mentions.height,
        "failures": result.failures.height, "claims": claims.height,
        **cost_metadata(stats),
        **{k: v for k, v in result.counts.items()},
        "units_per_minute": round(units.height / t.seconds * 60, 1) if t.seconds else 0.0,
        **(endpoint_metadata(cached) if cached else {}),
        "preview": preview(result.entity_mentions, ["title", "type", "description"])})
    yield from _extraction_checks(context, result, units.height, s.method)


def _extraction_checks(context: dg.AssetExecutionContext, result: ExtractionResult,
                       units: int, method: str):
    """The asset's two checks on one partition's :class:`ExtractionResult` over its
    ``units`` text units: ``failed_units_rate`` (at most ``FAILED_UNITS_MAX_RATE`` of
    the units failed, :func:`failed_units_rate`) and ``entities_found`` (WARN, logged:
    :func:`extraction_yield`)."""
    failed, rate = failed_units_rate(result.counts, units)
    yield dg.AssetCheckResult(
        check_name="failed_units_rate", passed=rate <= FAILED_UNITS_MAX_RATE,
        metadata={"failed_units": failed, "units": units, "rate": round(rate, 4),
                  "max_rate": FAILED_UNITS_MAX_RATE})
    ok, meta, text = extraction_yield(units, result.counts.get("units_without_names", 0),
                                      result.entity_mentions.height, method)
    if not ok:
        context.log.warning(f"{context.partition_key}: {text}")
    yield dg.AssetCheckResult(check_name="entities_found", passed=ok, metadata=meta,
                              severity=dg.AssetCheckSeverity.WARN, description=text)
