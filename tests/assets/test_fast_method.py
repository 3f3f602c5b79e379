"""Issue 32: the model-free index method ``method=fast`` (kgloom.extraction.cooccurrence).

Co-occurrence weights on a hand-made text, the pair cap, the settings' routes, record
edges under both methods, every asset alone against its golden under ``fast`` with the
same table schemas as ``standard``'s goldens (and the model resource never opened),
switching the method on an existing index, and a corpus with no names."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from kgloom.embedding.tokenizer import default_tokenizer
from kgloom.extraction.cooccurrence import (
    UNIT_STRENGTH,
    cooccurrence_graph,
    cooccurrence_unit,
    sentence_pairs,
)
from kgloom.ingest.chunking import split_text_units
from kgloom.ingest.documents import read_documents
from kgloom.resources.model import LLMResource
from kgloom.settings.indexing import IndexSettings, load_settings_file, settings_from_mapping
from tests.assets import test_assets as ta

FAST = {"method": "fast"}


# --------------------------------------------------------------------------------------
# co-occurrence weights (pure)
# --------------------------------------------------------------------------------------

def test_sentence_pairs_weigh_each_sentence_by_one_plus_inverse_token_distance():
    names = ["Alice", "Bob", "Paris", "Holmes", "Sherlock Holmes"]
    # Alice(0) met(1) Bob(2) in(3) Paris(4): d = 2, 4 and 2 tokens
    found, pairs = sentence_pairs("Alice met Bob in Paris.", names, window=10)
    assert found == ["Alice", "Bob", "Paris"]
    assert pairs == {("Alice", "Bob"): 1.5, ("Alice", "Paris"): 1.25, ("Bob", "Paris"): 1.5}
    # nested names: "Holmes" inside "Sherlock Holmes" is not a second name; the nearest
    # occurrences count (Bob ... Sherlock Holmes: 1 token apart the second time)
    found, pairs = sentence_pairs("Bob saw Sherlock Holmes and Bob Sherlock Holmes.",
                                  names, window=10)
    assert found == ["Bob", "Sherlock Holmes"]
    assert pairs == {("Bob", "Sherlock Holmes"): 2.0}
    # a name inside a longer word is no occurrence
    assert sentence_pairs("Bobby met Alice.", names, 10)[0] == ["Alice"]
    # caseless scripts have no word boundary: each Han character is one token
    assert sentence_pairs("李白和杜甫喝酒。", ["李白", "杜甫"], 10) == (
        ["李白", "杜甫"], {("李白", "杜甫"): 1 + 1 / 2})
    # the window: each name pairs with at most `window` names after it
    found, pairs = sentence_pairs("Alice, Bob and Paris.", names, window=1)
    assert set(pairs) == {("Alice", "Bob"), ("Bob", "Paris")}


def test_unit_weights_sum_sentences_and_add_the_weaker_unit_level_edges():
    s = IndexSettings(method="fast")
    text = ("Alice Moreau met Bob Lang in Paris. Then Bob Lang wrote to Carol Weiss and "
            "Alice Moreau. It rained and Dave Hume slept.")
    counts: Counter = Counter()
    ents, rels = cooccurrence_unit("u1", text, s, counts)
    names = {e["title"] for e in ents}
    assert {"Alice Moreau", "Bob Lang", "Paris", "Carol Weiss", "Dave Hume"} <= names
    w = {tuple(sorted((r["source"], r["target"]))): r["strength"] for r in rels}
    # each edge runs the way its first shared sentence reads ("... wrote to Carol Weiss and
    # Alice Moreau"); a unit-level edge, with no such sentence, in sorted order
    direction = {frozenset((r["source"], r["target"])): (r["source"], r["target"]) for r in rels}
    assert direction[frozenset(("Alice Moreau", "Carol Weiss"))] == ("Carol Weiss", "Alice Moreau")
    assert direction[frozenset(("Alice Moreau", "Paris"))] == ("Alice Moreau", "Paris")
    # sentence 1: Alice Moreau(0-1) met(2) Bob Lang(3-4) in(5) Paris(6)
    # sentence 2: Then(0) Bob Lang(1-2) wrote(3) to(4) Carol Weiss(5-6) and(7)
    # Alice Moreau(8-9); d = tokens from the end of one name to the start of the other
    assert w[("Alice Moreau", "Bob Lang")] == pytest.approx((1 + 1 / 2) + (1 + 1 / 6))
    assert w[("Alice Moreau", "Paris")] == pytest.approx(1 + 1 / 5)
    assert w[("Bob Lang", "Paris")] == pytest.approx(1 + 1 / 2)
    assert w[("Bob Lang", "Carol Weiss")] == pytest.approx(1 + 1 / 3)
    assert w[("Alice Moreau", "Carol Weiss")] == pytest.approx(1 + 1 / 2)
    # Dave Hume shares no sentence: joined at unit level to the hubs only, weaker
    dave = {p: v for p, v in w.items() if "Dave Hume" in p}
    assert dave and set(dave.values()) == {UNIT_STRENGTH}
    assert w[("Carol Weiss", "Paris")] == UNIT_STRENGTH  # Paris is a hub (3rd name)
    assert counts["sentence_pairs"] == 5 and counts["unit_pairs"] == 4
    assert {r["kind"] for r in rels} == {"co_mention"}
    shared = next(r for r in rels if (r["source"], r["target"]) == ("Bob Lang", "Paris"))
    assert shared["description"] == "Alice Moreau met Bob Lang in Paris."
    types = {e["title"]: (e["type"], e["description"]) for e in ents}
    assert types["Alice Moreau"] == ("OTHER", "Alice Moreau met Bob Lang in Paris.")
    assert types["Paris"][0] == "LOCATION"  # "in Paris": a cue
    assert counts["cooccurrence_pairs_dropped"] == 0


def test_a_unit_with_thousands_of_names_caps_its_pairs_and_counts_the_drop():
    s = IndexSettings(method="fast", cooccurrence_max_pairs=50)
    names = [f"Zorg{chr(65 + i // 26 // 26 % 26)}{chr(65 + i // 26 % 26)}{chr(65 + i % 26)}"
             for i in range(2000)]
    text = "Roll call: " + ", ".join(names) + " and Quux. " + " ".join(
        f"Then {a} met {b}." for a, b in zip(names[::2], names[1::2]))
    counts: Counter = Counter()
    ents, rels = cooccurrence_unit("u1", text, s, counts)
    assert len({e["title"] for e in ents}) >= 2000
    assert len(rels) == 50
    # pairs considered are linear in the names (window 10 + 3 hubs), not n^2 / 2
    considered = counts["sentence_pairs"] + counts["unit_pairs"]
    assert considered < 20 * 2001
    assert counts["cooccurrence_pairs_dropped"] == considered - 50
    # the strongest pairs are kept: the "met" sentences (1 + 1/2 each, plus the roll call)
    assert min(r["strength"] for r in rels) >= 1.5


# --------------------------------------------------------------------------------------
# settings
# --------------------------------------------------------------------------------------

def test_method_is_a_setting_reachable_like_every_other(tmp_path):
    from kgloom.definitions import build_resources
    from kgloom.settings.indexing import parse_assignments

    assert IndexSettings().method == "standard"
    assert settings_from_mapping(parse_assignments(["method=fast"])).method == "fast"
    f = tmp_path / "s.yaml"
    f.write_text("settings:\n  method: fast\n  record_edges: [authors:WROTE:PERSON]\n")
    s = settings_from_mapping(load_settings_file(f))
    assert (s.method, s.record_edges) == ("fast", ("authors:WROTE:PERSON",))
    r = build_resources(str(tmp_path), str(tmp_path / "out"), settings_file=str(f))
    assert r["index"].settings().method == "fast"
    assert "method" in type(r["index"].index_settings).model_fields  # the launchpad's field
    with pytest.raises(ValueError, match="method must be one of"):
        IndexSettings(method="quick")
    for bad in ({"summary_method": "llm"}, {"extract_claims": True}, {"max_gleanings": 1},
                {"candidate_source": "open"}, {"llm_descriptions": True}):
        with pytest.raises(ValueError, match="method=fast uses no model"):
            IndexSettings(method="fast", **bad)
    with pytest.raises(ValueError, match="field:RELATION"):
        IndexSettings(record_edges=("authors",))


def test_the_method_is_part_of_the_extraction_fingerprint():
    from kgloom.corpus.partitions import settings_fingerprint

    std, fast = IndexSettings(), IndexSettings(method="fast")
    assert settings_fingerprint(std, "m") != settings_fingerprint(fast, "m")
    assert settings_fingerprint(std, "m") == settings_fingerprint(IndexSettings(), "m")


# --------------------------------------------------------------------------------------
# record edges, both methods
# --------------------------------------------------------------------------------------

def _records(tmp_path: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    inp = tmp_path / "notes"
    inp.mkdir()
    rows = [{"title": "Garden Notes", "text": "The roses bloomed early this year.",
             "authors": ["Ada Byron", "Mary Shelley"], "tags": "gardening"},
            {"title": "Trip", "text": "We drove to Leeds on Sunday.", "authors": "Ada Byron"},
            {"text": "no title here", "authors": ["Nobody Known"]}]
    (inp / "notes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    docs, _ = read_documents(inp)
    return docs, split_text_units(docs, default_tokenizer(), 600, 100)


@pytest.mark.parametrize("method", ["fast", "standard"])
def test_record_fields_become_edges_of_the_record_title(tmp_path, method):
    from kgloom.extraction.extract import extract_graph
    from kgloom.llm import open_llm

    docs, units = _records(tmp_path)
    s = IndexSettings(method=method, record_edges=("authors:AUTHORED_BY:PERSON", "tags:TAGGED"))
    if method == "fast":
        res = cooccurrence_graph(units, s, documents=docs)
    else:
        res = extract_graph(units, open_llm(tmp_path / "c.sqlite", fake=True), s,
                            documents=docs)
    rels = res.relationship_mentions.filter(pl.col("kind") == "extracted")
    got = {(r["source"], r["target"], r["description"]) for r in rels.iter_rows(named=True)}
    assert {("Garden Notes", "Ada Byron", "Garden Notes AUTHORED_BY Ada Byron"),
            ("Garden Notes", "Mary Shelley", "Garden Notes AUTHORED_BY Mary Shelley"),
            ("Garden Notes", "gardening", "Garden Notes TAGGED gardening"),
            ("Trip", "Ada Byron", "Trip AUTHORED_BY Ada Byron")} <= got
    assert not any("Nobody Known" in g for g in got)  # a record without a title
    types = dict(res.entity_mentions.select("title", "type").unique().iter_rows())
    assert types["Ada Byron"] == "PERSON" and types["gardening"] == "OTHER"
    assert res.counts["record_edges"] == 4


# --------------------------------------------------------------------------------------
# every asset alone under fast: goldens, same schemas as standard, no model opened
# --------------------------------------------------------------------------------------

GOLDEN_FAST = ta.DATA / "golden-fast"
SETTINGS_FAST = {"chunk_size": 120, "chunk_overlap": 20, **FAST}


@pytest.fixture
def no_model(monkeypatch):
    """The LLM resource must never load or even check a model: both raise."""
    def boom(*_a, **_k):
        raise AssertionError("the model resource was opened under method=fast")

    monkeypatch.setattr(LLMResource, "open", boom)
    monkeypatch.setattr(LLMResource, "verify", boom)
    import kgloom.llm

    monkeypatch.setattr(kgloom.llm, "open_llm", boom)


def _fast_resources(inp, out):
    from kgloom.definitions import build_resources

    # a model path that does not exist: fast needs none
    return build_resources(str(inp), str(out), model_path="/nonexistent/model.gguf",
                           fake_llm=False, **SETTINGS_FAST)


@pytest.fixture(scope="module")
def built_fast(tmp_path_factory):
    base = tmp_path_factory.mktemp("fast")
    inp, out, keep = ta._input_copy(base), base / "output", base / "copies"
    keep.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        for name in list(os.environ):
            if name.startswith("KGLOOM_") and name != "KGLOOM_REGEN_GOLDEN":
                mp.delenv(name)
        mp.setattr(LLMResource, "open", lambda *a, **k: pytest.fail("model opened"))
        mp.setattr(LLMResource, "verify", lambda *a, **k: pytest.fail("model checked"))
        with ta.record_writes(out, keep) as log:
            _, report = ta.index_folder(_fast_resources(inp, out),
                                        dg.DagsterInstance.ephemeral(), force=True)
    assert report.success, report
    return ta.Built(inp, out, log)


def _check_fast_asset(built, asset, partition, tmp_path):
    out = tmp_path / "output"
    out.mkdir()
    ta.upstream_state(built, asset, partition, out)
    instance = dg.DagsterInstance.ephemeral()
    ta.register_partitions(instance, ta.KEYS)
    with ta.record_writes(out) as log:
        result = dg.materialize([ta.ASSETS[asset]], partition_key=partition or None,
                                resources=_fast_resources(built.input, out),
                                instance=instance, raise_on_error=False)
    assert result.success, [str(e.event_specific_data.error) for e in result.all_events
                            if e.is_step_failure]
    folder = ta.quote(partition, safe="")
    paths = {n: p.replace("{partition}", folder) for n, p in ta.OUTPUTS[asset].items()}
    written = set(log.by_path())
    declared = {p for p in paths.values() if not (p.startswith("lancedb/")
                                                  and not Path(p).suffix)}
    assert written == declared
    actual = {n: ta.normalize_file(out, p) for n, p in paths.items()}
    gpath = (GOLDEN_FAST / asset / f"{partition}.json" if partition
             else GOLDEN_FAST / f"{asset}.json")
    if ta.REGEN:
        gpath.parent.mkdir(parents=True, exist_ok=True)
        gpath.write_text(ta.dump_golden(actual), encoding="utf-8")
    golden = json.loads(gpath.read_text("utf-8"))
    diff = [d for n in sorted(actual) for d in ta.differences(actual[n], golden[n], n)]
    assert not diff, f"{asset} [{partition}] differs from {gpath}:\n" + "\n".join(diff)
    # the same tables, with the same columns and dtypes, as the standard method's golden
    standard = json.loads(ta.golden_path(asset, partition).read_text("utf-8"))
    for name, content in actual.items():
        if "columns" in content and "columns" in standard[name]:
            assert content["columns"] == standard[name]["columns"], (asset, name)


@pytest.mark.parametrize("partition", ta.KEYS)
@pytest.mark.parametrize("asset", ta.PARTITIONED)
def test_fast_partitioned_asset_alone_matches_golden_and_standard_schema(
        built_fast, asset, partition, tmp_path, no_model):
    _check_fast_asset(built_fast, asset, partition, tmp_path)


@pytest.mark.parametrize("asset", [a for a in ta.ASSETS if a not in ta.PARTITIONED])
def test_fast_graph_asset_alone_matches_golden_and_standard_schema(
        built_fast, asset, tmp_path, no_model):
    _check_fast_asset(built_fast, asset, "", tmp_path)


def test_fast_index_has_a_graph_rule_reports_and_says_its_method(built_fast):
    out = built_fast.out
    summary = json.loads((out / "index-summary.json").read_text())
    assert summary["method"] == "fast" and summary["llm_calls"] == 0
    assert summary["rows"]["entities"] > 0 and summary["rows"]["relationships"] > 0
    reports = pl.read_parquet(out / "community_reports.parquet")
    assert reports.height and set(reports["generated_by"]) == {"rules"}
    assert not (out / "llm_cache.sqlite").exists()


# --------------------------------------------------------------------------------------
# switching the method on an existing index
# --------------------------------------------------------------------------------------

@pytest.mark.integration
def test_switching_method_rebuilds_extraction_and_graph_and_reuses_the_llm_cache(tmp_path):
    from kgloom.cli.runner import index_folder
    from kgloom.definitions import build_resources
    from kgloom.llm import cache_rows

    inp = ta._input_copy(tmp_path)
    out = tmp_path / "out"
    instance = dg.DagsterInstance.ephemeral()
    base = {"chunk_size": 120, "chunk_overlap": 20}

    def run(method: str):
        r = build_resources(str(inp), str(out), fake_llm=True, method=method, **base)
        return index_folder(r, instance)[1]

    first = run("standard")
    assert first.success and sorted(first.partition_runs) == ta.KEYS
    rows = cache_rows(out)
    std_entities = pl.read_parquet(out / "entities.parquet")
    vectors_stats = json.loads((out / "stages/vector_index.stats.json").read_text())

    fast = run("fast")
    assert fast.success and sorted(fast.partition_runs) == ta.KEYS  # extraction changes
    assert {"entities", "communities", "community_reports", "vector_index",
            "index_summary"} <= set(fast.graph_assets)
    assert json.loads((out / "index-summary.json").read_text())["method"] == "fast"
    assert cache_rows(out) == rows  # fast adds nothing to the LLM cache
    vstats = json.loads((out / "stages/vector_index.stats.json").read_text())
    # text units did not change: their vectors are kept, not embedded again
    assert vstats["tables"]["text_units"]["embedded"] == 0, vstats["tables"]

    back = run("standard")
    assert back.success and sorted(back.partition_runs) == ta.KEYS
    assert cache_rows(out) == rows  # every standard call came from the cache
    summary = json.loads((out / "index-summary.json").read_text())
    assert summary["method"] == "standard"
    assert summary["llm"]["extraction"]["calls"] == 0
    assert summary["llm"]["extraction"]["cache_hits"] > 0
    again = pl.read_parquet(out / "entities.parquet")
    assert sorted(again["title"]) == sorted(std_entities["title"])
    assert vectors_stats  # the first build wrote its stats too

    unchanged = run("standard")
    assert unchanged.graph_up_to_date and not unchanged.partition_runs


# --------------------------------------------------------------------------------------
# a corpus with no names
# --------------------------------------------------------------------------------------

def test_the_no_names_warning_names_what_each_method_skips():
    from kgloom.extraction.checks import extraction_yield

    ok, _, standard = extraction_yield(4, 3, 2, "standard")
    assert not ok and "the LLM was not asked about them" in standard
    ok, _, fast = extraction_yield(4, 3, 2, "fast")
    assert not ok and "no entity could come from them" in fast and "LLM" not in fast


@pytest.mark.integration
def test_a_corpus_with_no_names_gives_text_units_vectors_an_empty_graph_and_a_warning(
        tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from kgloom.cli import app

    inp = tmp_path / "chat"
    inp.mkdir()
    (inp / "chat.txt").write_text(
        "hey how are you doing today? i'm fine thanks, just tired. want to get lunch "
        "later? sure, at noon works. ok see you then.\n" * 20)
    (inp / "numbers.txt").write_text(" ".join(str(i * 7 % 101) for i in range(400)))
    out = tmp_path / "out"
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(LLMResource, "open", lambda *a, **k: pytest.fail("model opened"))
    res = CliRunner().invoke(app, ["index", "--input-dir", str(inp), "--output-dir", str(out),
                                   "--model-path", str(tmp_path / "none.gguf"),
                                   "--set", "method=fast"])
    assert res.exit_code == 0, res.output
    assert "WARNING: the graph is empty: 0 entities from 2 document" in res.output
    assert "entities_found" in res.output
    # no LLM under fast: the check says what a unit without names costs here
    assert "have no candidate name, so no entity could come from them" in res.output
    assert "LLM was not asked" not in res.output
    summary = json.loads((out / "index-summary.json").read_text())
    assert summary["method"] == "fast"
    assert summary["rows"]["text_units"] >= 2 and summary["rows"]["entities"] == 0
    import lancedb

    db = lancedb.connect(str(out / "lancedb"))
    assert db.open_table("text_units").count_rows() == summary["rows"]["text_units"]
