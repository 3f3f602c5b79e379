"""Writing one community report: the kernel the reports stage and global search share.

The reports stage (:mod:`kgloom.reports.community_reports`) writes every community's
report at index time; with ``llm_reports: lazy`` (:class:`kgloom.settings.indexing.IndexSettings`)
it writes rule reports only and global search writes a community's LLM report the first
time it reaches the community (:mod:`kgloom.query.context_builder.lazy_reports`). Both
go through this module, so an LLM report has one prompt (:data:`REPORT_TEMPLATE`), one
context builder (:func:`build_report_context`), one check (:func:`check_report`) and one
reuse key (:func:`report_key`) whichever side writes it. No Dagster, no stage imported.

Follows GraphRAG's ``summarize_communities`` (report fields: title, summary, rating with
explanation, findings with explanations; ``build_mixed_context``): a report's context is
its member entities, the relationships among them (highest degree first) and, when claims
were extracted, the members' claims, within ``report_max_input_tokens``; when that does
not fit and the community has sub-communities, their reports (largest first) stand in for
the raw members.

The LLM's prompt keeps every fixed part (the instructions) before the community's data,
so the KV cache of that prefix is reused from one report to the next; its fields are
bounded (``maxLength``, ``maxItems``). It has no worked example: the grammar shapes the
reply, and a small model copied an example's names (or its placeholders) into its
reports. A small community gets a report built by rules (:func:`rule_report`, no model
call).

Grounded reports: an LLM reply is published only when it names nothing its context
lacks, does not repeat the prompt's example and does not loop (:func:`check_report`);
otherwise the community gets its rule report and a failures row saying why
(:func:`write_llm_report`).

The package's modules: :mod:`.prompt` (the templates, the reply schemas, the versions and
bounds), :mod:`.report_context` (a community's context), :mod:`.rules` (rule reports and
the options a model chooses among), :mod:`.roles` (the role the text gives a member),
:mod:`.sections` (the headings of a long document and each unit's section),
:mod:`.report_checks` (the grounding checks of a reply); here: the reuse key, the schema
per community, and writing an LLM report. What other modules use is re-exported here, so
``kgloom.report_writer.X`` keeps working (:data:`CHOICES_TEMPLATE` is read from this
module when a report is keyed or written, so replacing it here takes effect).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import polars as pl

from kgloom.core.ids import content_id
from kgloom.llm import LLMCaller, structured_call
from kgloom.llm.structured import is_loop_failure
from kgloom.report_writer.prompt import (
    _BRIEF_KEY,
    BRIEF_REPORT_SCHEMA,
    CHOICES_TEMPLATE,
    GROUNDING_VERSION,
    MAX_FINDING_OPTIONS,
    MAX_SENTENCE_OPTIONS,
    MAX_TITLE_OPTIONS,
    REJECTED,
    REPORT_METHODS,
    REPORT_TEMPLATE,
    RULES_VERSION,
    SAME_FIELD_MIN_WORDS,
    STAGE,
)
from kgloom.report_writer.report_checks import check_report, example_text, report_text
from kgloom.report_writer.report_context import build_report_context, member_claims
from kgloom.report_writer.rules import (
    FINDING_CANDIDATES,
    TITLE_MAX_WORDS,
    MemberRows,
    Places,
    ReportOptions,
    _members,
    _whole,
    report_options,
    rule_report,
)
from kgloom.settings.indexing import IndexSettings

# its own names and those it re-exports from the package's modules
__all__ = [
    "BRIEF_REPORT_SCHEMA", "CHOICES_TEMPLATE", "FINDING_CANDIDATES", "GROUNDING_VERSION",
    "MAX_FINDING_OPTIONS", "MAX_SENTENCE_OPTIONS", "MAX_TITLE_OPTIONS", "REJECTED",
    "REPORT_METHODS", "REPORT_SETTINGS", "REPORT_TEMPLATE", "RULES_VERSION",
    "SAME_FIELD_MIN_WORDS", "STAGE", "TITLE_MAX_WORDS", "MemberRows", "Places", "ReportOptions",
    "WrittenReport", "_whole", "build_report_context", "check_report", "example_text",
    "is_brief", "member_claims", "report_columns", "report_key", "report_options",
    "report_schema", "report_settings", "report_text", "rule_report", "write_llm_report",
]


def _markdown(obj: dict) -> str:
    parts = [f"# {obj['title']}", "", obj["summary"], "",
             f"**Rating:** {obj['rating']} — {obj['rating_explanation']}", ""]
    for f in obj["findings"]:
        parts += [f"## {f['summary']}", "", f["explanation"], ""]
    return "\n".join(parts).strip() + "\n"


def report_key(community: dict, model_id: str, settings: IndexSettings,
               claim_ids: list[str] | None = None, method: str = "llm") -> str:
    """Return the reuse key of one community's report: a hash of the community's member
    entity ids, internal relationship ids and members' claim ids (its structure, not its
    level or number), and of how the report is written: for ``method`` ``llm`` the report
    template, the model, the context settings and ``GROUNDING_VERSION`` (the checks a
    reply passes, :func:`check_report`), for ``rules`` ``RULES_VERSION``, for ``lazy``
    (a rule report awaiting its LLM report, ``llm_reports: lazy``) ``RULES_VERSION`` and
    the word ``lazy``. Two communities with the same key get the same report; the three
    methods never share a key, so switching ``llm_reports`` between ``eager`` and
    ``lazy`` never reuses a report of the other kind."""
    if method not in REPORT_METHODS:
        raise ValueError(f"report method must be one of {REPORT_METHODS}, got {method!r}")
    how = ((REPORT_TEMPLATE.hash, model_id, settings.seed, settings.report_max_input_tokens,
            GROUNDING_VERSION) if method == "llm" else
           (RULES_VERSION,) if method == "rules" else (RULES_VERSION, "lazy"))
    if method == "llm" and settings.llm_report_form == "choices":
        how += ("choices", CHOICES_TEMPLATE.hash, RULES_VERSION)
    elif method == "llm" and is_brief(community, settings):
        how += _BRIEF_KEY
    return content_id("report", *how, *sorted(community["entity_ids"]), "|",
                      *sorted(community["relationship_ids"]),
                      *(["|claims", *sorted(claim_ids)] if claim_ids else []))




def is_brief(community: dict, settings: IndexSettings) -> bool:
    """True when ``community``'s LLM report is a brief one (:data:`BRIEF_REPORT_SCHEMA`):
    it has at most ``report_brief_max_members`` members (0: never)."""
    return 0 < len(community["entity_ids"]) <= settings.report_brief_max_members


def report_schema(community: dict, settings: IndexSettings) -> dict:
    """The JSON schema of ``community``'s LLM report: :data:`BRIEF_REPORT_SCHEMA` for a
    small one (:func:`is_brief`), else ``REPORT_TEMPLATE.schema``."""
    return BRIEF_REPORT_SCHEMA if is_brief(community, settings) else REPORT_TEMPLATE.schema


# What an LLM report's prompt, schema and reuse key depend on besides the community and
# the model: the index settings global search needs to write a lazy report exactly as
# the reports stage would have (recorded in the stage's stats, ``report_settings``).
REPORT_SETTINGS = ("seed", "report_max_input_tokens", "report_brief_max_members",
                   "llm_report_form")


def report_settings(settings: IndexSettings) -> dict[str, int | str]:
    """The :data:`REPORT_SETTINGS` of ``settings``, JSON-ready."""
    return {name: getattr(settings, name) for name in REPORT_SETTINGS}


def report_columns(obj: dict) -> dict:
    """The ``COMMUNITY_REPORTS_SCHEMA`` columns a report reply (or :func:`rule_report`)
    fills: title, summary (stripped), full_content (markdown), rank (the 0-10 rating as
    a float), rating_explanation, findings and full_content_json (the reply as JSON)."""
    return {"title": obj["title"].strip(), "summary": obj["summary"].strip(),
            "full_content": _markdown(obj), "rank": float(obj["rating"]),
            "rating_explanation": obj["rating_explanation"], "findings": obj["findings"],
            "full_content_json": json.dumps(obj)}


@dataclass(frozen=True)
class WrittenReport:
    """What :func:`write_llm_report` returns.

    Attributes:
        report: the report to publish ({title, summary, rating, rating_explanation,
            findings}): the model's reply, or the community's :func:`rule_report` when
            :func:`check_report` rejected the reply; None when the reply failed twice.
        generated_by: ``llm`` (the reply), ``rules`` (a rejected reply replaced), or ""
            (no report).
        rejected: the failures row of a rejected reply (reason :data:`REJECTED` plus
            the problems, detail the reply as JSON), else None.
        failure: the failures row of a reply that failed twice
            (:func:`kgloom.llm.structured_call`), else None.
    """

    report: dict | None
    generated_by: str
    rejected: dict | None = None
    failure: dict | None = None


def write_llm_report(llm: LLMCaller, community: dict, context: str, settings: IndexSettings,
                     entities: pl.DataFrame, relationships: pl.DataFrame,
                     title_of: dict[str, str],
                     places: Places | None = None) -> WrittenReport:
    """Ask ``llm`` for ``community``'s report from ``context`` and check the reply.

    With ``settings.llm_report_form`` ``choices`` (the default) the model chooses the
    report's parts among options of the community's data (:func:`_write_choices_report`).
    With ``free``: one structured call (stage ``community_reports``, item the community number,
    :data:`REPORT_TEMPLATE` with :func:`report_schema`'s schema, seed ``settings.seed``);
    the reply is checked by :func:`check_report` against ``context`` and the members'
    titles; a rejected reply is replaced by :func:`rule_report`. Decoding stops once a
    field of the reply repeats itself (``stop_on_loop``): every string value of the
    report schemas is a field :func:`check_report` checks for loops, so such a reply is
    rejected without being decoded to its end (the failures row says "repeats itself"
    and holds the reply so far).

    Args:
        llm: a :class:`kgloom.llm.CachedLLM` or a wrapper with its ``call``.
        community: a ``COMMUNITIES_SCHEMA`` row as a dict.
        context: its context (:func:`build_report_context`).
        settings: ``seed`` and ``report_brief_max_members``.
        entities / relationships: the full tables (for the rule report).
        title_of: entity id -> title.
        places: text unit id -> (document title, position), for the rule report
            (:func:`rule_report`).

    Returns:
        a :class:`WrittenReport`; never raises for a bad reply.
    """
    item = str(community["community"])
    if settings.llm_report_form == "choices":
        return _write_choices_report(llm, community, context, settings, entities,
                                     relationships, title_of, places)
    obj, failure = structured_call(llm, REPORT_TEMPLATE, STAGE, item, settings.seed,
                                   schema=report_schema(community, settings),
                                   stop_on_loop=True, context=context)

    def rejected(why: str, reply: str) -> WrittenReport:
        # published as the rule report, the reply kept in the failures row
        return WrittenReport(rule_report(community, entities, relationships, places=places),
                             "rules",
                             rejected={"stage": STAGE, "item_id": item,
                                       "reason": REJECTED + why, "detail": reply})

    if failure is not None and is_loop_failure(failure):  # what check_report would reject
        return rejected(failure["reason"].removeprefix("reply "), failure["detail"])
    if obj is None:
        return WrittenReport(None, "", failure=failure)
    problems = check_report(obj, context,
                            [title_of[e] for e in community["entity_ids"] if e in title_of])
    if problems:
        return rejected("; ".join(problems), json.dumps(obj, ensure_ascii=False))
    return WrittenReport(obj, "llm", failure=failure)


def _write_choices_report(llm: LLMCaller, community: dict, context: str,
                          settings: IndexSettings, entities: pl.DataFrame,
                          relationships: pl.DataFrame, title_of: dict[str, str],
                          places: Places | None) -> WrittenReport:
    """:func:`write_llm_report` with ``llm_report_form`` ``choices``: one structured call
    (:data:`CHOICES_TEMPLATE`, the community's :func:`report_options` listed under its
    context and as the reply's enums), then :func:`rule_report` with the reply as its
    picks. The report is checked as a free one is (:func:`check_report`), against the
    context, the options, the documents it cites and its members' own descriptions (what
    a finding may quote when the context's budget left it out): what it names comes from
    there by construction, so a rejection would mean a bug, and it is still published as the
    rule report with a failures row. A reply that does not parse twice: no report and the
    failure row (the caller publishes the rule report)."""
    item = str(community["community"])
    options = report_options(community, entities, relationships)
    obj, failure = structured_call(llm, CHOICES_TEMPLATE, STAGE, item, settings.seed,
                                   schema=options.schema(), context=context,
                                   options=options.text())
    if obj is None:
        return WrittenReport(None, "", failure=failure)
    report = rule_report(community, entities, relationships, places=places, picks=obj)
    # the documents of the community's own text units (what its findings cite), not
    # every document of the corpus: on the 2Wiki pool all 6,119 titles went into each
    # report's check
    # and the sections they fall under (a summary's "where")
    cited = "\n".join(sorted({part for u in community.get("text_unit_ids") or []
                               if places and u in places for part in places[u][::2]
                               if isinstance(part, str) and part}))
    # the rule report quotes its members' own evidence, which the context may have left
    # out for its token budget: that is the community's data too
    ents, rels = _members(community, entities, relationships, None)
    own = "\n".join([e[1] for e in ents if e[1]] + [r[3] for r in rels if r[3]])
    problems = check_report(report, f"{context}\n{options.text()}\n{cited}\n{own}",
                            [title_of[e] for e in community["entity_ids"] if e in title_of],
                            composed=True)
    if problems:
        return WrittenReport(rule_report(community, entities, relationships, places=places),
                             "rules", rejected={
                                 "stage": STAGE, "item_id": item,
                                 "reason": REJECTED + "; ".join(problems),
                                 "detail": json.dumps(obj, ensure_ascii=False)})
    return WrittenReport(report, "llm", failure=failure)
