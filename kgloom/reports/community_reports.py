"""Community reports: rule-based for small communities, by the local LLM for the others.

Follows GraphRAG's ``summarize_communities`` (report fields: title, summary, rating with
explanation, findings with explanations; ``build_mixed_context``): a report's context is
its member entities, the relationships among them (highest degree first) and, when claims
were extracted, the members' claims, within
``report_max_input_tokens``; when that does not fit and the community has
sub-communities, their reports (largest first) stand in for the raw members. Levels are
processed deepest first so sub-community reports exist when a parent needs them.

Reports sized to the community: a community with fewer than ``report_llm_min_members``
members or fewer than ``report_llm_min_relationships`` internal relationships gets a
report built by rules from its members and their relationship sentences
(:func:`rule_report`, no model call): a model's report of two names and one sentence
only restates that sentence, at ~300 generated tokens. The LLM's prompt keeps every
fixed part (the instructions) before the community's data, so the KV cache of that
prefix is reused from one report to the next; its fields are bounded (``maxLength``,
``maxItems``). It has no worked example: the grammar shapes the reply, and a small model
copied an example's names (or its placeholders) into its reports.

Grounded reports: an LLM reply is published only when it names nothing its context
lacks, does not repeat the prompt's example and does not loop (:func:`check_report`);
otherwise the community gets its rule report and a failures row saying why.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable

import polars as pl
import regex

from kgloom import layout, schemas
from kgloom.config import IndexSettings
from kgloom.grounding import find_repetition, shared_phrase, ungrounded_names, words
from kgloom.ids import content_id
from kgloom.llm import CachedLLM, PromptTemplate, structured_call
from kgloom.storage import failures_frame
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
    reply passes, :func:`check_report`), for ``rules`` ``RULES_VERSION``. Two
    communities with the same key get the same report."""
    how = ((REPORT_TEMPLATE.hash, model_id, settings.seed, settings.report_max_input_tokens,
            GROUNDING_VERSION) if method == "llm" else (RULES_VERSION,))
    if method == "llm" and is_brief(community, settings):
        how += _BRIEF_KEY
    return content_id("report", *how, *sorted(community["entity_ids"]), "|",
                      *sorted(community["relationship_ids"]),
                      *(["|claims", *sorted(claim_ids)] if claim_ids else []))


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


def rule_report(community: dict, entities: pl.DataFrame, relationships: pl.DataFrame) -> dict:
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

    Returns:
        {title, summary, rating, rating_explanation, findings: [{summary, explanation}]}.
    """
    props = REPORT_TEMPLATE.schema["properties"]
    limit = {k: props[k].get("maxLength", 0) for k in ("title", "summary", "rating_explanation")}
    item = props["findings"]["items"]["properties"]
    ents = entities.filter(pl.col("id").is_in(set(community["entity_ids"]))).sort(
        ["degree", "title"], descending=[True, False])
    rels = relationships.filter(pl.col("id").is_in(set(community["relationship_ids"]))).sort(
        ["combined_degree", "id"], descending=[True, False])
    first = lambda d: (d or "").split("\n")[0].strip()  # noqa: E731
    if rels.height:
        pairs = [(f"{r['source']} – {r['target']}", first(r["description"]))
                 for r in rels.iter_rows(named=True)]
    else:
        pairs = [(r["title"], first(r["description"])) for r in ents.iter_rows(named=True)]
    sentences = list(dict.fromkeys(d for _, d in pairs if d))
    titles = ents["title"].to_list() or ["(empty community)"]
    summary = _clip(" ".join(sentences), limit["summary"]) if sentences else \
        f"{_names(titles)}: {ents.height} entities with no description."
    n_rel = len(community["relationship_ids"])
    findings = [{"summary": _clip(name, item["summary"]["maxLength"]),
                 "explanation": _clip(desc or name, item["explanation"]["maxLength"])}
                for name, desc in pairs[:props["findings"]["maxItems"]]]
    return {"title": _clip(_names(titles), limit["title"]), "summary": summary,
            "rating": min(10, ents.height + n_rel),
            "rating_explanation": _clip(
                f"Built by rules from {ents.height} entities and {n_rel} relationships; "
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


def _placement(community: dict) -> dict:
    """The report fields that come from the community itself, not from the LLM."""
    return {"id": content_id("community_report", community["id"]),
            "community": community["community"], "level": community["level"],
            "parent": community["parent"], "children": community["children"],
            "period": community["period"], "size": community["size"]}


def build_community_reports(communities: pl.DataFrame, entities: pl.DataFrame,
                            relationships: pl.DataFrame, llm: CachedLLM | None,
                            settings: IndexSettings, tokenizer: Tokenizer,
                            progress: Callable[[int, int], None] | None = None,
                            previous: pl.DataFrame | None = None,
                            claims: pl.DataFrame | None = None,
                            unit_tokens: dict[str, int] | None = None,
                            ) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, int]]:
    """Build a report for every community, deepest level first (the caller writes them).

    Incremental indexing: a community whose :func:`report_key` (members, internal
    relationships, template, model, settings) equals that of a report in ``previous`` keeps
    that report (its title, summary, rating and findings) with no LLM call, even if the
    community's number changed; so after adding or deleting a document only communities
    whose membership or internal relationships changed are rewritten (GraphRAG's
    incremental update likewise keeps the reports of unchanged communities). Edits to
    member descriptions alone do not rewrite a kept report; pass ``previous=None`` to
    rewrite every report (the prompt cache still saves unchanged prompts).

    Args:
        communities: a ``COMMUNITIES_SCHEMA`` frame.
        entities / relationships: ``ENTITIES_SCHEMA`` / ``RELATIONSHIPS_SCHEMA`` frames.
        llm: the cached LLM (stage ``community_reports``); at most one call per community
            large enough for it (:func:`needs_llm_report`); the others get
            :func:`rule_report`. The calls of one level go out ``llm.concurrency`` at a
            time. None with ``method=fast``: every report is a rule report. A reply that
            :func:`check_report` rejects (it names what its context lacks, repeats the
            prompt's example or repeats itself) is replaced by the community's
            :func:`rule_report`, with a failures row saying why (reason starting with
            :data:`REJECTED`, detail the reply).
        settings: ``report_max_input_tokens``, ``seed``, ``report_llm_min_members``,
            ``report_llm_min_relationships``, ``report_llm_min_source_tokens`` and
            ``report_brief_max_members``.
        tokenizer: measures the context budget.
        progress: called as ``progress(done, total)``.
        previous: the last ``COMMUNITY_REPORTS_SCHEMA`` table, or None.
        claims: a ``COVARIATES_SCHEMA`` table (claims), or None; each community's
            context lists its members' claims.
        unit_tokens: text unit id -> ``n_tokens``, for ``report_llm_min_source_tokens``
            (:func:`needs_llm_report`); None: that rule is not applied.

    Returns:
        (reports, failures, context_methods): reports conform to
        ``COMMUNITY_REPORTS_SCHEMA``, one row per community whose reply parsed or was
        rejected (``generated_by``: ``llm`` or ``rules``); every other community, and
        every rejected reply, has a failures row;
        context_methods counts how contexts were built, with ``rules`` for rule-based
        reports, ``reused`` for reports kept from ``previous`` and ``carried_down`` for a community
        repeated unchanged on a higher level, which gets its deeper copy's report (so
        one LLM call per distinct :func:`report_key`).
    """
    done: dict[int, dict] = {}
    failures: list[dict] = []
    methods: dict[str, int] = {}
    written: dict[str, dict] = {}  # report_key -> report written in this call
    kept = ({} if previous is None or "report_key" not in previous.columns else
            {r["report_key"]: r for r in previous.iter_rows(named=True)})
    order = communities.sort(["level", "community"], descending=[True, False])
    units = dict(zip(relationships["id"].to_list(), relationships["text_unit_ids"].to_list()))
    title_of = dict(zip(entities["id"].to_list(), entities["title"].to_list()))
    total, finished = order.height, 0

    def reuse(c: dict, key: str) -> None:
        # "reused": from the previous run; "carried_down": the same community one level
        # deeper (communities at or below max_cluster_size repeat per level)
        how = "reused" if key in kept else "carried_down"
        methods[how] = methods.get(how, 0) + 1
        done[c["community"]] = {**(kept.get(key) or written[key]), **_placement(c),
                                "report_key": key}

    def ask(model: CachedLLM, job: tuple[dict, str, str]) -> tuple[dict | None, dict | None]:
        return structured_call(model, REPORT_TEMPLATE, STAGE, str(job[0]["community"]),
                               settings.seed, schema=report_schema(job[0], settings),
                               context=job[2])

    def tick(n: int, _level_total: int) -> None:  # n of this level's calls are done
        if progress:
            progress(finished + n, total)

    # a level's communities are disjoint and need only deeper levels' reports: one
    # level's calls go out together (llm.concurrency at a time), deepest level first
    for _, level in order.group_by("level", maintain_order=True):
        jobs: list[tuple[dict, str, str]] = []  # (community, report key, context)
        answers: list[tuple[dict, str, str, dict | None, dict | None]] = []
        for c in level.iter_rows(named=True):
            own_claims = member_claims(c, entities, claims)
            by = "llm" if needs_llm_report(c, settings, units, unit_tokens) else "rules"
            key = report_key(c, llm.model_id if llm else "", settings,
                             own_claims["id"].to_list() if own_claims is not None else None, by)
            if key in kept or key in written:
                reuse(c, key)
                finished += 1
                tick(0, total)
                continue
            if by == "rules":
                methods["rules"] = methods.get("rules", 0) + 1
                answers.append((c, key, by, rule_report(c, entities, relationships), None))
                finished += 1
                tick(0, total)
                continue
            children = [done[k] for k in c["children"] if k in done]
            context, method = build_report_context(c, entities, relationships, children,
                                                   settings.report_max_input_tokens,
                                                   tokenizer, own_claims)
            methods[method] = methods.get(method, 0) + 1
            jobs.append((c, key, context))
        replies: list[tuple[dict | None, dict | None]] = []
        if jobs:
            if llm is None:
                raise ValueError("LLM reports asked for with no model (llm=None)")
            replies = llm.map(functools.partial(ask, llm), jobs, tick)
        for (c, key, context), (obj, failure) in zip(jobs, replies):
            problems = [] if obj is None else check_report(
                obj, context, [title_of[e] for e in c["entity_ids"] if e in title_of])
            if problems:  # published as the rule report, the reply kept in the failures row
                failures.append({"stage": STAGE, "item_id": str(c["community"]),
                                 "reason": REJECTED + "; ".join(problems),
                                 "detail": json.dumps(obj, ensure_ascii=False)})
                answers.append((c, key, "rules", rule_report(c, entities, relationships), None))
            else:
                answers.append((c, key, "llm", obj, failure))
        for c, key, by, obj, failure in answers:
            if obj is None:
                failures += [failure] if failure else []
            else:
                done[c["community"]] = {
                    **_placement(c), "title": obj["title"].strip(),
                    "summary": obj["summary"].strip(), "full_content": _markdown(obj),
                    "rank": float(obj["rating"]),
                    "rating_explanation": obj["rating_explanation"],
                    "findings": obj["findings"], "full_content_json": json.dumps(obj),
                    "report_key": key, "generated_by": by}
                written[key] = done[c["community"]]
        finished += len(jobs)
    schema = {k: v for k, v in schemas.COMMUNITY_REPORTS_SCHEMA.items() if k != "human_readable_id"}
    rows = [{k: r[k] for k in schema} for r in sorted(done.values(), key=lambda r: r["community"])]
    frame = pl.DataFrame(rows, schema=schema).with_row_index("human_readable_id").with_columns(
        pl.col("human_readable_id").cast(pl.Int64))
    return (schemas.conform(frame, schemas.COMMUNITY_REPORTS_SCHEMA), failures_frame(failures),
            methods)
