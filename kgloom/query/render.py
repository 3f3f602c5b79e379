"""A retrieval or search result as readable text (the CLI's default output).

One row per text unit: rank, score, the unit's id (its first characters; the full ids
are listed under the table), document, the unit's first words, how it was reached (mode
and hops) and the entities and edges that brought it in, by title. Tables are drawn by
``tabulate``. Importing this module loads no model and no search code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tabulate import tabulate

if TYPE_CHECKING:  # a retrieval-only CLI run does not import the search code
    from kgloom.query.retrieval.result import RetrievalResult
    from kgloom.query.searcher import SearchResult

FIRST_WORDS = 12
ID_CHARS = 12  # of a text unit id (sha256 hex) in the table: 48 bits, distinct in practice
MAX_BROUGHT_BY = 3  # entities named per row
UNCITED_CONTEXT_ITEMS = 5  # context lines shown under an answer that cites none


def _first_words(text: str, n: int = FIRST_WORDS) -> str:
    words = " ".join((text or "").split()).split(" ")
    return " ".join(words[:n]) + (" …" if len(words) > n else "")


def render_result(result: RetrievalResult) -> str:
    """Return ``result`` as text: a header (mode, fallback, linked entities, which
    search each table used, seconds, and ``info["notice"]`` when nothing in the index is
    relevant to the question) and a table of the ranked text units.

    An entity is shown by title when the result names it (the entities or linked
    frames), else by its id's first 8 characters; an edge as ``source -> target``. A
    text unit is shown by its id's first :data:`ID_CHARS` characters in the table, and
    its whole id (``text_units.parquet`` / LanceDB ``text_units`` ``id``) is listed
    under it, so the full passage can be read from the index.
    """
    info = result.info
    title = dict(zip(result.linked["entity_id"].to_list(), result.linked["title"].to_list()))
    title.update({e: t for e, t in zip(result.entities["entity_id"].to_list(),
                                       result.entities["title"].to_list()) if t})
    edge = {r["relationship_id"]: f"{r['source']} -> {r['target']}"
            for r in result.relationships.iter_rows(named=True) if r["relationship_id"]}
    used = info.get("used_mode", result.mode)
    lines = [f"mode: {result.mode}" + (f" (ran {used}: {info['fallback']})"
                                        if info.get("fallback") else "")]
    if result.linked.height:
        lines.append("linked: " + "; ".join(
            f"{r['title']} [{r['method']} \"{r['span']}\" {r['score']:.2f}]"
            for r in result.linked.iter_rows(named=True)))
    elif used != "vector" or result.mode in ("multihop", "ppr", "hybrid"):
        lines.append("linked: none")
    lines.append("search: " + ", ".join(f"{t} {k}" for t, k in info.get("ann", {}).items())
                 + f"; graph {info.get('graph_backend')}; {info.get('seconds', 0):.3f} s"
                 + f"; build {info.get('build_id') or 'unmarked'}")
    if info.get("notice"):  # nothing relevant found: said above the results
        lines.append(f"notice: {info['notice']}")
    rows = []
    for r in result.text_units.iter_rows(named=True):
        brought = [title.get(e, e[:8]) for e in r["entity_ids"][:MAX_BROUGHT_BY]]
        more = len(r["entity_ids"]) - len(brought)
        edges = [edge[x] for x in r["relationship_ids"] if x in edge][:MAX_BROUGHT_BY]
        rows.append([r["rank"], f"{r['score']:.3f}", r["id"][:ID_CHARS],
                     r["document_title"] or r["document_id"][:8],
                     _first_words(r["text"]),
                     r["via"] + ("" if r["hop_depth"] is None else f" ({r['hop_depth']} hop)"),
                     ", ".join(brought) + (f" +{more}" if more > 0 else "")
                     + ("\nvia " + "; ".join(edges) if edges else "")])
    if not rows:
        lines.append("no text unit found")
        return "\n".join(lines)
    lines.append(tabulate(rows, headers=["rank", "score", "text unit", "document", "text",
                                         "reached", "brought in by"],
                          tablefmt="simple", maxcolwidths=[None, None, None, 24, 48, 14, 40],
                          disable_numparse=[2]))  # an all-digit id prefix stays text
    lines.append("text unit ids (text_units.parquet id):")
    lines += [f"  {r['rank']}. {r['id']}" for r in result.text_units.iter_rows(named=True)]
    return "\n".join(lines)


def render_search(result: SearchResult, context_only: bool = False) -> str:
    """Return a search result as text: the route and why, ``info["notice"]`` when nothing
    in the index is relevant to the question, any fallback, the answer and what each
    citation points to (for an answer that cites nothing, the first
    :data:`UNCITED_CONTEXT_ITEMS` lines of its context), the LLM calls per stage; with
    ``context_only`` the context the model would read (global search: each map batch of
    reports)."""
    info = result.info
    lines = [f"route: {result.route} ({result.route_reason}); build "
             f"{info.get('build_id') or 'unmarked'}"]
    if info.get("notice"):  # nothing relevant found: said before the answer
        lines.append(f"notice: {info['notice']}")
    if info.get("fallback"):
        lines.append(f"fallback: {info['fallback']}")
    sel = info.get("selection")
    if sel:
        lines.append(f"communities: {sel['method']}, {len(sel['selected'])} selected, "
                     f"{sel['rated']} rated in {sel['rating_calls']} calls, "
                     f"{sel['pruned_reports']} pruned unrated")
    ctx = result.context
    if context_only:
        if result.map_batches:
            for i, b in enumerate(result.map_batches, 1):
                lines += [f"--- map batch {i}: {b.tokens} tokens ---", b.text]
        else:
            lines += [f"--- context: {ctx.tokens} of {ctx.budget} tokens ({ctx.counter}) ---",
                      ctx.text or "(empty)"]
        return "\n".join(lines)
    lines.append(f"context: {ctx.tokens} of {ctx.budget} tokens, {len(ctx.items)} items")
    lines.append("answer: " + (result.answer if result.answer is not None else
                               "(none: " + (info.get("note") or "see failures") + ")"))
    if result.notice:
        lines.append(f"note: {result.notice}")
    check = info.get("answer_check") or {}
    if check.get("invented_citations"):
        lines.append(f"removed {check['invented_citations']} citations that are not in the "
                     "context: " + ", ".join(check["dropped_citations"]
                                             + check["removed_inline"]))
    if check.get("degenerate"):
        lines.append(f"answer cut: it kept repeating \"{check['repeated']}\"")
    if check.get("ungrounded_names"):
        lines.append("names the context does not hold: " + ", ".join(check["ungrounded_names"]))
    cited = result.cited()
    for c in cited:
        lines.append(f"  [{c['ref']}] {_first_words(c['text'].split('] ', 1)[-1], 24)}")
    if not cited and result.answer and ctx.items:
        # what the answer was given, as the chat surfaces show it (answer_stream)
        lines.append("the answer cites nothing; its context:")
        lines += [f"  [{x.ref}] {_first_words(x.text.split('] ', 1)[-1], 24)}"
                  for x in ctx.items[:UNCITED_CONTEXT_ITEMS]]
    calls = info.get("llm", {})
    if calls:
        lines.append("llm: " + "; ".join(
            f"{stage} {s['calls']} calls ({s['cache_hits']} cached), {s['prompt_tokens']} "
            f"prompt tokens" for stage, s in calls.items() if stage != "total"))
    for f in result.failures:
        lines.append(f"failure: {f['stage']} {f['item_id']}: {f['reason']}")
    return "\n".join(lines)
