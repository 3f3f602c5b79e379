"""A community report's context (GraphRAG's ``build_mixed_context``): member entities,
the relationships among them and the members' claims within the token budget, else
the sub-communities' reports.
"""

from __future__ import annotations

import polars as pl

from kgloom.embedding.tokenizer import Tokenizer

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
