"""kgloom.query search: context packing and budgets, local / direct / global / auto search,
dynamic community selection on a hand-built hierarchy, map/reduce ordering, the answer's
citation enum, routing rules, the CLI and the bad inputs of issue 15. Fake or scripted
LLMs only (no model file)."""

from __future__ import annotations

import itertools
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import build_carol_tables
from test_query import write_carol_index

from kgloom.core import schemas, storage
from kgloom.llm import CachedLLM, Completion, LLMCache
from kgloom.query.context_builder import community_context as cc
from kgloom.query.context_builder.context import (
    ContextItem,
    Section,
    pack_context,
    refs_in,
    token_counter,
)
from kgloom.query.routing import route_by_rules, route_question
from kgloom.query.searcher import SEARCH_MODES, Searcher, SearchSettings
from kgloom.query.structured_search import global_search as gs
from kgloom.query.structured_search.search_base import answer_schema


# --- helpers ---------------------------------------------------------------------------------
class ScriptedBackend:
    """A backend whose reply is ``reply(messages, schema) -> obj`` (dumped as JSON); with
    ``count_tokens`` it counts like a model's tokenizer (one token per 3 characters)."""

    def __init__(self, reply: Callable[[list[dict], dict], Any], n_ctx: int = 0) -> None:
        self.reply = reply
        self.model_id = "scripted"
        self.calls: list[dict] = []
        if n_ctx:
            self.n_ctx = n_ctx
            self.count_tokens = lambda text: -(-len(text) // 3)

    def complete(self, messages, schema, max_tokens, seed, stop_on_loop=False) -> Completion:
        self.calls.append({"messages": messages, "schema": schema})
        text = json.dumps(self.reply(messages, schema))
        return Completion(text, sum(len(m["content"].split()) for m in messages),
                          len(text.split()), 0.0)


def _llm(backend: Any, tmp_path: Path, name: str = "cache") -> CachedLLM:
    return CachedLLM(backend, LLMCache(tmp_path / f"{name}.sqlite"), backend.model_id)


def _reports(communities: pl.DataFrame, same_key: dict[int, int] | None = None,
             without: tuple[int, ...] = ()) -> pl.DataFrame:
    """A report per community (rank = community number); ``same_key`` {c: d}: c repeats
    d's report; communities in ``without`` get none."""
    same_key = same_key or {}
    rows = []
    for r in communities.iter_rows(named=True):
        c = r["community"]
        if c in without:
            continue
        key = same_key.get(c, c)
        rows.append({"id": f"r{c}", "human_readable_id": c, "community": c, "level": r["level"],
                     "parent": r["parent"], "children": r["children"],
                     "title": f"Report {key}", "summary": f"Summary of community {key}.",
                     "full_content": f"# Report {key}\n\nFindings about community {key}. " * 3,
                     "rank": float(c), "rating_explanation": "", "findings": [],
                     "full_content_json": "", "period": "", "size": r["size"],
                     "report_key": f"key{key}"})
    return pl.DataFrame(rows, schema=schemas.COMMUNITY_REPORTS_SCHEMA)


def _rating(schema: dict) -> bool:
    """A rating batch's schema: its properties are report refs (cc.rate_schema)."""
    return all(re.fullmatch(r"C\d+", k) for k in schema["properties"])


def _hierarchy(edges: dict[int, list[int]], level: dict[int, int]) -> pl.DataFrame:
    parent = {k: c for c, kids in edges.items() for k in kids}
    return pl.DataFrame([{"id": str(c), "human_readable_id": c, "community": c, "level": lv,
                          "parent": parent.get(c, -1), "children": edges.get(c, []),
                          "title": f"Community {c}", "entity_ids": [], "relationship_ids": [],
                          "text_unit_ids": [], "period": "", "size": 1}
                         for c, lv in level.items()], schema=schemas.COMMUNITIES_SCHEMA)


# roots 0 1 2; 0 -> 3 4; 1 -> 5; 2 -> 6 (2's report repeated) and 11 (no report);
# 3 -> 7 8; 4 -> 9; 6 -> 10; 11 -> 12
EDGES = {0: [3, 4], 1: [5], 2: [6, 11], 3: [7, 8], 4: [9], 6: [10], 11: [12]}
LEVEL = {0: 0, 1: 0, 2: 0, 3: 1, 4: 1, 5: 1, 6: 1, 11: 1, 7: 2, 8: 2, 9: 2, 10: 2, 12: 2}
RATING = {0: 3, 1: 0, 2: 2, 3: 4, 4: 0, 5: 5, 7: 0, 8: 2, 9: 5, 10: 1, 12: 0}


@pytest.fixture(scope="module")
def tree() -> cc.CommunityTree:
    comms = _hierarchy(EDGES, LEVEL)
    return cc.CommunityTree(_reports(comms, same_key={6: 2}, without=(11,)), comms)


def _every_step_reply(answer: str, point: str) -> Callable[[list, dict], Any]:
    """A scripted model for every search step: each rating 4, one map point ``point``
    (score 7, the first report), and the answer ``answer`` citing the first id."""
    def reply(messages, schema):
        props = schema["properties"]
        if _rating(schema):
            return dict.fromkeys(props, 4)
        if "points" in props:
            refs = props["points"]["items"]["properties"]["reports"]["items"]["enum"]
            return {"points": [{"description": point, "score": 7, "reports": refs[:1]}]}
        return {"answer": answer, "citations": props["citations"]["items"]["enum"][:1]}
    return reply


def _rater(ratings: dict[int, int | None], tmp_path: Path, batch: int = 8, budget: int = 650,
           question: str = "q?") -> tuple[cc.BatchRater, list[list[int]]]:
    """A BatchRater over a scripted model that rates community c ``ratings[c]``; a batch
    holding a None rating gets a reply that breaks the schema (so it fails twice). Also
    returns the communities of each call, in call order (a failed batch twice)."""
    calls: list[list[int]] = []

    def reply(messages, schema):
        refs = list(schema["properties"])
        calls.append([int(r[1:]) for r in refs])
        if any(ratings[int(r[1:])] is None for r in refs):
            return {"rating": 3}
        return {r: ratings[int(r[1:])] for r in refs}

    llm = _llm(ScriptedBackend(reply), tmp_path, f"rate-{batch}-{budget}")
    return cc.BatchRater(llm, question, token_counter(None), 0, budget, batch, 80), calls


def _flat(calls: list[list[int]]) -> list[int]:
    return [c for call in calls for c in call]


# --- dynamic community selection ------------------------------------------------------------
def test_dynamic_selection_descends_into_relevant_and_prunes_irrelevant(tree, tmp_path):
    events: list[dict] = []
    rate, calls = _rater(RATING, tmp_path)
    sel = cc.select_dynamic(tree, rate, threshold=1, progress=events.append)
    # roots, then children of relevant 0 and 2 (6 repeats 2's report: walked through to 10;
    # 11 has no report: walked through to 12), then children of relevant 3: one batch each
    assert calls == [[0, 1, 2], [3, 4, 10, 12], [7, 8]]
    rated = _flat(calls)
    assert 5 not in rated and 9 not in rated and 6 not in rated  # pruned / same report
    # relevant children replace their parents: 3 -> 8, 2 -> 10; best rating first
    assert sel.selected == [8, 10]
    assert sel.rated == 9 and sel.rating_calls == 3
    assert sel.pruned_subtrees == 2 and sel.pruned_reports == 2
    assert tree.missing == [11]
    assert [e["rated"] for e in events] == [3, 7, 9]
    assert [e["rating_calls"] for e in events] == [1, 2, 3]
    assert events[-1]["relevant"] == 2 and events[-1]["pruned_reports"] == 2
    assert sel.summary()["rated"] == 9 and sel.summary()["rating_calls"] == 3


@pytest.mark.parametrize("batch", [1, 2, 3, 4, 8])
def test_batched_rating_selects_and_prunes_as_one_report_per_call(tree, tmp_path, batch):
    rate, calls = _rater(RATING, tmp_path, batch=batch)
    sel = cc.select_dynamic(tree, rate, threshold=1)
    (tmp_path / "one").mkdir()
    one, one_calls = _rater(RATING, tmp_path / "one", batch=1)  # a cache of its own
    ref = cc.select_dynamic(tree, one, threshold=1)
    assert _flat(one_calls) == [0, 1, 2, 3, 4, 10, 12, 7, 8]  # the walk of one per call
    assert _flat(calls) == _flat(one_calls)
    assert (sel.selected, sel.ratings, sel.pruned_subtrees, sel.pruned_reports) == \
        (ref.selected, ref.ratings, ref.pruned_subtrees, ref.pruned_reports)
    # steps of 3, 4 and 2 reports: ceil(n / batch) calls each
    assert sel.rated == 9 and all(len(c) <= batch for c in calls)
    assert sel.rating_calls == len(calls) == sum(-(-n // batch) for n in (3, 4, 2))
    assert ref.rating_calls == 9


def test_dynamic_selection_stops_at_max_level_and_keeps_relevant_parents(tree, tmp_path):
    rate, calls = _rater(RATING, tmp_path)
    sel = cc.select_dynamic(tree, rate, threshold=1, max_level=1)
    assert calls == [[0, 1, 2], [3, 4]]
    assert sel.selected == [3, 2]  # 2 has no rated child within level 1: kept
    assert sel.pruned_reports == 1  # 5; level-2 reports are out of scope


def test_dynamic_selection_lists_replaced_parents_or_keeps_them(tree, tmp_path):
    rate, _ = _rater(RATING, tmp_path)
    sel = cc.select_dynamic(tree, rate, threshold=1)
    # 0 -> 3 -> 8 and 2 -> 10: the parents left the selection, best rating first
    assert sel.selected == [8, 10] and sel.replaced == [3, 0, 2]
    assert sel.summary()["replaced"] == [3, 0, 2]
    (tmp_path / "keep").mkdir()
    rate, calls = _rater(RATING, tmp_path / "keep")
    kept = cc.select_dynamic(tree, rate, threshold=1, keep_parent=True)
    # the same walk and ratings; every relevant community stays (rating, then rank)
    assert _flat(calls) == [0, 1, 2, 3, 4, 10, 12, 7, 8]
    assert kept.selected == [3, 0, 8, 2, 10] and kept.replaced == []
    assert kept.ratings == sel.ratings


def test_dynamic_selection_rates_next_level_when_no_root_is_relevant(tree, tmp_path):
    ratings = {**RATING, 0: 0, 2: 0, 1: None}  # the roots' batch fails (1 breaks it)
    rate, calls = _rater(ratings, tmp_path)
    sel = cc.select_dynamic(tree, rate, threshold=1)
    assert calls[:2] == [[0, 1, 2], [0, 1, 2]]  # retried once, then a failure row
    assert sel.level_fallbacks == [1]
    # level 1 by rank (community number, descending); 6 repeats 2's report: not re-rated
    assert calls[2:] == [[5, 4, 3], [7, 8]]
    assert sel.ratings[0] is sel.ratings[1] is sel.ratings[2] is None
    assert len(sel.failures) == 1 and sel.rating_calls == 3 and sel.rated == 8
    assert sel.selected == [5, 8]
    assert sel.pruned_reports == 3  # 9, 10, 12: the roots' subtrees were rated after all


def test_a_failing_rating_batch_is_one_failure_row_and_its_reports_not_relevant(tree,
                                                                                 tmp_path):
    rate, calls = _rater({**RATING, 1: None}, tmp_path, batch=2)
    sel = cc.select_dynamic(tree, rate, threshold=1)
    # roots in batches [0, 1] (fails: 0 counts as not relevant, its subtree pruned) and [2]
    assert calls == [[0, 1], [0, 1], [2], [10, 12]]
    assert sel.failures == [{"stage": "search_rate", "item_id": "C0,C1",
                             "reason": sel.failures[0]["reason"],
                             "detail": sel.failures[0]["detail"]}]
    assert "schema" in sel.failures[0]["reason"]
    assert sel.ratings[0] is None and sel.ratings[1] is None and sel.ratings[2] == 2
    assert sel.selected == [10] and sel.pruned_reports == 6  # 3 4 5 7 8 9
    assert sel.summary()["rating_failures"] == 1


def test_rate_schema_has_exactly_the_batch_refs():
    import jsonschema

    schema = cc.rate_schema(["C5", "C12", "C0"])
    assert list(schema["properties"]) == ["C5", "C12", "C0"]
    assert schema["required"] == ["C5", "C12", "C0"]
    assert schema["additionalProperties"] is False
    assert all(p["enum"] == list(range(6)) for p in schema["properties"].values())
    jsonschema.validate({"C5": 0, "C12": 5, "C0": 3}, schema)
    for bad in ({"C5": 0, "C12": 5}, {"C5": 0, "C12": 5, "C0": 3, "C9": 1},
                {"C5": 6, "C12": 5, "C0": 3}, {"C5": "2", "C12": 5, "C0": 3}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
    # the grammar the model samples under holds the refs and nothing else
    from kgloom.llm.grammar import json_grammar

    gbnf = json_grammar(cc.rate_schema(["C5", "C7"]))
    assert '\\"C5\\"' in gbnf and '\\"C7\\"' in gbnf and "C9" not in gbnf


def test_rating_batches_stay_within_budget_and_batch_size():
    counter = token_counter(None)
    reports = [cc.Report(c, 0, f"Report {c}", "a fairly long summary sentence " * (c % 5 + 1),
                         "full " * 200, float(c), f"k{c}") for c in range(20)]
    for budget, batch, cap in ((650, 8, 80), (100, 3, 40), (60, 8, 80), (25, 8, 80)):
        rate = cc.BatchRater(None, "q?", counter, 0, budget, batch, cap)
        batches = rate.batches(reports)
        assert [r for b in batches for r in b.refs] == [f"C{c}" for c in range(20)]
        for b in batches:
            assert b.tokens == counter(b.text) <= budget and 1 <= len(b.refs) <= batch
            lines = b.text.split("\n")
            assert [ln.split("]", 1)[0][1:] for ln in lines] == b.refs
            assert all(counter(ln) <= cap for ln in lines)
            assert all("full" not in ln for ln in lines)  # the summary, not the content
        if budget >= 100:  # a batch closes only when the next line does not fit
            for b, nxt in itertools.pairwise(batches):
                first = rate.batches([r for r in reports if r.ref == nxt.refs[0]])[0]
                assert len(b.refs) == batch or counter(b.text + "\n" + first.text) > budget
    with pytest.raises(ValueError, match="rate budget of 2 tokens cannot hold one report"):
        cc.BatchRater(None, "q?", counter, 0, 2, 8, 80).batches(reports)
    with pytest.raises(ValueError, match="rate budget must be a positive"):
        cc.BatchRater(None, "q?", counter, 0, 0, 8, 80).batches(reports)
    with pytest.raises(ValueError, match="reports per batch"):
        cc.BatchRater(None, "q?", counter, 0, 100, 0, 80).batches(reports)


def test_static_selection_and_unknown_level(tree):
    assert cc.select_static(tree, 1).selected == [6, 5, 4, 3]  # by rank; 11 has no report
    with pytest.raises(ValueError, match="level 7 is not a level"):
        cc.select_static(tree, 7)


def test_report_of_a_community_that_no_longer_exists_is_ignored():
    comms = _hierarchy({0: [1]}, {0: 0, 1: 1})
    reports = pl.concat([_reports(comms), _reports(_hierarchy({}, {42: 0}))])
    t = cc.CommunityTree(reports, comms)
    assert t.stale == [42] and sorted(t.reports) == [0, 1]


# --- map / reduce --------------------------------------------------------------------------
def test_map_batches_within_budget_and_reduce_orders_points(tmp_path):
    counter = token_counter(None)
    reports = [cc.Report(c, 0, f"Report {c}", "s", "word " * 60, float(c), f"k{c}")
               for c in range(6)]
    batches = cc.map_batches(reports, 120, counter, 100)
    assert len(batches) >= 3
    assert [r for b in batches for r in b.refs] == [f"C{c}" for c in range(6)]
    assert all(b.tokens <= 120 and b.tokens == counter(b.text) for b in batches)

    # each batch: one point per report, scored by the report's number mod 3 (0 dropped)
    def reply(messages, schema):
        refs = schema["properties"]["points"]["items"]["properties"]["reports"]["items"]["enum"]
        return {"points": [{"description": f"point from {r}", "score": int(r[1:]) % 3 * 4,
                            "reports": [r]} for r in refs[:3]]}

    backend = ScriptedBackend(reply)
    events: list[dict] = []
    points, failures = gs.run_map("q?", batches, _llm(backend, tmp_path), 0, events.append)
    assert not failures and len(backend.calls) == len(batches)
    assert [e["done"] for e in events] == list(range(1, len(batches) + 1))
    ranked = gs.rank_points(points)
    assert all(p.score > 0 for p in ranked)
    keys = [(-p.score, p.batch, p.position) for p in ranked]
    assert keys == sorted(keys)
    ctx = gs.reduce_context(points, 60, counter)
    assert ctx.tokens <= 60
    assert [x.text.split(") ", 1)[1] for x in ctx.items] == \
        [p.description for p in ranked][:len(ctx.items)]
    assert refs_in(ctx.items[0].text) == ["P1", ranked[0].reports[0]]


def test_map_failure_becomes_a_row_and_other_batches_go_on(tmp_path):
    counter = token_counter(None)
    reports = [cc.Report(c, 0, f"R{c}", "", "text " * 50, 0.0, f"k{c}") for c in range(4)]
    batches = cc.map_batches(reports, 80, counter, 70)

    def reply(messages, schema):
        refs = schema["properties"]["points"]["items"]["properties"]["reports"]["items"]["enum"]
        if "C0" in refs:
            return {"points": [{"description": "x", "score": 5, "reports": ["C99"]}]}
        return {"points": [{"description": f"from {refs[0]}", "score": 5, "reports": refs[:1]}]}

    points, failures = gs.run_map("q?", batches, _llm(ScriptedBackend(reply), tmp_path), 0)
    assert len(failures) == 1 and failures[0]["stage"] == "search_map"
    assert "C0" in failures[0]["item_id"] and "schema" in failures[0]["reason"]
    assert points and all("C0" not in p.reports for p in points)


# --- context packing ----------------------------------------------------------------------
def _items(kind: str, prefix: str, n: int, words: int, source=lambda i: str(i)):
    return [ContextItem(f"{prefix}{i}", kind, source(i), f"[{prefix}{i}] " + "w " * words)
            for i in range(n)]


@pytest.mark.parametrize("budget", [40, 90, 200, 500])
def test_pack_context_respects_budget_shares_and_each_source_once(budget):
    counter = token_counter(None)
    units = _items("text_units", "T", 10, 12, source=lambda i: f"u{i % 4}")  # 4 distinct
    sections = [Section("entities", _items("entities", "E", 10, 6), 0.2),
                Section("relationships", _items("relationships", "R", 10, 8), 0.3),
                Section("text_units", units, 0.5)]
    ctx = pack_context(sections, budget, counter)
    assert ctx.tokens == counter(ctx.text) <= budget
    kept_units = [x.source_id for x in ctx.items if x.kind == "text_units"]
    assert len(kept_units) == len(set(kept_units))
    assert ctx.sections["entities"]["used"] <= int(0.2 * budget)
    if budget >= 200:
        assert sorted(kept_units) == ["u0", "u1", "u2", "u3"]


def test_pack_context_budget_too_small_names_the_budget():
    counter = token_counter(None)
    with pytest.raises(ValueError, match=r"budget of 5 tokens cannot hold one"):
        pack_context([Section("entities", _items("entities", "E", 2, 10), 1.0)], 5, counter)
    for bad in (0, -3, 1.5, True, "10"):
        with pytest.raises(ValueError, match="budget must be a positive"):
            pack_context([], bad, counter)
    assert pack_context([], 10, counter).items == []


def test_truncate_never_exceeds_max_tokens():
    counter = token_counter(None)
    text = "Scrooge went home to his gloomy chambers " * 30
    for n in (1, 3, 17, 64):
        cut = counter.truncate(text, n)
        assert counter(cut) <= n and (cut == "" or cut.endswith("…"))


# --- the Carol index with communities and reports ---------------------------------------------
def write_search_index(folder: Path, embedder) -> Path:
    """The Carol index with communities (roots 0 and 1; 0 -> 2, 3; 1 -> 4, which repeats
    1's report) and a report each."""
    out = write_carol_index(folder, embedder)
    comms = build_carol_tables()["communities"]
    storage.write_table(comms, out, schemas.COMMUNITIES)
    storage.write_table(_reports(comms, same_key={4: 1}), out, schemas.COMMUNITY_REPORTS)
    return out


@pytest.fixture(scope="module")
def search_index(tmp_path_factory, embedder) -> Path:
    return write_search_index(tmp_path_factory.mktemp("search_index"), embedder)


def silent_leaf_reply(mapped: list[list[str]] | None = None, leaf_score: int = 0
                      ) -> Callable[[list, dict], Any]:
    """A scripted model for the search index: community 0 and its child 3 are rated
    relevant (3 replaces 0); a map batch of 3 alone scores its point ``leaf_score`` (0:
    the narrow report helps nothing), any other batch 6; answers cite the first id.
    ``mapped`` collects each map batch's refs."""

    def reply(messages, schema):
        props = schema["properties"]
        if _rating(schema):
            return {r: 3 if r in ("C0", "C3") else 0 for r in props}
        if "points" in props:
            refs = props["points"]["items"]["properties"]["reports"]["items"]["enum"]
            if mapped is not None:
                mapped.append(list(refs))
            return {"points": [{"description": f"from {refs[0]}",
                                "score": leaf_score if refs == ["C3"] else 6,
                                "reports": refs[:1]}]}
        return {"answer": "themes", "citations": props["citations"]["items"]["enum"][:1]}

    return reply


@pytest.fixture(scope="module")
def searcher(search_index, tmp_path_factory, embedder) -> Searcher:
    cache = tmp_path_factory.mktemp("qcache") / "q.sqlite"
    return Searcher(search_index, embedder=embedder, fake_llm=True, cache_path=cache)


QUESTIONS = ["How is Scrooge related to Bob Cratchit?", "Who is Tiny Tim's father?",
             "What did the Ghost of Christmas Past show?", "Wer war Marleys Partner?",
             "fog", "Tell me about Fezziwig and Fred and Marley and Tiny Tim"]


@pytest.mark.parametrize("budget", [60, 150, 400, 2000])
def test_local_context_budget_and_each_text_unit_once(searcher, budget):
    for q in QUESTIONS:
        res = searcher.search(q, mode="local", budget=budget, answer=False)
        ctx = res.context
        assert ctx.tokens == searcher.counter(ctx.text) <= budget
        units = [x.source_id for x in ctx.items if x.kind == "text_units"]
        assert len(units) == len(set(units)) and len(ctx.refs) == len(set(ctx.refs))
        assert all(x.text.startswith(f"[{x.ref}] ") for x in ctx.items)
        assert res.answer is None and res.info["llm"] == {}


def test_local_context_verbalizes_graph_with_ids(searcher):
    res = searcher.search("How is Scrooge related to Bob Cratchit?", mode="local",
                          answer=False)
    text = res.context.text
    assert "[R1] EBENEZER SCROOGE is related to BOB CRATCHIT: Bob Cratchit is Scrooge's " \
           "underpaid \"clerk\"" in text
    assert re.search(r"^\[E0\] EBENEZER SCROOGE \(person\): ", text, re.M)
    assert re.search(r"^\[T\d+\] \(from A Christmas Carol\) ", text, re.M)
    assert re.search(r"^\[C[01]\] Report", text, re.M)
    kinds = {x.kind for x in res.context.items}
    assert kinds == {"entities", "relationships", "reports", "text_units"}
    assert res.info["local"]["seed_source"] == "linked"


def test_budget_is_counted_with_the_model_tokenizer_when_it_has_one(search_index, tmp_path,
                                                                   embedder):
    backend = ScriptedBackend(lambda m, s: {"answer": "a", "citations": []}, n_ctx=4096)
    s = Searcher(search_index, llm=_llm(backend, tmp_path), embedder=embedder)
    res = s.search("Who is Tiny Tim's father?", mode="local", budget=300)
    assert res.info["counter"].startswith("model")
    assert res.context.tokens == backend.count_tokens(res.context.text) <= 300
    # the same budget in WordPiece tokens holds a different amount of text
    wp = token_counter(None)
    assert wp(res.context.text) != res.context.tokens


def test_budget_that_does_not_fit_the_model_window_is_refused(search_index, tmp_path, embedder):
    backend = ScriptedBackend(lambda m, s: {"answer": "a", "citations": []}, n_ctx=256)
    s = Searcher(search_index, llm=_llm(backend, tmp_path), embedder=embedder)
    with pytest.raises(ValueError, match="context window"):
        s.search("Who is Tiny Tim's father?", mode="local", budget=2000)
    assert backend.calls == []


# --- answers and the citation enum -------------------------------------------------------
def test_answer_citations_are_an_enum_of_context_ids(searcher):
    for q in QUESTIONS[:4]:
        for mode in ("local", "direct"):
            res = searcher.search(q, mode=mode, budget=400)
            assert res.answer and res.citations
            assert set(res.citations) <= set(res.context.refs)
            assert [c["ref"] for c in res.cited()] == res.citations
            assert res.info["llm"]["search_answer"]["calls"] == 1
    assert answer_schema(["E1", "T2"])["properties"]["citations"]["items"]["enum"] == \
        ["E1", "T2"]


def test_an_answer_citing_outside_the_context_loses_the_citation_not_the_answer(
        search_index, tmp_path, embedder):
    """A backend that does not enforce the citation enum: a made-up id is dropped and
    counted, the answer and its real citations are kept (no retry, no failure row)."""
    backend = ScriptedBackend(lambda m, s: {
        "answer": "Bob Cratchit", "citations": ["T999", s["properties"]["citations"]["items"][
            "enum"][0], "C77"]})
    s = Searcher(search_index, llm=_llm(backend, tmp_path), embedder=embedder)
    res = s.search("Who is Tiny Tim's father?", mode="local")
    assert res.answer == "Bob Cratchit"
    assert res.citations == [res.context.refs[0]]
    assert len(backend.calls) == 1 and res.failures == []
    check = res.info["answer_check"]
    assert check["invented_citations"] == 2 and check["dropped_citations"] == ["T999", "C77"]
    assert check["degenerate"] is False


def test_invented_inline_citations_are_removed_and_counted(search_index, tmp_path, embedder):
    def reply(messages, schema):
        real = schema["properties"]["citations"]["items"]["enum"][0]
        return {"answer": f"Bob Cratchit [{real}] [C99], as the report \"The Devil and the "
                          f"Devil\" says (T55).", "citations": [real]}

    s = Searcher(search_index, llm=_llm(ScriptedBackend(reply), tmp_path), embedder=embedder)
    for mode in ("local", "direct"):
        res = s.search("Who is Tiny Tim's father?", mode=mode)
        real = res.citations[0]
        assert res.answer == f"Bob Cratchit [{real}], as says."
        check = res.info["answer_check"]
        assert check["removed_inline"] == ["C99", "T55", "The Devil and the Devil"]
        assert check["invented_citations"] == 3


def test_check_answer_keeps_what_the_context_holds():
    from kgloom.query.structured_search.search_base import check_answer

    ctx = "[C1] Scrooge and Marley: the old firm\n[T2] (from A Christmas Carol) [Illustration]"
    got = check_answer('See the report "Scrooge and Marley" [C1; T2] and [Illustration].',
                       ["C1", "T2", "C1"], ["C1", "T2"], ctx)
    assert got.answer == 'See the report "Scrooge and Marley" [C1, T2] and [Illustration].'
    assert got.citations == ["C1", "T2"] and got.info()["invented_citations"] == 0
    # "See" is in no line of the context: a corpus that writes it in lower case tells
    # an ordinary word from a name
    assert got.ungrounded_names == ["See"]
    got = check_answer('See the report "Scrooge and Marley" [C1; T2] and [Illustration].',
                       ["C1", "T2", "C1"], ["C1", "T2"], ctx,
                       corpus=["Scrooge could not see it.", "You see? Marley said."])
    assert got.ungrounded_names == []
    got = check_answer("Scrooge and Marley met Sherlock Holmes.", ["C1"], ["C1"], ctx)
    assert got.ungrounded_names == ["Sherlock Holmes"] and got.answer.startswith("Scrooge")
    assert got.info()["ungrounded_names"] == ["Sherlock Holmes"]
    got = check_answer("[Data: Reports (5, 7)]", [], ["C1"], ctx)
    assert got.removed_inline == ["Data: Reports (5", "7)"] and got.answer.startswith("(no answer")


def test_check_answer_flags_a_one_word_answer_the_context_lacks():
    """The issue's case on invented text: a one-word answer naming nothing of the context
    is flagged and kept as written (flagged, not removed); the context's own name in
    another case is not; a kept citation id is no name."""
    from kgloom.query.structured_search.search_base import check_answer

    ctx = "[T1] Nordlicht Robotics was founded by Ilse Brandt in Kiel in 1998."
    got = check_answer("Calais-Lille", ["T1"], ["T1"], ctx)
    assert got.answer == "Calais-Lille" and got.ungrounded_names == ["Calais-Lille"]
    assert got.info()["ungrounded_names"] == ["Calais-Lille"]
    assert check_answer("BRANDT [T1]", ["T1"], ["T1", "T2"], ctx).ungrounded_names == []
    assert check_answer("Brandt [T2]", ["T2"], ["T1", "T2"], ctx).ungrounded_names == []


@pytest.mark.parametrize("mode", ["local", "direct", "global"])
def test_every_search_method_flags_an_answer_naming_what_its_context_lacks(
        search_index, tmp_path, embedder, mode):
    """Local, direct and global answers all go through the check: a one-word answer with
    a made-up name is flagged (in ``info`` and in the printed result), the context's own
    name in another case is not."""
    from kgloom.query.render import render_search

    def model(answer: str) -> Callable[[list, dict], Any]:
        return _every_step_reply(answer, "Scrooge keeps the counting-house.")

    for answer, flagged in (("Vardelune-Oskett", ["Vardelune-Oskett"]), ("SCROOGE.", [])):
        s = Searcher(search_index, llm=_llm(ScriptedBackend(model(answer)), tmp_path, answer),
                     embedder=embedder)
        res = s.search("Who keeps the counting-house, Scrooge?", mode=mode)
        assert res.route == mode
        assert "scrooge" in res.context.text.lower()
        assert res.answer == answer
        assert res.info["answer_check"]["ungrounded_names"] == flagged
        line = "names the context does not hold: Vardelune-Oskett"
        assert (line in render_search(res)) == bool(flagged)


def test_a_looping_answer_is_cut_and_flagged(search_index, tmp_path, embedder):
    loop = "Tiny Tim is " + ", ".join(["a man named Tiny Tim"] * 6) + "."
    backend = ScriptedBackend(lambda m, s: {
        "answer": loop, "citations": s["properties"]["citations"]["items"]["enum"][:1]})
    s = Searcher(search_index, llm=_llm(backend, tmp_path), embedder=embedder)
    res = s.search("Who is Tiny Tim?", mode="local")
    assert res.answer == "Tiny Tim is a man named Tiny Tim…"
    assert res.info["answer_check"]["degenerate"] is True
    assert res.info["answer_check"]["repeated"] == "a man named Tiny Tim"
    from kgloom.query.render import render_search

    assert 'answer cut: it kept repeating "a man named Tiny Tim"' in render_search(res)


def test_an_answer_that_cites_nothing_is_printed_with_its_context(search_index, tmp_path,
                                                                 embedder):
    """The bundled model's global answer "104…" cited nothing and the printed result
    showed no source at all; now the first lines of what it was given follow it, and an
    answer that cites shows only what it cites."""
    from kgloom.query.render import UNCITED_CONTEXT_ITEMS, render_search

    for cites in (False, True):
        backend = ScriptedBackend(lambda m, s, cites=cites: {
            "answer": "Scrooge keeps it.",
            "citations": s["properties"]["citations"]["items"]["enum"][:1] if cites else []})
        res = Searcher(search_index, llm=_llm(backend, tmp_path, str(cites)),
                       embedder=embedder).search("Who keeps the counting-house?", mode="local")
        out = render_search(res)
        shown = [x.ref for x in res.context.items if f"  [{x.ref}] " in out]
        if cites:
            assert res.citations and "cites nothing" not in out
            assert shown == res.citations
        else:
            assert res.citations == [] and "the answer cites nothing; its context:" in out
            assert shown == [x.ref for x in res.context.items][:UNCITED_CONTEXT_ITEMS]


def test_answers_of_the_demo_or_fake_model_say_so(searcher, search_index, tmp_path, embedder):
    from kgloom.llm import SMOLLM2_SHA256
    from kgloom.query.render import render_search
    from kgloom.query.structured_search.search_base import (
        DEMO_MODEL_NOTICE,
        FAKE_MODEL_NOTICE,
        model_notice,
    )

    res = searcher.search("Who is Tiny Tim's father?", mode="local")  # the fake model
    assert res.answer and res.notice == FAKE_MODEL_NOTICE
    assert f"note: {FAKE_MODEL_NOTICE}" in render_search(res)
    assert res.to_dict()["notice"] == FAKE_MODEL_NOTICE
    assert searcher.search("Who is Tiny Tim's father?", mode="local", answer=False).notice \
        is None  # no answer, nothing to warn about
    assert model_notice(SMOLLM2_SHA256) == DEMO_MODEL_NOTICE
    assert "demo model" in DEMO_MODEL_NOTICE and "reliable part" in DEMO_MODEL_NOTICE
    backend = ScriptedBackend(lambda m, s: {"answer": "Bob", "citations": []})
    other = Searcher(search_index, llm=_llm(backend, tmp_path), embedder=embedder)
    assert other.search("Who is Tiny Tim's father?", mode="local").notice is None


@pytest.mark.parametrize("mode", SEARCH_MODES)
def test_every_search_says_when_nothing_in_the_index_is_relevant(searcher, mode):
    """The judgement of retrieval (the question's nearest unit against the calibrated
    default), on every route, in the result, its dict and its rendering (before the
    answer)."""
    from kgloom.query.render import render_search

    on = searcher.search("Who was Scrooge's business partner?", mode=mode)
    off = searcher.search("Where was the director of film Billy Elliot born?", mode=mode)
    assert on.info["low_relevance"] is False and on.info["notice"] is None
    assert off.info["low_relevance"] is True and off.info["notice"]
    threshold = searcher.retrieval.low_relevance_similarity
    assert on.info["best_similarity"] >= threshold > off.info["best_similarity"]
    assert off.to_dict()["info"]["notice"] == off.info["notice"]
    text = render_search(off)
    assert f"notice: {off.info['notice']}" in text
    assert text.index("notice: ") < text.index("answer: ")
    assert "notice: " not in render_search(on)


# --- global search -------------------------------------------------------------------------
def test_global_static_maps_every_report_of_the_level_then_reduces(searcher):
    res = searcher.search("What are the main themes?", mode="global", level=1)
    assert res.route == "global" and res.info["level"] == 1
    assert res.info["selection"]["selected"] == [4, 3, 2]
    mapped = [r for b in res.map_batches for r in b.refs]
    assert mapped == ["C4", "C3", "C2"]
    assert res.info["llm"]["search_map"]["calls"] == len(res.map_batches)
    if res.answer is not None:
        assert set(res.citations) <= set(mapped)
        assert all(c.startswith("C") for c in res.citations)
    assert res.context.tokens <= searcher.config.reduce_budget


def test_dynamic_selection_rates_only_the_shortlist_at_each_step(tree, tmp_path):
    # a shortlist of one: the highest community number of each queue
    asked: list[list[int]] = []

    def shortlist(queue: list[int]) -> list[int]:
        asked.append(list(queue))
        return [max(queue)]

    rate, calls = _rater(RATING, tmp_path)
    sel = cc.select_dynamic(tree, rate, threshold=1, shortlist=shortlist)
    # roots 0 1 2 -> 2 (relevant) -> its effective children 10, 12 -> 12 (not relevant)
    assert asked == [[0, 1, 2], [10, 12]]
    assert calls == [[2], [12]]
    assert sel.shortlisted_out == 3 and sel.selected == [2]
    assert sel.summary()["shortlisted_out"] == 3


def test_dynamic_search_shortlists_by_embedding(search_index, tmp_path, embedder):
    reply = _every_step_reply("x", "a point")

    # a shortlist of 1: one rating per step instead of one per root
    s = Searcher(search_index, llm=_llm(ScriptedBackend(reply), tmp_path / "a"),
                 embedder=embedder, config=SearchSettings(rate_shortlist=1))
    res = s.search("What are the main themes?", mode="global", dynamic=True)
    sel = res.info["selection"]
    assert sel["shortlisted_out"] >= 1
    full = Searcher(search_index, llm=_llm(ScriptedBackend(reply), tmp_path / "b"),
                    embedder=embedder, config=SearchSettings(rate_shortlist=0))
    every = full.search("What are the main themes?", mode="global", dynamic=True)
    assert every.info["selection"]["shortlisted_out"] == 0
    assert sel["rated"] < every.info["selection"]["rated"]


def test_global_dynamic_counts_calls_and_progress(search_index, tmp_path, embedder):
    def reply(messages, schema):
        props = schema["properties"]
        if _rating(schema):  # Bob and Tim's community (1, repeated as 4) is relevant
            return {r: 4 if r == "C1" else 0 for r in props}
        if "points" in props:
            refs = props["points"]["items"]["properties"]["reports"]["items"]["enum"]
            return {"points": [{"description": "the Cratchits keep Christmas", "score": 7,
                                "reports": refs[:1]}]}
        enum = props["citations"]["items"]["enum"]
        return {"answer": "family", "citations": enum[:1]}

    s = Searcher(search_index, llm=_llm(ScriptedBackend(reply), tmp_path), embedder=embedder)
    events: list[dict] = []
    res = s.search("What are the main themes?", mode="global", dynamic=True,
                   progress=events.append)
    sel = res.info["selection"]
    # roots 0 and 1 rated in one call; 1 relevant, its child 4 repeats its report: no
    # further call
    assert sel["rated"] == 2 and sel["rating_calls"] == 1 and sel["selected"] == [1]
    assert sel["pruned_subtrees"] == 1 and sel["pruned_reports"] == 2
    assert res.answer == "family" and res.citations == ["C1"]
    assert [e["phase"] for e in events] == ["rate", "map", "reduce"]
    assert events[0]["rated"] == 2 and events[0]["rating_calls"] == 1
    assert res.info["llm"]["search_rate"]["calls"] == 1
    assert res.info["llm"]["total"]["calls"] == 3


@pytest.mark.parametrize("fallback", [True, False])
def test_dynamic_map_falls_back_to_the_replaced_parents(search_index, tmp_path, embedder,
                                                        fallback):
    mapped: list[list[str]] = []
    reply = silent_leaf_reply(mapped)

    # the fixture's hierarchy: roots 0 and 1; 0 -> 2, 3; 1 -> 4 (repeating 1's report)
    cfg = SearchSettings(rate_shortlist=0, map_fallback=fallback)
    s = Searcher(search_index, llm=_llm(ScriptedBackend(reply), tmp_path, f"fb{fallback}"),
                 embedder=embedder, config=cfg)
    events: list[dict] = []
    res = s.search("What are the main themes?", mode="global", dynamic=True,
                   progress=events.append)
    sel = res.info["selection"]
    assert sel["selected"] == [3] and sel["replaced"] == [0]
    if not fallback:
        assert mapped == [["C3"]] and res.answer is None and "fallback" not in res.info["map"]
        return
    assert mapped == [["C3"], ["C0"]]
    assert res.info["map"]["fallback"] == {"reports": 1, "batches": 1, "points": 1,
                                           "above_zero": 1}
    assert res.answer == "themes" and res.citations == ["C0"]
    assert [b.refs for b in res.map_batches] == [["C3"], ["C0"]]
    assert res.sources["C0"]["kind"] == "reports"
    maps = [e for e in events if e["phase"] == "map"]
    assert [(e["done"], e["total"]) for e in maps] == [(1, 1), (2, 2)]


def test_dynamic_map_does_not_fall_back_when_the_selection_answers(search_index, tmp_path,
                                                                    embedder):
    reply = silent_leaf_reply(leaf_score=5)
    s = Searcher(search_index, llm=_llm(ScriptedBackend(reply), tmp_path), embedder=embedder,
                 config=SearchSettings(rate_shortlist=0))
    res = s.search("What are the main themes?", mode="global", dynamic=True)
    assert "fallback" not in res.info["map"] and res.citations == ["C3"]
    assert res.info["llm"]["search_map"]["calls"] == 1


def test_global_dynamic_rating_prompts_within_budget_and_a_failed_batch_goes_on(
        search_index, tmp_path, embedder):
    prompts: list[tuple[list[str], str]] = []

    def reply(messages, schema):
        props = schema["properties"]
        if _rating(schema):
            text = messages[-1]["content"]
            prompts.append((list(props), text.split("Reports:\n", 1)[1].split("\n\n", 1)[0]))
            if "C0" in props:
                return {"C0": 9}  # breaks the schema: this batch fails twice
            return dict.fromkeys(props, 4)
        if "points" in props:
            refs = props["points"]["items"]["properties"]["reports"]["items"]["enum"]
            return {"points": [{"description": "a point", "score": 7, "reports": refs[:1]}]}
        return {"answer": "x", "citations": props["citations"]["items"]["enum"][:1]}

    cfg = SearchSettings(rate_batch=1, rate_budget=40, rate_shortlist=0)
    s = Searcher(search_index, llm=_llm(ScriptedBackend(reply), tmp_path), embedder=embedder,
                 config=cfg)
    res = s.search("What are the main themes?", mode="global", dynamic=True)
    assert res.route == "global" and res.answer == "x"
    for refs, lines in prompts:  # each call: its batch's refs, one line each, in budget
        assert refs_in(lines) == refs and len(refs) <= cfg.rate_batch
        assert s.counter(lines) <= cfg.rate_budget
    rate_failures = [f for f in res.failures if f["stage"] == "search_rate"]
    assert [f["item_id"] for f in rate_failures] == ["C0"]
    sel = res.info["selection"]
    assert sel["ratings"]["0"] is None and sel["rating_failures"] == 1
    assert 0 not in sel["selected"] and sel["selected"]
    with pytest.raises(ValueError, match="rate budget of 3 tokens"):
        Searcher(search_index, llm=_llm(ScriptedBackend(reply), tmp_path, "b"),
                 embedder=embedder, config=SearchSettings(rate_budget=3)).search(
            "What are the main themes?", mode="global", dynamic=True)


def test_global_without_reports_says_so_and_falls_back_to_local(search_index, tmp_path,
                                                                embedder):
    out = shutil.copytree(search_index, tmp_path / "noreports")
    (storage.table_path(out, schemas.COMMUNITY_REPORTS)).unlink()
    s = Searcher(out, embedder=embedder, fake_llm=True, cache_path=tmp_path / "c.sqlite")
    res = s.search("What are the main themes?", mode="global")
    assert res.route == "local" and "no community reports" in res.info["fallback"]
    assert "fell back to local" in res.route_reason and res.answer
    assert s.search("What are the main themes?", mode="global", dynamic=True).route == "local"


def test_index_without_graph_files_answers_from_text_units(search_index, tmp_path, embedder):
    from test_query import GRAPH_FILES

    out = shutil.copytree(search_index, tmp_path / "vectors_only")
    for name in GRAPH_FILES + ["communities.parquet", "community_reports.parquet"]:
        (out / name).unlink()
    s = Searcher(out, embedder=embedder, fake_llm=True, cache_path=tmp_path / "c.sqlite")
    for mode in ("local", "global", "auto"):
        res = s.search("Who is Tiny Tim's father?", mode=mode, budget=300)
        assert res.route in ("local", "direct") and res.answer
        assert {x.kind for x in res.context.items} == {"text_units"}
        assert set(res.citations) <= set(res.context.refs)


def test_global_context_only_lists_the_map_batches(searcher):
    res = searcher.search("themes?", mode="global", level=0, answer=False)
    assert res.route == "global" and res.answer is None and res.info["llm"] == {}
    assert [r for b in res.map_batches for r in b.refs] == ["C1", "C0"]


# --- routing -------------------------------------------------------------------------------
@pytest.mark.parametrize("question,linked,route,rule", [
    ("What are the main themes of the book?", [], "global", "thematic"),
    ("Summarize the story", [], "global", "thematic"),
    ("What kinds of places appear across the documents?", [], "global", "thematic"),
    ("How is Scrooge related to Fred?", ["EBENEZER SCROOGE", "FRED"], "local", "relation"),
    ("Which film came out first, Alpha or Beta?", ["ALPHA", "BETA"], "local", "relation"),
    ("Did Scrooge and Fezziwig meet?", ["EBENEZER SCROOGE", "FEZZIWIG"], "local", "entities"),
    ("Who is the mother of the director of Jaws?", ["JAWS"], "local", "chain"),
    ("When did Lothair II's mother die?", ["LOTHAIR II"], "local", "chain"),
    ("Where did Sylvia Burka's husband die?", ["SYLVIA BURKA"], "local", "chain"),
    ("Who is Bob Cratchit?", ["BOB CRATCHIT"], "local", "profile"),
    ("When was Marley buried?", ["JACOB MARLEY"], "direct", "lookup"),
])
def test_routing_rules(question, linked, route, rule):
    got = route_by_rules(question, linked)
    assert got is not None and (got.route, got.rule) == (route, rule)
    assert got.decided_by == "rules" and got.reason


def test_routing_without_a_rule_asks_the_classifier_or_says_why_not(tmp_path):
    assert route_by_rules("What are the themes of Scrooge's life?", ["EBENEZER SCROOGE"]) \
        is None
    assert route_by_rules("Was ist das?", []) is None
    no_model, failure = route_question("Was ist das?", [], None, 0)
    assert (no_model.route, no_model.decided_by, failure) == ("local", "no_model", None)
    llm = _llm(ScriptedBackend(lambda m, s: {"route": "global", "reason": "themes"}), tmp_path)
    got, failure = route_question("Was ist das?", [], llm, 0)
    assert (got.route, got.decided_by, failure) == ("global", "classifier", None)
    assert "themes" in got.reason
    bad = _llm(ScriptedBackend(lambda m, s: {"route": "sideways", "reason": "x"}),
               tmp_path, "bad")
    got, failure = route_question("Was ist das?", [], bad, 0)
    assert got.decided_by == "classifier_failed" and failure["stage"] == "search_route"


def test_auto_records_route_and_reason(searcher):
    res = searcher.search("How is Scrooge related to Bob Cratchit?", mode="auto")
    assert res.route == "local" and res.info["routing"]["rule"] == "relation"
    assert "EBENEZER SCROOGE" in res.info["routing"]["linked"]
    res = searcher.search("What are the main themes of the book?", mode="auto")
    assert res.route == "global" and "corpus-wide" in res.route_reason


# --- bad input -----------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs,match", [
    ({"question": "  "}, "non-empty"),
    ({"question": "x", "mode": "drift"}, "mode must be one of"),
    ({"question": "Who is Fred?", "budget": 0}, "budget must be a positive"),
    ({"question": "Who is Fred?", "mode": "local", "budget": 3}, "budget of 3 tokens"),
    ({"question": "x", "mode": "global", "level": 9}, "level 9 is not a level"),
    ({"question": "x", "mode": "global", "dynamic": True, "answer": False}, "context-only"),
])
def test_bad_inputs_raise_value_errors(searcher, kwargs, match):
    with pytest.raises(ValueError, match=match):
        searcher.search(**kwargs)


def test_question_in_another_language_is_answered_from_what_is_found(searcher):
    res = searcher.search("Что показал Призрак прошлого Рождества?", mode="auto")
    assert res.context.items and res.answer is not None
    # local contexts cite their lines, global ones the reports their key points name
    assert res.citations and set(res.citations) <= set(refs_in(res.context.text))


def test_search_writes_only_its_query_cache(search_index, tmp_path, embedder):
    before = {p: p.stat().st_mtime_ns for p in search_index.rglob("*") if p.is_file()}
    s = Searcher(search_index, embedder=embedder, fake_llm=True,
                 cache_path=tmp_path / "q.sqlite")
    s.search("Who is Fred?", mode="local")
    after = {p: p.stat().st_mtime_ns for p in search_index.rglob("*") if p.is_file()}
    assert after == before and (tmp_path / "q.sqlite").exists()


# --- CLI -----------------------------------------------------------------------------------
def test_cli_search_modes(search_index, tmp_path):
    from typer.testing import CliRunner

    from kgloom.cli import app

    runner = CliRunner()
    base = ["--output-dir", str(search_index), "--fake-llm", "--cache-path",
            str(tmp_path / "c.sqlite")]
    ctx = runner.invoke(app, ["query", "Who is Tiny Tim's father?", "--mode", "local",
                              "--context-only", "--budget", "300", *base])
    assert ctx.exit_code == 0, ctx.output
    assert "route: local (asked for)" in ctx.output and "Text units:" in ctx.output
    assert re.search(r"context: \d+ of 300 tokens", ctx.output)
    js = runner.invoke(app, ["query", "What are the main themes of the book?", "--mode",
                             "auto", "--json", *base])
    assert js.exit_code == 0, js.output
    payload = json.loads(js.output[js.output.index("{"):])
    assert payload["route"] == "global" and payload["info"]["routing"]["rule"] == "thematic"
    assert set(payload["citations"]) <= {c["ref"] for c in payload["cited"]}
    dyn = runner.invoke(app, ["query", "themes?", "--mode", "global", "--dynamic",
                              "--level", "1", *base])
    assert dyn.exit_code == 0, dyn.output
    assert "communities: dynamic" in dyn.output or "fallback:" in dyn.output
    keep = runner.invoke(app, ["query", "themes?", "--mode", "global", "--dynamic",
                               "--keep-parent", "--json", *base])
    assert keep.exit_code == 0, keep.output
    kept = json.loads(keep.output[keep.output.index("{"):])["info"]["selection"]
    assert kept["replaced"] == [] and kept["selected"]
    bad = runner.invoke(app, ["query", "Who?", "--mode", "local", "--budget", "2", *base])
    assert bad.exit_code == 2 and "budget of 2 tokens" in bad.output
