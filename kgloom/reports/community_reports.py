"""Community reports: rule-based for small communities, by the local LLM for the others.

Levels are processed deepest first so sub-community reports exist when a parent needs
them (its context, :func:`kgloom.report_writer.build_report_context`). One report is
written by :mod:`kgloom.report_writer` (prompt, context, checks, reuse key), the kernel
global search shares to write lazy reports.

Reports sized to the community: a community with fewer than ``report_llm_min_members``
members or fewer than ``report_llm_min_relationships`` internal relationships gets a
report built by rules from its members and their relationship sentences
(:func:`kgloom.report_writer.rule_report`, no model call): a model's report of two
names and one sentence only restates that sentence, at ~300 generated tokens.

Lazy reports (``llm_reports: lazy``, LazyGraphRAG's idea: Microsoft Research blog
"LazyGraphRAG: Setting a new standard for quality and cost", 2024): the stage makes no
model call; every community gets its rule report, and those :func:`needs_llm_report`
selects are published with ``generated_by`` ``lazy`` (a rule report awaiting its LLM
report), which global search writes the first time it reaches the community.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import polars as pl

from kgloom.core import schemas
from kgloom.core.ids import content_id
from kgloom.core.storage import failures_frame
from kgloom.embedding.tokenizer import Tokenizer
from kgloom.llm import CachedLLM
from kgloom.report_writer import (
    MemberRows,
    Places,
    WrittenReport,
    build_report_context,
    member_claims,
    report_columns,
    report_key,
    rule_report,
    write_llm_report,
)
from kgloom.report_writer.sections import unit_sections
from kgloom.settings.indexing import IndexSettings


def source_tokens(community: dict, relationship_units: dict[str, list[str] | None],
                  unit_tokens: dict[str, int]) -> int | None:
    """The tokens of the text units ``community``'s internal relationships were extracted
    from (each unit counted once), or None when that is unknown: no internal
    relationship, or one whose text units are not in ``unit_tokens`` (an imported graph).

    Args:
        community: a ``COMMUNITIES_SCHEMA`` row as a dict.
        relationship_units: relationship id -> its ``text_unit_ids``.
        unit_tokens: text unit id -> ``n_tokens`` (the chunking tokenizer's tokens).
    """
    units: set[str] = set()
    for r in community["relationship_ids"]:
        ids = relationship_units.get(r)
        if not ids or any(u not in unit_tokens for u in ids):
            return None
        units.update(ids)
    return sum(unit_tokens[u] for u in units) if units else None


def unit_places(text_units: pl.DataFrame, documents: pl.DataFrame) -> Places:
    """{text unit id: (its document's title, its ``chunk_index``, its section)} from text
    units (id, document_id, chunk_index; start_char and end_char for sections) and
    documents (id, title; ``text`` for sections). The section is the heading the unit
    falls under in a document of several units
    (:func:`kgloom.report_writer.sections.unit_sections`), "" for a one-unit document,
    one without headings or without its text. Units of no listed document are left
    out."""
    title = dict(zip(documents["id"].to_list(), documents["title"].to_list()))
    section: dict[str, str] = {}
    if "text" in documents.columns and {"start_char", "end_char"} <= set(text_units.columns):
        texts = dict(zip(documents["id"].to_list(), documents["text"].to_list()))
        for (doc,), units in text_units.filter(
                pl.col("document_id").is_in(list(texts))).group_by("document_id"):
            if units.height > 1 and texts[doc]:
                section.update(zip(units["id"].to_list(), unit_sections(
                    texts[doc], list(zip(units["start_char"].to_list(),
                                         units["end_char"].to_list())))))
    return {u: (title[d], k, section.get(u, ""))
            for u, d, k in zip(text_units["id"].to_list(), text_units["document_id"].to_list(),
                               text_units["chunk_index"].to_list())
            if d in title}


def needs_llm_report(community: dict, settings: IndexSettings,
                     relationship_units: dict[str, list[str] | None] | None = None,
                     unit_tokens: dict[str, int] | None = None) -> bool:
    """True when ``community`` is worth an LLM report: at least ``report_llm_min_members``
    members and ``report_llm_min_relationships`` internal relationships, and its internal
    relationships come from text units of at least ``report_llm_min_source_tokens``
    tokens in all (:func:`source_tokens`; not tested when ``relationship_units`` or
    ``unit_tokens`` is None or the sources are unknown). A report of the people and
    places of one 50-token passage would be longer than the passage (an LLM report is
    ~270 tokens with the default model); the rule report quotes its sentences instead.
    All three settings 0: every community gets an LLM report. With ``method=fast`` no
    community does (the index uses no model)."""
    if not settings.uses_model:
        return False
    if (len(community["entity_ids"]) < settings.report_llm_min_members
            or len(community["relationship_ids"]) < settings.report_llm_min_relationships):
        return False
    if relationship_units is None or unit_tokens is None \
            or settings.report_llm_min_source_tokens <= 0:
        return True
    n = source_tokens(community, relationship_units, unit_tokens)
    return n is None or n >= settings.report_llm_min_source_tokens



def _write(llm: CachedLLM, settings: IndexSettings, entities: pl.DataFrame,
           relationships: pl.DataFrame, title_of: dict[str, str],
           job: tuple[dict, str, str],
           unit_places: Places | None = None) -> WrittenReport:
    """One job of :func:`build_community_reports` (community, key, context) written by
    :func:`kgloom.report_writer.write_llm_report` (run ``llm.concurrency`` at a time)."""
    return write_llm_report(llm, job[0], job[2], settings, entities, relationships, title_of,
                            unit_places)


def _write_unless_given_up(llm: CachedLLM, settings: IndexSettings, entities: pl.DataFrame,
                           relationships: pl.DataFrame, title_of: dict[str, str],
                           rejected_run: list[int],
                           unit_places: Places | None,
                           job: tuple[dict, str, str]) -> WrittenReport | None:
    """:func:`_write`, or None without a call once ``settings.report_llm_give_up_after``
    replies in a row were rejected (``rejected_run[0]`` counts them; a kept reply resets
    it)."""
    give_up = settings.report_llm_give_up_after
    if give_up and rejected_run[0] >= give_up:
        return None
    reply = _write(llm, settings, entities, relationships, title_of, job, unit_places)
    rejected_run[0] = rejected_run[0] + 1 if reply.rejected else 0
    return reply


def _placement(community: dict) -> dict:
    """The report fields that come from the community itself, not from the LLM."""
    return {"id": content_id("community_report", community["id"]),
            "community": community["community"], "level": community["level"],
            "parent": community["parent"], "children": community["children"],
            "period": community["period"], "size": community["size"]}


def eager_llm_reports(communities: pl.DataFrame, settings: IndexSettings,
                      relationship_units: dict[str, list[str] | None] | None = None,
                      unit_tokens: dict[str, int] | None = None) -> set[int]:
    """The communities whose LLM report the reports stage writes now: with ``llm_reports``
    ``eager``, those :func:`needs_llm_report` selects, at most ``report_llm_eager_max``
    of them (0: all), nearest the root first (lowest ``level``, then most members, then
    community number); none with ``lazy``. The other selected communities are lazy.

    Args:
        communities: a ``COMMUNITIES_SCHEMA`` frame.
        settings / relationship_units / unit_tokens: as for :func:`needs_llm_report`.

    Returns:
        community numbers (``community`` column values).
    """
    if settings.llm_reports == "lazy":
        return set()
    wanted = [c for c in communities.iter_rows(named=True)
              if needs_llm_report(c, settings, relationship_units, unit_tokens)]
    cap = settings.report_llm_eager_max
    if cap and len(wanted) > cap:
        wanted = sorted(wanted, key=lambda c: (c["level"], -len(c["entity_ids"]),
                                               c["community"]))[:cap]
    return {c["community"] for c in wanted}


def build_community_reports(communities: pl.DataFrame, entities: pl.DataFrame,
                            relationships: pl.DataFrame, llm: CachedLLM | None,
                            settings: IndexSettings, tokenizer: Tokenizer,
                            progress: Callable[[int, int], None] | None = None,
                            previous: pl.DataFrame | None = None,
                            claims: pl.DataFrame | None = None,
                            unit_tokens: dict[str, int] | None = None,
                            unit_places: Places | None = None,
                            ) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, int]]:
    """Build a report for every community, deepest level first (the caller writes them).

    A level's communities are disjoint and need only deeper levels' reports: one level's
    calls go out together (``llm.concurrency`` at a time). A community whose
    :func:`~kgloom.report_writer.report_key` matches a report of ``previous`` or one
    written in this call keeps it (:meth:`_ReportsBuild.reuse`: incremental indexing).

    Args:
        communities: a ``COMMUNITIES_SCHEMA`` frame.
        entities / relationships: ``ENTITIES_SCHEMA`` / ``RELATIONSHIPS_SCHEMA`` frames.
        llm: the cached LLM (stage ``community_reports``); at most one call per community
            large enough for it (:func:`needs_llm_report`); the others get
            :func:`~kgloom.report_writer.rule_report`. None with ``method=fast`` or
            ``llm_reports: lazy``: no call. Rejected replies and giving up:
            :meth:`_ReportsBuild.reply_answers`.
        settings: ``report_max_input_tokens``, ``seed``, ``report_llm_min_members``,
            ``report_llm_min_relationships``, ``report_llm_min_source_tokens``,
            ``report_brief_max_members`` and ``llm_reports`` (``lazy``: every community
            :func:`needs_llm_report` selects gets its rule report with ``generated_by``
            ``lazy`` and the ``lazy`` :func:`report_key`, no model call).
        tokenizer: measures the context budget.
        progress: called as ``progress(done, total)``.
        previous: the last ``COMMUNITY_REPORTS_SCHEMA`` table, or None.
        claims: a ``COVARIATES_SCHEMA`` table (claims), or None; each community's
            context lists its members' claims.
        unit_tokens: text unit id -> ``n_tokens``, for ``report_llm_min_source_tokens``
            (:func:`needs_llm_report`); None: that rule is not applied.
        unit_places: text unit id -> (document title, the unit's ``chunk_index``): where
            rule reports say their members are and what their findings cite
            (:func:`kgloom.report_writer.rule_report`); None: units cited by short id.

    Returns:
        (reports, failures, context_methods): reports conform to
        ``COMMUNITY_REPORTS_SCHEMA``, one row per community whose reply parsed or was
        rejected (``generated_by``: ``llm``, ``rules`` or ``lazy``); every other community,
        and every rejected reply, has a failures row; context_methods counts how contexts
        were built (:class:`_ReportsBuild`).

    Raises:
        ValueError: a community needs an LLM report and ``llm`` is None.
    """
    build = _ReportsBuild(communities, entities, relationships, llm, settings, tokenizer,
                          progress, previous, claims, unit_tokens, unit_places)
    order = communities.sort(["level", "community"], descending=[True, False])
    for _, level in order.group_by("level", maintain_order=True):
        jobs, answers = build.plan_level(level)
        replies = build.write_jobs(jobs)
        answers += build.reply_answers(jobs, replies)
        build.record(answers)
        build.finished += len(jobs)
    return build.tables()


# (community, report key, context) of one LLM report to write
_Job = tuple[dict, str, str]
# (community, report key, generated_by, report object or None, failure row or None)
_Answer = tuple[dict, str, str, dict | None, dict | None]


class _ReportsBuild:
    """The state of one :func:`build_community_reports` call: the reports done so far
    (``done``: community number -> report row; ``written``: report key -> report row
    written in this call; ``kept``: report key -> ``previous`` row), the failure rows,
    and ``methods``, which counts how contexts were built (a
    :func:`~kgloom.report_writer.build_report_context` method), with ``rules`` for
    rule-based reports, ``lazy`` for rule reports awaiting their LLM report,
    ``lazy_after_rejections`` for communities left lazy after the stage gave up,
    ``reused`` for reports kept from ``previous`` and ``carried_down`` for a community
    repeated unchanged on a higher level, which gets its deeper copy's report (so one
    LLM call per distinct :func:`report_key`)."""

    def __init__(self, communities: pl.DataFrame, entities: pl.DataFrame,
                 relationships: pl.DataFrame, llm: CachedLLM | None,
                 settings: IndexSettings, tokenizer: Tokenizer,
                 progress: Callable[[int, int], None] | None,
                 previous: pl.DataFrame | None, claims: pl.DataFrame | None,
                 unit_tokens: dict[str, int] | None,
                 unit_places: Places | None) -> None:
        self.entities, self.relationships, self.llm = entities, relationships, llm
        self.settings, self.tokenizer, self.progress = settings, tokenizer, progress
        self.claims, self.unit_tokens, self.unit_places = claims, unit_tokens, unit_places
        self.done: dict[int, dict] = {}
        self.failures: list[dict] = []
        self.methods: dict[str, int] = {}
        self.written: dict[str, dict] = {}
        self.kept = ({} if previous is None or "report_key" not in previous.columns else
                     {r["report_key"]: r for r in previous.iter_rows(named=True)})
        self.units = dict(zip(relationships["id"].to_list(),
                              relationships["text_unit_ids"].to_list()))
        self.title_of = dict(zip(entities["id"].to_list(), entities["title"].to_list()))
        self.member_rows = MemberRows.of(entities, relationships)  # for the rule reports
        self.total, self.finished = communities.height, 0
        self.eager = eager_llm_reports(communities, settings, self.units, unit_tokens)
        self.rejected_run = [0]  # LLM replies rejected in a row (report_llm_give_up_after)
        self.claim_ids_of: dict[int, list[str] | None] = {}

    def tick(self, n: int, _level_total: int) -> None:
        """Progress: ``n`` of this level's calls are done."""
        if self.progress:
            self.progress(self.finished + n, self.total)

    def reuse(self, c: dict, key: str) -> None:
        """Give community ``c`` the report of ``key`` kept from ``previous`` ("reused")
        or written in this call for the same community one level deeper
        ("carried_down": communities at or below max_cluster_size repeat per level).

        Incremental indexing: a community whose :func:`report_key` (members, internal
        relationships, template, model, settings) equals that of a report in
        ``previous`` keeps that report (its title, summary, rating and findings) with no
        LLM call, even if the community's number changed; so after adding or deleting a
        document only communities whose membership or internal relationships changed
        are rewritten (GraphRAG's incremental update likewise keeps the reports of
        unchanged communities). Edits to member descriptions alone do not rewrite a
        kept report; pass ``previous=None`` to rewrite every report (the prompt cache
        still saves unchanged prompts)."""
        how = "reused" if key in self.kept else "carried_down"
        self.methods[how] = self.methods.get(how, 0) + 1
        self.done[c["community"]] = {**(self.kept.get(key) or self.written[key]),
                                     **_placement(c), "report_key": key}

    def rule_answer(self, c: dict, key: str, by: str) -> _Answer:
        """Community ``c``'s rule report as an answer generated ``by`` (rules or lazy)."""
        return (c, key, by, rule_report(c, self.entities, self.relationships,
                                        self.member_rows, self.unit_places), None)

    def plan_level(self, level: pl.DataFrame) -> tuple[list[_Job], list[_Answer]]:
        """(jobs, answers) of one level's communities, in order: an LLM job (with its
        context) for each eager community needing an LLM report, a rule report for the
        others; communities with a known report key are reused, not listed."""
        jobs: list[_Job] = []
        answers: list[_Answer] = []
        settings = self.settings
        for c in level.iter_rows(named=True):
            own_claims = member_claims(c, self.entities, self.claims)
            by = ("rules" if not needs_llm_report(c, settings, self.units, self.unit_tokens)
                  else "llm" if c["community"] in self.eager else "lazy")
            claim_ids = own_claims["id"].to_list() if own_claims is not None else None
            self.claim_ids_of[c["community"]] = claim_ids
            key = report_key(c, self.llm.model_id if self.llm and by == "llm" else "",
                             settings, claim_ids, by)
            if key in self.kept or key in self.written:
                self.reuse(c, key)
                self.finished += 1
                self.tick(0, self.total)
                continue
            if by != "llm":  # rules, or rules awaiting the LLM report (lazy)
                self.methods[by] = self.methods.get(by, 0) + 1
                answers.append(self.rule_answer(c, key, by))
                self.finished += 1
                self.tick(0, self.total)
                continue
            children = [self.done[k] for k in c["children"] if k in self.done]
            context, method = build_report_context(c, self.entities, self.relationships,
                                                   children, settings.report_max_input_tokens,
                                                   self.tokenizer, own_claims)
            self.methods[method] = self.methods.get(method, 0) + 1
            jobs.append((c, key, context))
        return jobs, answers

    def write_jobs(self, jobs: list[_Job]) -> list[WrittenReport | None]:
        """One reply per job (None: not asked, the stage gave up), ``llm.concurrency``
        at a time (:func:`_write_unless_given_up`).

        Raises:
            ValueError: ``jobs`` is not empty and there is no model (``llm`` None).
        """
        if not jobs:
            return []
        if self.llm is None:
            raise ValueError("LLM reports asked for with no model (llm=None)")
        write = functools.partial(_write_unless_given_up, self.llm, self.settings,
                                  self.entities, self.relationships, self.title_of,
                                  self.rejected_run, self.unit_places)
        return self.llm.map(write, jobs, self.tick)

    def reply_answers(self, jobs: list[_Job], replies: list[WrittenReport | None],
                      ) -> list[_Answer]:
        """The answers of ``jobs``' replies, in order.

        A reply that :func:`~kgloom.report_writer.check_report` rejects (it names what
        its context lacks, repeats the prompt's example or repeats itself) is replaced
        by the community's rule report, with a failures row saying why (reason starting
        with :data:`kgloom.report_writer.REJECTED`, detail the reply;
        :func:`kgloom.report_writer.write_llm_report`). After
        ``report_llm_give_up_after`` rejected replies in a row no more calls are made:
        the communities left are published ``lazy``, as global search would
        (``methods["lazy_after_rejections"]`` counts them)."""
        answers: list[_Answer] = []
        for (c, key, _), reply in zip(jobs, replies):
            if reply is None:
                lazy_key = report_key(c, "", self.settings, self.claim_ids_of[c["community"]],
                                      "lazy")
                self.methods["lazy_after_rejections"] = \
                    self.methods.get("lazy_after_rejections", 0) + 1
                answers.append(self.rule_answer(c, lazy_key, "lazy"))
                continue
            if reply.rejected:  # published as the rule report, the reply kept in the row
                self.failures.append(reply.rejected)
            answers.append((c, key, reply.generated_by, reply.report, reply.failure))
        return answers

    def record(self, answers: list[_Answer]) -> None:
        """File each answer: its report row under ``done`` and ``written``, or (no
        report) its failure row."""
        for c, key, by, obj, failure in answers:
            if obj is None:
                self.failures += [failure] if failure else []
            else:
                self.done[c["community"]] = {**_placement(c), **report_columns(obj),
                                             "report_key": key, "generated_by": by}
                self.written[key] = self.done[c["community"]]

    def tables(self) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, int]]:
        """(reports conformed to ``COMMUNITY_REPORTS_SCHEMA`` in community order, the
        failures frame, the context-method counts)."""
        schema = {k: v for k, v in schemas.COMMUNITY_REPORTS_SCHEMA.items()
                  if k != "human_readable_id"}
        rows = [{k: r[k] for k in schema}
                for r in sorted(self.done.values(), key=lambda r: r["community"])]
        frame = pl.DataFrame(rows, schema=schema).with_row_index("human_readable_id") \
            .with_columns(pl.col("human_readable_id").cast(pl.Int64))
        return (schemas.conform(frame, schemas.COMMUNITY_REPORTS_SCHEMA),
                failures_frame(self.failures), self.methods)
