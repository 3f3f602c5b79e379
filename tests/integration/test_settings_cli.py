"""One settings surface (IndexSettings -> resource, CLI --set / --settings, env) and a
quiet CLI whose runs carry the named jobs."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest
from typer.testing import CliRunner

from kgloom.cli import app
from kgloom.definitions import build_resources, defs
from kgloom.resources import IndexConfigResource, IndexSettingsConfig
from kgloom.settings.indexing import (
    IndexSettings,
    load_settings_file,
    parse_assignments,
    settings_fields,
    settings_from_mapping,
)

BOOK = Path(__file__).resolve().parents[2] / "data" / "input" / "a-christmas-carol.txt"


def test_the_index_settings_are_one_typed_field_of_the_resource():
    # a declared class (no type()): the resource's index_settings field is the index section
    assert IndexConfigResource.model_fields["index_settings"].annotation is IndexSettingsConfig
    assert set(IndexConfigResource.model_fields) == {"input_dir", "output_dir",
                                                     "index_settings"}
    assert set(IndexSettingsConfig.model_fields) == set(IndexSettings.model_fields)
    assert issubclass(IndexSettingsConfig, IndexSettings)
    # the resource's defaults build exactly the model's defaults
    assert IndexConfigResource().settings() == IndexSettings()
    # and every field reaches the settings: flip each one and see it arrive
    for name, (_, default) in settings_fields().items():
        if name == "record_edges":
            value = ["authors:AUTHORED_BY"]
        elif isinstance(default, bool):
            value = not default
        elif isinstance(default, int):
            value = default + 1
        elif isinstance(default, float):
            value = default / 2
        elif isinstance(default, list):
            value = default[:1]
        elif name == "summary_method":
            value = "llm"
        elif name == "method":
            value = "fast"
        elif name == "candidate_source":
            value = "ngram"
        elif name == "extraction_text":
            value = "full"
        elif name == "community_backend":
            value = "leidenalg"
        elif name == "llm_reports":
            value = "lazy"
        elif name == "llm_report_form":
            value = "free"
        else:
            pytest.fail(f"no test value for {name}")
        resource = IndexConfigResource(index_settings=IndexSettingsConfig(**{name: value}))
        got = getattr(resource.settings(), name)
        assert (list(got) if isinstance(got, tuple) else got) == value, name
    with pytest.raises(ValueError, match="chunk_overlap"):  # checked as the model is
        IndexSettingsConfig(chunk_size=100, chunk_overlap=100)


def test_the_launchpad_config_schema_lists_every_setting():
    index = defs.resources["index"]
    schema = type(index).to_config_schema().as_field().config_type
    nested = schema.fields["index_settings"].config_type
    assert set(settings_fields()) == set(nested.fields)


def test_settings_from_strings_and_files(tmp_path):
    s = settings_from_mapping(parse_assignments(
        ["chunk_size=400", "entity_types=person, place", "extract_claims=true",
         "embedding_merge_threshold=0.9"]))
    assert (s.chunk_size, s.entity_types, s.extract_claims, s.embedding_merge_threshold) == (
        400, ("PERSON", "PLACE"), True, 0.9)
    with pytest.raises(ValueError, match="unknown setting"):
        settings_from_mapping({"chunksize": 3})
    with pytest.raises(ValueError, match="chunk_size"):
        settings_from_mapping({"chunk_size": "many"})
    with pytest.raises(ValueError, match="chunk_overlap"):
        settings_from_mapping({"chunk_size": 100, "chunk_overlap": 100})
    for bad, field in ((["entity_types="], "entity_types"),
                       (["resolution_methods=normalized,guess"], "resolution_methods"),
                       (["max_gleanings=-1"], "max_gleanings"),
                       (["report_max_input_tokens=0"], "report_max_input_tokens"),
                       (["embedding_merge_threshold=1.5"], "embedding_merge_threshold")):
        with pytest.raises(ValueError, match=field):  # refused before any work
            settings_from_mapping(parse_assignments(bad))
    with pytest.raises(ValueError, match="key=value"):
        parse_assignments(["chunk_size"])
    f = tmp_path / "s.yaml"
    f.write_text("settings:\n  chunk_size: 321\n  entity_types: [person]\n")
    assert load_settings_file(f) == {"chunk_size": 321, "entity_types": ["person"]}
    f.write_text("- not a mapping\n")
    with pytest.raises(ValueError, match="mapping"):
        load_settings_file(f)


def test_settings_file_env_then_arguments(tmp_path, monkeypatch):
    f = tmp_path / "s.yaml"
    f.write_text("chunk_size: 321\nmax_cluster_size: 7\n")
    monkeypatch.setenv("KGLOOM_SETTINGS", str(f))
    s = build_resources(str(tmp_path), str(tmp_path), fake_llm=True,
                        max_cluster_size=5)["index"].settings()
    assert (s.chunk_size, s.max_cluster_size) == (321, 5)  # arguments win over the file


def _index(args, tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    return CliRunner().invoke(app, ["index", "--fake-llm", *args])


@pytest.fixture(scope="module")
def small_input(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("in")
    text = BOOK.read_text(encoding="utf-8")
    start = text.index("Marley was dead")
    (d / "marley.txt").write_text(text[start:start + 1500], encoding="utf-8")
    return d


@pytest.mark.integration
def test_cli_is_quiet_names_its_jobs_and_logs_to_a_file(small_input, tmp_path, monkeypatch):
    out = tmp_path / "out"
    settings = tmp_path / "s.yaml"
    settings.write_text("chunk_size: 150\n")
    res = _index(["--input-dir", str(small_input), "--output-dir", str(out),
                  "--settings", str(settings), "--set", "chunk_overlap=30"],
                 tmp_path, monkeypatch)
    assert res.exit_code == 0, res.output
    # Dagster's event log stays off the terminal; the summary table is there
    assert "RUN_START" not in res.output and "STEP_OUTPUT" not in res.output
    for label in ("documents", "text units", "entities", "relationships", "communities",
                  "community reports", "failures", "LLM calls", "cache hits", "wall time"):
        assert label in res.output, label
    printed = json.loads(res.stdout[res.stdout.index("{"):res.stdout.rindex("}") + 1])
    units = printed["rows"]["text_units"]
    assert units > 1  # 1,500 characters in 150-token units: the settings arrived
    log = (tmp_path / "home" / "logs" / "kgloom.log").read_text()
    assert "RUN_START" in log and "STEP_SUCCESS" in log
    with dg.DagsterInstance.from_config(str(tmp_path / "home")) as instance:
        jobs = sorted(r.job_name for r in instance.get_runs())
        assert jobs == ["graph_job", "ingest_job"]
        tags = instance.get_runs()[0].tags
        assert tags["kgloom/command"] == "kgloom index"
    # --verbose prints the event log too; a no-change run re-runs nothing
    res = _index(["--input-dir", str(small_input), "--output-dir", str(out),
                  "--settings", str(settings), "--set", "chunk_overlap=30", "--verbose"],
                 tmp_path, monkeypatch)
    assert res.exit_code == 0 and "graph up to date" in res.output
    # a setting that decides partitions changed: the partition is rebuilt
    res = _index(["--input-dir", str(small_input), "--output-dir", str(out),
                  "--set", "chunk_size=150", "--set", "chunk_overlap=30",
                  "--set", "max_relationships_per_unit=4", "--verbose"],
                 tmp_path, monkeypatch)
    assert res.exit_code == 0, res.output
    assert "RUN_START" in res.output
    assert "1 changed" in res.output


def test_cli_rejects_a_bad_setting_before_any_work(small_input, tmp_path, monkeypatch):
    out = tmp_path / "out"
    res = _index(["--input-dir", str(small_input), "--output-dir", str(out),
                  "--set", "chunk_size=lots"], tmp_path, monkeypatch)
    assert res.exit_code == 2 and "chunk_size" in res.output
    res = _index(["--input-dir", str(small_input), "--output-dir", str(out),
                  "--settings", str(tmp_path / "missing.yaml")], tmp_path, monkeypatch)
    assert res.exit_code == 2 and "missing.yaml" in res.output
    assert not out.exists()


def test_index_honours_kgloom_output_dir_and_the_settings_file(small_input, tmp_path,
                                                               monkeypatch):
    """`kgloom index` without --output-dir writes where KGLOOM_OUTPUT_DIR says (the UI
    always did), and a sectioned settings file names the input folder and index knobs."""
    out = tmp_path / "from-env"
    config = tmp_path / "kgloom.yaml"
    config.write_text(f"paths:\n  input_dir: {small_input}\n  output_dir: {tmp_path / 'x'}\n"
                      "index:\n  chunk_size: 150\n  chunk_overlap: 30\n")
    monkeypatch.setenv("KGLOOM_OUTPUT_DIR", str(out))  # the variable wins over the file
    res = _index(["--config", str(config)], tmp_path, monkeypatch)
    assert res.exit_code == 0, res.output
    assert (out / "index-summary.json").exists() and not (tmp_path / "x").exists()
    assert f"index written to {out}" in res.output
    printed = json.loads(res.stdout[res.stdout.index("{"):res.stdout.rindex("}") + 1])
    assert printed["rows"]["text_units"] > 1  # the file's chunk_size arrived
    # and `kgloom status` reads the same folders
    res = CliRunner().invoke(app, ["status"], env={"KGLOOM_CONFIG": str(config)})
    assert res.exit_code == 0, res.output
    assert "marley.txt" in res.output


def test_a_bad_key_in_the_settings_file_is_named(small_input, tmp_path, monkeypatch):
    config = tmp_path / "kgloom.yaml"
    config.write_text("retrieval:\n  hop_decy: 0.3\n")
    res = _index(["--input-dir", str(small_input), "--config", str(config)], tmp_path,
                 monkeypatch)
    assert res.exit_code == 2
    assert "retrieval.hop_decy" in res.output and "hop_decay" in res.output


@pytest.mark.parametrize("backend", ["igraph", "leidenalg"])
def test_the_communities_asset_runs_the_configured_backend(tmp_path, monkeypatch, backend):
    """index.community_backend reaches hierarchical_leiden through the resource."""
    from conftest import build_carol_tables

    from kgloom.assets import graph_assets
    from kgloom.core import schemas, storage

    seen = []
    real = graph_assets.hierarchical_leiden
    monkeypatch.setattr(graph_assets, "hierarchical_leiden",
                        lambda *a, **k: seen.append(k["backend"]) or real(*a, **k))
    t = build_carol_tables()
    out = tmp_path / "out"
    storage.write_table(t["entities"], out, schemas.ENTITIES)
    storage.write_table(t["relationships"], out, schemas.RELATIONSHIPS)
    result = dg.materialize([graph_assets.communities], resources=build_resources(
        str(tmp_path), str(out), fake_llm=True, community_backend=backend))
    assert result.success and seen == [backend]
    assert storage.read_table(out, schemas.COMMUNITIES).height > 0
