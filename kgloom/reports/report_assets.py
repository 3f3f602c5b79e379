"""Asset: community_reports (published level), an LLM report per community."""

import dagster as dg

from kgloom import schemas
from kgloom.graph.graph_assets import communities
from kgloom.tokenizer import default_tokenizer
from kgloom.pipelines.wiring import (GRAPH_INPUTS, Timer, cost_metadata, endpoint_metadata,
                                     graph_inputs_of, preview, progress)
from kgloom.reports.community_reports import REJECTED
from kgloom.reports.community_reports import STAGE as REPORTS_STAGE
from kgloom.reports.community_reports import build_community_reports
from kgloom.resources import IndexConfigResource, LLMResource
from kgloom.stats import write_stage_stats
from kgloom.storage import read_table, write_table


@dg.asset(group_name="reports",
          deps=[communities, "entities", "relationships", "covariates", "corpus"],
          pool="llm", kinds={"llama_cpp", "parquet"})
def community_reports(context: dg.AssetExecutionContext, index: IndexConfigResource,
                      llm: LLMResource) -> dg.MaterializeResult:
    """An LLM report per community, deepest level first (sub-reports stand in when over
    budget); a rule report for small ones, and for all with ``method=fast`` (no model
    opened)."""
    clock = Timer.started()
    s = index.settings()
    comms = read_table(index.out, schemas.COMMUNITIES)
    ents = read_table(index.out, schemas.ENTITIES)
    rels = read_table(index.out, schemas.RELATIONSHIPS)
    previous = (read_table(index.out, schemas.COMMUNITY_REPORTS, schemas.COMMUNITY_REPORTS_SCHEMA)
                if s.reuse_reports else None)
    claims = read_table(index.out, schemas.COVARIATES, schemas.COVARIATES_SCHEMA)
    units = read_table(index.corpus_folder, schemas.TEXT_UNITS, schemas.TEXT_UNITS_SCHEMA,
                       columns=["id", "n_tokens"])  # not the texts
    cached = llm.open_for(s, index.out, log=context.log)
    reports, failures, methods = build_community_reports(
        comms, ents, rels, cached, s, default_tokenizer(), progress(context, REPORTS_STAGE),
        previous=previous, claims=claims,
        unit_tokens=dict(zip(units["id"].to_list(), units["n_tokens"].to_list())))
    write_table(reports, index.out, schemas.COMMUNITY_REPORTS)
    write_table(failures, index.corpus_folder, f"{schemas.FAILURES}.{REPORTS_STAGE}")
    st = cached.stats.get(REPORTS_STAGE) if cached else None
    by = dict(reports.group_by("generated_by").len().iter_rows()) if reports.height else {}
    # LLM replies rejected by check_report (published as rule reports)
    rejected = failures.filter(failures["reason"].str.starts_with(REJECTED)).height
    stats = write_stage_stats(index.out, REPORTS_STAGE, clock.elapsed,
                              st.as_dict() if st else {},
                              reports=reports.height, failures=failures.height,
                              context_methods=methods, llm_reports=by.get("llm", 0),
                              rule_reports=by.get("rules", 0), rejected_reports=rejected,
                              llm_backend=cached.backend_settings() if cached else {},
                              method=s.method)
    return dg.MaterializeResult(metadata={
        GRAPH_INPUTS: graph_inputs_of(context, "communities", "covariates"),
        "rows": reports.height, "communities": comms.height, "failures": failures.height,
        "llm_reports": by.get("llm", 0), "rule_reports": by.get("rules", 0),
        "rejected_reports": rejected,
        "context_methods": dg.MetadataValue.json(methods),
        **cost_metadata(stats),
        **(endpoint_metadata(cached) if cached else {}), "method": s.method,
        "preview": preview(reports, ["community", "level", "title", "rank", "size"])})
