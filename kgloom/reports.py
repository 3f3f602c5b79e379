"""Community reports, written bottom-up by the local LLM.

Follows GraphRAG's ``summarize_communities`` (report fields: title, summary, rating with
explanation, findings with explanations; ``build_mixed_context``): a report's context is
its member entities, the relationships among them (highest degree first) and, when claims
were extracted, the members' claims, within
``report_max_input_tokens``; when that does not fit and the community has
sub-communities, their reports (largest first) stand in for the raw members. Levels are
processed deepest first so sub-community reports exist when a parent needs them.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import polars as pl

from kgloom import schemas
from kgloom.config import IndexSettings
from kgloom.ids import content_id
from kgloom.llm import CachedLLM, PromptTemplate, structured_call
from kgloom.storage import failures_frame
from kgloom.tokenizer import Tokenizer

STAGE = "community_reports"

REPORT_TEMPLATE = PromptTemplate(
    name="community_report",
    system=("You write a short report about a community of related entities in a knowledge "
            "graph, using only the data given. Answer with JSON only."),
    user=("Community data:\n{context}\n\n"
          "Write the report: a title naming its key entities, a summary of how they are related, "
          "an importance rating from 0 to 10 with a one-sentence explanation, and up to three "
          "findings, each a short statement with an explanation grounded in the data."),
    schema={
        "type": "object",
        "properties": {
            "title": {"type": "string", "minLength": 1, "maxLength": 80},
            "summary": {"type": "string", "minLength": 1, "maxLength": 400},
            # an enum, since llama-cpp-python's grammar ignores minimum/maximum
            "rating": {"type": "integer", "enum": list(range(11))},
            "rating_explanation": {"type": "string", "minLength": 1, "maxLength": 200},
            "findings": {"type": "array", "minItems": 1, "maxItems": 3,
                         "items": {"type": "object",
                                   "properties": {
                                       "summary": {"type": "string", "minLength": 1,
                                                   "maxLength": 100},
                                       "explanation": {"type": "string", "minLength": 1,
                                                       "maxLength": 250}},
                                   "required": ["summary", "explanation"]}},
        },
        "required": ["title", "summary", "rating", "rating_explanation", "findings"],
    },
    max_tokens=450,
)


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

    Returns:
        (context text, method): method is ``members`` when all members and relationships fit,
        ``sub_reports`` when sub-community reports stand in, ``truncated`` otherwise.
    """
    ids = set(community["entity_ids"])
    ents = entities.filter(pl.col("id").is_in(ids)).sort(["degree", "title"],
                                                         descending=[True, False])
    rels = relationships.filter(pl.col("id").is_in(set(community["relationship_ids"]))).sort(
        ["combined_degree", "id"], descending=[True, False])
    ent_lines = [f"- {r['title']} ({r['type']}): {r['description']}".replace("\n", " ")
                 for r in ents.iter_rows(named=True)]
    rel_lines = [f"- {r['source']} -> {r['target']}: {r['description']}".replace("\n", " ")
                 for r in rels.iter_rows(named=True)]
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
               claim_ids: list[str] | None = None) -> str:
    """Return the reuse key of one community's report: a hash of the community's member
    entity ids, internal relationship ids and members' claim ids (its structure, not its
    level or number), the report template, the model and the context settings. Two
    communities with the same key get the same report."""
    return content_id("report", REPORT_TEMPLATE.hash, model_id, settings.seed,
                      settings.report_max_input_tokens, *sorted(community["entity_ids"]), "|",
                      *sorted(community["relationship_ids"]),
                      *(["|claims", *sorted(claim_ids)] if claim_ids else []))


def _placement(community: dict) -> dict:
    """The report fields that come from the community itself, not from the LLM."""
    return {"id": content_id("community_report", community["id"]),
            "community": community["community"], "level": community["level"],
            "parent": community["parent"], "children": community["children"],
            "period": community["period"], "size": community["size"]}


def write_community_reports(communities: pl.DataFrame, entities: pl.DataFrame,
                            relationships: pl.DataFrame, llm: CachedLLM,
                            settings: IndexSettings, tokenizer: Tokenizer,
                            progress: Callable[[int, int], None] | None = None,
                            previous: pl.DataFrame | None = None,
                            claims: pl.DataFrame | None = None,
                            ) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, int]]:
    """Write a report for every community, deepest level first.

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
        llm: the cached LLM (stage ``community_reports``); at most one call per community.
            The calls of one level go out ``llm.concurrency`` at a time.
        settings: ``report_max_input_tokens`` and ``seed``.
        tokenizer: measures the context budget.
        progress: called as ``progress(done, total)``.
        previous: the last ``COMMUNITY_REPORTS_SCHEMA`` table, or None.
        claims: a ``COVARIATES_SCHEMA`` table (claims), or None; each community's
            context lists its members' claims.

    Returns:
        (reports, failures, context_methods): reports conform to
        ``COMMUNITY_REPORTS_SCHEMA``, one row per community whose reply parsed; every other
        community has a failures row; context_methods counts how contexts were built, with
        ``reused`` for reports kept from ``previous`` and ``carried_down`` for a community
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
    total, finished = order.height, 0

    def reuse(c: dict, key: str) -> None:
        # "reused": from the previous run; "carried_down": the same community one level
        # deeper (communities at or below max_cluster_size repeat per level)
        how = "reused" if key in kept else "carried_down"
        methods[how] = methods.get(how, 0) + 1
        done[c["community"]] = {**(kept.get(key) or written[key]), **_placement(c),
                                "report_key": key}

    def ask(job: tuple[dict, str, str]) -> tuple[dict | None, dict | None]:
        return structured_call(llm, REPORT_TEMPLATE, STAGE, str(job[0]["community"]),
                               settings.seed, context=job[2])

    def tick(n: int, _level_total: int) -> None:  # n of this level's calls are done
        if progress:
            progress(finished + n, total)

    # a level's communities are disjoint and need only deeper levels' reports: one
    # level's calls go out together (llm.concurrency at a time), deepest level first
    for _, level in order.group_by("level", maintain_order=True):
        jobs: list[tuple[dict, str, str]] = []  # (community, report key, context)
        for c in level.iter_rows(named=True):
            own_claims = member_claims(c, entities, claims)
            key = report_key(c, llm.model_id, settings,
                             own_claims["id"].to_list() if own_claims is not None else None)
            if key in kept or key in written:
                reuse(c, key)
                finished += 1
                tick(0, total)
                continue
            children = [done[k] for k in c["children"] if k in done]
            context, method = build_report_context(c, entities, relationships, children,
                                                   settings.report_max_input_tokens,
                                                   tokenizer, own_claims)
            methods[method] = methods.get(method, 0) + 1
            jobs.append((c, key, context))
        for (c, key, _), (obj, failure) in zip(jobs, llm.map(ask, jobs, tick)):
            if obj is None:
                failures.append(failure)
            else:
                done[c["community"]] = {
                    **_placement(c), "title": obj["title"].strip(),
                    "summary": obj["summary"].strip(), "full_content": _markdown(obj),
                    "rank": float(obj["rating"]),
                    "rating_explanation": obj["rating_explanation"],
                    "findings": obj["findings"], "full_content_json": json.dumps(obj),
                    "report_key": key}
                written[key] = done[c["community"]]
        finished += len(jobs)
    schema = {k: v for k, v in schemas.COMMUNITY_REPORTS_SCHEMA.items() if k != "human_readable_id"}
    rows = [{k: r[k] for k in schema} for r in sorted(done.values(), key=lambda r: r["community"])]
    frame = pl.DataFrame(rows, schema=schema).with_row_index("human_readable_id").with_columns(
        pl.col("human_readable_id").cast(pl.Int64))
    return (schemas.conform(frame, schemas.COMMUNITY_REPORTS_SCHEMA), failures_frame(failures),
            methods)
