"""Writing one community report: the kernel the reports stage and global search share.

The reports stage (:mod:`kgloom.reports.community_reports`) writes every community's
report at index time; with ``llm_reports: lazy`` (:class:`kgloom.config.IndexSettings`)
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
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass

import polars as pl
import regex

from kgloom import layout
from kgloom.config import IndexSettings
from kgloom.grounding import find_repetition, shared_phrase, ungrounded_names, words
from kgloom.ids import content_id
from kgloom.llm import LLMCaller, PromptTemplate, structured_call
from kgloom.llm.structured import is_loop_failure
from kgloom.tokenizer import Tokenizer

STAGE = layout.COMMUNITY_REPORTS

_REPORT_USER = "Community data:\n{context}"
# No worked example: the JSON-schema grammar alone shapes the reply. A small model
# copied the former example's people and places (Sherlock Holmes, Baker Street) into 12
# of the book's 60 reports, and a placeholder example's "<a fact about <name 1>>" into 9
# of 22 replies; with no example, 4 of the same 22 named anything outside their context
# (bench/results/eval_reports_book_real.json).

REPORT_TEMPLATE = PromptTemplate(
    name="community_report",
    system=("You write a short report about a community of related entities in a knowledge "
            "graph, using only the data given. Answer with JSON only: a title naming its key "
            "entities, a summary of how they are related, an importance rating from 0 to 10 "
            "with a one-sentence explanation, and up to three findings, each a short "
            "statement with an explanation grounded in the data. Name only the entities "
            "of the data."),
    user=_REPORT_USER,
    schema={
        "type": "object",
        "properties": {
            "title": {"type": "string", "minLength": 1, "maxLength": 60},
            "summary": {"type": "string", "minLength": 1, "maxLength": 300},
            # an enum, since llama-cpp-python's grammar ignores minimum/maximum
            "rating": {"type": "integer", "enum": list(range(11))},
            "rating_explanation": {"type": "string", "minLength": 1, "maxLength": 120},
            "findings": {"type": "array", "minItems": 1, "maxItems": 3,
                         "items": {"type": "object",
                                   "properties": {
                                       "summary": {"type": "string", "minLength": 1,
                                                   "maxLength": 80},
                                       "explanation": {"type": "string", "minLength": 1,
                                                       "maxLength": 160}},
                                   "required": ["summary", "explanation"]}},
        },
        "required": ["title", "summary", "rating", "rating_explanation", "findings"],
    },
    max_tokens=450,
)
# generated_by of a published report: by the model, by rules, or by rules awaiting the
# LLM report global search writes on first use (llm_reports: lazy; kgloom.schemas)
REPORT_METHODS = ("llm", "rules", "lazy")
RULES_VERSION = "rules-1"  # bump when rule_report's output changes (part of report_key)
GROUNDING_VERSION = "grounding-1"  # bump when check_report's rules change (part of report_key)
REJECTED = "report rejected, rule report published: "  # failures reason of a rejected reply
# a reply copying one field's text into another (a finding's summary as its explanation)
# says nothing new: seen in the book's real-model reports, 3-4 fields alike
SAME_FIELD_MIN_WORDS = 4


def _brief_schema(schema: dict) -> dict:
    """``schema`` cut to a brief report: one finding, shorter summary and explanations."""
    props = copy.deepcopy(schema["properties"])
    props["summary"]["maxLength"] = 200
    props["rating_explanation"]["maxLength"] = 80
    props["findings"]["maxItems"] = 1
    props["findings"]["items"]["properties"]["explanation"]["maxLength"] = 120
    return {**schema, "properties": props}


# The reply schema of a community of at most ``report_brief_max_members`` members: the
# same fields (so the same table, the same markdown) with one finding and shorter
# strings. The prompt is REPORT_TEMPLATE's, word for word, so the KV cache of its fixed
# prefix serves both sizes; only the grammar differs.
BRIEF_REPORT_SCHEMA = _brief_schema(REPORT_TEMPLATE.schema)
_BRIEF_KEY = ("brief", content_id("schema", json.dumps(BRIEF_REPORT_SCHEMA, sort_keys=True)))


_HEADINGS = ("Entities:", "Relationships:", "Claims:", "Sub-community reports:")


def _fit(lines: list[str], budget: int, tokenizer: Tokenizer) -> tuple[list[str], bool]:
    """Keep leading ``lines`` while their token total stays within ``budget``; a heading
    left with nothing under it is dropped."""
    kept, used, complete = [], 0, True
    for line in lines:
        n = tokenizer.count(line) + 1
        if used + n > budget:
            complete = False
            break
        kept.append(line)
        used += n
    while kept and kept[-1] in _HEADINGS:
        kept.pop()
    return kept, complete


def member_claims(community: dict, entities: pl.DataFrame,
                  claims: pl.DataFrame | None) -> pl.DataFrame | None:
    """The claims (COVARIATES_SCHEMA rows) whose subject is a member of ``community``,
    sorted by id; None when there are none."""
    if claims is None or not claims.height:
        return None
    titles = entities.filter(pl.col("id").is_in(set(community["entity_ids"])))["title"]
    found = claims.filter(pl.col("subject_id").is_in(titles.to_list())).sort("id")
    return found if found.height else None


def _sentences(description: str | None) -> list[str]:
    """A description's parts: the descriptions merged into it, one per line."""
    return [part.strip() for part in (description or "").split("\n") if part.strip()]


def _member_lines(ents: pl.DataFrame, rels: pl.DataFrame) -> tuple[list[str], list[str]]:
    """The context lines of a community's entities and relationships, each description
    part (an evidence sentence) written once: relationships with the same description
    share one line (``- A -> C; B -> C: ...``), a relationship part already written is
    left out, and an entity's description keeps only the parts no relationship line
    holds (an entity described by its relationships' sentences is listed by name and
    type). Extractive descriptions are evidence sentences, so the same sentence was
    otherwise written once per entity and relationship it names."""
    rel_lines: list[list] = []  # [pairs, parts]
    by_parts: dict[tuple[str, ...], list] = {}
    written: set[str] = set()
    for r in rels.iter_rows(named=True):
        pair, parts = f"{r['source']} -> {r['target']}", tuple(_sentences(r["description"]))
        if parts and parts in by_parts:
            by_parts[parts][0].append(pair)
            continue
        line = [[pair], [p for p in parts if p not in written]]
        written.update(parts)
        by_parts.setdefault(parts, line)
        rel_lines.append(line)
    ent_lines = []
    for r in ents.iter_rows(named=True):
        own = [p for p in _sentences(r["description"]) if p not in written]
        ent_lines.append(f"- {r['title']} ({r['type']})" + (f": {' '.join(own)}" if own else ""))
    return ent_lines, [f"- {'; '.join(pairs)}" + (f": {' '.join(parts)}" if parts else "")
                       for pairs, parts in rel_lines]


def build_report_context(community: dict, entities: pl.DataFrame, relationships: pl.DataFrame,
                         child_reports: list[dict], budget: int,
                         tokenizer: Tokenizer,
                         claims: pl.DataFrame | None = None) -> tuple[str, str]:
    """Build one community's report context within ``budget`` tokens.

    Args:
        community: a ``COMMUNITIES_SCHEMA`` row as a dict.
        entities / relationships: the full tables (with degree / combined_degree).
        child_reports: reports (dicts with title, summary, size) of its sub-communities.
        budget: max tokens of :mod:`kgloom.tokenizer`.
        claims: the members' claims (see :func:`member_claims`), listed after the
            relationships under "Claims:"; None adds nothing (the context is then
            exactly members and relationships).

    Each evidence sentence is written once (see :func:`_member_lines`).

    Returns:
        (context text, method): method is ``members`` when all members and relationships fit,
        ``sub_reports`` when sub-community reports stand in, ``truncated`` otherwise.
    """
    ids = set(community["entity_ids"])
    ents = entities.filter(pl.col("id").is_in(ids)).sort(["degree", "title"],
                                                         descending=[True, False])
    rels = relationships.filter(pl.col("id").is_in(set(community["relationship_ids"]))).sort(
        ["combined_degree", "id"], descending=[True, False])
    ent_lines, rel_lines = _member_lines(ents, rels)
    claim_lines = ([f"- {r['subject_id']} -> {r['object_id']} [{r['type']}, {r['status']}]: "
                    f"{r['description']}".replace("\n", " ") for r in claims.iter_rows(named=True)]
                   if claims is not None else [])
    lines = (["Entities:"] + ent_lines + (["Relationships:"] + rel_lines if rel_lines else [])
             + (["Claims:"] + claim_lines if claim_lines else []))
    members, complete = _fit(lines, budget, tokenizer)
    if complete:
        return "\n".join(members), "members"
    if child_reports:
        subs = [f"- {c['title']}: {c['summary']}".replace("\n", " ")
                for c in sorted(child_reports, key=lambda c: (-c["size"], c["title"]))]
        kept, _ = _fit(["Sub-community reports:"] + subs, budget, tokenizer)
        if len(kept) > 1:
            return "\n".join(kept), "sub_reports"
    return "\n".join(members), "truncated"


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
    if method == "llm" and is_brief(community, settings):
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


def _names(titles: list[str]) -> str:
    """"A", "A and B", "A, B and C", "A, B, C and 2 others"."""
    if len(titles) <= 3:
        return titles[0] if len(titles) == 1 else ", ".join(titles[:-1]) + " and " + titles[-1]
    return f"{', '.join(titles[:3])} and {len(titles) - 3} others"


def _clip(text: str, limit: int) -> str:
    """``text`` on one line, cut at a word to at most ``limit`` characters ("…" added)."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    head = flat[:limit - 1]
    return (head.rsplit(" ", 1)[0] if " " in head[limit // 2:] else head) + "…"


@dataclass(frozen=True)
class MemberRows:
    """What :func:`rule_report` reads of the entities and relationships, by id: built once
    for a whole reports stage (:meth:`of`), so a rule report is dictionary lookups, not
    two table filters and sorts (~0.9 ms a community: 12 s of the 2Wiki pool's 13,780
    rule reports).

    Attributes:
        entities: id -> (title, description, degree).
        relationships: id -> (source, target, description, combined_degree).
    """

    entities: dict[str, tuple[str, str | None, int | None]]
    relationships: dict[str, tuple[str, str, str | None, int | None]]

    @classmethod
    def of(cls, entities: pl.DataFrame, relationships: pl.DataFrame) -> MemberRows:
        """From ``ENTITIES_SCHEMA`` / ``RELATIONSHIPS_SCHEMA`` frames (degree and
        combined_degree filled)."""
        return cls(
            dict(zip(entities["id"].to_list(), zip(
                entities["title"].to_list(), entities["description"].to_list(),
                entities["degree"].to_list()))),
            dict(zip(relationships["id"].to_list(), zip(
                relationships["source"].to_list(), relationships["target"].to_list(),
                relationships["description"].to_list(),
                relationships["combined_degree"].to_list()))))


def rule_report(community: dict, entities: pl.DataFrame, relationships: pl.DataFrame,
                rows: MemberRows | None = None) -> dict:
    """A report of a small community built by rules, no model: the same fields and
    bounds as an LLM report (:data:`REPORT_TEMPLATE`'s schema).

    - title: the member titles, highest degree first ("A and B", "A, B and C");
    - summary: the internal relationships' descriptions (evidence sentences of the text),
      strongest first (combined degree), each relationship's first description; a
      community without an internal relationship gets its members' descriptions;
    - rating: the number of members plus internal relationships, at most 10 (GraphRAG's
      rating is the community's importance; a rule can only count its size);
    - findings: one per internal relationship ("A – B": its description), at most 3;
      without relationships, one per member.

    Args:
        community: a ``COMMUNITIES_SCHEMA`` row as a dict.
        entities / relationships: the full tables (degree / combined_degree filled).
        rows: :meth:`MemberRows.of` those tables, when the caller writes many reports;
            None: the community's rows are taken from the tables.

    Returns:
        {title, summary, rating, rating_explanation, findings: [{summary, explanation}]}.
    """
    props = REPORT_TEMPLATE.schema["properties"]
    limit = {k: props[k].get("maxLength", 0) for k in ("title", "summary", "rating_explanation")}
    item = props["findings"]["items"]["properties"]
    if rows is None:
        rows = MemberRows.of(
            entities.filter(pl.col("id").is_in(set(community["entity_ids"]))),
            relationships.filter(pl.col("id").is_in(set(community["relationship_ids"]))))
    # highest degree first, then title; strongest relationship first, then id (a missing
    # degree sorts first, as a descending table sort puts nulls)
    ents = sorted((rows.entities[i] for i in set(community["entity_ids"])
                   if i in rows.entities),
                  key=lambda e: (e[2] is not None, -(e[2] or 0), e[0]))
    rels = sorted(((i, *rows.relationships[i]) for i in set(community["relationship_ids"])
                   if i in rows.relationships),
                  key=lambda r: (r[4] is not None, -(r[4] or 0), r[0]))
    first = lambda d: (d or "").split("\n")[0].strip()  # noqa: E731
    if rels:
        pairs = [(f"{source} – {target}", first(desc)) for _, source, target, desc, _ in rels]
    else:
        pairs = [(title, first(desc)) for title, desc, _ in ents]
    sentences = list(dict.fromkeys(d for _, d in pairs if d))
    titles = [title for title, _, _ in ents] or ["(empty community)"]
    summary = _clip(" ".join(sentences), limit["summary"]) if sentences else \
        f"{_names(titles)}: {len(ents)} entities with no description."
    n_rel = len(community["relationship_ids"])
    findings = [{"summary": _clip(name, item["summary"]["maxLength"]),
                 "explanation": _clip(desc or name, item["explanation"]["maxLength"])}
                for name, desc in pairs[:props["findings"]["maxItems"]]]
    return {"title": _clip(_names(titles), limit["title"]), "summary": summary,
            "rating": min(10, len(ents) + n_rel),
            "rating_explanation": _clip(
                f"Built by rules from {len(ents)} entities and {n_rel} relationships; "
                "rated by size.", limit["rating_explanation"]),
            "findings": findings or [{"summary": _clip(titles[0], item["summary"]["maxLength"]),
                                      "explanation": "No description."}]}


# an angle-bracket placeholder ("<name 1>", "<a fact about X>") written into a reply
_PLACEHOLDER = regex.compile(r"<[^<>\n]{1,80}>")


def example_text(template: PromptTemplate = REPORT_TEMPLATE) -> str:
    """The worked example(s) of ``template``: each example turn's user and assistant
    text, one after the other (what :func:`check_report` tells a copy by); "" for a
    template without examples (``REPORT_TEMPLATE`` has none)."""
    return "\n".join(part for turn in template.examples for part in turn)


def report_text(obj: dict) -> str:
    """A report reply's free text, one field a paragraph: title, summary, rating explanation,
    then each finding's summary and explanation."""
    parts = [obj.get("title", ""), obj.get("summary", ""), obj.get("rating_explanation", "")]
    for f in obj.get("findings") or []:
        parts += [f.get("summary", ""), f.get("explanation", "")]
    return "\n\n".join(p for p in parts if p)  # a blank line: no name spans two fields


def check_report(obj: dict, context: str, members: tuple[str, ...] | list[str] = (),
                 example: str | None = None) -> list[str]:
    """Why an LLM report reply must not be published; [] when it may.

    A report may name only what its context holds (the rule of GraphRAG's report prompt,
    "do not include information where the supporting evidence for it is not
    provided", enforced here rather than asked for). Checked, in order:

    - it repeats the prompt's worked example (when ``example`` is not empty): a
      ``<placeholder>`` of the example, a run of
      :data:`kgloom.grounding.EXAMPLE_MIN_WORDS` words it shares with ``example`` but
      not with ``context`` (:func:`kgloom.grounding.shared_phrase`), or a name of the
      example that the context lacks;
    - it writes placeholders: text in angle brackets that the context lacks
      ("<a fact about Scrooge>", a template slot, not a report);
    - it names what its context lacks: a proper name of its text
      (:func:`kgloom.grounding.ungrounded_names`) that neither ``context`` nor
      ``members`` holds;
    - it repeats itself: a loop within a field (:func:`kgloom.grounding.find_repetition`),
      the same text of ``SAME_FIELD_MIN_WORDS`` words or more in two fields (a finding's
      summary copied as its explanation), or two findings with the same summary.

    Args:
        obj: the parsed reply (title, summary, rating_explanation, findings).
        context: the community data the model was given (the prompt's user turn).
        members: the community's member titles (names it may use even when a cut
            context left them out).
        example: the prompt's example text (default: :func:`example_text` of
            ``REPORT_TEMPLATE``, "" since it has none); pass an older prompt's to check
            the reports written under it.

    Returns:
        one reason per failed check, each naming what was found.
    """
    example = example_text() if example is None else example
    text = report_text(obj)
    problems: list[str] = []
    slots = [p for p in dict.fromkeys(_PLACEHOLDER.findall(text)) if p not in context]
    copied = [p for p in slots if p in example]
    phrase = shared_phrase(text, example, context) if example else None
    unknown = [n for n in ungrounded_names(text, context, tuple(members))
               if not any(n in p for p in slots)]
    example_words = set(words(example))
    from_example = [n for n in unknown if example_words and set(words(n)) <= example_words]
    if copied or phrase or from_example:
        what = [f"placeholder {p}" for p in copied[:3]] + (
            [f"its words \"{phrase}\""] if phrase else []) + from_example[:5]
        problems.append("repeats the prompt's example: " + ", ".join(what))
    if any(p not in copied for p in slots):
        problems.append("writes placeholders: " + ", ".join(
            p for p in slots if p not in copied)[:200])
    others = [n for n in unknown if n not in from_example]
    if others:
        problems.append("names what its context lacks: " + ", ".join(others[:8]))
    fields = [("title", obj.get("title", "")), ("summary", obj.get("summary", "")),
              ("rating_explanation", obj.get("rating_explanation", ""))]
    for i, f in enumerate(obj.get("findings") or [], 1):
        fields += [(f"finding {i} summary", f.get("summary", "")),
                   (f"finding {i} explanation", f.get("explanation", ""))]
    problems += _repeats(fields, obj.get("findings") or [])
    return problems


def _repeats(fields: list[tuple[str, str]], findings: list[dict]) -> list[str]:
    """The "repeats itself" reason of :func:`check_report` ([] or one reason): a loop
    within a field, the same text (of ``SAME_FIELD_MIN_WORDS`` words or more) in two
    fields, or two findings with the same summary."""
    for _, text in fields:
        rep = find_repetition(text or "")
        if rep is not None:
            return [f"repeats itself: \"{rep.phrase}\" {rep.count} times"]
    first: dict[tuple[str, ...], str] = {}
    for name, text in fields:
        key = tuple(words(text or ""))
        if len(key) >= SAME_FIELD_MIN_WORDS:
            if key in first:
                return [f"repeats itself: the same text in {first[key]} and {name}"]
            first[key] = name
    seen: set[str] = set()
    for f in findings:
        key = " ".join(words(f.get("summary", "")))
        if key in seen:
            return [f"repeats itself: the finding \"{f['summary']}\" twice"]
        seen.add(key)
    return []



# What an LLM report's prompt, schema and reuse key depend on besides the community and
# the model: the index settings global search needs to write a lazy report exactly as
# the reports stage would have (recorded in the stage's stats, ``report_settings``).
REPORT_SETTINGS = ("seed", "report_max_input_tokens", "report_brief_max_members")


def report_settings(settings: IndexSettings) -> dict[str, int]:
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
                     title_of: dict[str, str]) -> WrittenReport:
    """Ask ``llm`` for ``community``'s report from ``context`` and check the reply.

    One structured call (stage ``community_reports``, item the community number,
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

    Returns:
        a :class:`WrittenReport`; never raises for a bad reply.
    """
    item = str(community["community"])
    obj, failure = structured_call(llm, REPORT_TEMPLATE, STAGE, item, settings.seed,
                                   schema=report_schema(community, settings),
                                   stop_on_loop=True, context=context)

    def rejected(why: str, reply: str) -> WrittenReport:
        # published as the rule report, the reply kept in the failures row
        return WrittenReport(rule_report(community, entities, relationships), "rules",
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
