"""Partitions per input file, incremental indexing, the sensor and the CLI backfill
(fake LLM; Dagster's testing helpers and real instances on disk)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from urllib.parse import quote

import dagster as dg
import polars as pl
import pytest
from typer.testing import CliRunner

from kgloom.cli.runner import index_folder, materialize_partitions
from kgloom.core import schemas
from kgloom.core.inputs import input_hashes
from kgloom.core.layout import partition_dir, partitions_root, stored_partitions
from kgloom.corpus.partitions import combine_partitions, diff_inputs, manifest_hashes
from kgloom.definitions import build_resources
from kgloom.llm import cache_rows, new_rows
from kgloom.pipelines.input_files import INPUT_FILES
from kgloom.pipelines.jobs import input_folder_sensor

BOOK = Path(__file__).resolve().parents[2] / "data" / "input" / "a-christmas-carol.txt"


def excerpt(start: int, n_chars: int) -> str:
    """A slice of the bundled book, from the first paragraph break after ``start``."""
    text = BOOK.read_text(encoding="utf-8")
    i = text.index("\n\n", start)
    return text[i: i + n_chars].strip()


def resources(inp: Path, out: Path, **settings) -> dict:
    return build_resources(str(inp), str(out), fake_llm=True, chunk_size=200, chunk_overlap=40,
                           **settings)


@pytest.fixture
def corpus(tmp_path) -> Path:
    d = tmp_path / "input"
    (d / "letters").mkdir(parents=True)
    (d / "stave1.txt").write_text(excerpt(20000, 2500), encoding="utf-8")
    (d / "letters" / "stave3.md").write_text(excerpt(90000, 2000), encoding="utf-8")
    return d


def test_diff_inputs_sorts_files_into_added_changed_deleted_unchanged():
    diff = diff_inputs({"a.txt": "1", "b.txt": "2", "c.txt": None},
                       {"a.txt": "1", "b.txt": "9", "c.txt": "3", "d.txt": "4"})
    assert diff.as_dict() == {"added": ["d.txt"], "changed": ["b.txt", "c.txt"],
                              "deleted": [], "unchanged": ["a.txt"]}
    assert diff_inputs({"a.txt": "1"}, {}).deleted == ["a.txt"]
    assert diff.to_materialize == ["b.txt", "c.txt", "d.txt"]


def test_partition_keys_are_relative_posix_paths(corpus):
    assert sorted(input_hashes(corpus)) == ["letters/stave3.md", "stave1.txt"]


@pytest.mark.integration
def test_incremental_index_add_rerun_and_delete(corpus, tmp_path):
    out = tmp_path / "out"
    instance = dg.DagsterInstance.ephemeral()
    diff, report = index_folder(resources(corpus, out), instance)
    assert report.success and diff.added == ["letters/stave3.md", "stave1.txt"]
    assert sorted(instance.get_dynamic_partitions(INPUT_FILES)) == diff.added
    first = {n: pl.read_parquet(out / f"{n}.parquet") for n in ("entities", "text_units")}

    # nothing changed: no partition run, no LLM call, same tables
    before = cache_rows(out)
    diff, report = index_folder(resources(corpus, out), instance)
    assert diff.unchanged == ["letters/stave3.md", "stave1.txt"] and not report.partition_runs
    assert new_rows(before, cache_rows(out)) == {}
    assert pl.read_parquet(out / "entities.parquet").equals(first["entities"])

    # one new file: extraction calls = its text units (and nothing re-extracted)
    (corpus / "stave5.txt").write_text(excerpt(150000, 1500), encoding="utf-8")
    before = cache_rows(out)
    diff, report = index_folder(resources(corpus, out), instance)
    assert diff.added == ["stave5.txt"] and list(report.partition_runs) == ["stave5.txt"]
    units = pl.read_parquet(partition_dir(out, "stave5.txt") / "text_units.parquet")
    calls = new_rows(before, cache_rows(out))
    assert calls["extraction"] == units.height
    reports_ = pl.read_parquet(out / "community_reports.parquet")
    comms = pl.read_parquet(out / "communities.parquet")
    assert set(reports_["community"]) == set(comms["community"])
    new_ids = set(units["id"])
    assert new_ids <= set(pl.read_parquet(out / "text_units.parquet")["id"])

    # delete it: its partition, text units and every reference to them are gone
    (corpus / "stave5.txt").unlink()
    diff, report = index_folder(resources(corpus, out), instance)
    assert diff.deleted == ["stave5.txt"] and report.success
    assert "stave5.txt" not in instance.get_dynamic_partitions(INPUT_FILES)
    assert "stave5.txt" not in stored_partitions(out)
    for table, col in [("entities", "text_unit_ids"), ("relationships", "text_unit_ids"),
                       ("communities", "text_unit_ids"), ("documents", "text_unit_ids")]:
        refs = set(pl.read_parquet(out / f"{table}.parquet")[col].explode().drop_nulls())
        assert not refs & new_ids, table
    assert not new_ids & set(pl.read_parquet(out / "text_units.parquet")["id"])
    assert set(pl.read_parquet(out / "entities.parquet")["id"]) == set(first["entities"]["id"])


@pytest.mark.integration
def test_materializing_a_partition_twice_changes_nothing(corpus, tmp_path):
    out = tmp_path / "out"
    instance = dg.DagsterInstance.ephemeral()
    index_folder(resources(corpus, out), instance)
    pdir = partition_dir(out, "stave1.txt")
    names = [schemas.DOCUMENTS, schemas.TEXT_UNITS, schemas.ENTITY_MENTIONS,
             schemas.RELATIONSHIP_MENTIONS]
    before = {n: pl.read_parquet(pdir / f"{n}.parquet") for n in names}
    report = materialize_partitions(["stave1.txt"], resources(corpus, out), instance)
    assert report.success
    for n in names:
        assert pl.read_parquet(pdir / f"{n}.parquet").equals(before[n]), n
    combined = combine_partitions(out, ["letters/stave3.md", "stave1.txt"])
    assert combined.text_units["id"].n_unique() == combined.text_units.height
    assert combined.documents.height == 2


@pytest.mark.integration
def test_the_same_document_in_two_files_is_kept_once(corpus, tmp_path):
    out = tmp_path / "out"
    shutil.copy(corpus / "stave1.txt", corpus / "copy.txt")
    instance = dg.DagsterInstance.ephemeral()
    index_folder(resources(corpus, out), instance)
    docs = pl.read_parquet(out / "documents.parquet")
    assert docs.height == 2 and docs["id"].n_unique() == 2
    units = pl.read_parquet(out / "text_units.parquet")
    assert units["id"].n_unique() == units.height
    failures = pl.read_parquet(out / "failures.parquet")
    assert failures.filter(pl.col("reason").str.contains("duplicate document")).height == 1


@pytest.mark.integration
def test_a_settings_change_makes_every_partition_changed(corpus, tmp_path):
    out = tmp_path / "out"
    instance = dg.DagsterInstance.ephemeral()
    index_folder(resources(corpus, out), instance)
    diff, report = index_folder(resources(corpus, out, max_gleanings=1), instance)
    assert diff.changed == ["letters/stave3.md", "stave1.txt"]
    assert sorted(report.partition_runs) == diff.changed
    assert all(v is not None for v in manifest_hashes(out).values())


def _apply(instance: dg.DagsterInstance, result: dg.SensorResult) -> None:
    """Do what the sensor daemon does with a result's dynamic partition requests."""
    for req in result.dynamic_partitions_requests or []:
        if isinstance(req, dg.AddDynamicPartitionsRequest):
            instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
        else:
            for key in req.partition_keys:
                instance.delete_dynamic_partition(req.partitions_def_name, key)


def test_sensor_adds_runs_and_deletes_partitions_then_refreshes_the_graph(
        corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("KGLOOM_INPUT_DIR", str(corpus))
    monkeypatch.setenv("KGLOOM_OUTPUT_DIR", str(tmp_path / "out"))
    instance = dg.DagsterInstance.ephemeral()

    def tick(cursor):
        with dg.build_sensor_context(instance=instance, cursor=cursor,
                                     resources=build_resources()) as ctx:
            result = input_folder_sensor(ctx)
        if isinstance(result, dg.SensorResult):
            _apply(instance, result)
        return result

    first = tick(None)
    assert sorted(r.partition_key for r in first.run_requests) == ["letters/stave3.md",
                                                                  "stave1.txt"]
    assert {r.job_name for r in first.run_requests} == {"ingest_job"}
    assert sorted(instance.get_dynamic_partitions(INPUT_FILES)) == ["letters/stave3.md",
                                                                   "stave1.txt"]
    # next tick: no ingest run in flight, so the graph-wide refresh is requested once
    second = tick(first.cursor)
    assert [r.job_name for r in second.run_requests] == ["graph_job"]
    assert isinstance(tick(second.cursor), dg.SkipReason)
    # a changed file re-runs only its partition
    (corpus / "stave1.txt").write_text(excerpt(30000, 2000), encoding="utf-8")
    third = tick(second.cursor)
    assert [(r.job_name, r.partition_key) for r in third.run_requests] == [
        ("ingest_job", "stave1.txt")]
    fourth = tick(third.cursor)
    assert [r.job_name for r in fourth.run_requests] == ["graph_job"]
    # a deleted file deletes its partition and refreshes the graph at once
    (corpus / "letters" / "stave3.md").unlink()
    fifth = tick(fourth.cursor)
    assert [r.job_name for r in fifth.run_requests] == ["graph_job"]
    assert sorted(instance.get_dynamic_partitions(INPUT_FILES)) == ["stave1.txt"]
    assert isinstance(tick(fifth.cursor), dg.SkipReason)


@pytest.mark.integration
def test_cli_backfill_and_status_against_an_instance_on_disk(corpus, tmp_path, monkeypatch):
    from kgloom.cli import app

    home = tmp_path / "dagster_home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    out = tmp_path / "out"
    args = ["--input-dir", str(corpus), "--output-dir", str(out)]
    runner = CliRunner()
    res = runner.invoke(app, ["backfill", "--partition", "stave1.txt", "--fake-llm", *args])
    assert res.exit_code == 0, res.output
    printed = json.loads(res.output[res.output.index("{"): res.output.rindex("}") + 1])
    assert printed["partition_runs"] == 1 and printed["llm_calls_this_run"]["extraction"] > 0

    instance = dg.DagsterInstance.get()  # DAGSTER_HOME = home
    runs = instance.get_runs()
    assert len(runs) == 2 and all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)
    assert len({r.tags["kgloom/backfill_id"] for r in runs}) == 1
    assert instance.get_materialized_partitions(dg.AssetKey("extracted_graph")) == {"stave1.txt"}
    meta = instance.get_latest_materialization_event(
        dg.AssetKey("entities")).asset_materialization.metadata
    assert "data:image/png;base64," in meta["degree_distribution"].value
    docs = pl.read_parquet(out / "documents.parquet")
    assert docs["source"].to_list() == ["stave1.txt"]  # only the backfilled file so far

    res = runner.invoke(app, ["status", *args])
    assert res.exit_code == 0, res.output
    lines = {ln.split()[0]: ln for ln in res.output.splitlines() if ln.strip()}
    assert "stale" in lines["extracted_graph"] and "letters/stave3.md" in lines["extracted_graph"]
    states = {ln.split()[1]: ln.split()[0] for ln in res.output.splitlines()
              if ln.startswith("  ")}
    assert states == {"stave1.txt": "unchanged", "letters/stave3.md": "added"}

    res = runner.invoke(app, ["backfill", "--partition", "nope.txt", "--fake-llm", *args])
    assert res.exit_code == 2 and "nope.txt" in res.output


@pytest.mark.integration
def test_a_graph_refresh_in_an_instance_without_partitions_destroys_nothing(corpus, tmp_path):
    from kgloom.cli.runner import refresh_graph

    out = tmp_path / "out"
    index_folder(resources(corpus, out), dg.DagsterInstance.ephemeral())
    before = sorted(stored_partitions(out))
    entities = pl.read_parquet(out / "entities.parquet")
    report = refresh_graph(resources(corpus, out), dg.DagsterInstance.ephemeral())
    assert report.graph_ok is False
    assert sorted(stored_partitions(out)) == before
    assert pl.read_parquet(out / "entities.parquet").equals(entities)
    # an unregistered partition whose file still exists is kept, not pruned
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(INPUT_FILES, ["stave1.txt"])
    assert refresh_graph(resources(corpus, out), instance).graph_ok
    assert sorted(stored_partitions(out)) == before
    docs = pl.read_parquet(out / "documents.parquet")
    assert docs["source"].to_list() == ["stave1.txt"]


# --- inputs stay inside the input folder -------------------------------------------------

SECRET = "The vault code is Hunter Two, said Aldous Crane."


def _step_errors(result) -> str:
    return "\n".join(str(e.step_failure_data.error.message) for e in result.all_events
                     if e.is_step_failure)


@pytest.mark.parametrize("key", ["../secret.txt", "letters/../../secret.txt", "link.txt",
                                 "/etc/hostname.txt", ".."])
def test_a_partition_key_leading_outside_the_input_folder_fails_before_reading(
        corpus, tmp_path, key):
    from kgloom.assets.ingest_assets import documents, text_units

    (tmp_path / "secret.txt").write_text(SECRET, encoding="utf-8")
    (corpus / "link.txt").symlink_to(tmp_path / "secret.txt")
    out = tmp_path / "out"
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(INPUT_FILES, [key])  # what the Dagster API allows
    for assets in ([documents], [documents, text_units], [text_units]):
        result = dg.materialize(assets, partition_key=key, instance=instance,
                                resources=resources(corpus, out), raise_on_error=False)
        assert not result.success
        assert "refused partition key" in _step_errors(result), _step_errors(result)
        assert stored_partitions(out) == []  # no folder made, nothing read or written
    assert not any(SECRET in p.read_text(errors="ignore")
                   for p in out.rglob("*") if p.is_file())


@pytest.mark.integration
def test_a_crafted_key_is_dropped_and_its_stage_folder_deleted_by_kgloom_index(
        corpus, tmp_path, monkeypatch):
    from kgloom.cli import app

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    (tmp_path / "secret.txt").write_text(SECRET, encoding="utf-8")
    out = tmp_path / "out"
    args = ["--input-dir", str(corpus), "--output-dir", str(out), "--fake-llm"]
    # the state an older kgloom left: a crafted key registered, its stage folder built
    bad = partitions_root(out) / quote("../secret.txt", safe="")
    bad.mkdir(parents=True)
    (bad / "documents.parquet").write_bytes(b"left by an older kgloom")
    (tmp_path / "dagster_home").mkdir()
    dg.DagsterInstance.get().add_dynamic_partitions(INPUT_FILES, ["../secret.txt"])

    runner = CliRunner()
    res = runner.invoke(app, ["backfill", "--partition", "../secret.txt", *args])
    assert res.exit_code == 2 and "../secret.txt" in res.output  # refused at the CLI door
    res = runner.invoke(app, ["index", *args])
    assert res.exit_code == 0, res.output
    assert not bad.exists()
    assert sorted(stored_partitions(out)) == ["letters/stave3.md", "stave1.txt"]
    assert "../secret.txt" not in dg.DagsterInstance.get().get_dynamic_partitions(INPUT_FILES)
    docs = pl.read_parquet(out / "documents.parquet")
    assert sorted(docs["source"]) == ["letters/stave3.md", "stave1.txt"]


@pytest.mark.integration
def test_a_symlink_leading_outside_is_skipped_and_reported_not_a_crash(
        corpus, tmp_path, monkeypatch):
    from kgloom.cli import app

    (tmp_path / "secret.txt").write_text(SECRET, encoding="utf-8")
    (corpus / "link.txt").symlink_to(tmp_path / "secret.txt")
    (corpus / "inside.txt").symlink_to(corpus / "stave1.txt")  # inside: followed
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    (tmp_path / "dagster_home").mkdir()
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["partitions", "--input-dir", str(corpus),
                                   "--output-dir", str(out)])
    assert res.exit_code == 0, res.output
    assert "warning: link.txt: symlink to a path outside the input folder" in res.output
    assert sorted(dg.DagsterInstance.get().get_dynamic_partitions(INPUT_FILES)) == [
        "inside.txt", "letters/stave3.md", "stave1.txt"]

    diff, report = index_folder(resources(corpus, out), dg.DagsterInstance.ephemeral())
    assert report.success and diff.skipped[0]["item_id"] == "link.txt"
    docs = pl.read_parquet(out / "documents.parquet")
    assert not docs["text"].str.contains("Hunter Two").any()
    assert docs.height == 2  # inside.txt is stave1.txt's text: kept once
    failures = pl.read_parquet(out / "failures.parquet")
    row = failures.filter(pl.col("item_id") == "link.txt").row(0, named=True)
    assert "outside the input folder" in row["reason"] and "secret.txt" in row["detail"]

    # `kgloom status` shows the skipped entry as indexing warned about it (it said nothing)
    res = CliRunner().invoke(app, ["status", "--input-dir", str(corpus), "--output-dir",
                                   str(out)])
    assert res.exit_code == 0, res.output
    assert f"warning: link.txt: {row['reason']} ({row['detail']})" in res.output
    assert SECRET not in res.output  # named, never read
