"""The Dagster asset graph end to end with the fake LLM: outputs, failures, cache reuse,
GraphRAG column compatibility, definitions, sensor and schedule."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import re
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from kgloom import report_writer
from kgloom.cli.runner import index_folder
from kgloom.core import schemas
from kgloom.definitions import build_resources, defs
from kgloom.pipelines.jobs import nightly_index_schedule

BOOK = Path(__file__).resolve().parents[2] / "data" / "input" / "a-christmas-carol.txt"
EXPECTED_FILES = ["documents.parquet", "text_units.parquet", "entities.parquet",
                  "relationships.parquet", "entity_aliases.parquet", "communities.parquet",
                  "community_reports.parquet", "graph-nodes.parquet", "graph-edges.parquet",
                  "failures.parquet", "index-summary.json", "graph.graphml",
                  "neo4j/nodes.csv", "neo4j/relationships.csv", "llm_cache.sqlite"]


def book_excerpt(start: int, n_chars: int) -> str:
    """A slice of the bundled book, from the first paragraph break after ``start``."""
    text = BOOK.read_text(encoding="utf-8")
    i = text.index("\n\n", start)
    return text[i: i + n_chars].strip()


def run_index(input_dir: Path, output_dir: Path, **settings) -> dict:
    """Materialize every partition (changed or not) and the graph with the fake LLM in a
    fresh ephemeral instance; return index-summary.json."""
    resources = build_resources(str(input_dir), str(output_dir), fake_llm=True,
                                chunk_size=200, chunk_overlap=40, **settings)
    _, report = index_folder(resources, dg.DagsterInstance.ephemeral(), force=True)
    assert report.success
    return json.loads((output_dir / "index-summary.json").read_text())


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("input")
    (d / "stave1.txt").write_text(book_excerpt(20000, 3000), encoding="utf-8")
    (d / "stave3.md").write_text(book_excerpt(90000, 2500), encoding="utf-8")
    (d / "empty.txt").write_text("   \n", encoding="utf-8")
    (d / "broken.txt").write_bytes(b"\xff\xfe\xfa not utf-8 \xc3\x28")
    return d


@pytest.fixture(scope="module")
def indexed(corpus, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("output")
    return out, run_index(corpus, out)


@pytest.mark.integration
def test_every_output_file_is_written(indexed):
    out, summary = indexed
    for name in EXPECTED_FILES:
        assert (out / name).exists(), name
    assert summary["rows"]["documents"] == 2
    assert summary["rows"]["text_units"] >= 4
    assert summary["llm_calls"] > 0
    assert set(summary["seconds_per_stage"]) >= {"documents", "extraction", "community_reports"}


@pytest.mark.integration
def test_index_summary_has_the_cost_of_every_stage(indexed):
    out, summary = indexed
    cost = summary["cost"]
    assert set(cost["stages"]) >= {"documents", "text_units", "extraction", "entities",
                                   "summaries", "communities", "community_reports",
                                   "graph_files", "vector_index"}
    assert cost["stages"]["summaries"]["part_of"] == "entities"
    top = [c for c in cost["stages"].values() if "part_of" not in c]
    assert cost["total"]["wall_seconds"] == pytest.approx(
        sum(c["wall_seconds"] for c in top), abs=0.05)
    assert cost["total"]["calls"] == summary["llm_calls"]
    assert cost["total"]["prompt_tokens"] == summary["prompt_tokens"]
    # the embedder's forward passes are model time: the vector index is mostly that
    vec = cost["stages"]["vector_index"]
    assert 0 < vec["embedder_seconds"] <= vec["wall_seconds"]
    assert 0 < vec["model_share"] <= 1
    assert summary["llm_backend"]["model_id"] == "fake-llm"
    reports = pl.read_parquet(out / "community_reports.parquet")
    st = json.loads((out / "stages" / "community_reports.stats.json").read_text())
    assert st["llm_reports"] + st["rule_reports"] == reports.height
    assert set(reports["generated_by"]) <= {"llm", "rules"}


@pytest.mark.integration
def test_bad_input_files_become_failures_rows(indexed):
    out, _ = indexed
    failures = pl.read_parquet(out / "failures.parquet")
    docs = failures.filter(pl.col("stage") == "documents").sort("item_id")
    assert docs["item_id"].to_list() == ["broken.txt", "empty.txt:empty"]
    assert docs["detail"].to_list() == ["", ""]
    broken, empty = docs["reason"].to_list()
    assert empty == "empty document (no text after normalization)"
    # the best guess and its confidence are charset-normalizer's, whose version is not pinned
    assert re.fullmatch(r"undecodable file: text encoding not detected with confidence "
                        r"\(best guess [\w-]+, confidence 0\.\d\d < 0\.9\); "
                        r"convert it to UTF-8", broken), broken


@pytest.mark.integration
def test_every_text_unit_extracted_or_listed_as_failure(indexed):
    out, _ = indexed
    units = pl.read_parquet(out / "text_units.parquet")
    status = pl.read_parquet(out / "stages" / "extraction_units.parquet")
    failures = pl.read_parquet(out / "failures.parquet").filter(pl.col("stage") == "extraction")
    assert set(status["text_unit_id"]) == set(units["id"])
    failed = set(status.filter(pl.col("status") == "failed")["text_unit_id"])
    assert failed <= set(failures["item_id"])
    mentions = pl.read_parquet(out / "stages" / "entity_mentions.parquet")
    assert set(mentions["text_unit_id"]) <= set(status.filter(
        pl.col("status") == "extracted")["text_unit_id"])


@pytest.mark.integration
def test_each_community_level_partitions_all_entities_and_has_reports(indexed):
    out, _ = indexed
    entities = pl.read_parquet(out / "entities.parquet")
    comms = pl.read_parquet(out / "communities.parquet")
    for level in comms["level"].unique():
        members = comms.filter(pl.col("level") == level)["entity_ids"].explode()
        assert members.len() == members.n_unique() == entities.height
    reports_ = pl.read_parquet(out / "community_reports.parquet")
    assert set(reports_["community"]) == set(comms["community"])


@pytest.mark.integration
def test_graphrag_tables_have_graphrag_columns_first(indexed):
    out, _ = indexed
    for table, columns in schemas.GRAPHRAG_COLUMNS.items():
        df = pl.read_parquet(out / f"{table}.parquet")
        assert df.columns[: len(columns)] == columns, table
        for col in columns:
            assert df.schema[col] == schemas.GRAPHRAG_TABLES[table][col], (table, col)


@pytest.mark.integration
def test_second_run_makes_no_llm_call_and_report_prompt_edit_reruns_only_reports(
        indexed, corpus, monkeypatch):
    import lancedb

    out, first = indexed
    db = lancedb.connect(str(out / "lancedb"))
    before = {n: (db.open_table(n).count_rows(), db.open_table(n).version)
              for n in ("text_units", "entities", "community_reports")}
    again = run_index(corpus, out)
    assert again["llm_calls"] == 0
    # re-materializing the emit assets (force) rewrites nothing: no LanceDB version
    for name, (rows, version) in before.items():
        table = db.open_table(name)
        assert (table.count_rows(), table.version) == (rows, version), name
    # unchanged communities keep their reports with no call; every other call is a hit
    reused = again["stages"]["community_reports"]["context_methods"]["reused"]
    assert reused == again["rows"]["communities"]
    assert again["llm_cache_hits"] == (first["llm_calls"] + first["llm_cache_hits"]
                                       - first["llm"]["community_reports"]["calls"])
    # the prompt of the default form (the model choosing a report's parts)
    edited = dataclasses.replace(report_writer.CHOICES_TEMPLATE,
                                 user=report_writer.CHOICES_TEMPLATE.user + "\nBe brief.")
    monkeypatch.setattr(report_writer, "CHOICES_TEMPLATE", edited)
    third = run_index(corpus, out)
    assert third["llm"]["extraction"]["calls"] == 0
    assert third["llm"].get("summaries", {}).get("calls", 0) == 0
    # every LLM report is written again (rule-built reports of small communities make no call)
    stage = third["stages"]["community_reports"]
    assert stage["llm_reports"] + stage["rule_reports"] == third["rows"]["communities"]
    assert third["llm"]["community_reports"]["calls"] == stage["llm_reports"] > 0


@pytest.mark.integration
def test_denormalized_columns_and_lancedb_tables(indexed):
    import lancedb

    out, _ = indexed
    units = pl.read_parquet(out / "text_units.parquet")
    entity_ids = set(pl.read_parquet(out / "entities.parquet")["id"])
    assert set(units["kg_node_ids"].explode().drop_nulls()) <= entity_ids
    db = lancedb.connect(str(out / "lancedb"))
    assert db.open_table("text_units").count_rows() == units.height
    row = db.open_table("text_units").to_arrow().slice(0, 1).to_pylist()[0]
    assert {"kg_node_ids", "neighbor_entity_ids", "neighbor_triples", "vector"} <= set(row)


@pytest.mark.integration
def test_dagster_cli_validates_the_definitions(tmp_path):
    import subprocess
    import sys

    env = {**os.environ, "DAGSTER_HOME": str(tmp_path)}
    res = subprocess.run([sys.executable, "-m", "dagster", "definitions", "validate", "-m",
                          "kgloom.definitions"], capture_output=True, text=True, env=env,
                         timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Validation successful" in res.stdout + res.stderr


def test_definitions_load():
    from kgloom.resources import EmbedderResource, IndexConfigResource, LLMResource

    dg.Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    assert {k.to_user_string() for k in graph.get_all_asset_keys()} == set(ASSET_GRAPH)
    assert {(c.asset_key.to_user_string(), c.name) for c in graph.asset_check_keys} == {
        ("extracted_graph", "failed_units_rate"), ("extracted_graph", "entities_found"),
        ("communities", "communities_group_entities"), ("graph_files", "kg_node_ids_exist"),
        ("graph_files", "edge_endpoints_exist"), ("vector_index", "vectors_valid"),
        ("vector_index", "row_counts_match")}
    assert {k: type(v) for k, v in defs.resources.items()} == {
        "index": IndexConfigResource, "llm": LLMResource, "embedder": EmbedderResource}


def test_missing_model_stops_before_any_work(tmp_path, corpus):
    from typer.testing import CliRunner

    from kgloom.cli import app

    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["index", "--input-dir", str(corpus), "--output-dir", str(out),
                                   "--model-path", str(tmp_path / "nope.gguf")])
    assert res.exit_code == 2
    assert "nope.gguf" in res.output and "does not exist" in res.output
    assert not out.exists()


def test_index_rejects_an_unknown_candidate_source_and_passes_the_settings(tmp_path, corpus):
    from typer.testing import CliRunner

    from kgloom.cli import app
    from kgloom.definitions import build_resources

    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["index", "--input-dir", str(corpus), "--output-dir", str(out),
                                   "--fake-llm", "--candidate-source", "guess"])
    assert res.exit_code == 2 and "candidate-source" in res.output
    assert not out.exists()
    r = build_resources(str(corpus), str(out), fake_llm=True, embedder_path="/models/st",
                        candidate_source="open", cut_boilerplate=False)
    s = r["index"].settings()
    assert (s.candidate_source, s.cut_boilerplate, s.title_candidates) == ("open", False, True)
    assert r["embedder"].model_path == "/models/st"


def test_nightly_schedule_refreshes_the_graph_at_two_utc(tmp_path, monkeypatch):
    assert nightly_index_schedule.cron_schedule == "0 2 * * *"
    assert nightly_index_schedule.execution_timezone == "UTC"
    assert nightly_index_schedule.job_name == "graph_job"
    monkeypatch.setenv("KGLOOM_OUTPUT_DIR", str(tmp_path / "never-built"))
    monkeypatch.setenv("KGLOOM_FAKE_LLM", "1")
    with dg.instance_for_test() as instance, dg.build_schedule_context(
            instance=instance, resources=build_resources(),
            scheduled_execution_time=dt.datetime(2026, 11, 30, 2, 0,
                                                 tzinfo=dt.UTC)) as ctx:
        requests = list(nightly_index_schedule.evaluate_tick(ctx).run_requests or [])
    assert len(requests) == 1


def test_the_schedule_and_sensor_start_as_the_operations_doc_says():
    from kgloom.pipelines.jobs import input_folder_sensor

    doc = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text(
        encoding="utf-8")
    said = {name: set(re.findall(rf"`{name}`[^.`]*?\b(on|off) by default", doc))
            for name in ("nightly_index_schedule", "input_folder_sensor")}
    assert said == {"nightly_index_schedule": {"on"}, "input_folder_sensor": {"off"}}
    assert nightly_index_schedule.default_status == dg.DefaultScheduleStatus.RUNNING
    assert input_folder_sensor.default_status == dg.DefaultSensorStatus.STOPPED


@pytest.mark.integration
def test_cache_command_shows_calls_per_stage(indexed):
    from typer.testing import CliRunner

    from kgloom.cli import app

    out, _ = indexed
    res = CliRunner().invoke(app, ["cache", "--output-dir", str(out)])
    assert res.exit_code == 0, res.output
    lines = {line.split()[0]: line.split() for line in res.output.splitlines()[1:] if line.strip()}
    assert {"extraction", "community_reports"} <= set(lines)
    assert int(lines["extraction"][1]) > 0  # rows in the cache table


@pytest.mark.integration
def test_query_command_reads_the_fake_llm_index(indexed):
    from typer.testing import CliRunner

    from kgloom.cli import app

    out, _ = indexed
    units = pl.read_parquet(out / "text_units.parquet")
    docs = dict(zip(*pl.read_parquet(out / "documents.parquet").select("id", "title")))
    # a question made of one unit's own words comes back first, from its document
    target = units.row(0, named=True)
    question = " ".join(target["text"].split()[:40])
    for mode in ("vector", "one_hop", "multihop", "ppr"):
        res = CliRunner().invoke(app, ["query", question, "--output-dir", str(out), "--mode",
                                       mode, "--top-k", "3", "--json"])
        assert res.exit_code == 0, res.output
        payload = json.loads(res.output[res.output.index("{"):])
        assert payload["info"]["used_mode"] in (mode, "vector")
        assert len(payload["text_units"]) == 3
        if mode == "vector":
            assert payload["text_units"][0]["id"] == target["id"]
            assert payload["text_units"][0]["document_title"] == docs[target["document_id"]]
    table = CliRunner().invoke(app, ["query", question, "--output-dir", str(out)])
    assert table.exit_code == 0 and docs[target["document_id"]] in table.output


# A snapshot of the definitions surface (after Dagster open platform's test_defs):
# renaming an asset or rewiring a dependency must be a deliberate edit of this table.
ASSET_GRAPH = {
    # each asset's dependencies are the assets whose files it reads
    "documents": [], "text_units": ["documents"],
    "extracted_graph": ["documents", "text_units"], "corpus": ["extracted_graph"],
    "entities": ["corpus"], "relationships": ["corpus"], "entity_aliases": ["corpus"],
    "covariates": ["corpus"], "communities": ["entities", "relationships"],
    "graph_stats": ["communities", "entities", "relationships"],
    "community_reports": ["communities", "corpus", "covariates", "entities", "relationships"],
    "graph_files": ["communities", "corpus", "covariates", "entities", "relationships"],
    "vector_index": ["community_reports", "entities", "graph_files"],
    "index_summary": ["communities", "community_reports", "corpus", "covariates", "entities",
                      "entity_aliases", "graph_files", "graph_stats", "relationships",
                      "vector_index"],
}


def test_definitions_surface_snapshot():
    graph = defs.resolve_asset_graph()
    surface = {k.to_user_string(): sorted(p.to_user_string() for p in graph.get(k).parent_keys)
               for k in graph.get_all_asset_keys()}
    assert surface == ASSET_GRAPH
    assert sorted(j.name for j in defs.jobs) == ["embed_job", "graph_job", "index_job",
                                                  "ingest_job", "reports_job"]
    partitioned = {k.to_user_string() for k in graph.get_all_asset_keys()
                   if graph.get(k).is_partitioned}
    assert partitioned == {"documents", "text_units", "extracted_graph"}
    for key in partitioned:
        assert graph.get(dg.AssetKey(key)).partitions_def.name == "input_files"
    assert [s.name for s in defs.schedules] == ["nightly_index_schedule"]
    assert [s.name for s in defs.sensors] == ["input_folder_sensor"]
    llm_assets = {k.to_user_string() for k in graph.get_all_asset_keys()
                  if graph.get(k).pools == {"llm"}}
    assert llm_assets == {"extracted_graph", "entities", "relationships", "entity_aliases",
                          "covariates", "community_reports"}


@pytest.mark.integration
def test_claims_become_covariates_and_join_report_contexts(corpus, tmp_path):
    out = tmp_path / "out"
    summary = run_index(corpus, out, extract_claims=True)
    cov = pl.read_parquet(out / "covariates.parquet")
    assert cov.height > 0 and cov.columns == list(schemas.COVARIATES_SCHEMA)
    titles = set(pl.read_parquet(out / "entities.parquet")["title"])
    assert set(cov["subject_id"]) <= titles
    assert set(cov["status"]) <= {"TRUE", "FALSE", "SUSPECTED"}
    units = pl.read_parquet(out / "text_units.parquet")
    linked = set(units["covariate_ids"].explode().drop_nulls())
    assert linked == set(cov["id"])
    assert summary["llm"]["claims"]["calls"] > 0


@pytest.mark.integration
def test_every_output_file_is_readable_as_the_umask_allows(indexed):
    import stat

    out, _ = indexed
    mask = os.umask(0)
    os.umask(mask)
    files = [p for p in out.rglob("*") if p.is_file() and not p.name.endswith(".lock")]
    assert any(p.name == "graph.graphml" for p in files)
    wrong = {str(p.relative_to(out)): oct(stat.S_IMODE(p.stat().st_mode)) for p in files
             if stat.S_IMODE(p.stat().st_mode) != 0o666 & ~mask}
    assert not wrong


@pytest.mark.integration
def test_cli_summary_prints_the_cost_of_the_stages_it_ran(indexed, capsys):
    from kgloom.cli.main import _finish
    from kgloom.cli.runner import RunReport
    from kgloom.core.stats import build_index_summary

    out, _ = indexed
    # the stats on disk now (other tests of this module may have run stages again)
    summary = build_index_summary(out)
    _finish(str(out), {}, RunReport(), "input", started=0.0)  # every stage ran after t = 0
    captured = capsys.readouterr()
    printed = json.loads(captured.out[:captured.out.rindex("}") + 1])
    cost = printed["cost"]
    assert cost["stages_wall_seconds"] == summary["cost"]["total"]["wall_seconds"]
    assert cost["model_seconds"] == summary["cost"]["total"]["model_seconds"]
    assert 0 <= cost["model_share_of_command"] <= cost["model_share_of_stages"] <= 1
    assert "| extraction |" in captured.err and "| total |" in captured.err
    _finish(str(out), {}, RunReport(), "input", started=10**12)  # nothing ran since then
    captured = capsys.readouterr()
    assert json.loads(captured.out[:captured.out.rindex("}") + 1])["cost"][
        "stages_wall_seconds"] == 0
    assert "| total |" not in captured.err
