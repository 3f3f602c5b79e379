"""Community reports over the Christmas Carol fixture graph, with a fake LLM."""

from __future__ import annotations

import json

import polars as pl
import pytest

from kgloom.core import schemas
from kgloom.embedding.tokenizer import default_tokenizer
from kgloom.llm import CachedLLM, Completion, LLMCache
from kgloom.llm.fake import FakeBackend
from kgloom.report_writer import REPORT_TEMPLATE, build_report_context
from kgloom.reports.community_reports import build_community_reports
from kgloom.settings.indexing import IndexSettings
from tests.conftest import build_carol_tables


@pytest.fixture
def tables() -> dict[str, pl.DataFrame]:
    """The fixture graph, with each community's relationship_ids filled in (the
    relationships whose two ends are both members), as the communities stage does."""
    t = build_carol_tables()
    rels = t["relationships"]
    rel_ids = []
    for members in t["communities"]["entity_ids"].to_list():
        inside = rels.filter(pl.col("source_id").is_in(members)
                             & pl.col("target_id").is_in(members))
        rel_ids.append(inside["id"].to_list())
    t["communities"] = t["communities"].with_columns(
        relationship_ids=pl.Series(rel_ids, dtype=pl.List(pl.String)))
    return t


# the model writes every field (GraphRAG's form): what most tests here check; the default
# form, where the model chooses among options of the data, is tested at the end
FREE = {"llm_report_form": "free"}
# every community gets an LLM report (the sizing rule off), as before reports were sized
ALL_LLM = {"report_llm_min_members": 0, "report_llm_min_relationships": 0,
           "report_llm_min_source_tokens": 0}


def _llm(tmp_path, backend) -> CachedLLM:
    return CachedLLM(backend, LLMCache(tmp_path / "cache.sqlite"), backend.model_id)


def _community(tables, number: int) -> dict:
    return tables["communities"].filter(pl.col("community") == number).row(0, named=True)


def test_every_community_gets_a_graphrag_report(tmp_path, tables):
    backend = FakeBackend()
    llm = _llm(tmp_path, backend)
    reports, failures, methods = build_community_reports(
        tables["communities"], tables["entities"], tables["relationships"],
        llm, IndexSettings(**FREE, **ALL_LLM), default_tokenizer())

    assert failures.height == 0
    assert set(reports["generated_by"]) == {"llm"}
    assert reports.columns == list(schemas.COMMUNITY_REPORTS_SCHEMA)
    assert reports.schema == pl.Schema(schemas.COMMUNITY_REPORTS_SCHEMA)
    assert sorted(reports["community"]) == sorted(tables["communities"]["community"])
    # one call per community, except that parent 1 (level 0) has the same members and
    # relationships as its child 4 (level 1): it gets the child's report with no call
    assert methods == {"members": 4, "carried_down": 1}
    assert backend.calls == 4
    assert llm.stats["community_reports"].cache_hits == 0
    same = reports.filter(pl.col("community").is_in([1, 4]))
    assert same["report_key"].n_unique() == 1 and same["full_content"].n_unique() == 1
    assert sum(methods.values()) == tables["communities"].height
    assert reports["rank"].is_between(0, 10).all()
    for r in reports.iter_rows(named=True):
        assert r["full_content"].startswith(f"# {r['title']}\n")
        assert r["summary"] in r["full_content"]
        assert all(f"## {f['summary']}" in r["full_content"] for f in r["findings"])
        assert json.loads(r["full_content_json"])["title"] == r["title"]
        assert 1 <= len(r["findings"]) <= 3
    # hierarchy copied from the communities
    c = tables["communities"].sort("community")
    rs = reports.sort("community")
    assert rs["level"].to_list() == c["level"].to_list()
    assert rs["parent"].to_list() == c["parent"].to_list()
    assert rs["children"].to_list() == c["children"].to_list()
    assert rs["size"].to_list() == c["size"].to_list()
    assert rs["id"].n_unique() == rs.height


def test_reports_are_cached_and_failures_are_rows(tmp_path, tables):
    args = (tables["communities"], tables["entities"], tables["relationships"])
    settings, tok = IndexSettings(**FREE, **ALL_LLM), default_tokenizer()
    first, _, _ = build_community_reports(*args, _llm(tmp_path, FakeBackend()), settings, tok)
    again_backend = FakeBackend()
    second, _, _ = build_community_reports(*args, _llm(tmp_path, again_backend), settings, tok)
    assert again_backend.calls == 0
    assert second.equals(first)

    broken = FakeBackend(broken_every=1)
    reports, failures, _ = build_community_reports(
        *args, CachedLLM(broken, LLMCache(tmp_path / "other.sqlite"), "broken"), settings, tok)
    assert reports.height == 0
    assert reports.columns == list(schemas.COMMUNITY_REPORTS_SCHEMA)
    assert sorted(failures["item_id"].cast(pl.Int64)) == sorted(
        tables["communities"]["community"])
    assert set(failures["stage"]) == {"community_reports"}


class _Recording:
    """Answers a fixed valid report and records each prompt's context."""

    model_id = "recording"

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def complete(self, messages, schema, max_tokens, seed, stop_on_loop=False):
        self.prompts.append(messages[-1]["content"])
        n = len(self.prompts)
        return Completion(json.dumps({
            "title": f"Report {n}", "summary": f"Summary {n}", "rating": 7,
            "rating_explanation": "central characters",
            "findings": [{"summary": "Scrooge", "explanation": "he is everywhere"}]}), 1, 1, 0.0)


def test_parents_use_child_reports_when_over_budget(tmp_path, tables):
    backend = _Recording()
    reports, failures, methods = build_community_reports(
        tables["communities"], tables["entities"], tables["relationships"],
        _llm(tmp_path, backend), IndexSettings(**FREE, report_max_input_tokens=60, **ALL_LLM),
        default_tokenizer())
    assert failures.height == 0
    assert reports["rank"].to_list() == [7.0] * reports.height
    assert methods.get("sub_reports", 0) >= 1
    # the deepest level is written first, and a parent's context quotes its children
    levels = [_community(tables, c)["level"] for c in reports.sort("community")["community"]]
    assert levels == [0, 0, 1, 1, 1]
    order = {r["community"]: int(r["title"].split()[1]) for r in reports.iter_rows(named=True)}
    assert max(order[c] for c in (2, 3, 4)) < order[0]
    assert order[1] == order[4]  # 1 is 4 carried up a level: the same report, no call
    assert any("Sub-community reports:" in p for p in backend.prompts)
    sub_prompt = next(p for p in backend.prompts if "Sub-community reports:" in p)
    assert "Report " in sub_prompt and "Summary " in sub_prompt


def test_context_members_when_it_fits(tables):
    tok = default_tokenizer()
    c = _community(tables, 0)
    ctx, method = build_report_context(c, tables["entities"], tables["relationships"], [],
                                       10_000, tok)
    assert method == "members"
    lines = ctx.split("\n")
    assert lines[0] == "Entities:"
    assert "Relationships:" in lines
    for title in ["EBENEZER SCROOGE", "JACOB MARLEY", "FRED", "GHOST OF CHRISTMAS PAST",
                  "FEZZIWIG"]:
        assert any(line.startswith(f"- {title} (PERSON): ") for line in lines)
    assert "BOB CRATCHIT" not in ctx  # not a member
    # highest degree first: Scrooge has the most relationships
    assert lines[1].startswith("- EBENEZER SCROOGE")
    # a relationship description with a newline stays on one line
    assert "- EBENEZER SCROOGE -> JACOB MARLEY: Marley was Scrooge's late business partner. " \
           "They traded as Scrooge and Marley." in lines


@pytest.mark.parametrize("budget", [25, 40, 60])
def test_context_sub_reports_or_truncated_within_budget(tables, budget):
    tok = default_tokenizer()
    c = _community(tables, 0)
    full, _ = build_report_context(c, tables["entities"], tables["relationships"], [],
                                   10_000, tok)
    assert tok.count(full) > budget  # so the budget really binds

    children = [{"title": "Scrooge and Marley", "summary": "The old firm.", "size": 3},
                {"title": "Christmas Past", "summary": "The Ghost and Fezziwig.", "size": 2}]
    ctx, method = build_report_context(c, tables["entities"], tables["relationships"],
                                       children, budget, tok)
    assert method == "sub_reports"
    assert ctx.split("\n")[:2] == ["Sub-community reports:",
                                   "- Scrooge and Marley: The old firm."]  # largest first
    assert tok.count(ctx) <= budget

    ctx, method = build_report_context(c, tables["entities"], tables["relationships"], [],
                                       budget, tok)
    assert method == "truncated"
    assert tok.count(ctx) <= budget
    assert full.startswith(ctx)  # a prefix of the members context, whole lines only


def test_context_truncated_when_even_one_child_report_does_not_fit(tables):
    tok = default_tokenizer()
    c = _community(tables, 0)
    long_child = [{"title": "Scrooge", "summary": "Scrooge " * 50, "size": 3}]
    ctx, method = build_report_context(c, tables["entities"], tables["relationships"],
                                       long_child, 30, tok)
    assert method == "truncated"
    assert tok.count(ctx) <= 30
    ctx, method = build_report_context(c, tables["entities"], tables["relationships"],
                                       long_child, 1, tok)
    assert (ctx, method) == ("", "truncated")


def test_report_template_schema_bounds_the_rating():
    # an enum, because llama-cpp-python's grammar converter ignores minimum/maximum
    rating = REPORT_TEMPLATE.schema["properties"]["rating"]
    assert rating["enum"] == list(range(11))
    assert REPORT_TEMPLATE.schema["properties"]["findings"]["maxItems"] == 3


def test_only_communities_whose_structure_changed_get_a_new_report(tmp_path, tables):
    backend = FakeBackend()
    llm = _llm(tmp_path, backend)
    args = (tables["entities"], tables["relationships"], llm, IndexSettings(**FREE),
            default_tokenizer())
    first, _, _ = build_community_reports(tables["communities"], *args)
    calls = backend.calls
    # the same communities, renumbered: every report is kept, none is rewritten
    shifted = tables["communities"].with_columns(
        pl.col("community") + 100,
        pl.when(pl.col("parent") >= 0).then(pl.col("parent") + 100).otherwise(-1),
        pl.col("children").list.eval(pl.element() + 100))
    again, _, methods = build_community_reports(shifted, *args, previous=first)
    assert backend.calls == calls
    assert methods == {"reused": shifted.height}
    assert sorted(again["community"]) == sorted(shifted["community"])
    assert (again.sort("community")["full_content"].to_list()
            == first.sort("community")["full_content"].to_list())
    # one member more in community 2 (and its level-0 parent 0): exactly those two change
    grown = shifted.with_columns(pl.when(pl.col("community").is_in([100, 102]))
                                 .then(pl.col("entity_ids").list.concat(pl.lit(["x" * 64])))
                                 .otherwise(pl.col("entity_ids")).alias("entity_ids"))
    _, _, methods = build_community_reports(grown, *args, previous=again)
    assert methods.get("reused") == shifted.height - 2
    assert sum(v for k, v in methods.items() if k != "reused") == 2  # written, not kept
    # a new report template rewrites everything: reuse is keyed on the template too
    _, _, methods = build_community_reports(grown, *args, previous=None)
    assert "reused" not in methods


class _Messages:
    """Answers a fixed valid report and records every call's whole message list."""

    model_id = "messages"

    def __init__(self) -> None:
        self.calls: list[list[dict]] = []

    def complete(self, messages, schema, max_tokens, seed, stop_on_loop=False):
        self.calls.append(messages)
        return Completion(json.dumps({
            "title": "T", "summary": "S", "rating": 5, "rating_explanation": "E",
            "findings": [{"summary": "F", "explanation": "X"}]}), 1, 1, 0.0)


def test_small_communities_get_rule_reports_and_large_ones_llm_reports(tmp_path, tables):
    import jsonschema

    backend = _Messages()
    reports, failures, methods = build_community_reports(
        tables["communities"], tables["entities"], tables["relationships"],
        _llm(tmp_path, backend), IndexSettings(**FREE), default_tokenizer())
    assert failures.height == 0 and reports.height == tables["communities"].height
    by = dict(reports.select("community", "generated_by").iter_rows())
    # 0 (5 members) and 2 (3 members, 2 relationships) reach both defaults (3 and 2);
    # 1 and 4 (Bob Cratchit, Tiny Tim) and 3 (the Ghost, Fezziwig) have 2 members each
    assert by == {0: "llm", 1: "rules", 2: "llm", 3: "rules", 4: "rules"}
    assert len(backend.calls) == 2
    assert methods["rules"] == 2 and methods["carried_down"] == 1
    bob = reports.filter(pl.col("community") == 4).row(0, named=True)
    assert bob["title"] == "BOB CRATCHIT and TINY TIM"
    # whole sentences: who, how (with the evidence quoted whole), where; no "…" cut
    unit = tables["relationships"].filter(pl.col("source") == "BOB CRATCHIT")[
        "text_unit_ids"][0][0]
    assert bob["summary"] == (
        "BOB CRATCHIT and TINY TIM form a community of 2 entities: 2 people. BOB CRATCHIT "
        "and TINY TIM are named together in 1 text unit. The text says: \"Tiny Tim is Bob "
        f"Cratchit's youngest son.\" They appear in 1 text unit (units {unit[:8]}).")
    # a finding repeats no other field: the pair is named as a pair
    assert bob["findings"] == [{"summary": "BOB CRATCHIT – TINY TIM",
                                "explanation": "Tiny Tim is Bob Cratchit's youngest son. "
                                               f"[Sources: units {unit[:8]}]"}]
    assert bob["rank"] == 3.0  # 2 members + 1 relationship
    assert bob["full_content"].startswith("# BOB CRATCHIT and TINY TIM\n")
    for r in reports.filter(pl.col("generated_by") == "rules").iter_rows(named=True):
        # the same fields and bounds as an LLM report
        jsonschema.validate(json.loads(r["full_content_json"]), REPORT_TEMPLATE.schema)
    # the thresholds are settings: at 2 members and 1 relationship every community of
    # the fixture reaches them
    backend2 = _Messages()
    again, _, _ = build_community_reports(
        tables["communities"], tables["entities"], tables["relationships"],
        _llm(tmp_path / "b", backend2),
        IndexSettings(**FREE, report_llm_min_members=2, report_llm_min_relationships=1),
        default_tokenizer())
    assert set(again["generated_by"]) == {"llm"} and len(backend2.calls) == 4
    # the report key says how a report was written: a threshold change rewrites it
    assert set(again["report_key"]).isdisjoint(
        reports.filter(pl.col("generated_by") == "rules")["report_key"])


def test_rule_reports_are_bounded_for_large_small_communities(tables):
    import jsonschema

    from kgloom.report_writer import rule_report

    long = "word " * 400
    rels = tables["relationships"].with_columns(pl.lit(long).alias("description"))
    ents = tables["entities"].with_columns(pl.lit("X" * 200).alias("title"))
    c = _community(tables, 0) | {"relationship_ids": rels["id"].to_list()}
    obj = rule_report(c, ents, rels)
    jsonschema.validate(obj, REPORT_TEMPLATE.schema)
    assert obj["rating"] == 10  # 5 members + 7 relationships, capped
    assert len(obj["findings"]) == 3
    lone = rule_report(c | {"entity_ids": c["entity_ids"][:1], "relationship_ids": []},
                       tables["entities"], tables["relationships"])
    jsonschema.validate(lone, REPORT_TEMPLATE.schema)
    assert lone["title"] == "EBENEZER SCROOGE" and "A Christmas Carol" in lone["summary"]


def test_report_prompts_share_their_fixed_prefix(tmp_path, tables):
    """Everything but the community's data comes first and is the same for every
    report, so llama.cpp reuses its KV cache from one report to the next."""
    backend = _Messages()
    build_community_reports(tables["communities"], tables["entities"],
                            tables["relationships"], _llm(tmp_path, backend),
                            IndexSettings(**FREE, **ALL_LLM), default_tokenizer())
    assert len(backend.calls) >= 2
    first, second = backend.calls[0], backend.calls[1]
    assert first[:-1] == second[:-1]  # system prompt and worked example
    assert first[-1]["content"].startswith("Community data:\nEntities:")
    assert first[-1]["content"] != second[-1]["content"]
    assert REPORT_TEMPLATE.user == "Community data:\n{context}"  # data, nothing after it


def test_every_community_of_three_or_more_members_gets_an_llm_report(tmp_path, tables):
    # community 2 has 3 members; strip its internal relationships to 1 and to 0: by the
    # defaults it still gets an LLM report (members decide), only 2-member ones get rules
    for keep in (1, 0):
        comms = tables["communities"].with_columns(
            relationship_ids=pl.when(pl.col("community") == 2)
            .then(pl.col("relationship_ids").list.head(keep))
            .otherwise(pl.col("relationship_ids")))
        backend = _Messages()
        reports, failures, _ = build_community_reports(
            comms, tables["entities"], tables["relationships"],
            _llm(tmp_path / str(keep), backend), IndexSettings(**FREE), default_tokenizer())
        assert failures.height == 0
        by = dict(reports.select("community", "generated_by").iter_rows())
        sizes = dict(comms.select("community", "size").iter_rows())
        assert {c for c, b in by.items() if b == "llm"} == {c for c, s in sizes.items()
                                                              if s >= 3}
        assert by[2] == "llm"
        # a relationships threshold is a setting: with 2 required, community 2 goes to rules
        backend2 = _Messages()
        strict, _, _ = build_community_reports(
            comms, tables["entities"], tables["relationships"],
            _llm(tmp_path / f"s{keep}", backend2),
            IndexSettings(**FREE, report_llm_min_relationships=2), default_tokenizer())
        assert dict(strict.select("community", "generated_by").iter_rows())[2] == "rules"
        assert len(backend2.calls) == len(backend.calls) - 1


class _Schemas(FakeBackend):
    """The fake LLM, recording each call's messages, schema and max_tokens."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[list[dict], dict, int]] = []

    def complete(self, messages, schema, max_tokens, seed, stop_on_loop=False):
        self.seen.append((messages, schema, max_tokens))
        return super().complete(messages, schema, max_tokens, seed)


def test_reports_are_sized_to_the_community(tmp_path, tables):
    """Communities of at most report_brief_max_members members get a brief LLM report
    (one finding, a shorter summary) from the same prompt; larger ones the full schema;
    0 turns brief reports off; the setting is part of the report's reuse key."""
    from kgloom.llm import reply_token_bound
    from kgloom.report_writer import BRIEF_REPORT_SCHEMA, report_key

    args = (tables["communities"], tables["entities"], tables["relationships"])
    sizes = dict(tables["communities"].select("community", "size").iter_rows())
    backend = _Schemas()
    reports, failures, _ = build_community_reports(
        *args, _llm(tmp_path / "a", backend),
        IndexSettings(**FREE, **ALL_LLM, report_brief_max_members=3), default_tokenizer())
    assert failures.height == 0 and set(reports["generated_by"]) == {"llm"}
    by_size = {}
    for messages, schema, max_tokens in backend.seen:
        context = messages[-1]["content"]
        n = context.split("Relationships:")[0].count("\n- ")
        by_size.setdefault(n <= 3, set()).add(json.dumps(schema))
        assert max_tokens == reply_token_bound(schema)
    assert by_size[True] == {json.dumps(BRIEF_REPORT_SCHEMA)}
    assert by_size[False] == {json.dumps(REPORT_TEMPLATE.schema)}
    # the prompt is the same for both sizes: only the grammar differs
    assert len({json.dumps(m[:-1]) for m, _, _ in backend.seen}) == 1
    assert reply_token_bound(BRIEF_REPORT_SCHEMA) < reply_token_bound(REPORT_TEMPLATE.schema) / 1.5
    for r in reports.iter_rows(named=True):
        if sizes[r["community"]] <= 3:
            assert len(r["findings"]) == 1 and len(r["summary"]) <= 200
    jsonschema_validate = __import__("jsonschema").validate
    for r in reports.filter(pl.col("size") <= 3).iter_rows(named=True):
        jsonschema_validate(json.loads(r["full_content_json"]), BRIEF_REPORT_SCHEMA)

    off = _Schemas()
    build_community_reports(*args, _llm(tmp_path / "b", off),
                            IndexSettings(**FREE, **ALL_LLM, report_brief_max_members=0),
                            default_tokenizer())
    assert {json.dumps(s) for _, s, _ in off.seen} == {json.dumps(REPORT_TEMPLATE.schema)}

    small = _community(tables, 2)  # 3 members
    keys = {report_key(small, "m", IndexSettings(**FREE, report_brief_max_members=n))
            for n in (0, 3, 5)}
    assert len(keys) == 2  # brief at 3 and 5 (the same report), full at 0


def test_context_writes_each_evidence_sentence_once():
    """Extractive descriptions are evidence sentences: a sentence naming three entities
    is the description of each and of their relationships. The context writes it once."""
    s1 = "Alice, Bob and Carol met in Dover."
    s2 = "Carol was born in Calais."
    ents = pl.DataFrame({"id": ["a", "b", "c", "d"], "title": ["ALICE", "BOB", "CAROL", "DOVER"],
                         "type": ["PERSON", "PERSON", "PERSON", "LOCATION"],
                         "description": [s1, s1, f"{s1}\n{s2}", s1],
                         "degree": [3, 2, 2, 1]})
    rels = pl.DataFrame({"id": ["r1", "r2", "r3"], "source": ["ALICE", "BOB", "CAROL"],
                         "target": ["DOVER", "DOVER", "ALICE"],
                         "description": [s1, s1, f"{s1}\n{s2}"],
                         "combined_degree": [4, 3, 2]})
    c = {"entity_ids": ["a", "b", "c", "d"], "relationship_ids": ["r1", "r2", "r3"]}
    ctx, method = build_report_context(c, ents, rels, [], 10_000, default_tokenizer())
    assert method == "members"
    assert ctx.count(s1) == 1 and ctx.count(s2) == 1
    assert ctx.split("\n") == ["Entities:", "- ALICE (PERSON)", "- BOB (PERSON)",
                               "- CAROL (PERSON)", "- DOVER (LOCATION)", "Relationships:",
                               f"- ALICE -> DOVER; BOB -> DOVER: {s1}",
                               f"- CAROL -> ALICE: {s2}"]
    # a sentence no relationship holds stays with its entity
    ctx, _ = build_report_context({"entity_ids": ["a", "c"], "relationship_ids": []},
                                  ents, rels, [], 10_000, default_tokenizer())
    assert ctx.split("\n") == ["Entities:", f"- ALICE (PERSON): {s1}",
                               f"- CAROL (PERSON): {s1} {s2}"]


def test_communities_from_passages_shorter_than_a_report_get_rule_reports(tmp_path, tables):
    """A community whose internal relationships all come from text units of fewer than
    report_llm_min_source_tokens tokens in all gets a rule report (an LLM report would be
    longer than its sources); 600-token units, unknown units and 0 keep the LLM."""
    from kgloom.reports.community_reports import source_tokens

    comms, ents, rels = tables["communities"], tables["entities"], tables["relationships"]
    rel_units = dict(zip(rels["id"].to_list(), rels["text_unit_ids"].to_list()))
    c2 = _community(tables, 2)  # 3 members, relationships from two text units
    first, second = sorted({u for r in c2["relationship_ids"] for u in rel_units[r]})

    def run(tokens: dict | None, name: str, **settings):
        reports, failures, _ = build_community_reports(
            comms, ents, rels, _llm(tmp_path / name, FakeBackend()),
            IndexSettings(**FREE, **settings),
            default_tokenizer(), unit_tokens=tokens)
        assert failures.height == 0
        return dict(reports.select("community", "generated_by").iter_rows())

    all_units = {u for us in rel_units.values() for u in us}
    short = {u: 600 for u in all_units} | {first: 50, second: 60}
    assert source_tokens(c2, rel_units, short) == 110  # each unit once
    assert source_tokens(_community(tables, 0), rel_units, short) == 710
    assert run(short, "short")[2] == "rules"
    assert run(short, "short")[0] == "llm"  # 5 members over several 600-token units
    assert run({u: 600 for u in all_units}, "long")[2] == "llm"
    assert run(short, "off", report_llm_min_source_tokens=0)[2] == "llm"
    # a relationship whose text units are unknown (an imported graph): the LLM decides
    unknown = {u: n for u, n in short.items() if u != first}
    assert source_tokens(c2, rel_units, unknown) is None
    assert run(unknown, "unknown")[2] == "llm"
    assert run(None, "none")[2] == "llm"


# --- grounded reports: a reply naming what its context lacks is not published ----------

_GOOD = {"title": "Scrooge, Marley and Fred",
         "summary": "Marley was Scrooge's late business partner, and Fred is Scrooge's "
                    "nephew.",
         "rating": 6, "rating_explanation": "Scrooge ties the others together.",
         "findings": [{"summary": "Scrooge and Marley were partners",
                       "explanation": "Marley was Scrooge's late business partner."}]}
_NON_MEMBER = {**_GOOD, "summary": "Scrooge and Marley visit Bob Cratchit and Tiny Tim at "
                                   "home."}
_EXAMPLE_COPY = {**_GOOD, "summary": "Sherlock Holmes and Dr. Watson agree to share rooms in "
                                     "Baker Street."}
_PLACEHOLDER_COPY = {**_GOOD, "findings": [{"summary": "<a fact about <name 1> and <name 2>>",
                                            "explanation": "<the sentence of the data that "
                                                           "states it>"}]}
_LOOPING = {**_GOOD, "summary": "Scrooge is a man named Scrooge, a man named Scrooge, a man "
                                "named Scrooge, a man named Scrooge."}
_SAME_FINDINGS = {**_GOOD, "findings": [_GOOD["findings"][0], _GOOD["findings"][0]]}
# as the book's real-model replies did: one sentence as rating explanation, finding
# summary and finding explanation
_SAME_FIELDS = {**_GOOD, "rating_explanation": "Marley was Scrooge's late business partner.",
                "findings": [{"summary": "Marley was Scrooge's late business partner.",
                              "explanation": "Marley was Scrooge's late business partner."}]}


class _Scripted:
    """Answers every report call with one fixed reply; counts the calls."""

    model_id = "scripted"

    def __init__(self, reply: dict) -> None:
        self.reply = reply
        self.calls = 0

    def complete(self, messages, schema, max_tokens, seed, stop_on_loop=False):
        self.calls += 1
        return Completion(json.dumps(self.reply), 1, 1, 0.0)


def _context_of(tables, number: int) -> tuple[str, list[str]]:
    c = _community(tables, number)
    ctx, _ = build_report_context(c, tables["entities"], tables["relationships"], [], 10_000,
                                  default_tokenizer())
    titles = tables["entities"].filter(pl.col("id").is_in(c["entity_ids"]))["title"].to_list()
    return ctx, titles


def test_check_report_keeps_a_grounded_reply_and_says_why_it_rejects_others(tables):
    from kgloom.report_writer import check_report

    ctx, members = _context_of(tables, 2)  # Scrooge, Marley, Fred
    assert check_report(_GOOD, ctx, members) == []
    why = check_report(_NON_MEMBER, ctx, members)
    assert len(why) == 1 and why[0].startswith("names what its context lacks")
    assert "Bob Cratchit" in why[0] and "Tiny Tim" in why[0]
    # the former prompt's example (Sherlock Holmes ...) passed as the example to check
    old_example = "Sherlock Holmes (PERSON): Dr. Watson met Sherlock Holmes in Baker Street."
    why = check_report(_EXAMPLE_COPY, ctx, members, example=old_example)
    assert why and why[0].startswith("repeats the prompt's example")
    assert "Sherlock Holmes" in why[0] and "Baker Street" in why[0]
    # with today's example: the names still are not in the context
    assert check_report(_EXAMPLE_COPY, ctx, members)[0].startswith("names what its context")
    why = check_report(_PLACEHOLDER_COPY, ctx, members)
    assert why and why[0].startswith("writes placeholders") and "<name 1>" in why[0]
    # a placeholder of the example the replies were written under: a copy of it
    why = check_report(_PLACEHOLDER_COPY, ctx, members, example="<name 1> (PERSON)")
    assert why[0].startswith("repeats the prompt's example: placeholder <name 1>")
    why = check_report(_LOOPING, ctx, members)
    assert why == ['repeats itself: "a man named Scrooge" 4 times']
    assert check_report(_SAME_FINDINGS, ctx, members)[0].startswith("repeats itself")
    assert check_report(_SAME_FIELDS, ctx, members) == [
        "repeats itself: the same text in rating_explanation and finding 1 summary"]
    # a member's title may be used even when a cut context left it out
    bare = "Entities:\n- EBENEZER SCROOGE (PERSON)"
    assert check_report(_GOOD, bare, members) == []
    assert check_report(_GOOD, bare, ["EBENEZER SCROOGE"])[0].startswith("names what")


@pytest.mark.parametrize("reply, reason", [
    (_NON_MEMBER, "names what its context lacks"), (_EXAMPLE_COPY, "names what its context"),
    (_PLACEHOLDER_COPY, "writes placeholders"), (_LOOPING, "repeats itself"),
    (_SAME_FIELDS, "repeats itself")])
def test_a_rejected_reply_is_replaced_by_the_rule_report_with_a_failures_row(
        tmp_path, tables, reply, reason):
    from kgloom.report_writer import REJECTED, rule_report

    only = tables["communities"].filter(pl.col("community") == 2)  # 3 members: an LLM report
    backend = _Scripted(reply)
    reports, failures, _ = build_community_reports(
        only, tables["entities"], tables["relationships"], _llm(tmp_path, backend),
        IndexSettings(**FREE), default_tokenizer())
    assert backend.calls == 1
    assert reports.height == 1 and reports["generated_by"].to_list() == ["rules"]
    rule = rule_report(_community(tables, 2), tables["entities"], tables["relationships"])
    assert reports["title"][0] == rule["title"] and reports["summary"][0] == rule["summary"]
    assert failures.height == 1
    row = failures.row(0, named=True)
    assert row["stage"] == "community_reports" and row["item_id"] == "2"
    assert row["reason"].startswith(REJECTED + reason)
    assert json.loads(row["detail"])["summary"] == reply["summary"]  # the reply, kept


class _StoppedInALoop:
    """Answers a report call as a decoder stopped for a loop does (the JSON written so
    far) when asked with ``stop_on_loop``; counts the calls."""

    model_id = "stopped"
    text = ('{"title": "Scrooge, Marley and Fred", "summary": "Marley was a partner, a '
            'partner, a partner, a par')

    def __init__(self) -> None:
        self.calls = 0

    def complete(self, messages, schema, max_tokens, seed, stop_on_loop=False):
        assert stop_on_loop  # every report call asks for the stop
        self.calls += 1
        return Completion(self.text, 1, 30, 0.0)


def test_a_reply_stopped_in_a_loop_is_rejected_and_counts_toward_giving_up(tmp_path, tables):
    from kgloom.report_writer import REJECTED, rule_report

    only = tables["communities"].filter(pl.col("community") == 2)
    backend = _StoppedInALoop()
    reports, failures, _ = build_community_reports(
        only, tables["entities"], tables["relationships"], _llm(tmp_path, backend),
        IndexSettings(**FREE), default_tokenizer())
    assert backend.calls == 1  # not retried
    rule = rule_report(_community(tables, 2), tables["entities"], tables["relationships"])
    assert reports["generated_by"].to_list() == ["rules"]
    assert reports["summary"][0] == rule["summary"]  # published, not lost
    row = failures.row(0, named=True)
    assert failures.height == 1
    assert row["reason"] == REJECTED + 'repeats itself: "a partner" 3 times (decoding stopped)'
    assert row["detail"] == backend.text
    # as any rejected reply, it counts toward report_llm_give_up_after
    every = _StoppedInALoop()
    reports, failures, methods = build_community_reports(
        tables["communities"], tables["entities"], tables["relationships"],
        _llm(tmp_path / "all", every), IndexSettings(**FREE, **ALL_LLM, report_llm_give_up_after=2),
        default_tokenizer())
    assert every.calls == 2 and methods["lazy_after_rejections"] > 0
    assert failures.filter(pl.col("reason").str.starts_with(REJECTED)).height == 2


def test_a_grounded_reply_is_published(tmp_path, tables):
    only = tables["communities"].filter(pl.col("community") == 2)
    reports, failures, _ = build_community_reports(
        only, tables["entities"], tables["relationships"], _llm(tmp_path, _Scripted(_GOOD)),
        IndexSettings(**FREE), default_tokenizer())
    assert failures.height == 0 and reports["generated_by"].to_list() == ["llm"]
    assert reports["summary"][0] == _GOOD["summary"]


def test_the_report_prompt_has_no_example_a_model_could_copy():
    """The grammar shapes the reply: the prompt holds no worked example (the former one's
    Sherlock Holmes was copied into 12 of 60 reports, a placeholder one's slots into 9
    of 22 replies); the instructions ask for the data's names only."""
    from kgloom.report_writer import example_text

    assert REPORT_TEMPLATE.examples == () and example_text() == ""
    assert "Name only the entities of the data." in REPORT_TEMPLATE.system
    for word in ("Sherlock", "Holmes", "Watson", "Baker", "<name"):
        assert word not in json.dumps(REPORT_TEMPLATE.messages(context="x"))


def test_rule_report_orders_members_by_degree_then_title_from_the_tables_or_the_rows(tables):
    from kgloom.report_writer import MemberRows, rule_report

    c = _community(tables, 0)
    ents = tables["entities"]
    # ties in degree are ordered by title; a missing degree or combined degree first
    tied = ents.with_columns(pl.when(pl.col("id") == c["entity_ids"][0]).then(None)
                             .otherwise(pl.lit(1)).cast(pl.Int64).alias("degree"))
    rels = tables["relationships"].with_columns(combined_degree=pl.lit(2, dtype=pl.Int64))
    obj = rule_report(c, tied, rels)
    assert obj == rule_report(c, tied, rels, MemberRows.of(tied, rels))
    titles = dict(zip(ents["id"].to_list(), ents["title"].to_list()))
    first, *rest = [titles[e] for e in c["entity_ids"]]
    order = [first, *sorted(rest)]
    assert len(order) == 5
    assert obj["title"] == ", ".join(order[:3]) + " and 2 others"
    # relationships of equal strength by id
    ids = sorted(set(c["relationship_ids"]))
    rel_rows = {r["id"]: r for r in rels.iter_rows(named=True)}
    assert obj["findings"][0]["summary"].startswith(rel_rows[ids[0]]["source"])


def test_a_rule_report_is_whole_sentences_a_relation_title_and_cited_findings():
    import jsonschema

    from kgloom.report_writer import TITLE_MAX_WORDS, rule_report

    long = ("Zephyr Mills, the largest of the valley's spinning concerns, supplies Yarrow "
            "Textiles with wool every season, as it has done for three generations of the "
            "family, and the carts leave at dawn, rattling down the lane past the chapel, "
            "the smithy, the old toll-house and the bridge, before the river mist has lifted "
            "from the water meadows.")
    ents = pl.DataFrame({
        "id": ["z", "y", "a"], "title": ["Zephyr Mills", "Yarrow Textiles", "Alder Retail"],
        "description": ["A mill.", "A weaver.", "A shop"], "degree": [3, 2, 1],
        "type": ["ORGANIZATION", "ORGANIZATION", "LOCATION"],
        "text_unit_ids": [["u1"], ["u1", "u2"], ["u2"]]})
    rels = pl.DataFrame({
        "id": ["r1", "r2"], "source": ["Zephyr Mills", "Yarrow Textiles"],
        "target": ["Yarrow Textiles", "Alder Retail"],
        "description": ["Zephyr Mills supplies Yarrow Textiles with wool.\n" + long,
                        long + "\nYarrow Textiles sells to Alder Retail"],
        "combined_degree": [4, 3], "text_unit_ids": [["u1"], ["u2"]]})
    community = {"entity_ids": ["z", "y", "a"], "relationship_ids": ["r1", "r2"],
                 "text_unit_ids": ["u1", "u2"]}
    places = {"u1": ("mills.txt", 0), "u2": ("retail.txt", 3)}
    obj = rule_report(community, ents, rels, places=places)
    jsonschema.validate(obj, REPORT_TEMPLATE.schema)
    # the closest pair as its sentence states it
    assert obj["title"] == "Zephyr Mills supplies Yarrow Textiles"
    assert len(obj["title"].split()) <= TITLE_MAX_WORDS
    summary = obj["summary"]
    assert "…" not in summary and summary.endswith(".")
    assert summary.startswith("Zephyr Mills, Yarrow Textiles and Alder Retail form a community "
                              "of 3 entities: 2 organizations and 1 place.")
    assert "mills.txt #0" in summary and "retail.txt #3" in summary  # where it lives
    assert 2 <= summary.count(". ") + 1 <= 4
    # findings: whole sentences (the long evidence is passed over for the short one),
    # each citing where its text units are
    # the title's statement is not repeated as a finding's summary
    assert [f["summary"] for f in obj["findings"]] == [
        "Zephyr Mills – Yarrow Textiles", "Yarrow Textiles sells to Alder Retail"]
    assert obj["findings"][0]["explanation"] == (
        "Zephyr Mills supplies Yarrow Textiles with wool. [Sources: mills.txt #0]")
    assert obj["findings"][1]["explanation"] == (
        "Yarrow Textiles sells to Alder Retail. [Sources: retail.txt #3]")
    assert all("…" not in f["explanation"] for f in obj["findings"])


class _Picks:
    """Answers a choices reply: the last title, the last sentence, the relationships in
    reverse order (the last one named twice), rating 7; records each call."""

    model_id = "picks"

    def __init__(self) -> None:
        self.seen: list[tuple[list[dict], dict]] = []

    def complete(self, messages, schema, max_tokens, seed, stop_on_loop=False):
        self.seen.append((messages, schema))
        props = schema["properties"]
        reply = {"title": props["title"]["enum"][-1]}
        if "sentence" in props:
            reply["sentence"] = props["sentence"]["enum"][-1]
        if "findings" in props:
            labels = props["findings"]["items"]["enum"]
            reply["findings"] = [*labels[::-1][:2], labels[-1]]
        reply["rating"] = "7"
        return Completion(json.dumps(reply), 1, 1, 0.0)


def test_by_default_the_model_chooses_parts_of_its_report_among_the_datas_own(tmp_path,
                                                                             tables):
    import jsonschema

    from kgloom.llm.choices import is_choice_schema
    from kgloom.report_writer import report_key, report_options, rule_report

    backend = _Picks()
    reports, failures, _ = build_community_reports(
        tables["communities"], tables["entities"], tables["relationships"],
        _llm(tmp_path, backend), IndexSettings(**ALL_LLM), default_tokenizer())
    # every attempted LLM report survives the grounding check: nothing to reject
    assert failures.height == 0 and set(reports["generated_by"]) == {"llm"}
    assert backend.seen
    for messages, schema in backend.seen:
        # a choice-only reply (the choice decoder reads it); the options are listed too
        assert is_choice_schema(schema)
        assert "\n\nOptions:\nTitles:\n1. " in messages[-1]["content"]
    c = _community(tables, 0)
    options = report_options(c, tables["entities"], tables["relationships"])
    got = reports.filter(pl.col("community") == 0).row(0, named=True)
    obj = json.loads(got["full_content_json"])
    jsonschema.validate(obj, REPORT_TEMPLATE.schema)
    assert obj["title"] == options.titles[-1] and obj["rating"] == 7
    assert f'"{options.sentences[-1]}"' in obj["summary"]
    picked = [label.replace(" – ", " and ") for label in options.findings[::-1][:2]]
    assert [f["summary"] for f in obj["findings"]][:2] == picked
    # the same shape and sentences as the rule report: only the picks differ
    plain = rule_report(c, tables["entities"], tables["relationships"])
    assert obj["summary"].split(". ")[0] == plain["summary"].split(". ")[0]
    assert set(obj) == set(plain)
    # the form is part of the reuse key
    assert report_key(c, "m", IndexSettings()) != report_key(c, "m", IndexSettings(**FREE))


def test_a_rule_report_counts_every_type_of_its_members_in_words():
    from kgloom.report_writer import rule_report

    kinds = ["PERSON", "PERSON", "LOCATION", "EVENT", "ORGANIZATION", "OTHER"]
    ents = pl.DataFrame({"id": [f"e{i}" for i in range(6)],
                         "title": [f"Name {chr(65 + i)}" for i in range(6)],
                         "description": ["D."] * 6, "degree": [6, 5, 4, 3, 2, 1],
                         "type": kinds, "text_unit_ids": [["u1"]] * 6})
    rels = pl.DataFrame(schema={"id": pl.String, "source": pl.String, "target": pl.String,
                                "description": pl.String, "combined_degree": pl.Int64,
                                "text_unit_ids": pl.List(pl.String)})
    obj = rule_report({"entity_ids": ents["id"].to_list(), "relationship_ids": [],
                       "text_unit_ids": ["u1"]}, ents, rels)
    assert obj["summary"].startswith(
        "Name A, Name B and 4 others form a community of 6 entities: 2 people, 1 event, "
        "1 place, 1 organization and 1 other name.")


def test_findings_that_quote_the_text_come_before_bare_counts():
    """A finding that quotes a whole sentence naming both says what joins them; the
    strongest pairs whose evidence has none (two half-scenes joined by " … ") come after
    it, and a model's chosen relationships stay first. Invented names."""
    from kgloom.report_writer import rule_report

    ents = pl.DataFrame({
        "id": ["o", "t", "b"], "title": ["Orrin Vale", "Tamsin Quill", "Brisk"],
        "description": ["A clerk.", "A mill owner.", "A carter."], "degree": [2, 2, 2],
        "type": ["PERSON"] * 3, "text_unit_ids": [["u1"], ["u1", "u2"], ["u2"]]})
    rels = pl.DataFrame({
        "id": ["r1", "r2"], "source": ["Orrin Vale", "Tamsin Quill"],
        "target": ["Tamsin Quill", "Brisk"],
        "description": ["Orrin Vale kept the books. … Tamsin Quill owned the mill.",
                        "Tamsin Quill hired Brisk to carry the wool."],
        "combined_degree": [9, 3], "text_unit_ids": [["u1"], ["u2"]]})
    community = {"entity_ids": ["o", "t", "b"], "relationship_ids": ["r1", "r2"],
                 "text_unit_ids": ["u1", "u2"]}
    obj = rule_report(community, ents, rels)
    assert obj["findings"][0]["explanation"].startswith(
        "Tamsin Quill hired Brisk to carry the wool.")
    assert obj["findings"][1]["explanation"].startswith(
        "Orrin Vale and Tamsin Quill are named together in 1 text unit.")
    # the model chose the stronger pair: it stays first
    picked = rule_report(community, ents, rels,
                         picks={"findings": ["Orrin Vale – Tamsin Quill"]})
    assert picked["findings"][0]["summary"] in ("Orrin Vale – Tamsin Quill",
                                                "Orrin Vale and Tamsin Quill")


def test_a_quote_that_starts_inside_a_parenthesis_is_no_whole_sentence():
    """The 2Wiki pool's report quoted "28 June 1961 – 3 February 2012) was a Bollywood film
    director ...": the tail of a sentence split inside its parenthesis. A quote's
    brackets open and close within it: "John III, Count of Ligny( d." (split at "d.") is
    the head of one."""
    from kgloom.report_writer import _whole

    assert _whole("12 May 1901 – 3 June 1960) was a Vessian film director.", 300) == ""
    assert _whole("Orla Venn (12 May 1901 – 3 June 1960) was a film director.", 300)
    assert _whole("Orla Venn, Count of Vessel( d.", 300) == ""


def test_a_chosen_report_may_quote_member_evidence_the_context_left_out(tmp_path):
    """The composed report quotes its members' own evidence; a context cut to its token
    budget, and the five sentence options, may not hold that sentence, and the check must
    not call the quote's other names ("Brisk Harlow") names the data lacks: the book's one
    rejected report quoted "little Bob" that way. Invented names."""
    from kgloom.report_writer import write_llm_report

    others = ["Tamsin Quill", "Edda Brann", "Oskar Pell", "Nerys Vale", "Mirel Cask",
              "Wynn Tarrow", "Ilse Dunmore"]
    ids = ["o", *[f"e{k}" for k in range(len(others))]]
    ents = pl.DataFrame({"id": ids, "title": ["Orrin Vale", *others],
                         "description": ["A clerk."] * len(ids),
                         "degree": [len(others)] + [1] * len(others),
                         "type": ["PERSON"] * len(ids), "text_unit_ids": [["u1"]] * len(ids)})
    rels = pl.DataFrame({
        "id": [f"r{k}" for k in range(len(others))], "source": ["Orrin Vale"] * len(others),
        "target": others,
        "description": [f"Orrin Vale paid {name} while {who} watched." for name, who in zip(
            others, ["Cael Morrow", "Dace Ambry", "Fenn Ostrey", "Gale Wickam", "Hale Ruddock",
                     "Ivo Sarrant", "Brisk Harlow"])],
        "combined_degree": list(range(len(others), 0, -1)),
        "text_unit_ids": [["u1"]] * len(others)})
    community = {"community": 0, "entity_ids": ids,
                 "relationship_ids": rels["id"].to_list(), "text_unit_ids": ["u1"]}
    context = "Entities:\nOrrin Vale: A clerk."  # cut short by its budget
    written = write_llm_report(_llm(tmp_path, _Picks()), community, context, IndexSettings(),
                               ents, rels, dict(zip(ids, ents["title"])))
    assert written.rejected is None and written.generated_by == "llm"
    quoted = " ".join(f["explanation"] for f in written.report["findings"])
    assert "Brisk Harlow" in quoted  # the weakest pair's sentence: no option holds it
