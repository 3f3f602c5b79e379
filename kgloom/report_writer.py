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
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass

import polars as pl
import regex

from kgloom.core import layout
from kgloom.core.ids import content_id
from kgloom.embedding.tokenizer import Tokenizer
from kgloom.llm import LLMCaller, PromptTemplate, structured_call
from kgloom.llm.structured import is_loop_failure
from kgloom.names.candidates import STOPWORDS
from kgloom.names.grounding import find_repetition, shared_phrase, ungrounded_names, words
from kgloom.settings.indexing import IndexSettings

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
                                                       "maxLength": 320}},
                                   "required": ["summary", "explanation"]}},
        },
        "required": ["title", "summary", "rating", "rating_explanation", "findings"],
    },
    max_tokens=600,
)
# What the model writes with llm_report_form "choices" (the default): choices among
# options taken from the community's data, which the rule report's sentences then carry
# (report_options, rule_report's picks). The options are listed under the data and are
# the reply's enums, so the reply can only pick among them.
CHOICES_TEMPLATE = PromptTemplate(
    name="community_report_choices",
    system=("You help write a short report about a community of related entities in a "
            "knowledge graph. Below its data are options taken from that data. Answer with "
            "JSON only: the title that best names the community, the sentence that best "
            "says how its members are related, up to three relationships most worth "
            "reporting, and the community's importance from 0 to 10."),
    user="Community data:\n{context}\n\nOptions:\n{options}",
    schema={},  # per community: ReportOptions.schema
    max_tokens=400,
)
MAX_TITLE_OPTIONS = 5
MAX_SENTENCE_OPTIONS = 5
MAX_FINDING_OPTIONS = 8
_RATINGS = [str(k) for k in range(11)]
# generated_by of a published report: by the model, by rules, or by rules awaiting the
# LLM report global search writes on first use (llm_reports: lazy; kgloom.core.schemas)
REPORT_METHODS = ("llm", "rules", "lazy")
RULES_VERSION = "rules-3"  # bump when rule_report's output changes (part of report_key)
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
        budget: max tokens of :mod:`kgloom.embedding.tokenizer`.
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
        entities: id -> (title, description, degree, type, text_unit_ids).
        relationships: id -> (source, target, description, combined_degree, text_unit_ids).
    """

    entities: dict[str, tuple[str, str | None, int | None, str | None, list[str] | None]]
    relationships: dict[str, tuple[str, str, str | None, int | None, list[str] | None]]

    @classmethod
    def of(cls, entities: pl.DataFrame, relationships: pl.DataFrame) -> MemberRows:
        """From ``ENTITIES_SCHEMA`` / ``RELATIONSHIPS_SCHEMA`` frames (degree and
        combined_degree filled; ``type`` and ``text_unit_ids`` read when present)."""
        def col(df: pl.DataFrame, name: str) -> list:
            return df[name].to_list() if name in df.columns else [None] * df.height
        return cls(
            dict(zip(entities["id"].to_list(), zip(
                entities["title"].to_list(), entities["description"].to_list(),
                entities["degree"].to_list(), col(entities, "type"),
                col(entities, "text_unit_ids")))),
            dict(zip(relationships["id"].to_list(), zip(
                relationships["source"].to_list(), relationships["target"].to_list(),
                relationships["description"].to_list(),
                relationships["combined_degree"].to_list(),
                col(relationships, "text_unit_ids")))))


# how a rule report counts members of each type ("4 people and 1 place")
_TYPE_WORDS = {"PERSON": ("person", "people"), "ORGANIZATION": ("organization", "organizations"),
               "LOCATION": ("place", "places"), "EVENT": ("event", "events")}
# relation words between two names in a sentence, for a title ("supplies", "is the clerk of")
_RELATION_WORDS = regex.compile(r"^[\p{Ll}][\p{L}\p{M}'’-]*(?: [\p{Ll}][\p{L}\p{M}'’-]*){0,3}$")
_WHOLE_SENTENCE = regex.compile(r"^[\p{Lu}\p{N}'‘\"“(][^\n…]*$")
_END_MARK = regex.compile(r"[.!?]['’\"”)]?$")
TITLE_MAX_WORDS = 10  # a report title a reader takes in at a glance


def _listed(items: list[str]) -> str:
    """"a", "a and b", "a, b and c": every item, however many."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _counted(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _head_names(titles: list[str], k: int) -> str:
    """The first ``k`` titles and how many more: "A, B and 3 others", "A and one other"."""
    rest = len(titles) - k
    if rest <= 0:
        return _listed(titles[:k])
    more = "one other" if rest == 1 else f"{rest} others"
    return f"{', '.join(titles[:k])} and {more}"


def _quote(descriptions: str | None, limit: int) -> str:
    """The first of a description's lines (each an evidence sentence of the text) that
    is one whole sentence of at most ``limit`` characters, else ""."""
    for line in (descriptions or "").split("\n"):
        whole = _whole(line, limit)
        if whole:
            return whole
    return ""


def _relation_phrase(source: str, target: str, descriptions: str | None) -> str:
    """The words between ``source`` and ``target`` in the first of a description's lines
    (evidence sentences) where they read as a relation (1-4 lower-case words, no
    punctuation, one of them no function word: "supplies", "was the partner of"; not
    "to the"), else ""."""
    for sentence in (descriptions or "").split("\n"):
        a = sentence.find(source)
        b = sentence.find(target, a + len(source)) if a >= 0 else -1
        between = sentence[a + len(source):b].strip() if b > a >= 0 else ""
        # a relation has a word of its own: "supplies", "partner"; not "to the", "and"
        if _RELATION_WORDS.fullmatch(between) and any(
                w.lower() not in STOPWORDS for w in between.split()):
            return between
    return ""


def _whole(sentence: str, limit: int) -> str:
    """``sentence`` when it is one whole sentence (a capital or digit first, no "…" cut,
    its brackets opened and closed within it: "28 June 1961 – 3 February 2012) was a
    film director" is the tail of a sentence split inside its parenthesis) of at most
    ``limit`` characters, with a full stop added where it has no end mark (a
    model-written description), else ""."""
    flat = " ".join(sentence.split())
    if flat and not _END_MARK.search(flat):
        flat += "."
    return flat if len(flat) <= limit and _WHOLE_SENTENCE.fullmatch(flat) \
        and _balanced(flat) else ""


def _balanced(text: str) -> bool:
    """Does every ")" or "]" of ``text`` close a bracket opened before it, and every one
    opened close? A sentence split inside its parenthesis ("John III, Count of Ligny( d."
    at the abbreviation "d.", or its tail "1465) was the second wife") is no whole one."""
    depth = 0
    for ch in text:
        depth += ch in "(["
        depth -= ch in ")]"
        if depth < 0:
            return False
    return depth == 0


def _places(unit_ids: list[str], places: dict[str, tuple[str, int]] | None,
            limit: int = 3) -> str:
    """Where text units are, for a citation: "a-christmas-carol.txt #12, #14" (document
    title and the unit's position in it, from ``places``), else the units' short ids."""
    ids = sorted(set(unit_ids))
    if not places:
        return "units " + ", ".join(u[:8] for u in ids[:limit]) + (
            f" and {len(ids) - limit} more" if len(ids) > limit else "")
    by_doc: dict[str, list[int]] = {}
    for u in ids:
        if u in places:
            doc, k = places[u]
            by_doc.setdefault(doc, []).append(k)

    def at(ks: list[int]) -> str:
        ks = sorted(ks)
        return ", ".join(f"#{k}" for k in ks) if len(ks) <= limit else f"#{ks[0]} to #{ks[-1]}"
    docs = sorted(by_doc.items(), key=lambda d: (-len(d[1]), d[0]))
    parts = [f"{doc} {at(ks)}" for doc, ks in docs[:2]] + (
        [f"{len(docs) - 2} more documents"] if len(docs) > 2 else [])
    return "; ".join(parts) or ("units " + ", ".join(u[:8] for u in ids[:limit]))


def _members(community: dict, entities: pl.DataFrame, relationships: pl.DataFrame,
             rows: MemberRows | None) -> tuple[list[tuple], list[tuple]]:
    """The community's entity rows, highest degree first, then title, and its internal
    relationship rows (id first), strongest first (combined degree), then id; a missing
    degree sorts first, as a descending table sort puts nulls."""
    if rows is None:
        rows = MemberRows.of(
            entities.filter(pl.col("id").is_in(set(community["entity_ids"]))),
            relationships.filter(pl.col("id").is_in(set(community["relationship_ids"]))))
    ents = sorted((rows.entities[i] for i in set(community["entity_ids"])
                   if i in rows.entities),
                  key=lambda e: (e[2] is not None, -(e[2] or 0), e[0]))
    rels = sorted(((i, *rows.relationships[i]) for i in set(community["relationship_ids"])
                   if i in rows.relationships),
                  key=lambda r: (r[4] is not None, -(r[4] or 0), r[0]))
    return ents, rels


def _title_options(titles: list[str], rels: list[tuple], max_chars: int) -> list[str]:
    """Titles of at most :data:`TITLE_MAX_WORDS` words and ``max_chars`` characters, the
    rule report's first: each of the strongest relationships as its sentence states it
    ("Zephyr Mills supplies Yarrow Textiles"), then the central members ("A, B and 3
    others")."""
    out = [f"{src} {phrase} {dst}" for _, src, dst, desc, _, _ in rels[:MAX_FINDING_OPTIONS]
           if (phrase := _relation_phrase(src, dst, desc))]
    out += [_head_names(titles, k) for k in range(min(3, len(titles)), 0, -1)]
    fit = [t for t in dict.fromkeys(out)
           if len(t.split()) <= TITLE_MAX_WORDS and len(t) <= max_chars]
    return fit or [_clip(titles[0], max_chars)]


def _finding_label(src: str, dst: str) -> str:
    return f"{src} – {dst}"


@dataclass(frozen=True)
class ReportOptions:
    """What the model may choose among for a community's report (``llm_report_form``
    ``choices``): titles (:func:`_title_options`), whole evidence sentences of its
    relationships (or members), and relationships for findings ("A – B"), all taken from
    the community's own data. :meth:`schema` is the reply's schema (enums only, so the
    choice decoder of :mod:`kgloom.llm.choices` reads it), :meth:`text` the options as
    the prompt lists them."""

    titles: list[str]
    sentences: list[str]
    findings: list[str]

    def schema(self) -> dict:
        """{title, sentence, findings (at most 3), rating ("0".."10")}; a list with no
        option is left out."""
        props: dict = {"title": {"type": "string", "enum": self.titles}}
        if self.sentences:
            props["sentence"] = {"type": "string", "enum": self.sentences}
        if self.findings:
            props["findings"] = {"type": "array", "maxItems": 3,
                                 "items": {"type": "string", "enum": self.findings}}
        props["rating"] = {"type": "string", "enum": _RATINGS}
        return {"type": "object", "properties": props, "required": list(props),
                "additionalProperties": False}

    def text(self) -> str:
        """The options as the prompt lists them, one numbered block per kind."""
        blocks = [("Titles", self.titles), ("Sentences", self.sentences),
                  ("Relationships", self.findings)]
        return "\n".join(f"{name}:\n" + "\n".join(f"{k}. {o}" for k, o in enumerate(opts, 1))
                         for name, opts in blocks if opts)


def report_options(community: dict, entities: pl.DataFrame, relationships: pl.DataFrame,
                   rows: MemberRows | None = None) -> ReportOptions:
    """The :class:`ReportOptions` of ``community`` (at most :data:`MAX_TITLE_OPTIONS`
    titles, :data:`MAX_SENTENCE_OPTIONS` sentences that fit a report's summary with room
    to spare, :data:`MAX_FINDING_OPTIONS` relationships, strongest first)."""
    ents, rels = _members(community, entities, relationships, rows)
    props = REPORT_TEMPLATE.schema["properties"]
    titles = [e[0] for e in ents] or ["(empty community)"]
    budget = props["summary"]["maxLength"] * 3 // 5
    lines = [line for r in rels[:MAX_FINDING_OPTIONS] for line in (r[3] or "").split("\n")]
    if not rels:
        lines = [line for e in ents for line in (e[1] or "").split("\n")]
    sentences = list(dict.fromkeys(w for line in lines if (w := _whole(line, budget))))
    labels = list(dict.fromkeys(_finding_label(r[1], r[2]) for r in rels))
    return ReportOptions(_title_options(titles, rels, props["title"]["maxLength"])
                         [:MAX_TITLE_OPTIONS], sentences[:MAX_SENTENCE_OPTIONS],
                         labels[:MAX_FINDING_OPTIONS])


# how many of a community's strongest relationships a rule report weighs for its findings
FINDING_CANDIDATES = 12


def _finding_order(rels: list[tuple], picked: int, limit: int,
                   places: dict[str, tuple[str, int]] | None) -> list[tuple]:
    """The relationships a report's findings take, in order: the first ``picked`` (a
    model's choices) as they are, then, of the next :data:`FINDING_CANDIDATES`, those
    whose evidence holds a whole sentence that fits a finding of ``limit`` characters
    with its citation (:func:`_quote`), strongest first, then the others as ranked. A
    finding that quotes the text says what joins two names; "A and B are named together
    in 3 text units" says only that something does."""
    head, rest = rels[:picked], rels[picked:picked + FINDING_CANDIDATES]

    def quotable(r: tuple) -> bool:
        cite = f" [Sources: {_places(r[5] or [], places)}]" if r[5] else ""
        return bool(_quote(r[3], limit - len(cite)))
    ok = [quotable(r) for r in rest]
    return head + [r for r, q in zip(rest, ok) if q] + [r for r, q in zip(rest, ok) if not q]


def rule_report(community: dict, entities: pl.DataFrame, relationships: pl.DataFrame,
                rows: MemberRows | None = None,
                places: dict[str, tuple[str, int]] | None = None,
                picks: dict | None = None) -> dict:
    """A report of a community built by rules, no model: the same fields and bounds as an
    LLM report (:data:`REPORT_TEMPLATE`'s schema), written in whole sentences.

    - title (at most :data:`TITLE_MAX_WORDS` words): the strongest internal relationship
      as its sentence states it when the words between the two names read as a relation
      ("Zephyr Mills supplies Yarrow Textiles"), else the central members, highest degree
      first ("A, B and 3 others");
    - summary, two to four whole sentences: who the members are (names and types), how
      they relate (the central member's ties, the closest pair), where they are in the
      corpus (text units per document, with positions), and, when it fits, the closest
      pair's evidence sentence quoted whole; never a sentence cut with "…";
    - rating: the number of members plus internal relationships, at most 10 (GraphRAG's
      rating is the community's importance; a rule can only count its size);
    - findings (at most 3): one per internal relationship, those whose evidence holds a
      whole sentence that fits first (:func:`_finding_order`), each group strongest
      first (combined degree), or per member without any; each a whole sentence citing
      its text units ("[Sources: a-christmas-carol.txt #12, #14]").

    Args:
        community: a ``COMMUNITIES_SCHEMA`` row as a dict.
        entities / relationships: the full tables (degree / combined_degree filled).
        rows: :meth:`MemberRows.of` those tables, when the caller writes many reports;
            None: the community's rows are taken from the tables.
        places: text unit id -> (document title, position of the unit in it), for the
            citations and the summary's "where"; None: units are cited by short id.
        picks: a model's reply to :meth:`ReportOptions.schema` (``llm_report_form``
            ``choices``): its title, its sentence as the quoted evidence, its
            relationships ("A – B") first among the findings and its rating stand
            instead of the rules' choices; the sentences around them are the same.

    Returns:
        {title, summary, rating, rating_explanation, findings: [{summary, explanation}]}.
    """
    props = REPORT_TEMPLATE.schema["properties"]
    limit = {k: props[k].get("maxLength", 0) for k in ("title", "summary", "rating_explanation")}
    item = props["findings"]["items"]["properties"]
    ents, rels = _members(community, entities, relationships, rows)
    picks = picks or {}
    if picks.get("findings"):  # the model's relationships first, in its order
        rank = {label: k for k, label in enumerate(dict.fromkeys(picks["findings"]))}
        rels = sorted(rels, key=lambda r: rank.get(_finding_label(r[1], r[2]), len(rank)))
    titles = [e[0] for e in ents] or ["(empty community)"]
    n_rel = len(community["relationship_ids"])
    units = sorted(set(community.get("text_unit_ids") or [])
                   | {u for r in rels for u in (r[5] or [])})

    # title: the closest pair as the text states it, or the central members
    title = picks.get("title") or _title_options(titles, rels[:1], limit["title"])[0]

    # summary: who, how, where, and the evidence when it fits
    kinds = {}
    for e in ents:
        kinds[e[3]] = kinds.get(e[3], 0) + 1
    typed = [_counted(n, *_TYPE_WORDS[t]) for t, n in sorted(
        kinds.items(), key=lambda kv: (-kv[1], str(kv[0]))) if t in _TYPE_WORDS]
    other = sum(n for t, n in kinds.items() if t not in _TYPE_WORDS)
    typed += [_counted(other, "other name", "other names")] if other else []
    who_names = _head_names(titles, 3 if len(titles) <= 3 else 2)
    size = ("is a community of one entity" if len(ents) == 1
            else f"form a community of {len(ents)} entities")
    parts: dict[str, str] = {
        "who": f"{who_names} {size}" + (f": {_listed(typed)}." if typed else ".")}
    if rels:
        _, src, dst, desc, _, rel_units = rels[0]
        centre = titles[0]
        ties = sum(1 for r in rels if centre in (r[1], r[2]))
        together = _counted(len(set(rel_units or [])), 'text unit', 'text units')
        parts["how"] = (f"{centre} is tied to {_counted(ties, 'other member', 'other members')}"
                        f"; the closest pair, {src} and {dst}, is named together in "
                        f"{together}." if ties and len(ents) > 2 else
                        f"{src} and {dst} are named together in {together}.")
    elif len(ents) > 1:
        parts["how"] = "No relationship joins them inside the community."
    if units:
        parts["where"] = (f"They appear in {_counted(len(units), 'text unit', 'text units')} "
                          f"({_places(units, places)}).")
    quote = picks.get("sentence") or _quote(rels[0][3] if rels else ents[0][1] if ents else "",
                                            limit["summary"])
    if quote:
        parts["quote"] = f"The text says: \"{quote}\""
    # whole sentences only: those that fit, by priority (a chosen sentence before the
    # rules' "how"), written in reading order
    priority = ["who", "quote", "where", "how"] if picks.get("sentence") else \
        ["who", "how", "where", "quote"]
    if len(parts["who"]) > limit["summary"]:
        parts["who"] = _clip(f"{_head_names(titles, 1)} form a community of {len(ents)} "
                             "entities.", limit["summary"])
    kept, total = set(), -1
    for key in priority:
        if key in parts and total + 1 + len(parts[key]) <= limit["summary"]:
            kept.add(key)
            total += 1 + len(parts[key])
    summary = " ".join(parts[k] for k in ("who", "how", "quote", "where") if k in kept)

    # findings: whole sentences citing their text units
    findings: list[dict] = []
    used: set[str] = set()  # quotes already a finding's: one sentence says one thing once
    for _, src, dst, desc, _, rel_units in _finding_order(
            rels, len(picks.get("findings") or []), item["explanation"]["maxLength"],
            places)[:props["findings"]["maxItems"]]:
        cite = f" [Sources: {_places(rel_units or [], places)}]" if rel_units else ""
        phrase = _relation_phrase(src, dst, desc)
        head = f"{src} {phrase} {dst}" if phrase else f"{src} and {dst}"
        if words(head) == words(title):  # the title already says it: name the pair
            head = _finding_label(src, dst)
        head = _clip(head, item["summary"]["maxLength"])
        quote = _quote(desc, item["explanation"]["maxLength"] - len(cite))
        quote = "" if quote in used else quote
        used.add(quote)
        body = quote or (f"{src} and {dst} are named together in "
                         f"{_counted(len(set(rel_units or [])), 'text unit', 'text units')}.")
        findings.append({"summary": head,
                         "explanation": _clip(body + cite, item["explanation"]["maxLength"])})
    if not findings:
        for e in ents[:props["findings"]["maxItems"]]:
            e_units = e[4] or []
            cite = f" [Sources: {_places(e_units, places)}]" if e_units else ""
            quote = _quote(e[1], item["explanation"]["maxLength"] - len(cite))
            quote = "" if quote in used else quote
            used.add(quote)
            body = quote or f"{e[0]} is named in " \
                f"{_counted(len(set(e_units)), 'text unit', 'text units')}."
            findings.append({"summary": _clip(e[0], item["summary"]["maxLength"]),
                             "explanation": _clip(body + cite, item["explanation"]["maxLength"])})
    rated = (f"Rated by the model from {len(ents)} entities and {n_rel} relationships."
             if "rating" in picks else
             f"Built by rules from {len(ents)} entities and {n_rel} relationships; "
             "rated by size.")
    return {"title": title, "summary": summary,
            "rating": int(picks["rating"]) if "rating" in picks else min(10, len(ents) + n_rel),
            "rating_explanation": _clip(rated, limit["rating_explanation"]),
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
      :data:`kgloom.names.grounding.EXAMPLE_MIN_WORDS` words it shares with ``example`` but
      not with ``context`` (:func:`kgloom.names.grounding.shared_phrase`), or a name of the
      example that the context lacks;
    - it writes placeholders: text in angle brackets that the context lacks
      ("<a fact about Scrooge>", a template slot, not a report);
    - it names what its context lacks: a proper name of its text
      (:func:`kgloom.names.grounding.ungrounded_names`) that neither ``context`` nor
      ``members`` holds;
    - it repeats itself: a loop within a field (:func:`kgloom.names.grounding.find_repetition`),
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
                     places: dict[str, tuple[str, int]] | None = None) -> WrittenReport:
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
                          places: dict[str, tuple[str, int]] | None) -> WrittenReport:
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
    cited = "\n".join(sorted({places[u][0] for u in community.get("text_unit_ids") or []
                               if places and u in places}))
    # the rule report quotes its members' own evidence, which the context may have left
    # out for its token budget: that is the community's data too
    ents, rels = _members(community, entities, relationships, None)
    own = "\n".join([e[1] for e in ents if e[1]] + [r[3] for r in rels if r[3]])
    problems = check_report(report, f"{context}\n{options.text()}\n{cited}\n{own}",
                            [title_of[e] for e in community["entity_ids"] if e in title_of])
    if problems:
        return WrittenReport(rule_report(community, entities, relationships, places=places),
                             "rules", rejected={
                                 "stage": STAGE, "item_id": item,
                                 "reason": REJECTED + "; ".join(problems),
                                 "detail": json.dumps(obj, ensure_ascii=False)})
    return WrittenReport(report, "llm", failure=failure)
