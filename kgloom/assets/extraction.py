"""Asset: extracted_graph, the LLM's entity and relationship mentions per text unit."""


import dagster as dg

from kgloom import schemas
from kgloom.assets._common import Timer, preview, progress
from kgloom.stats import stages_dir, write_stage_stats
from kgloom.assets.ingest import text_units
from kgloom.extraction import STAGE, extract_graph
from kgloom.resources import IndexConfigResource, LLMResource
from kgloom.storage import read_table, write_table

FAILED_UNITS_MAX_RATE = 0.05


@dg.asset(group_name="extraction", deps=[text_units], pool="llm", kinds={"llama_cpp", "parquet"},
          check_specs=[dg.AssetCheckSpec("failed_units_rate", asset="extracted_graph")])
def extracted_graph(context: dg.AssetExecutionContext, index: IndexConfigResource,
                    llm: LLMResource):
    """Entities and relationships per text unit, JSON-schema-constrained and cached."""
    units = read_table(stages_dir(index.out), schemas.TEXT_UNITS)
    cached = llm.open(index.out)
    with Timer() as t:
        result = extract_graph(units, cached, index.settings(), progress(context, STAGE))
    sd = stages_dir(index.out)
    write_table(result.entity_mentions, sd, schemas.ENTITY_MENTIONS)
    write_table(result.relationship_mentions, sd, schemas.RELATIONSHIP_MENTIONS)
    write_table(result.failures, sd, f"{schemas.FAILURES}.{STAGE}")
    write_table(result.units, sd, "extraction_units")
    llm_stats = cached.stats.get(STAGE)
    stats = write_stage_stats(index.out, STAGE, t.seconds,
                              llm_stats.as_dict() if llm_stats else {}, **result.counts)
    failed = result.counts.get("units_failed", 0)
    rate = failed / max(units.height, 1)
    yield dg.MaterializeResult(metadata={
        "entity_mentions": result.entity_mentions.height,
        "relationship_mentions": result.relationship_mentions.height,
        "failures": result.failures.height, **{f"llm_{k}": v for k, v in stats["llm"].items()},
        **{k: v for k, v in result.counts.items()},
        "units_per_minute": round(units.height / t.seconds * 60, 1) if t.seconds else 0.0,
        "preview": preview(result.entity_mentions, ["title", "type", "description"])})
    yield dg.AssetCheckResult(
        check_name="failed_units_rate", passed=rate <= FAILED_UNITS_MAX_RATE,
        metadata={"failed_units": failed, "units": units.height, "rate": round(rate, 4),
                  "max_rate": FAILED_UNITS_MAX_RATE})
