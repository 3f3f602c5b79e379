"""Lazy community reports (``llm_reports: lazy``): the reports stage makes no model call
and marks the communities eager mode would give an LLM report; global search writes such
a report the first time it reaches the community, with the stage's own prompt, and keeps
it for the next query. Fake model only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from test_query import write_carol_index

from kgloom.core import layout, schemas, storage
from kgloom.embedding.tokenizer import default_tokenizer
from kgloom.llm import CachedLLM, Completion, LLMCache
from kgloom.llm.fake import FakeBackend
from kgloom.query.context_builder.lazy_reports import LAZY_REPORTS_FILE, LazyReportStore
from kgloom.query.searcher import Searcher, SearchSettings
from kgloom.report_writer import (
    CHOICES_TEMPLATE,
    REJECTED,
    REPORT_TEMPLATE,
    report_settings,
    rule_report,
)
from kgloom.reports.community_reports import build_community_reports, needs_llm_report
from kgloom.settings.indexing import IndexSettings
from tests.conftest import build_carol_tables

ALL_LLM = {"report_llm_min_members": 0, "report_llm_min_relationships": 0,
           "report_llm_min_source_tokens": 0}


class Recording:
    """A fake backend that records every call's messages and schema; ``reply`` (messages,
    schema) -> obj overrides the fake's reply to report calls."""

    def __init__(self, reply=None) -> None:
        self.fake = FakeBackend()
        self.model_id = self.fake.model_id
        self.reply = reply
        self.seen: list[tuple[list[dict], dict]] = []

    def complete(self, messages, schema, max_tokens, seed, stop_on_loop=False) -> Completion:
        self.seen.append((messages, schema))
        if self.reply is not None and is_report_call(messages):
            return Completion(json.dumps(self.reply(messages, schema)), 1, 1, 0.0)
        return self.fake.complete(messages, schema, max_tokens, seed)

    def report_calls(self) -> list[str]:
        """Each report call as JSON (messages and schema), in call order."""
        return [json.dumps([m, s], sort_keys=True) for m, s in self.seen
                if is_report_call(m)]


def is_report_call(messages: list[dict]) -> bool:
    """A call of either report form (the model writing it, or choosing its parts)."""
    return messages[0]["content"] in (REPORT_TEMPLATE.system, CHOICES_TEMPLATE.system)


def _llm(backend: Any, path: Path) -> CachedLLM:
    return CachedLLM(backend, LLMCache(path), backend.model_id)


def carol() -> dict[str, pl.DataFrame]:
    """The conftest Carol tables, each community's relationship_ids filled (the
    relationships with both ends inside), as the communities stage writes them."""
    t = build_carol_tables()
    rels = t["relationships"]
    inside = [rels.filter(pl.col("source_id").is_in(m) & pl.col("target_id").is_in(m))["id"]
              .to_list() for m in t["communities"]["entity_ids"].to_list()]
    t["communities"] = t["communities"].with_columns(
        relationship_ids=pl.Series(inside, dtype=pl.List(pl.String)))
    return t


def _build(t, llm, settings, previous=None):
    return build_community_reports(t["communities"], t["entities"], t["relationships"], llm,
                                   settings, default_tokenizer(), previous=previous)


# --- the reports stage -----------------------------------------------------------------------
@pytest.mark.parametrize("sizing", [{}, ALL_LLM])
def test_lazy_build_makes_no_call_and_marks_what_eager_writes_by_llm(tmp_path, sizing):
    t = carol()
    eager_backend, lazy_backend = Recording(), Recording()
    eager, _, _ = _build(t, _llm(eager_backend, tmp_path / "e.sqlite"), IndexSettings(**sizing))
    lazy, failures, methods = _build(t, _llm(lazy_backend, tmp_path / "l.sqlite"),
                                     IndexSettings(**sizing, llm_reports="lazy"))
    assert lazy_backend.seen == [] and failures.height == 0
    assert eager_backend.seen  # eager mode did call the model for these communities
    settings = IndexSettings(**sizing)
    chosen = {c["community"] for c in t["communities"].iter_rows(named=True)
              if needs_llm_report(c, settings)}
    by = dict(lazy.select("community", "generated_by").iter_rows())
    assert {c for c, b in by.items() if b == "lazy"} == chosen
    assert {c for c, b in by.items() if b == "rules"} == set(by) - chosen
    assert {c for c, b in dict(eager.select("community", "generated_by").iter_rows()).items()
            if b == "llm"} == chosen
    # every lazy row is the community's rule report, in GraphRAG's columns
    assert lazy.schema == pl.Schema(schemas.COMMUNITY_REPORTS_SCHEMA)
    for r in lazy.filter(pl.col("generated_by") == "lazy").iter_rows(named=True):
        c = t["communities"].filter(pl.col("community") == r["community"]).row(0, named=True)
        assert json.loads(r["full_content_json"]) == rule_report(c, t["entities"],
                                                                  t["relationships"])
    assert chosen and methods.get("lazy", 0) > 0
    # the rule reports of the communities too small for the model are the same either way
    rules = lazy.filter(pl.col("generated_by") == "rules")
    assert rules.equals(eager.filter(pl.col("community").is_in(rules["community"].to_list())))


def test_lazy_needs_no_model_and_fast_marks_nothing():
    t = carol()
    lazy, _, _ = _build(t, None, IndexSettings(**ALL_LLM, llm_reports="lazy"))
    assert set(lazy["generated_by"]) == {"lazy"}
    fast, _, _ = _build(t, None, IndexSettings(method="fast", llm_reports="lazy"))
    assert set(fast["generated_by"]) == {"rules"}


def test_unknown_llm_reports_value_is_refused():
    with pytest.raises(ValueError, match="llm_reports"):
        IndexSettings(llm_reports="sometimes")


def test_switching_modes_never_reuses_the_other_kind_of_report(tmp_path):
    t = carol()
    eager_s, lazy_s = IndexSettings(**ALL_LLM), IndexSettings(**ALL_LLM, llm_reports="lazy")
    backend = Recording()
    llm = _llm(backend, tmp_path / "c.sqlite")
    eager, _, _ = _build(t, llm, eager_s)
    n_eager = len(backend.seen)
    # eager -> lazy: no call, and the LLM reports are not kept as if they were lazy ones
    lazy, _, methods = _build(t, llm, lazy_s, previous=eager)
    assert len(backend.seen) == n_eager and "reused" not in methods
    assert set(lazy["generated_by"]) == {"lazy"}
    assert not set(lazy["report_key"]) & set(eager["report_key"])
    # lazy -> lazy: every report kept, no call
    again, _, methods = _build(t, llm, lazy_s, previous=lazy)
    assert methods.get("reused") == lazy.height and again.equals(lazy)
    # lazy -> eager: the rule reports are not kept as LLM reports: each is written again
    # (the LLM cache answers the prompts, so the backend sees no new call)
    back, _, methods = _build(t, llm, eager_s, previous=lazy)
    assert "reused" not in methods and set(back["generated_by"]) == {"llm"}
    assert llm.stats["community_reports"].cache_hits == n_eager
    assert back.drop("human_readable_id").equals(eager.drop("human_readable_id"))


# --- global search over a lazy index -----------------------------------------------------------
def write_lazy_index(folder: Path, embedder, settings: IndexSettings) -> Path:
    """The Carol index with communities (relationship_ids filled) and the reports of a
    lazy build, its stats recording the report settings as the asset does."""
    out = write_carol_index(folder, embedder)
    t = carol()
    reports, _, _ = _build(t, None, settings)
    storage.write_table(t["communities"], out, schemas.COMMUNITIES)
    storage.write_table(reports, out, schemas.COMMUNITY_REPORTS)
    storage.write_json({"stages": {layout.COMMUNITY_REPORTS: {
        "report_settings": report_settings(settings)}}}, out / layout.SUMMARY_FILE)
    return out


LAZY = IndexSettings(**ALL_LLM, llm_reports="lazy", report_max_input_tokens=600, seed=7)
# the model writes every field: the form whose replies the grounding check can reject
LAZY_FREE = IndexSettings(**ALL_LLM, llm_reports="lazy", report_max_input_tokens=600, seed=7,
                          llm_report_form="free")


@pytest.fixture(scope="module")
def lazy_index(tmp_path_factory, embedder) -> Path:
    return write_lazy_index(tmp_path_factory.mktemp("lazy_index"), embedder, LAZY)


def _eager_report_calls(tmp_path: Path) -> set[str]:
    """The report calls (messages and schema) eager mode makes with :data:`LAZY`'s
    settings."""
    backend = Recording()
    _build(carol(), _llm(backend, tmp_path / "eager.sqlite"),
           LAZY.model_copy(update={"llm_reports": "eager"}))
    return set(backend.report_calls())


def test_global_search_writes_a_lazy_report_once_with_the_stage_prompt(lazy_index, tmp_path,
                                                                       embedder):
    backend = Recording()
    s = Searcher(lazy_index, llm=_llm(backend, tmp_path / "q.sqlite"), embedder=embedder,
                 cache_path=tmp_path / "q.sqlite")
    first = s.search("What are the main themes?", mode="global", level=1)
    written = backend.report_calls()
    info = first.info["lazy_reports"]
    selected = first.info["selection"]["selected"]
    assert written and info["written"] == len(written) and info["failed"] == 0
    assert info["awaiting_after"] < info["awaiting_before"]
    # the same prompt, context and schema the eager stage sends for those communities
    assert set(written) <= _eager_report_calls(tmp_path)
    # the map read the LLM reports, not the rule reports
    tree = s.index.tables.tree
    assert {tree.reports[c].generated_by for c in selected} == {"llm"}
    mapped = "\n".join(b.text for b in first.map_batches)
    assert all(tree.reports[c].title in mapped for c in selected)
    assert (tmp_path / LAZY_REPORTS_FILE).exists()
    assert len(LazyReportStore(tmp_path / LAZY_REPORTS_FILE)) == len(written)
    # the same searcher: no report call
    second = s.search("Who are the people?", mode="global", level=1)
    assert backend.report_calls() == written
    assert "community_reports" not in second.info["llm"]
    # a new searcher with another LLM cache in the same folder: the side table answers
    other = Recording()
    fresh = Searcher(lazy_index, llm=_llm(other, tmp_path / "q2.sqlite"), embedder=embedder,
                     cache_path=tmp_path / "q2.sqlite")
    third = fresh.search("What are the main themes?", mode="global", level=1)
    assert other.report_calls() == []
    assert third.info["lazy_reports"]["reused"] == len(written)
    assert third.info["selection"]["selected"] == selected
    assert [b.text for b in third.map_batches] == [b.text for b in first.map_batches]


def test_dynamic_search_rates_the_llm_reports_of_the_communities_it_reaches(
        lazy_index, tmp_path, embedder):
    backend = Recording()
    s = Searcher(lazy_index, llm=_llm(backend, tmp_path / "q.sqlite"), embedder=embedder,
                 cache_path=tmp_path / "q.sqlite")
    res = s.search("What are the main themes?", mode="global", dynamic=True)
    tree = s.index.tables.tree
    rated = [int(c) for c in res.info["selection"]["ratings"]]
    assert rated and res.info["lazy_reports"]["written"] > 0
    assert {tree.reports[c].generated_by for c in rated} == {"llm"}
    # every report call came before the rating call that showed its report
    first_rating = next(i for i, (m, sch) in enumerate(backend.seen)
                        if m[0]["content"].startswith("You judge"))
    first_report = next(i for i, (m, _) in enumerate(backend.seen) if is_report_call(m))
    assert first_report < first_rating


def test_global_search_without_the_model_reads_the_rule_reports(lazy_index, tmp_path,
                                                                embedder):
    t = carol()
    s = Searcher(lazy_index, fake_llm=True, embedder=embedder, cache_path=tmp_path / "q.sqlite")
    res = s.search("What are the main themes?", mode="global", level=1, answer=False)
    assert res.route == "global" and res.context.items
    comms = {r["community"]: r for r in t["communities"].iter_rows(named=True)}
    for c in res.info["selection"]["selected"]:
        rule = rule_report(comms[c], t["entities"], t["relationships"])
        assert s.index.tables.tree.reports[c].title == rule["title"]
    lazy = res.info["lazy_reports"]
    assert lazy["written"] == 0 and lazy["awaiting_after"] == lazy["awaiting_before"] > 0
    assert not (tmp_path / LAZY_REPORTS_FILE).exists()
    # with the model but lazy_reports off: no report call either
    backend = Recording()
    off = Searcher(lazy_index, llm=_llm(backend, tmp_path / "o.sqlite"), embedder=embedder,
                   cache_path=tmp_path / "o.sqlite",
                   config=SearchSettings(lazy_reports=False))
    answered = off.search("What are the main themes?", mode="global", level=1)
    assert answered.route == "global" and backend.report_calls() == []


def test_a_rejected_lazy_report_keeps_the_rule_report_and_is_not_asked_again(
        tmp_path_factory, tmp_path, embedder):
    index = write_lazy_index(tmp_path_factory.mktemp("lazy_rejected"), embedder, LAZY_FREE)

    def invented(messages, schema):  # names nobody in the context
        return {"title": "Sherlock Holmes", "summary": "Sherlock Holmes lives in Baker Street.",
                "rating": 5, "rating_explanation": "Holmes matters.",
                "findings": [{"summary": "Watson helps", "explanation": "Watson writes."}]}

    backend = Recording(invented)
    s = Searcher(index, llm=_llm(backend, tmp_path / "q.sqlite"), embedder=embedder,
                 cache_path=tmp_path / "q.sqlite")
    res = s.search("What are the main themes?", mode="global", level=1)
    asked = backend.report_calls()
    info = res.info["lazy_reports"]
    assert asked and info["rejected"] == len(asked) and info["written"] == 0
    assert [f for f in res.failures if f["reason"].startswith(REJECTED)]
    tree = s.index.tables.tree
    assert all(tree.reports[c].generated_by == "rules" and "Holmes" not in tree.reports[c].title
               for c in res.info["selection"]["selected"])
    other = Recording(invented)
    fresh = Searcher(index, llm=_llm(other, tmp_path / "q2.sqlite"), embedder=embedder,
                     cache_path=tmp_path / "q2.sqlite")
    fresh.search("What are the main themes?", mode="global", level=1)
    assert other.report_calls() == []


def test_a_search_writes_at_most_its_share_of_lazy_reports(tmp_path_factory, tmp_path,
                                                          embedder):
    index = write_lazy_index(tmp_path_factory.mktemp("lazy_capped"), embedder, LAZY)
    backend = Recording()
    s = Searcher(index, llm=_llm(backend, tmp_path / "q.sqlite"), embedder=embedder,
                 cache_path=tmp_path / "q.sqlite",
                 config=SearchSettings(lazy_reports_per_search=1))
    first = s.search("What are the main themes?", mode="global", level=1)
    info = first.info["lazy_reports"]
    selected = first.info["selection"]["selected"]
    tree = s.index.tables.tree
    assert len(backend.report_calls()) == info["written"] == 1
    assert info["capped"] == len({tree.reports[c].report_key for c in selected}) - 1 > 0
    # the best-ranked report of the static selection got its LLM report first
    assert tree.reports[selected[0]].generated_by == "llm"
    assert [tree.reports[c].generated_by for c in selected[1:]].count("lazy") == info["capped"]
    second = s.search("What are the main themes?", mode="global", level=1)
    assert len(backend.report_calls()) == 2 and second.info["lazy_reports"]["written"] == 1


def test_side_table_is_shared_whole_and_an_unwritable_folder_does_not_raise(tmp_path):
    row = {"generated_by": "llm", "title": "t", "summary": "s", "full_content": "# t\n",
           "rank": 3.0, "full_content_json": "{}", "model_id": "m", "reason": ""}
    a, b = LazyReportStore(tmp_path / "x.sqlite"), LazyReportStore(tmp_path / "x.sqlite")
    assert b.get("k") is None and a.put("k", row)
    assert b.get("k") == row  # another connection sees the committed row
    assert a.put("k", {**row, "title": "other"}) and b.get("k") == row  # first one kept
    missing = LazyReportStore(tmp_path / "no" / "such" / "folder" / "x.sqlite")
    assert missing.get("k") is None and not missing.put("k", row) and len(missing) == 0


@pytest.mark.parametrize("cap", [1, 2])
def test_eager_writes_at_most_its_cap_nearest_the_root_and_leaves_the_rest_lazy(tmp_path, cap):
    t = carol()
    backend = Recording()
    settings = IndexSettings(**ALL_LLM, report_llm_eager_max=cap)
    reports, _, _ = _build(t, _llm(backend, tmp_path / "c.sqlite"), settings)
    chosen = [c for c in t["communities"].iter_rows(named=True)
              if needs_llm_report(c, settings)]
    assert len(chosen) > cap  # the cap binds on this graph
    first = sorted(chosen, key=lambda c: (c["level"], -len(c["entity_ids"]),
                                          c["community"]))[:cap]
    by = dict(reports.select("community", "generated_by").iter_rows())
    assert {c for c, b in by.items() if b == "llm"} == {c["community"] for c in first}
    assert {c for c, b in by.items() if b == "lazy"} == \
        {c["community"] for c in chosen} - {c["community"] for c in first}
    assert len(backend.report_calls()) <= cap  # communities repeated per level share one
    # no cap: every chosen community is written now, as before the cap
    uncapped, _, _ = _build(t, _llm(Recording(), tmp_path / "u.sqlite"),
                            IndexSettings(**ALL_LLM, report_llm_eager_max=0))
    assert set(uncapped.filter(pl.col("generated_by") == "llm")["community"].to_list()) == \
        {c["community"] for c in chosen}


def _invented(messages, schema):  # names nobody in any community's context
    return {"title": "Sherlock Holmes", "summary": "Sherlock Holmes lives in Baker Street.",
            "rating": 5, "rating_explanation": "Holmes matters.",
            "findings": [{"summary": "Watson helps", "explanation": "Watson writes."}]}


def test_the_stage_gives_up_on_llm_reports_after_rejected_replies_in_a_row(tmp_path):
    t = carol()
    never = Recording(_invented)
    all_asked, _, _ = _build(t, _llm(never, tmp_path / "n.sqlite"),
                             IndexSettings(**ALL_LLM, report_llm_eager_max=0,
                                           report_llm_give_up_after=0,
                                           llm_report_form="free"))
    assert len(never.report_calls()) > 2  # without giving up every chosen one is asked
    assert set(all_asked["generated_by"]) <= {"rules"}  # and every reply was rejected
    backend = Recording(_invented)
    settings = IndexSettings(**ALL_LLM, report_llm_eager_max=0, report_llm_give_up_after=2,
                             llm_report_form="free")
    reports, failures, methods = _build(t, _llm(backend, tmp_path / "g.sqlite"), settings)
    assert len(backend.report_calls()) == 2
    assert failures.filter(pl.col("reason").str.starts_with(REJECTED)).height == 2
    lazy = reports.filter(pl.col("generated_by") == "lazy")
    assert lazy.height == methods["lazy_after_rejections"] > 0
    # a lazy report is the rule report global search starts from, as llm_reports: lazy
    chosen = {c["community"] for c in t["communities"].iter_rows(named=True)
              if needs_llm_report(c, settings)}
    assert set(lazy["community"].to_list()) <= chosen
    lazy_mode, _, _ = _build(t, _llm(Recording(), tmp_path / "l.sqlite"),
                             IndexSettings(**ALL_LLM, llm_reports="lazy",
                                           llm_report_form="free"))
    keys = dict(lazy_mode.select("community", "report_key").iter_rows())
    assert all(keys[c] == k for c, k in lazy.select("community", "report_key").iter_rows())


def test_kept_replies_never_make_the_stage_give_up(tmp_path):
    t = carol()
    backend = Recording()  # the fake model's replies pass the check
    settings = IndexSettings(**ALL_LLM, report_llm_eager_max=0, report_llm_give_up_after=1)
    reports, _, methods = _build(t, _llm(backend, tmp_path / "k.sqlite"), settings)
    assert "lazy_after_rejections" not in methods
    assert "lazy" not in set(reports["generated_by"])
    assert "llm" in set(reports["generated_by"])
