"""Assets: graph files (graph-nodes/edges parquet, denormalized text units, GraphML, Neo4j
CSV), the LanceDB vector index, and index_summary (failures.parquet, index-summary.json)."""



import dagster as dg
import polars as pl

from kgloom import schemas
from kgloom.assets._common import Timer, cost_metadata, preview
from kgloom.stats import build_index_summary, cost_markdown, stages_dir, write_stage_stats
from kgloom.emit import (build_graph_tables, denormalize_text_units, edges_endpoints_exist,
                         kg_node_ids_exist, row_counts_match, vectors_valid, write_graphml,
                         write_neo4j_import)
from kgloom.resources import EmbedderResource, IndexConfigResource
from kgloom.storage import read_table, table_path, write_json, write_table

GRAPHML_FILE = "graph.graphml"
NEO4J_DIR = "neo4j"
SUMMARY_FILE = "index-summary.json"


@dg.asset(group_name="emit", deps=["entities", "relationships", "communities", "text_units"],
          kinds={"parquet", "duckdb"},
          check_specs=[dg.AssetCheckSpec("edge_endpoints_exist", asset="graph_files"),
                       dg.AssetCheckSpec("kg_node_ids_exist", asset="graph_files")])
def graph_files(context: dg.AssetExecutionContext, index: IndexConfigResource):
    """graph-nodes / graph-edges parquet, text_units.parquet and documents.parquet with KG
    columns, graph.graphml and Neo4j import CSVs."""
    clock = Timer.started()
    out, sd = index.out, stages_dir(index.out)
    ents = read_table(out, schemas.ENTITIES)
    rels = read_table(out, schemas.RELATIONSHIPS)
    comms = read_table(out, schemas.COMMUNITIES)
    nodes, edges = build_graph_tables(ents, rels, comms)
    units = denormalize_text_units(
        read_table(sd, schemas.TEXT_UNITS), ents, rels, comms,
        read_table(out, schemas.COVARIATES, schemas.COVARIATES_SCHEMA))
    write_table(nodes, out, schemas.GRAPH_NODES)
    write_table(edges, out, schemas.GRAPH_EDGES)
    write_table(units, out, schemas.TEXT_UNITS)
    write_table(read_table(sd, schemas.DOCUMENTS), out, schemas.DOCUMENTS)
    write_graphml(ents, rels, out / GRAPHML_FILE)
    write_neo4j_import(ents, rels, out / NEO4J_DIR)
    write_stage_stats(out, "graph_files", clock.elapsed, nodes=nodes.height, edges=edges.height)
    yield dg.MaterializeResult(metadata={
        "nodes": nodes.height, "edges": edges.height, "text_units": units.height,
        "units_with_entities": units.filter(pl.col("kg_node_ids").list.len() > 0).height,
        "path": dg.MetadataValue.path(str(out)),
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


@dg.asset(group_name="emit", deps=[graph_files, "community_reports"], kinds={"lancedb"},
          check_specs=[dg.AssetCheckSpec("vectors_valid", asset="vector_index"),
                       dg.AssetCheckSpec("row_counts_match", asset="vector_index")])
def vector_index(context: dg.AssetExecutionContext, index: IndexConfigResource,
                 embedder: EmbedderResource):
    """LanceDB tables text_units, entities, community_reports: idempotent upserts by id."""
    import lancedb

    from kgloom.vectors import (LANCEDB_DIR, VECTOR_TABLES, embed_with_reuse,
                                write_embedder_manifest, write_lancedb)

    clock = Timer.started()
    out = index.out
    emb = embedder.load()
    db_path = out / LANCEDB_DIR
    written, expected, reused = {}, {}, {}
    for table, (parquet, text_expr) in VECTOR_TABLES.items():
        if parquet == schemas.COMMUNITY_REPORTS and not table_path(out, parquet).exists():
            # a run that selects no report stage (e.g. a retrieval-only index)
            context.log.warning("no community_reports.parquet: its LanceDB table is empty")
        df = read_table(out, parquet, schemas.GRAPHRAG_TABLES[parquet]
                        if parquet == schemas.COMMUNITY_REPORTS else None)
        texts = df.select(text_expr.fill_null("").alias("t"))["t"].to_list()
        vectors, keys, reused[table] = embed_with_reuse(emb, db_path, table, texts)
        context.log.info(f"{table}: embedded {len(texts) - reused[table]} rows, "
                         f"reused {reused[table]} unchanged")
        written[table] = write_lancedb(db_path, table, df.with_columns(keys), vectors)
        expected[table] = df.height
    write_embedder_manifest(db_path, emb)
    stats = write_stage_stats(out, "vector_index", clock.elapsed, tables=written, dim=emb.dim,
                              reused_vectors=reused, embedder_seconds=emb.seconds)
    yield dg.MaterializeResult(metadata={
        "path": dg.MetadataValue.path(str(db_path)), "dim": emb.dim, **cost_metadata(stats),
        **{f"{k}_embedded": expected[k] - v for k, v in reused.items()},
        **{f"{k}_reused": v for k, v in reused.items()},
        **{f"{k}_rows": v["rows"] for k, v in written.items()},
        **{f"{k}_version": v["version"] for k, v in written.items()}})
    db = lancedb.connect(str(db_path))
    tables = {name: db.open_table(name) for name in expected}
    checks = [vectors_valid(tables[n], emb.dim, expected[n]) for n in expected]
    yield dg.AssetCheckResult(check_name="vectors_valid", passed=all(c[0] for c in checks),
                              metadata={n: dg.MetadataValue.json(c[1])
                                        for n, c in zip(expected, checks)})
    ok, meta = row_counts_match(expected, {n: tables[n].count_rows() for n in expected})
    yield dg.AssetCheckResult(check_name="row_counts_match", passed=ok,
                              metadata={"counts": dg.MetadataValue.json(meta)})


@dg.asset(group_name="emit", deps=[vector_index], kinds={"json", "parquet"})
def index_summary(context: dg.AssetExecutionContext, index: IndexConfigResource) -> dg.MaterializeResult:
    """failures.parquet (every stage's failures) and index-summary.json."""
    out, sd = index.out, stages_dir(index.out)
    parts = sorted(sd.glob(f"{schemas.FAILURES}.*.parquet"))
    failures = (pl.concat([pl.read_parquet(p) for p in parts]) if parts
                else schemas.empty(schemas.FAILURES_SCHEMA))
    write_table(failures, out, schemas.FAILURES)
    summary = build_index_summary(out)
    write_json(summary, out / SUMMARY_FILE)
    return dg.MaterializeResult(metadata={
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
