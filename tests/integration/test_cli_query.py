"""`kgloom query` / `kgloom ui` as a user meets them: checks before loading, messages that
list every valid value, warnings for ignored options, text-unit ids in the table, the UI's
options, and the numpy query embedder that spares a cold query the torch import."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from kgloom.query import modes

ROOT = Path(__file__).resolve().parents[2]
# what a checked-and-refused command must not have imported (seconds of loading)
HEAVY = ("numpy", "polars", "pyarrow", "lancedb", "duckdb", "torch", "sentence_transformers",
         "transformers", "dagster", "kgloom.query.retriever", "kgloom.query.searcher")


def run_cli_fresh(args: list[str], extra_env: dict | None = None) -> dict:
    """Run `kgloom ARGS` through typer's CliRunner in a fresh interpreter; return its exit
    code, output (stdout + stderr) and which of HEAVY (and torch) it imported."""
    code = (
        "import json, sys\n"
        "from typer.testing import CliRunner\n"
        "from kgloom.cli import app\n"
        f"r = CliRunner().invoke(app, {args!r})\n"
        f"heavy = {HEAVY!r}\n"
        "print(json.dumps({'code': r.exit_code, 'out': r.output,\n"
        "                  'loaded': [m for m in heavy if m in sys.modules]}))\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", **(extra_env or {})}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- the one registry of modes ------------------------------------------------------------
def test_the_registry_holds_every_mode_once_and_the_libraries_use_it():
    import importlib

    from kgloom.query import retriever
    from kgloom.query import searcher as search

    assert len(modes.MODES) == len(set(modes.MODES)) == 12
    assert set(modes.MODES) == set(modes.RETRIEVAL_MODES) | set(modes.SEARCH_MODES)
    assert search.SEARCH_MODES is modes.SEARCH_MODES
    assert set(retriever.MODES) | {"two_step"} == set(modes.RETRIEVAL_MODES)
    for mode in modes.RETRIEVAL_MODES:  # one module per retrieval mode, one entry point
        assert callable(importlib.import_module(f"kgloom.query.retrieval.{mode}").retrieve)
    assert modes.DEFAULT_MODE in modes.RETRIEVAL_MODES
    for option, users in modes.OPTION_MODES.items():
        assert users and set(users) <= set(modes.MODES), option


def test_retriever_and_searcher_messages_list_every_mode_of_their_kind():
    with pytest.raises(ValueError) as exc:
        modes.check_mode("telepathy", modes.RETRIEVAL_MODES)
    assert all(m in str(exc.value) for m in modes.RETRIEVAL_MODES)
    assert "'telepathy'" in str(exc.value)


# --- checks before loading ----------------------------------------------------------------
def test_a_bad_mode_is_refused_before_anything_loads_listing_all_modes(tmp_path):
    res = run_cli_fresh(["query", "Who is Scrooge?", "--output-dir", str(tmp_path),
                         "--mode", "telepathy"])
    assert res["code"] == 2
    assert res["loaded"] == []
    assert "'telepathy'" in res["out"]
    listed = res["out"].split("must be one of", 1)[1]
    assert all(m in listed for m in modes.MODES), listed


@pytest.mark.parametrize("args, names", [
    (["--top-k", "0"], ["top_k", "> 0"]),
    (["--depth", "-1", "--mode", "multihop"], ["depth", ">= 0"]),
    (["--lambda", "-0.5", "--mode", "fused"], ["lambda"]),
    (["--lambda", "inf", "--mode", "fused"], ["lambda must be finite"]),
    (["--oversample", "0", "--mode", "fused"], ["oversample"]),
    (["--damping", "1.5", "--mode", "ppr"], ["damping", "[0, 1)"]),
    (["--graph-backend", "neo4j"], ["graph_backend", *modes.GRAPH_BACKENDS]),
    (["--level", "-2", "--mode", "global"], ["level"]),
    (["--budget", "0", "--mode", "local"], ["budget"]),
])
def test_bad_option_values_are_refused_before_loading(tmp_path, args, names):
    res = run_cli_fresh(["query", "Who is Scrooge?", "--output-dir", str(tmp_path), *args])
    assert res["code"] == 2, res["out"]
    assert res["loaded"] == []
    assert all(n in res["out"] for n in names), res["out"]


def test_an_empty_question_is_refused_before_loading(tmp_path):
    res = run_cli_fresh(["query", "  ", "--output-dir", str(tmp_path)])
    assert res["code"] == 2 and res["loaded"] == [] and "question" in res["out"]


def test_a_question_of_bytes_that_are_not_utf8_is_refused_before_loading(tmp_path):
    # Python reads argv bytes that are not UTF-8 as lone surrogates (surrogateescape);
    # the embedder's tokenizer raised TypeError on them
    res = run_cli_fresh(["query", "who is \udcff?", "--output-dir", str(tmp_path)])
    assert res["code"] == 2 and res["loaded"] == [], res["out"]
    assert "question is not text" in res["out"] and "U+DCFF" in res["out"]
    assert "Traceback" not in res["out"]


def test_an_option_the_mode_ignores_is_named_in_a_warning(tmp_path):
    from kgloom.cli import app

    runner = CliRunner()
    missing = str(tmp_path / "no-index")
    res = runner.invoke(app, ["query", "Who is Scrooge?", "--output-dir", missing,
                              "--mode", "bridge", "--dynamic", "--lambda", "0.5"])
    assert res.exit_code == 2  # then the missing index is reported
    assert "warning: --dynamic/--static is ignored by --mode bridge" in res.output
    assert "(it applies to: global, auto)" in res.output
    assert "warning: --lambda is ignored by --mode bridge (it applies to: fused)" in res.output
    # an option the mode reads, or a default left alone, warns of nothing
    quiet = runner.invoke(app, ["query", "Who is Scrooge?", "--output-dir", missing,
                                "--mode", "fused", "--lambda", "0.5", "--depth", "2"])
    assert quiet.exit_code == 2 and "warning" not in quiet.output
    search = runner.invoke(app, ["query", "Who is Scrooge?", "--output-dir", missing,
                                 "--mode", "local", "--damping", "0.3", "--graph-backend",
                                 "memory"])
    assert "warning: --damping is ignored by --mode local" in search.output
    assert "warning: --graph-backend is ignored by --mode local" in search.output


def test_ignored_options_follow_the_registry():
    assert modes.ignored_options("ppr", ["damping", "depth", "top_k"]) == ["depth"]
    assert modes.ignored_options("global", ["dynamic", "level", "budget"]) == ["budget"]
    assert modes.ignored_options("auto", ["dynamic", "budget", "graph_backend"]) == [
        "graph_backend"]


# --- the retrieval table and a cold query with no torch ------------------------------------
@pytest.fixture(scope="module")
def small_index(tmp_path_factory):
    from kgloom.core.layout import LANCEDB_DIR
    from kgloom.embedding.sentence_embedder import Embedder
    from kgloom.publish.vectors import write_flat_snapshot
    from tests.unit.test_query import write_carol_index

    embedder = Embedder()
    out = write_carol_index(tmp_path_factory.mktemp("cli_index"), embedder)
    for table in ("text_units", "entities"):  # as sync_index writes them
        assert write_flat_snapshot(out / LANCEDB_DIR, table) is not None
    return out, embedder


@pytest.fixture(scope="module")
def lancedb_only_copy(small_index, tmp_path_factory):
    """The same index without its flat snapshots: every read goes through LanceDB."""
    out, _ = small_index
    copy = tmp_path_factory.mktemp("lancedb_only") / "index"
    shutil.copytree(out, copy)
    for snap in (copy / "lancedb").glob("*.flat.parquet"):
        snap.unlink()
    return copy


@pytest.mark.integration
def test_the_table_shows_each_text_units_id(small_index):
    from kgloom.cli import app
    from kgloom.query.retriever import Retriever

    out, embedder = small_index
    res = CliRunner().invoke(app, ["query", "Who is Tiny Tim's father?", "--output-dir",
                                   str(out), "--mode", "vector", "--top-k", "3"])
    assert res.exit_code == 0, res.output
    ids = Retriever(out, embedder).retrieve("Who is Tiny Tim's father?", "vector", top_k=3) \
        .text_units["id"].to_list()
    header = next(line for line in res.output.splitlines() if line.split()[:1] == ["rank"])
    assert "text unit" in header
    table_rows = [line for line in res.output.splitlines() if line.split()[:1] and
                  line.split()[0].isdigit()]  # a row starts with its rank
    assert len(table_rows) == len(ids) == 3
    for rank, unit_id in enumerate(ids, 1):
        assert unit_id[:12] in table_rows[rank - 1]  # the short id in the row of its rank
        assert f"  {rank}. {unit_id}" in res.output  # the whole id under the table


@pytest.mark.integration
def test_the_notice_that_nothing_is_relevant_comes_above_the_results(small_index):
    from kgloom.cli import app

    out, _ = small_index
    runner = CliRunner()
    args = ["--output-dir", str(out), "--mode", "bridge"]
    off = runner.invoke(app, ["query", "Where was the director of film Billy Elliot born?",
                              *args])
    assert off.exit_code == 0, off.output
    lines = off.stdout.splitlines()
    notice = next(i for i, line in enumerate(lines) if line.startswith("notice: "))
    header = next(i for i, line in enumerate(lines) if line.split()[:1] == ["rank"])
    assert notice < header and "Nothing in this index looks relevant" in lines[notice]
    on = runner.invoke(app, ["query", "Who is Tiny Tim's father?", *args])
    assert on.exit_code == 0 and "notice: " not in on.output
    # --json: the whole result on stdout, the notice in it and on stderr for the reader
    js = runner.invoke(app, ["query", "Where was the director of film Billy Elliot born?",
                             *args, "--json"])
    got = json.loads(js.stdout)
    assert got["info"]["low_relevance"] is True
    assert f"notice: {got['info']['notice']}" in js.stderr


@pytest.mark.integration
@pytest.mark.parametrize("mode", ["multihop", "fused"])
def test_a_cold_retrieval_query_loads_neither_torch_nor_lancedb_and_ranks_the_same(
        small_index, lancedb_only_copy, mode):
    """The cold CLI (numpy embedder, flat snapshots) against the torch embedder reading
    LanceDB: the same units in the same order."""
    from kgloom.query.retriever import Retriever

    out, embedder = small_index
    question = "Who is Tiny Tim's father?"
    res = run_cli_fresh(["query", question, "--output-dir", str(out), "--mode", mode,
                         "--json"])
    assert res["code"] == 0, res["out"]
    assert not {"torch", "sentence_transformers", "transformers", "dagster", "lancedb",
                "kgloom.query.searcher"} & set(res["loaded"])
    got = json.loads(res["out"][res["out"].index("{"):])
    reference = Retriever(lancedb_only_copy, embedder)
    assert not reference.index.units.from_snapshot  # the reference really reads LanceDB
    want = reference.retrieve(question, mode=mode, top_k=5).text_units
    assert [u["id"] for u in got["text_units"]] == want["id"].to_list()
    assert np.allclose([u["similarity"] for u in got["text_units"]],
                       want["similarity"].to_list(), atol=1e-4)
    assert np.allclose([u["score"] for u in got["text_units"]], want["score"].to_list(),
                       atol=1e-4)
    assert got["info"]["ann"] and set(got["info"]["ann"].values()) == {"flat"}


@pytest.mark.integration
def test_a_stale_or_foreign_snapshot_is_not_used(small_index, tmp_path):
    import polars as pl

    from kgloom.core.layout import LANCEDB_DIR
    from kgloom.embedding.store import VECTOR_TABLES, flat_snapshot_path, read_flat_snapshot
    from kgloom.query.retriever import Retriever

    out, embedder = small_index
    copy = tmp_path / "index"
    shutil.copytree(out, copy)
    db = copy / LANCEDB_DIR
    units = pl.read_parquet(copy / "text_units.parquet")
    expr = VECTOR_TABLES["text_units"][1]
    good = read_flat_snapshot(db, "text_units", units, expr, embedder.key)
    assert good is not None and good.shape == (units.height, 384)
    assert np.allclose(good, Retriever(copy, embedder).index.units.vectors)
    assert read_flat_snapshot(db, "text_units", units, expr, "another|256|192") is None
    assert read_flat_snapshot(db, "text_units", units.head(2), expr, embedder.key) is None
    path = flat_snapshot_path(db, "text_units")
    snap = pl.read_parquet(path)
    snap.with_columns(pl.when(pl.int_range(pl.len()) == 0).then(pl.lit("stale"))
                      .otherwise(pl.col("embedding_key")).alias("embedding_key")
                      ).write_parquet(path)
    assert read_flat_snapshot(db, "text_units", units, expr, embedder.key) is None
    r = Retriever(copy, embedder)  # falls back to LanceDB, same vectors
    assert not r.index.units.from_snapshot and np.allclose(r.index.units.vectors, good)


# --- the numpy query embedder ---------------------------------------------------------------
def test_fast_embedder_vectors_agree_with_sentence_transformers(embedder):
    from kgloom.embedding import query_embedder
    from kgloom.embedding.fast import FastEmbedder

    fast = query_embedder()
    assert isinstance(fast, FastEmbedder)
    assert (fast.name, fast.key, fast.dim) == (embedder.name, embedder.key, embedder.dim)
    book = (ROOT / "data" / "input" / "a-christmas-carol.txt").read_text(encoding="utf-8")
    texts = ["Who is Tiny Tim's father?", "", "Scrooge", "naïve café — «Ebenezer»!",
             book[30000:33000]]  # ~600 tokens: several windows
    assert len(fast.windows_for(texts[-1])) > 1
    assert fast.windows_for(texts[-1]) == embedder.windows_for(texts[-1])
    a, b = fast.embed(texts), embedder.embed(texts)
    assert a.shape == b.shape == (len(texts), 384) and a.dtype == np.float32
    cosines = (a * b).sum(axis=1)
    assert cosines.min() > 0.99, cosines  # the bound: within cosine 0.01
    assert np.allclose(a, b, atol=1e-4)  # in fact equal to float32 rounding


def test_query_embedder_falls_back_for_a_folder_of_another_kind(tmp_path):
    from kgloom.embedding import default_embedder_path
    from kgloom.embedding.fast import FastEmbedder, fast_path_reason

    folder = tmp_path / "model"
    shutil.copytree(default_embedder_path(), folder)
    assert fast_path_reason(folder) is None
    pooling = folder / "1_Pooling" / "config.json"
    cfg = json.loads(pooling.read_text())
    cfg.update(pooling_mode_mean_tokens=False, pooling_mode_cls_token=True)
    pooling.write_text(json.dumps(cfg))
    assert "pooling" in fast_path_reason(folder)
    with pytest.raises(ValueError, match="pooling"):
        FastEmbedder(folder)


@pytest.mark.integration
def test_a_query_cache_that_cannot_be_opened_is_named(small_index, tmp_path):
    """A folder, or a file that is no SQLite database, as --cache-path: a message naming
    it and exit 2 (it was sqlite3's OperationalError and a traceback)."""
    from kgloom.cli import app

    out, _ = small_index
    not_a_db = tmp_path / "notes.txt"
    not_a_db.write_text("not a database\n" * 100)
    for cache in (tmp_path, not_a_db):
        res = CliRunner().invoke(app, ["query", "Who is Tiny Tim's father?", "--output-dir",
                                       str(out), "--mode", "direct", "--fake-llm",
                                       "--cache-path", str(cache)])
        assert res.exit_code == 2, res.output
        assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
        assert f"the query cache {cache}" in res.output and "--cache-path" in res.output


# --- the settings reach the query ---------------------------------------------------------
def test_search_opens_the_model_the_settings_name(small_index, tmp_path):
    """`kgloom query` (search; direct, as this index has no communities) opens the llm
    section's model, as `kgloom index` does: the GGUF of KGLOOM_MODEL_PATH (here
    missing: refused, named), or the model servers."""
    from kgloom.cli import app
    from kgloom.llm.testing import FakeChatServer

    out, _ = small_index
    args = ["query", "Who is Tiny Tim's father?", "--output-dir", str(out), "--mode", "direct",
            "--json", "--cache-path", str(tmp_path / "q.sqlite")]
    res = CliRunner().invoke(app, args,
                             env={"KGLOOM_MODEL_PATH": str(tmp_path / "no-such.gguf")})
    assert res.exit_code == 2 and "no-such.gguf" in res.output, res.output
    with FakeChatServer(model_id="served-model") as server:
        res = CliRunner().invoke(app, [*args, "--set", f"llm.urls={server.url}"])
        assert res.exit_code == 0, res.output
        assert server.requests > 0  # the answer came from the server
    got = json.loads(res.stdout[res.stdout.index("{"):])
    assert got["answer"] is not None


def test_retrieval_options_come_from_the_settings_unless_given(small_index, tmp_path):
    from kgloom.cli import app

    out, _ = small_index
    args = ["query", "Who is Tiny Tim's father?", "--output-dir", str(out), "--mode",
            "vector", "--json"]
    res = CliRunner().invoke(app, args, env={"KGLOOM_RETRIEVAL__TOP_K": "2"})
    assert res.exit_code == 0, res.output
    assert len(json.loads(res.stdout[res.stdout.index("{"):])["text_units"]) == 2
    config = tmp_path / "kgloom.yaml"
    config.write_text("retrieval:\n  top_k: 4\n")
    res = CliRunner().invoke(app, [*args, "--config", str(config)])
    assert len(json.loads(res.stdout[res.stdout.index("{"):])["text_units"]) == 4
    res = CliRunner().invoke(app, [*args, "--config", str(config), "--top-k", "3"])
    assert len(json.loads(res.stdout[res.stdout.index("{"):])["text_units"]) == 3
    config.write_text("retrieval:\n  top_k: 0\n")  # checked as the flag is
    res = CliRunner().invoke(app, [*args, "--config", str(config)])
    assert res.exit_code == 2 and "top_k" in res.output
    res = CliRunner().invoke(app, [*args, "--set", "retrieval.hop_decy=0.1"])
    assert res.exit_code == 2 and "retrieval.hop_decy" in res.output


# --- kgloom ui ------------------------------------------------------------------------------
def test_ui_passes_host_port_and_folders_through(monkeypatch, tmp_path):
    import dagster as dg

    import kgloom.cli.serve_commands as cli
    from kgloom.pipelines.input_files import INPUT_FILES

    calls = []
    monkeypatch.setattr(cli.subprocess, "call",
                        lambda argv, env=None: calls.append((argv, env)) or 0)
    monkeypatch.setenv("DAGSTER_HOME", "")  # unset for the command; restored afterwards
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rel" / "in").mkdir(parents=True)
    (tmp_path / "rel" / "in" / "a.txt").write_text("Ada Lovelace met Charles Babbage.\n")
    res = CliRunner().invoke(cli.app, ["ui", "--host", "0.0.0.0", "--port", "3111",
                                       "--output-dir", str(tmp_path / "out"),
                                       "--input-dir", "rel/in"])
    assert res.exit_code == 0, res.output
    (argv, env), = calls
    assert Path(argv[0]).name == "dg" and argv[1:2] == ["dev"]  # Dagster's own entry
    assert argv[argv.index("-h") + 1] == "0.0.0.0" and argv[argv.index("-p") + 1] == "3111"
    assert env["KGLOOM_OUTPUT_DIR"] == str((tmp_path / "out").resolve())
    assert env["KGLOOM_INPUT_DIR"] == str((tmp_path / "rel" / "in").resolve())
    # the index's own instance, with the input file registered for "Materialize all"
    home = (tmp_path / "out" / ".dagster_home").resolve()
    assert env["DAGSTER_HOME"] == str(home)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.get_dynamic_partitions(INPUT_FILES) == ["a.txt"]
    assert "no login" in res.output  # listening beyond this machine is said
    calls.clear()
    monkeypatch.setenv("DAGSTER_HOME", "")
    local = CliRunner().invoke(cli.app, ["ui", "--output-dir", "out2", "--input-dir", "none"])
    (argv, env), = calls
    assert argv[argv.index("-h") + 1] == "127.0.0.1" and "no login" not in local.output
    assert "does not exist" in local.output  # no input folder yet: said, the UI still opens
    assert env["DAGSTER_HOME"] == str((tmp_path / "out2" / ".dagster_home").resolve())


def test_an_output_folder_that_is_a_file_is_a_clear_error(monkeypatch, tmp_path):
    import kgloom.cli.main as cli

    monkeypatch.setenv("DAGSTER_HOME", "")  # the index's own instance; restored afterwards
    (tmp_path / "in").mkdir()
    (tmp_path / "a-file").write_text("not a folder\n")
    for command in ("status", "partitions", "ui"):
        res = CliRunner().invoke(cli.app, [command, "--input-dir", str(tmp_path / "in"),
                                           "--output-dir", str(tmp_path / "a-file")])
        assert res.exit_code == 2, (command, res.output)
        assert "no Dagster instance" in res.output and "Traceback" not in res.output
    assert (tmp_path / "a-file").read_text() == "not a folder\n"  # nothing lost


def test_the_cli_doc_lists_every_mode_and_which_modes_read_each_option():
    import typer.main

    from kgloom.cli import app

    doc = (ROOT / "docs" / "query-cli.md").read_text(encoding="utf-8")
    for mode in modes.MODES:
        assert f"`{mode}`" in doc, mode
    command = typer.main.get_command(app).commands["query"]
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ")[1].strip(" |")
            for line in doc.splitlines() if line.startswith("| `--")}
    for name, users in modes.OPTION_MODES.items():
        param = next(p for p in command.params if p.name == name)
        flag = param.opts[0]  # written `--dynamic/--static` or `--fake-llm` in the doc
        row = next((v for k, v in rows.items() if re.search(f"`{flag}[`/]", k)), None)
        assert row is not None, f"docs/query-cli.md has no row for {flag}"
        named = {m for m in modes.MODES if f"`{m}`" in row}
        if row.startswith("every retrieval"):
            named = set(modes.RETRIEVAL_MODES)
        elif row.startswith("every search"):
            named = set(modes.SEARCH_MODES)
        assert named == set(users), (flag, row)
