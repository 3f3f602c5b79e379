"""Published builds (kgloom.core.builds): the marker every publish writes last, readers that
see one whole build (or refuse clearly) while an index is republished, half-written and
damaged indexes refused naming the file, and the partial failures of issue 29 (a full
disk, a truncated table, an edgeless graph, a question too long for the model).

The index is the conftest's Christmas Carol graph, published as the pipeline does it
(the tables, then ``sync_index``, then ``publish_build``), in two variants whose text,
descriptions and entity sets differ, so an answer mixing two builds shows."""

from __future__ import annotations

import errno
import itertools
import json
import os
import shutil
import threading
import time
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
from conftest import build_carol_tables, carol_relationship_id
from conftest import carol_entity_id as eid
from conftest import carol_unit_id as uid
from typer.testing import CliRunner

from kgloom.core import builds, schemas, storage
from kgloom.core.builds import (
    IndexChangedError,
    IndexFilesMissingError,
    IndexInconsistentError,
    publish_build,
    read_marker,
)
from kgloom.core.ids import content_id
from kgloom.core.layout import LANCEDB_DIR
from kgloom.publish import tables
from kgloom.publish.vectors import sync_index
from kgloom.query.retriever import Retriever
from kgloom.query.searcher import Searcher

QUESTION = "How is Bob Cratchit related to Tiny Tim?"


# --- the two variants of the index ------------------------------------------------------
def variant_tables(variant: int) -> dict[str, pl.DataFrame]:
    """The published tables of variant 0 (the conftest Carol graph) or 1 (every text
    unit and description revised, and one more entity, MRS CRATCHIT, with an edge)."""
    t = build_carol_tables()
    units, ents, rels, comms = t["text_units"], t["entities"], t["relationships"], t["communities"]
    if variant:
        units = units.with_columns(pl.col("text") + " (revised edition)")
        ents = ents.with_columns(pl.col("description") + " Revised.")
        extra = ents.filter(pl.col("title") == "TINY TIM").with_columns(
            id=pl.lit(eid("MRS CRATCHIT")), title=pl.lit("MRS CRATCHIT"),
            human_readable_id=pl.lit(ents.height, dtype=pl.Int64),
            description=pl.lit("Mrs Cratchit, Bob's wife, a character. Revised."))
        ents = pl.concat([ents, extra])
        rels = pl.concat([rels, rels.head(1).with_columns(
            id=pl.lit(carol_relationship_id("BOB CRATCHIT", "MRS CRATCHIT")),
            source=pl.lit("BOB CRATCHIT"),
            target=pl.lit("MRS CRATCHIT"), source_id=pl.lit(eid("BOB CRATCHIT")),
            target_id=pl.lit(eid("MRS CRATCHIT")), human_readable_id=pl.lit(rels.height,
                                                                            dtype=pl.Int64),
            description=pl.lit("Mrs Cratchit is Bob Cratchit's wife"),
            text_unit_ids=pl.lit([uid("u3")]))])
        comms = comms.with_columns(entity_ids=pl.when(pl.col("community").is_in([1, 4]))
                                   .then(pl.col("entity_ids").list.concat(
                                       pl.lit([eid("MRS CRATCHIT")])))
                                   .otherwise(pl.col("entity_ids")))
    nodes, edges = tables.build_graph_tables(ents, rels, comms)
    units = tables.denormalize_text_units(units, ents, rels, comms)
    docs = schemas.conform(pl.DataFrame({
        "id": [content_id("A Christmas Carol")], "human_readable_id": [0],
        "title": ["A Christmas Carol"], "text": [" ".join(units["text"])],
        "text_unit_ids": [units["id"].to_list()], "creation_date": [""], "raw_data": [None],
        "source": ["carol.txt"], "encoding": ["utf-8"], "encoding_confidence": [1.0],
        "boilerplate_cut": [None]}), schemas.DOCUMENTS_SCHEMA)
    reports = pl.DataFrame([
        {"id": f"r{r['community']}", "human_readable_id": r["community"],
         "community": r["community"], "level": r["level"], "parent": r["parent"],
         "children": r["children"], "title": f"Report {r['community']}",
         "summary": f"Summary of community {r['community']}, variant {variant}.",
         "full_content": f"# Report {r['community']}\n\nMembers: {len(r['entity_ids'])}, "
                         f"variant {variant}.",
         "rank": float(r["community"]), "rating_explanation": "", "findings": [],
         "full_content_json": "", "period": "", "size": len(r["entity_ids"]),
         "report_key": f"key{r['community']}-{variant}"}
        for r in comms.iter_rows(named=True)], schema=schemas.COMMUNITY_REPORTS_SCHEMA)
    return {schemas.TEXT_UNITS: units, schemas.ENTITIES: ents, schemas.RELATIONSHIPS: rels,
            schemas.COMMUNITIES: comms, schemas.COMMUNITY_REPORTS: reports,
            schemas.GRAPH_NODES: nodes, schemas.GRAPH_EDGES: edges, schemas.DOCUMENTS: docs}


def publish_variant(out: Path, embedder, variant: int) -> dict:
    """Publish ``variant`` into ``out`` as a run does: every table written atomically,
    the LanceDB tables synced (vector_index's ``sync_index``), then the marker last
    (index_summary's ``publish_build``). Returns the marker."""
    for name, df in variant_tables(variant).items():
        storage.write_table(df, out, name)
    sync_index(out, embedder)
    return publish_build(out)


@pytest.fixture(scope="module")
def published(tmp_path_factory, embedder) -> Path:
    out = tmp_path_factory.mktemp("published") / "out"
    publish_variant(out, embedder, 0)
    return out


def _copy(src: Path, dst: Path) -> Path:
    return Path(shutil.copytree(src, dst))


def _answer(r: Retriever) -> tuple:
    """What a multihop retrieval returns, comparably: its build, units and their text."""
    res = r.retrieve(QUESTION, "multihop", top_k=3)
    return (res.info["build_id"], tuple(res.text_units["id"]), tuple(res.text_units["text"]),
            tuple(sorted(res.entities["entity_id"])))


# --- the marker -------------------------------------------------------------------------
def test_publish_writes_the_marker_last_with_tables_and_lancedb_versions(published):
    marker = read_marker(published)
    assert set(marker["tables"]) == {schemas.TEXT_UNITS, schemas.ENTITIES,
                                     schemas.RELATIONSHIPS, schemas.COMMUNITIES,
                                     schemas.COMMUNITY_REPORTS, schemas.GRAPH_NODES,
                                     schemas.GRAPH_EDGES, schemas.DOCUMENTS}
    assert set(marker["lancedb"]) == {"text_units", "entities", "community_reports"}
    assert marker["lancedb"]["entities"]["rows"] == 7
    snap = published / marker["snapshot"]
    for name, rec in marker["tables"].items():
        linked, live = snap / f"{name}.parquet", published / f"{name}.parquet"
        assert linked.stat().st_size == rec["bytes"] == live.stat().st_size
        assert rec["digest"] == builds._digest(live)
    assert "embedder.json" in marker["files"]
    # the marker is written after every table and link of its build
    assert (published / builds.MARKER_FILE).stat().st_mtime_ns >= max(
        p.stat().st_mtime_ns for p in snap.iterdir())


def test_every_result_names_its_build(published, embedder, tmp_path):
    build_id = read_marker(published)["build_id"]
    r = Retriever(published, embedder)
    assert r.build.build_id == build_id
    for mode in ("vector", "one_hop", "multihop", "fused", "ppr", "hybrid", "bridge"):
        assert r.retrieve(QUESTION, mode=mode, top_k=2).info["build_id"] == build_id
    s = Searcher(published, embedder=embedder, fake_llm=True, cache_path=tmp_path / "q.sqlite")
    for mode in ("local", "global", "direct", "auto"):
        assert s.search(QUESTION, mode=mode).info["build_id"] == build_id


def test_cli_json_names_the_build(published, tmp_path):
    from kgloom.cli import app

    build_id = read_marker(published)["build_id"]
    for mode in ("multihop", "local"):
        res = CliRunner().invoke(app, ["query", QUESTION, "--output-dir", str(published),
                                       "--mode", mode, "--json", "--fake-llm",
                                       "--cache-path", str(tmp_path / "q.sqlite")])
        assert res.exit_code == 0, res.output
        assert json.loads(res.stdout)["info"]["build_id"] == build_id
        res = CliRunner().invoke(app, ["query", QUESTION, "--output-dir", str(published),
                                       "--mode", mode, "--fake-llm",
                                       "--cache-path", str(tmp_path / "q.sqlite")])
        assert res.exit_code == 0 and f"build {build_id}" in res.stdout, res.output


# --- one build per reader ---------------------------------------------------------------
def test_an_open_handle_keeps_reading_its_build_while_a_new_one_is_published(
        published, embedder, tmp_path):
    out = _copy(published, tmp_path / "out")
    ref0 = _answer(Retriever(out, embedder))
    old = Retriever(out, embedder)  # opened, graph not loaded yet
    marker1 = publish_variant(out, embedder, 1)
    # its graph is loaded after the new build replaced every table: still build 0's
    assert _answer(old) == ref0
    new = _answer(Retriever(out, embedder))
    assert new[0] == marker1["build_id"] and new[1:] != ref0[1:]
    assert any("revised edition" in t for t in new[2])


def test_a_lancedb_table_swapped_for_another_builds_is_refused(published, embedder, tmp_path):
    """The issue's reproduction: a finished index whose lancedb/entities.lance is the
    previous build's; the old code crashed with KeyError."""
    prev = tmp_path / "prev"
    publish_variant(prev, embedder, 1)
    out = _copy(published, tmp_path / "out")
    target = out / LANCEDB_DIR / "entities.lance"
    shutil.rmtree(target)
    shutil.copytree(prev / LANCEDB_DIR / "entities.lance", target)
    # the flat snapshots (lancedb/*.flat.parquet) hold this build's vectors, checked row
    # by row against its parquet: a reader of them never opens the swapped folder
    assert _answer(Retriever(out, embedder)) == _answer(Retriever(published, embedder))
    for snap in (out / LANCEDB_DIR).glob("*.flat.parquet"):
        snap.unlink()  # now the vectors come from LanceDB, which must refuse the swap
    r = Retriever(out, embedder)  # text units are fine; the graph modes read entities
    with pytest.raises(IndexInconsistentError, match=r"entities\.lance.*another build"):
        r.retrieve(QUESTION, "multihop")
    s = Searcher(out, embedder=embedder, fake_llm=True, cache_path=tmp_path / "q.sqlite")
    with pytest.raises(IndexInconsistentError, match=r"entities\.lance"):
        s.search(QUESTION, mode="local")
    # without the marker (an older kgloom's folder) the mix is caught too, not a KeyError
    (out / builds.MARKER_FILE).unlink()
    with pytest.raises(IndexInconsistentError, match="half-written index: the LanceDB "
                                                     "entities table"):
        Retriever(out, embedder).retrieve(QUESTION, "multihop")


def test_a_parquet_table_swapped_for_another_builds_does_not_reach_the_reader(
        published, embedder, tmp_path):
    prev = tmp_path / "prev"
    publish_variant(prev, embedder, 1)
    out = _copy(published, tmp_path / "out")
    ref = _answer(Retriever(out, embedder))
    for name in (schemas.ENTITIES, schemas.GRAPH_NODES):
        shutil.copyfile(prev / f"{name}.parquet", out / f"{name}.parquet")
    assert _answer(Retriever(out, embedder)) == ref  # the build's own tables, consistent


def test_a_pruned_build_gives_a_clear_error_and_a_new_handle_opens_the_new_build(
        published, embedder, tmp_path, monkeypatch):
    out = _copy(published, tmp_path / "out")
    old = Retriever(out, embedder)
    monkeypatch.setattr(builds, "KEEP_SUPERSEDED_SECONDS", 0.0)
    for variant in (1, 0, 1):
        last = publish_variant(out, embedder, variant)
    assert len(list((out / builds.BUILDS_DIR).iterdir())) == builds.KEEP_BUILDS
    with pytest.raises(IndexChangedError, match=r"republished.*open the index again"):
        old.retrieve(QUESTION, "multihop")
    assert _answer(Retriever(out, embedder))[0] == last["build_id"]


def test_a_handle_opening_while_the_build_changes_opens_the_new_one(
        published, embedder, tmp_path, monkeypatch):
    """The marker changes between the handle's reads (first try): it retries."""
    out = _copy(published, tmp_path / "out")
    original = builds.Build.read
    calls = {"n": 0}

    def republish_on_first_read(self, name, columns=None):
        calls["n"] += 1
        if calls["n"] == 1:  # a publish lands mid-open and prunes the build read so far
            shutil.rmtree(self.folder)
            publish_variant(out, embedder, 1)
        return original(self, name, columns)

    monkeypatch.setattr(builds.Build, "read", republish_on_first_read)
    r = Retriever(out, embedder)
    assert r.build.build_id == read_marker(out)["build_id"]
    assert any("revised edition" in t for t in r.index.units.texts)


@pytest.mark.integration
@pytest.mark.slow
def test_queries_in_a_loop_while_the_index_republishes_see_one_build_each(
        published, embedder, tmp_path):
    """Issue 29's case: readers loop for over a minute while the publish step (tables,
    LanceDB sync, marker) runs again and again, alternating the two variants. Every
    answer names a build and equals the answer of that build's variant; no crash."""
    from kgloom.embedding.sentence_embedder import Embedder

    out = _copy(published, tmp_path / "out")
    expected = {}
    for variant in (0, 1):  # each variant's answer, from an index of it alone
        ref = tmp_path / f"ref{variant}"
        publish_variant(ref, embedder, variant)
        expected[variant] = _answer(Retriever(ref, embedder))[1:]
    variant_of = {read_marker(out)["build_id"]: 0}
    writer_embedder = Embedder()  # the writer's own (a model is not shared across threads)
    stop, errors = threading.Event(), []

    def republish() -> None:
        try:
            for variant in itertools.cycle((1, 0)):
                if stop.is_set():
                    return
                marker = publish_variant(out, writer_embedder, variant)
                variant_of[marker["build_id"]] = variant
        except Exception as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    writer = threading.Thread(target=republish, daemon=True)
    writer.start()
    answers, searches = [], []
    deadline = time.monotonic() + 65
    try:
        while time.monotonic() < deadline and writer.is_alive():
            answers.append(_answer(Retriever(out, embedder)))
            s = Searcher(out, embedder=embedder, fake_llm=True,
                         cache_path=tmp_path / "q.sqlite")
            res = s.search(QUESTION, mode="local", answer=False)
            searches.append((res.info["build_id"], tuple(x.source_id for x in res.context.items
                                                         if x.kind == "entities")))
    finally:
        stop.set()
        writer.join(timeout=120)
    assert not errors, errors
    builds_seen = {a[0] for a in answers}
    assert len(variant_of) > 3 and len(builds_seen) > 1, (len(variant_of), len(builds_seen))
    for build_id, *rest in answers:
        assert tuple(rest) == expected[variant_of[build_id]], build_id
    mrs = eid("MRS CRATCHIT")
    for build_id, entity_ids in searches:
        assert (mrs in entity_ids) <= (variant_of[build_id] == 1), build_id
    print(f"republish loop: {len(variant_of)} builds published, {len(answers)} retrievals "
          f"and {len(searches)} local searches from {len(builds_seen)} builds, 0 errors")


# --- half-written and damaged indexes ----------------------------------------------------
@pytest.mark.parametrize("table", [schemas.ENTITIES, schemas.RELATIONSHIPS,
                                   schemas.COMMUNITIES, schemas.COMMUNITY_REPORTS])
@pytest.mark.parametrize("mode", ["local", "global"])
def test_search_refuses_an_index_missing_a_table_naming_it(published, embedder, tmp_path,
                                                           table, mode):
    out = _copy(published, tmp_path / "out")
    (out / f"{table}.parquet").unlink()
    s = Searcher(out, embedder=embedder, fake_llm=True, cache_path=tmp_path / "q.sqlite")
    with pytest.raises(IndexFilesMissingError, match=f"{table}.parquet"):
        s.search(QUESTION, mode=mode)
    from kgloom.cli import app

    res = CliRunner().invoke(app, ["query", QUESTION, "--output-dir", str(out), "--mode",
                                   mode, "--fake-llm", "--cache-path",
                                   str(tmp_path / "q.sqlite")])
    assert res.exit_code == 2 and f"{table}.parquet" in res.output, res.output


def test_an_unmarked_half_written_index_is_refused_too(published, embedder, tmp_path):
    """A folder without a marker (an older kgloom's): a graph index needs its graph tables."""
    out = _copy(published, tmp_path / "out")
    (out / builds.MARKER_FILE).unlink()
    (out / f"{schemas.RELATIONSHIPS}.parquet").unlink()
    s = Searcher(out, embedder=embedder, fake_llm=True, cache_path=tmp_path / "q.sqlite")
    with pytest.raises(IndexFilesMissingError, match=r"relationships\.parquet"):
        s.search(QUESTION, mode="local")
    assert s.search(QUESTION, mode="direct").info["build_id"] is None


def test_a_truncated_table_is_named(published, embedder, tmp_path):
    out = _copy(published, tmp_path / "out")
    for path in (out / f"{schemas.ENTITIES}.parquet",  # cut in place, as a full disk does
                 out / read_marker(out)["snapshot"] / f"{schemas.ENTITIES}.parquet"):
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    with pytest.raises(IndexInconsistentError, match=r"entities\.parquet has \d+ bytes"):
        Retriever(out, embedder).retrieve(QUESTION, "multihop")
    (out / builds.MARKER_FILE).unlink()  # unmarked: the reader itself names the file
    with pytest.raises(storage.UnreadableTableError, match=r"entities\.parquet.*truncated"):
        Retriever(out, embedder).retrieve(QUESTION, "multihop")
    with pytest.raises(storage.UnreadableTableError, match=r"entities\.parquet"):
        storage.read_table(out, schemas.ENTITIES)


# --- a full disk ----------------------------------------------------------------------
def test_a_full_disk_names_the_folder_and_keeps_the_published_table(tmp_path, monkeypatch):
    df = pl.DataFrame({"id": ["a", "b"], "text": ["x" * 1000, "y" * 1000]})
    storage.write_table(df, tmp_path, "t")
    before = (tmp_path / "t.parquet").read_bytes()

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pl.DataFrame, "write_parquet", full)
    with pytest.raises(storage.DiskFullError, match=rf"{tmp_path}.*free: .*needed about") as e:
        storage.write_table(df.head(1), tmp_path, "t")
    assert e.value.errno == errno.ENOSPC
    assert (tmp_path / "t.parquet").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["t.parquet"]  # no temporary file left


def test_a_writer_that_truncates_silently_never_publishes(tmp_path, monkeypatch):
    """A writer that hit a full disk without raising leaves a truncated file (read later
    as "Invalid thrift: transport error"): it is checked before it replaces the table."""
    df = pl.DataFrame({"id": ["a", "b"]})
    storage.write_table(df, tmp_path, "t")
    real = pl.DataFrame.write_parquet

    def short(self, file, *args, **kwargs):
        real(self, file, *args, **kwargs)
        Path(file).write_bytes(Path(file).read_bytes()[:20])

    monkeypatch.setattr(pl.DataFrame, "write_parquet", short)
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage._replace(free=0))
    with pytest.raises(storage.DiskFullError, match=str(tmp_path)):
        storage.write_table(df.head(1), tmp_path, "t")
    assert storage.read_table(tmp_path, "t").equals(df)


@pytest.mark.integration
def test_a_full_disk_in_a_stage_fails_the_run_naming_the_folder(tmp_path, monkeypatch):
    """The corpus step on a full disk: the run fails with the folder named."""
    from kgloom.cli.runner import index_folder
    from kgloom.definitions import build_resources

    inp = tmp_path / "input"
    inp.mkdir()
    (inp / "a.txt").write_text("Ebenezer Scrooge met Bob Cratchit in London. " * 5)
    out = tmp_path / "out"
    real = pl.DataFrame.write_parquet

    def full_in_stages(self, file, *args, **kwargs):
        if f"{os.sep}stages{os.sep}" in str(file) and "partitions" not in str(file):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, file, *args, **kwargs)

    monkeypatch.setattr(pl.DataFrame, "write_parquet", full_in_stages)
    with dg.instance_for_test() as instance:
        _, report = index_folder(build_resources(str(inp), str(out), fake_llm=True), instance)
        assert not report.success
        messages = []
        for run in instance.get_runs():
            for e in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_FAILURE):
                error = e.dagster_event.event_specific_data.error
                while error is not None:  # the step error, caused by kgloom's
                    messages.append(error.message)
                    error = error.cause
    assert any("no space left on the disk of" in m and str(out / "stages") in m
               for m in messages), messages
    assert any("no space left on the disk of" in e and str(out / "stages") in e
               for e in report.errors), report.errors  # what `kgloom index` prints
    assert not (out / builds.MARKER_FILE).exists()  # nothing half-built was published


# --- a question too long for the model ------------------------------------------------
def test_a_question_too_long_for_the_model_says_so(published, embedder, tmp_path):
    from test_search import ScriptedBackend, _llm

    backend = ScriptedBackend(lambda m, s: {"answer": "a", "citations": []}, n_ctx=4096)
    s = Searcher(published, llm=_llm(backend, tmp_path), embedder=embedder)
    long_question = "Who is Tiny Tim's father? " * 4000  # ~100 KB
    for mode in ("local", "direct", "global"):
        with pytest.raises(ValueError, match="question is too long") as e:
            s.search(long_question, mode=mode)
        assert "lower the budget" not in str(e.value)
    assert backend.calls == []
    assert s.search("Who is Tiny Tim's father?", mode="local", budget=300).answer


# --- an edgeless graph ------------------------------------------------------------------
def test_an_edgeless_graph_gets_a_warn_check_and_a_cli_warning(tmp_path):
    from kgloom.assets.graph_assets import communities
    from kgloom.cli.runner import _warnings
    from kgloom.definitions import build_resources
    from kgloom.graph.communities import community_structure

    t = build_carol_tables()
    no_edges = t["relationships"].head(0)
    ok, meta, _ = community_structure(t["entities"], t["relationships"], t["communities"])
    assert ok and meta["singleton_communities"] == 0
    out = tmp_path / "out"
    storage.write_table(t["entities"], out, schemas.ENTITIES)
    storage.write_table(no_edges, out, schemas.RELATIONSHIPS)
    result = dg.materialize([communities], resources=build_resources(
        str(tmp_path), str(out), fake_llm=True))
    (check,) = result.get_asset_check_evaluations()
    assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
    assert check.metadata["singleton_communities"].value == 7
    (line,) = _warnings(result)  # the line the CLI prints between WARNING bars
    assert "communities_group_entities" in line and "no relationship" in line


# --- through the pipeline ----------------------------------------------------------------
@pytest.mark.integration
def test_kgloom_index_publishes_builds_and_a_swapped_lancedb_table_is_refused(tmp_path):
    """The issue's reproduction on a real (fake-LLM) index: `kgloom index` writes the
    marker; after `--force` a new build; the previous build's lancedb/entities.lance put
    back in place is refused (no KeyError); a deleted table is named."""
    from kgloom.cli import app
    from kgloom.cli.runner import index_folder
    from kgloom.definitions import build_resources

    inp, out = tmp_path / "input", tmp_path / "out"
    inp.mkdir()
    book = Path(__file__).resolve().parents[2] / "data" / "input" / "a-christmas-carol.txt"
    text = book.read_text(encoding="utf-8")
    start = text.index("Marley was dead")
    (inp / "stave1.txt").write_text(text[start:start + 2500], encoding="utf-8")
    with dg.instance_for_test() as instance:
        resources = build_resources(str(inp), str(out), fake_llm=True)
        _, first = index_folder(resources, instance)
        assert first.success
        marker1 = read_marker(out)
        saved = tmp_path / "entities.lance"
        shutil.copytree(out / LANCEDB_DIR / "entities.lance", saved)
        (inp / "stave1.txt").write_text(text[start + 2500:start + 5000], encoding="utf-8")
        _, second = index_folder(resources, instance, force=True)
        assert second.success
    marker2 = read_marker(out)
    assert marker2["build_id"] != marker1["build_id"]
    assert marker2["lancedb"]["entities"]["version"] > marker1["lancedb"]["entities"]["version"]

    def query(mode: str, where: Path = out) -> tuple[int, str]:
        res = CliRunner().invoke(app, ["query", "Who was Marley?", "--output-dir", str(where),
                                       "--mode", mode, "--json", "--fake-llm", "--cache-path",
                                       str(tmp_path / "q.sqlite")])
        return res.exit_code, res.stdout if res.exit_code == 0 else res.output

    code, output = query("local")
    assert code == 0, output
    assert json.loads(output)["info"]["build_id"] == marker2["build_id"]
    swapped = _copy(out, tmp_path / "swapped")
    shutil.rmtree(swapped / LANCEDB_DIR / "entities.lance")
    shutil.copytree(saved, swapped / LANCEDB_DIR / "entities.lance")
    # with its flat snapshots the reader never opens the swapped folder: the same answer
    code, output = query("multihop", swapped)
    code_out, output_out = query("multihop")
    assert code == 0 == code_out
    got, want = json.loads(output), json.loads(output_out)
    assert got["info"]["build_id"] == want["info"]["build_id"] == marker2["build_id"]
    assert {k: v for k, v in got.items() if k != "info"} == \
        {k: v for k, v in want.items() if k != "info"}
    for snap in (swapped / LANCEDB_DIR).glob("*.flat.parquet"):
        snap.unlink()  # read from LanceDB now: the swapped table must be refused
    for mode in ("local", "multihop", "fused"):
        code, output = query(mode, swapped)
        assert code == 2 and "entities.lance" in output and "another build" in output, output
        assert "Traceback" not in output
    (out / f"{schemas.COMMUNITIES}.parquet").unlink()
    code, output = query("local")
    assert code == 2 and "communities.parquet" in output, output
