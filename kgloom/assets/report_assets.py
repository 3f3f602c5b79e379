"""Asset: community_reports (published level), an LLM report per community."""

import dagster as dg

from kgloom.assets.graph_assets import communities
from kgloom.assets.metadata import Timer, cost_metadata, endpoint_metadata, preview, progress
from kgloom.core import schemas
from kgloom.core.layout import COMMUNITY_REPORTS, Level
from kgloom.embedding.tokenizer import default_tokenizer
from kgloom.pipelines.freshness import GRAPH_INPUTS, graph_inputs_of
from kgloom.report_writer import REJECTED, report_settings
from kgloom.reports.community_reports import build_community_reports, unit_places
from kgloom.resources import IndexConfigResource, LLMResource


@dg.asset(group_name="reports",
          deps=[communities, "entities", "relationships", "covariates", "corpus"],
          pool="llm", kinds={"llama_cpp", "parquet"})
def community_reports(context: dg.AssetExecutionContext, index: IndexConfigResource,
                      llm: LLMResource) -> dg.MaterializeResult:
    """An LLM report per community, deepest level first (sub-reports stand in when over
    budget); a rule report for small ones, and for all with ``method=fast`` or
    ``llm_reports: lazy`` (no model opened; lazy marks those awaiting an LLM report)."""
    clock = Timer.started()
    s = index.settings()
    store = index.store
    comms = store.read(schemas.COMMUNITIES)
    ents = store.read(schemas.ENTITIES)
    rels = store.read(schemas.RELATIONSHIPS)
    previous = (store.read(schemas.COMMUNITY_REPORTS, schema=schemas.COMMUNITY_REPORTS_SCHEMA)
                if s.reuse_reports else None)
    claims = store.read(schemas.COVARIATES, schema=schemas.COVARIATES_SCHEMA)
    units = store.read(schemas.TEXT_UNITS, Level.CORPUS, schema=schemas.TEXT_UNITS_SCHEMA,
                       columns=["id", "n_tokens", "document_id", "chunk_index", "start_char",
                                "end_char"])  # no unit texts
    # the documents' texts serve only the sections of long ones: read, used, let go
    places = unit_places(units, store.read(schemas.DOCUMENTS, Level.CORPUS,
                                           schema=schemas.DOCUMENTS_SCHEMA,
                                           columns=["id", "title", "text"]))
    cached = llm.open_for(s, store, log=context.log) if s.llm_reports == "eager" else None
    reports, failures, methods = build_community_reports(
        comms, ents, rels, cached, s, default_tokenizer(), progress(context, COMMUNITY_REPORTS),
        previous=previous, claims=claims,
        unit_tokens=dict(zip(units["id"].to_list(), units["n_tokens"].to_list())),
        unit_places=places)
    if cached is not None:
        cached.release()  # the model, now (CachedLLM.release)
    store.write(reports, schemas.COMMUNITY_REPORTS)
    store.write_failures(failures, COMMUNITY_REPORTS)
    st = cached.stats.get(COMMUNITY_REPORTS) if cached else None
    by = dict(reports.group_by("generated_by").len().iter_rows()) if reports.height else {}
    # LLM replies rejected by check_report (published as rule reports)
    rejected = failures.filter(failures["reason"].str.starts_with(REJECTED)).height
    stats = store.write_stats(COMMUNITY_REPORTS, clock.elapsed, st.as_dict() if st else {},
                              reports=reports.height, failures=failures.height,
                              context_methods=methods, llm_reports=by.get("llm", 0),
                              rule_reports=by.get("rules", 0), rejected_reports=rejected,
                              **({"lazy_reports": by.get("lazy", 0),
                                  "report_settings": report_settings(s)}
                                 if by.get("lazy", 0) else {}),
                              llm_backend=cached.backend_settings() if cached else {},
                              method=s.method)
    return dg.MaterializeResult(metadata={
        GRAPH_INPUTS: graph_inputs_of(context, "communities", "covariates"),
        "rows": reports.height, "communities": comms.height, "failures": failures.height,
        "llm_reports": by.get("llm", 0), "rule_reports": by.get("rules", 0),
        "rejected_reports": rejected,
        **({"lazy_reports": by.get("lazy", 0)} if by.get("lazy", 0) else {}),
        "context_methods": dg.MetadataValue.json(methods),
        **cost_metadata(stats),
        **(endpoint_metadata(cached) if cached else {}), "method": s.method,
        "preview": preview(reports, ["community", "level", "title", "rank", "size"])})
