"""Assets: graph files (graph-nodes/edges parquet, denormalized text units, GraphML, Neo4j
CSV), the LanceDB vector index, and index_summary (failures.parquet, index-summary.json)."""

import dagster as dg
import polars as pl

from kgloom.assets.metadata import Timer, cost_metadata, embedder_time, preview, progress
from kgloom.core import schemas
from kgloom.core.layout import (
    GRAPH_FILES,
    GRAPHML_FILE,
    LANCEDB_DIR,
    NEO4J_DIR,
    SUMMARY_DEPS,
    VECTOR_INDEX,
    Level,
)
from kgloom.core.stats import cost_markdown
from kgloom.core.storage import disk_full_error, is_disk_full, read_parquet
from kgloom.pipelines.freshness import GRAPH_INPUTS, graph_inputs_of
from kgloom.publish.tables import (
    build_graph_tables,
    denormalize_text_units,
    edges_endpoints_exist,
    kg_node_ids_exist,
    row_counts_match,
    vectors_valid,
    write_graphml,
    write_neo4j_import,
)
from kgloom.resources import EmbedderResource, IndexConfigResource


@dg.asset(group_name="emit",
          deps=["corpus", "entities", "relationships", "covariates", "communities"],
          kinds={"parquet", "duckdb"},
          check_specs=[dg.AssetCheckSpec("edge_endpoints_exist", asset="graph_files"),
                       dg.AssetCheckSpec("kg_node_ids_exist", asset="graph_files")])
def graph_files(context: dg.AssetExecutionContext, index: IndexConfigResource):
    """graph-nodes / graph-edges parquet, text_units.parquet and documents.parquet with KG
    columns, graph.graphml and Neo4j import CSVs."""
    clock = Timer.started()
    store = index.store
    ents = store.read(schemas.ENTITIES)
    rels = store.read(schemas.RELATIONSHIPS)
    comms = store.read(schemas.COMMUNITIES)
    nodes, edges = build_graph_tables(ents, rels, comms)
    units = denormalize_text_units(
        store.read(schemas.TEXT_UNITS, Level.CORPUS), ents, rels, comms,
        store.read(schemas.COVARIATES, schema=schemas.COVARIATES_SCHEMA))
    store.write(nodes, schemas.GRAPH_NODES)
    store.write(edges, schemas.GRAPH_EDGES)
    store.write(units, schemas.TEXT_UNITS)
    docs = store.read(schemas.DOCUMENTS, Level.CORPUS)
    store.write(docs, schemas.DOCUMENTS)
    write_graphml(ents, rels, store.file(GRAPHML_FILE), comms)
    write_neo4j_import(ents, rels, store.file(NEO4J_DIR), text_units=units, documents=docs,
                       communities=comms)
    store.write_stats(GRAPH_FILES, clock.elapsed, nodes=nodes.height, edges=edges.height)
    yield dg.MaterializeResult(metadata={
        GRAPH_INPUTS: graph_inputs_of(context, "entities", "relationships", "communities"),
        "nodes": nodes.height, "edges": edges.height, "text_units": units.height,
        "units_with_entities": units.filter(pl.col("kg_node_ids").list.len() > 0).height,
        "path": dg.MetadataValue.path(str(store.folder(Level.PUBLISHED))),
        "degree_distribution": preview(
            nodes.group_by("degree").len().sort("degree"), ["degree", "len"], n=30)})
    ok, meta = edges_endpoints_exist(nodes, edges)
    yield dg.AssetCheckResult(check_name="edge_endpoints_exist", passed=ok,
                              metadata={k: dg.MetadataValue.json(v) if isinstance(v, list) else v
                                        for k, v in meta.items()})
    ok, meta = kg_node_ids_exist(units, ents)
    yield dg.AssetCheckResult(check_name="kg_node_ids_exist", passed=ok,
                              metadata={k: dg.MetadataValue.json(v) if isinstance(v, list) else v
                                        for k, v in meta.items()})


@dg.asset(group_name="emit", deps=[graph_files, "entities", "community_reports"],
          kinds={"lancedb"},
          check_specs=[dg.AssetCheckSpec("vectors_valid", asset="vector_index"),
                       dg.AssetCheckSpec("row_counts_match", asset="vector_index")])
def vector_index(context: dg.AssetExecutionContext, index: IndexConfigResource,
                 embedder: EmbedderResource):
    """LanceDB tables text_units, entities, community_reports: rows whose content changed
    are embedded and upserted by id in batches (unchanged ones are left alone, so a
    no-change run writes nothing)."""
    import lancedb

    clock = Timer.started()
    store = index.store
    emb = embedder.load()
    emb_before = emb.passes()  # the loaded embedder is shared by the stages of a process
    db_path = store.file(LANCEDB_DIR)
    try:
        written, expected = store.sync_vectors(
            emb, progress=lambda t: progress(context, f"vectors {t}"), log=context.log.info)
    except Exception as exc:  # LanceDB reports a full disk in its own words
        if is_disk_full(exc):
            raise disk_full_error(db_path, None, exc) from exc
        raise
    finally:
        emb.release()  # its session's memory, until a later stage embeds again
    stats = store.write_stats(VECTOR_INDEX, clock.elapsed, tables=written, dim=emb.dim,
                              reused_vectors={k: v["reused"] for k, v in written.items()},
                              **embedder_time(emb, emb_before))
    yield dg.MaterializeResult(metadata={
        # from graph_files only: an index built without reports (--no-reports) keeps the
        # reports of the last run that wrote them, and is up to date without new ones
        GRAPH_INPUTS: graph_inputs_of(context, "graph_files"),
        "path": dg.MetadataValue.path(str(db_path)), "dim": emb.dim, **cost_metadata(stats),
        **{f"{k}_{field}": v[field] for k, v in written.items()
           for field in ("rows", "version", "written", "embedded", "reused", "deleted")}})
    db = lancedb.connect(str(db_path))
    tables = {name: db.open_table(name) for name in expected}
    checks = [vectors_valid(tables[n].search().select(["vector"]).limit(None).to_arrow(),
                            emb.dim, expected[n]) for n in expected]
    yield dg.AssetCheckResult(check_name="vectors_valid", passed=all(c[0] for c in checks),
                              metadata={n: dg.MetadataValue.json(c[1])
                                        for n, c in zip(expected, checks)})
    ok, meta = row_counts_match(expected, {n: tables[n].count_rows() for n in expected})
    yield dg.AssetCheckResult(check_name="row_counts_match", passed=ok,
                              metadata={"counts": dg.MetadataValue.json(meta)})


@dg.asset(group_name="emit", deps=SUMMARY_DEPS, kinds={"json", "parquet"})
def index_summary(context: dg.AssetExecutionContext,
                  index: IndexConfigResource) -> dg.MaterializeResult:
    """failures.parquet (every stage's failures) and index-summary.json (reads every
    published table and stage's stats), then, last of every publish, the build marker
    build.json (:func:`kgloom.core.builds.publish_build`): from then on readers open this
    build."""
    store = index.store
    parts = store.failure_files()
    failures = (pl.concat([read_parquet(p) for p in parts]) if parts
                else schemas.empty(schemas.FAILURES_SCHEMA))
    store.write(failures, schemas.FAILURES)
    summary = store.index_summary(index.settings().method)
    store.write_summary(summary)
    marker = store.publish_build()
    versions = {k: v["version"] for k, v in marker["lancedb"].items()}
    context.log.info(f"published build {marker['build_id']} ({len(marker['tables'])} tables, "
                     f"LanceDB versions {versions})")
    return dg.MaterializeResult(metadata={
        "build_id": marker["build_id"],
        GRAPH_INPUTS: graph_inputs_of(context, "vector_index"),
        "method": summary["method"],
        "failures": failures.height, "llm_calls": summary["llm_calls"],
        "llm_cache_hits": summary["llm_cache_hits"],
        "prompt_tokens": summary["prompt_tokens"],
        "completion_tokens": summary["completion_tokens"],
        "rows": dg.MetadataValue.json(summary["rows"]),
        "seconds_per_stage": dg.MetadataValue.json(summary["seconds_per_stage"]),
        "cost": dg.MetadataValue.md(cost_markdown(summary["cost"])),
        "wall_seconds": summary["cost"]["total"]["wall_seconds"],
        "model_seconds": summary["cost"]["total"]["model_seconds"],
        "model_share": summary["cost"]["total"]["model_share"],
        "llm_backend": dg.MetadataValue.json(summary["llm_backend"]),
        "failures_preview": preview(failures, ["stage", "item_id", "reason"])})
