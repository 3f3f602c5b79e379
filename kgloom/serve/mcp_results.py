"""What the tools of ``kgloom mcp`` return (docs/mcp.md): one pydantic model per tool
(published as the tool's output schema) and the functions that turn the serve layer's
answers (``kgloom serve``'s JSON: :func:`kgloom.serve.query_routes.run_query` and
:class:`kgloom.serve.graph_view.GraphView`) into that structured content plus the text a
model reads. Pure functions over dicts; no Dagster, no MCP transport.

Every result carries ``build_id`` (the build it was read from) and ``citations``: the
text units it rests on, each with its id, its ``T<n>`` ref (as search cites it) and its
document's title.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from kgloom.serve.graph_view import GraphView, UnknownItemError
from kgloom.serve.openai_chat import answer_text

SNIPPET_CHARS = 240  # characters of a text shown where the full text is not the point


# --- the output models (each tool's output schema) -------------------------------------
class Citation(BaseModel):
    """A text unit a result rests on."""

    text_unit_id: str
    ref: str | None = Field(None, description="T<n>, as search cites the unit")
    document_title: str | None = None


class Cited(BaseModel):
    """Anything a search answer cites: a text unit, entity, relationship, report or
    (global search) key point."""

    ref: str
    kind: str = Field(description="text_units, entities, relationships, reports or points")
    id: str
    text: str
    document_title: str | None = Field(None, description="for a text unit")


class Result(BaseModel):
    """What every tool's result holds."""

    build_id: str | None = Field(description="the published build the answer was read from")
    citations: list[Citation] = Field(description="the text units the result rests on")


class TextUnitHit(BaseModel):
    rank: int
    id: str
    ref: str | None = None
    score: float | None = None
    similarity: float | None = None
    hop_depth: int | None = None
    via: str | None = None
    document_id: str | None = None
    document_title: str | None = None
    entity_ids: list[str] = []
    relationship_ids: list[str] = []
    text: str


class RetrieveResult(Result):
    question: str
    mode: str
    used_mode: str | None = Field(None, description="differs from mode on a fallback")
    fallback: str | None = None
    text_units: list[TextUnitHit]
    low_relevance: bool | None = None
    notice: str | None = Field(None, description="why nothing may be relevant")
    ignored_options: list[str] = []


class SearchAnswer(Result):
    question: str
    method: str
    route: str = Field(description="the search that ran: local, global or direct")
    route_reason: str
    answer: str | None
    cited: list[Cited]
    notice: str | None = Field(None, description="what to know about the answering model")
    low_relevance: bool | None = None
    relevance_notice: str | None = None
    ignored_options: list[str] = []


class EntityHit(BaseModel):
    id: str
    title: str
    type: str | None = None
    degree: int | None = None
    pagerank: float | None = None


class FoundEntities(Result):
    text: str
    entities: list[EntityHit]


class Entity(EntityHit):
    description: str | None = None
    communities: dict[str, int] = Field(description="level -> community number")
    text_unit_ids: list[str]


class EntityResult(Result):
    entity: Entity


class Node(Entity):
    hop: int


class Edge(BaseModel):
    id: str
    source: str
    target: str
    source_title: str | None = None
    target_title: str | None = None
    description: str | None = None
    weight: float | None = None
    kind: str | None = None


class Neighbourhood(Result):
    entity_id: str
    depth: int
    nodes: list[Node]
    edges: list[Edge]
    truncated: bool


class CommunityRow(BaseModel):
    community: int
    level: int
    parent: int | None = None
    title: str | None = None
    size: int | None = None
    has_report: bool


class Report(BaseModel):
    title: str | None = None
    summary: str | None = None
    full_content: str | None = None
    rank: float | None = None
    rating_explanation: str | None = None
    findings: Any = None
    generated_by: str | None = None


class CommunityResult(Result):
    community: int
    level: int
    parent: int | None = None
    title: str | None = None
    size: int | None = None
    children: list[CommunityRow]
    members: list[Entity]
    members_total: int
    relationship_ids: list[str]
    text_unit_ids: list[str]
    report: Report | None


class Document(BaseModel):
    id: str
    title: str
    source: str | None = None
    text_units: int
    first_text_unit_id: str | None = None
    creation_date: str | None = None


class Documents(Result):
    documents: list[Document]
    published_at: str | None = None


class TextUnit(Result):
    id: str
    ref: str
    text: str
    document_id: str | None = None
    document_title: str | None = None
    entity_ids: list[str]


# --- shaping ------------------------------------------------------------------------------
def _unit(graph: GraphView, unit_id: str) -> dict[str, Any] | None:
    """:meth:`GraphView.text_unit`, None when this build lacks it."""
    try:
        return graph.text_unit(unit_id)
    except UnknownItemError:
        return None


def citations(graph: GraphView, unit_ids: list[str]) -> list[dict[str, Any]]:
    """The citation ({text_unit_id, ref, document_title}) of each text unit of
    ``unit_ids`` this build holds, once each, in the order given."""
    out = []
    for uid in dict.fromkeys(unit_ids):
        row = _unit(graph, uid)
        if row is not None:
            out.append({"text_unit_id": uid, "ref": row["ref"],
                        "document_title": row["document_title"]})
    return out


def _clip(text: Any, chars: int = SNIPPET_CHARS) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= chars else text[:chars].rstrip() + " ..."


def _count(n: int, one: str, many: str | None = None) -> str:
    """``1 entity``, ``2 entities``."""
    return f"{n} {one if n == 1 else many or one + 's'}"


def _footer(build_id: str | None) -> str:
    return f"(build {build_id})"


def retrieval(graph: GraphView, out: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """(structured content, text) of a retrieval mode's answer.

    Args:
        graph: the build's view (for each unit's ``T<n>`` ref).
        out: :func:`kgloom.serve.query_routes.run_query`'s dict for a retrieval mode.
    """
    info = out["info"]
    units = [{**u, "ref": (_unit(graph, u["id"]) or {}).get("ref")} for u in out["text_units"]]
    data = {"build_id": info.get("build_id"), "question": out["question"],
            "mode": out["mode"], "used_mode": info.get("used_mode"),
            "fallback": info.get("fallback"), "text_units": units,
            "low_relevance": info.get("low_relevance"), "notice": info.get("notice"),
            "ignored_options": info.get("ignored_options", []),
            "citations": citations(graph, [u["id"] for u in units])}
    lines = [f"{_count(len(units), 'text unit')} by {out['mode']} retrieval"
             + (f" (ran {data['used_mode']}: {data['fallback']})" if data["fallback"] else "")
             + f" for: {out['question']}"]
    if data["notice"]:
        lines.append(f"Note: {data['notice']}")
    if data["ignored_options"]:
        lines.append(f"Ignored by this mode: {', '.join(data['ignored_options'])}")
    for u in units:
        score = f", score {u['score']:.3f}" if isinstance(u.get("score"), float) else ""
        lines += ["", f"[{u['ref']}] {u.get('document_title')} (text unit {u['id']}"
                  f"{score})", " ".join(str(u.get("text") or "").split())]
    return data, "\n".join(lines + ["", _footer(data["build_id"])])


def search(graph: GraphView, out: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """(structured content, text) of a search's answer: the answer, then its sources
    (:func:`kgloom.serve.openai_chat.answer_text`, as the chat endpoint writes it). Its
    citations are the text units it cites, then the other text units of its context
    (global search's context holds none: it cites reports and key points).

    Args:
        graph: the build's view (for the cited units' document titles).
        out: :func:`kgloom.serve.query_routes.run_query`'s dict for a search mode.
    """
    info = out["info"]
    cited = []
    for c in out.get("cited", []):
        row = _unit(graph, c["id"]) if c["kind"] == "text_units" else None
        cited.append({**c, "document_title": row["document_title"] if row else None})
    # the cited units first, then the others the answer's context held
    items = (out.get("context") or {}).get("items") or []
    units = [c["id"] for c in cited if c["kind"] == "text_units"] + \
        [x["source_id"] for x in items if x["kind"] == "text_units"]
    data = {"build_id": info.get("build_id"), "question": out["question"],
            "method": out["mode"], "route": out["route"],
            "route_reason": out["route_reason"], "answer": out["answer"], "cited": cited,
            "notice": out.get("notice"), "low_relevance": info.get("low_relevance"),
            "relevance_notice": info.get("notice"),
            "ignored_options": info.get("ignored_options", []),
            "citations": citations(graph, units)}
    text = (f"{answer_text(out)}\n\n(search: {out['route']}; {_footer(data['build_id'])[1:]}")
    return data, text


def found_entities(build_id: str | None, text: str,
                   hits: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
    """(structured content, text) of :meth:`GraphView.find_entities`'s ``hits`` for
    ``text``."""
    data = {"build_id": build_id, "text": text, "entities": hits, "citations": []}
    lines = [f"{_count(len(hits), 'entity', 'entities')} whose name contains {text!r}"
             + (":" if hits else " (none; try a shorter part of the name)")]
    lines += [f"- {e['title']} ({(e.get('type') or 'entity').lower()}), id {e['id']}, "
              f"degree {e.get('degree')}" for e in hits]
    return data, "\n".join(lines + ["", _footer(build_id)])


def entity(graph: GraphView, build_id: str | None,
           node: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """(structured content, text) of :meth:`GraphView.node`'s ``node``; its citations
    are the text units that mention it."""
    cites = citations(graph, node["text_unit_ids"])
    data = {"build_id": build_id, "entity": node, "citations": cites}
    levels = ", ".join(f"level {k}: {v}" for k, v in node["communities"].items()) or "none"
    refs = ", ".join(c["ref"] for c in cites[:30]) + (" ..." if len(cites) > 30 else "")
    lines = [f"{node['title']} ({(node.get('type') or 'entity').lower()}), id {node['id']}",
             node.get("description") or "(no description)",
             f"degree {node.get('degree')}, PageRank {node.get('pagerank')}",
             f"communities: {levels}", f"mentioned in {len(cites)} text units: {refs}"]
    return data, "\n".join(lines + ["", _footer(build_id)])


def neighbourhood(graph: GraphView, build_id: str | None, entity_id: str, depth: int,
                  sub: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """(structured content, text) of :meth:`GraphView.subgraph` around ``entity_id``;
    its citations are the centre entity's text units."""
    centre = next((n for n in sub["nodes"] if n["id"] == entity_id), None)
    data = {"build_id": build_id, "entity_id": entity_id, "depth": depth,
            "nodes": sub["nodes"], "edges": sub["edges"], "truncated": sub["truncated"],
            "citations": citations(graph, centre["text_unit_ids"] if centre else [])}
    title = centre["title"] if centre else entity_id
    lines = [f"{_count(len(sub['nodes']), 'entity', 'entities')} within "
             f"{_count(depth, 'hop')} of {title}"
             + (" (cut at max_nodes: nearest first)" if sub["truncated"] else "") + ":"]
    lines += [f"- hop {n['hop']}: {n['title']} ({(n.get('type') or 'entity').lower()}), "
              f"id {n['id']}" for n in sub["nodes"]]
    lines += ["", f"{_count(len(sub['edges']), 'relationship')} among them:"]
    lines += [f"- {e['source_title']} -> {e['target_title']}: {_clip(e.get('description'))}"
              for e in sub["edges"]]
    return data, "\n".join(lines + ["", _footer(build_id)])


def community(graph: GraphView, build_id: str | None,
              row: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """(structured content, text) of :meth:`GraphView.community`'s ``row``; its
    citations are the community's text units."""
    data = {**row, "build_id": build_id, "citations": citations(graph, row["text_unit_ids"])}
    report = row.get("report")
    lines = [f"Community {row['community']} (level {row['level']}, "
             f"{_count(row['size'], 'entity', 'entities')}, "
             f"parent {row['parent']}): {row.get('title')}"]
    if report:
        lines += ["", f"Report: {report.get('title')}", report.get("summary") or ""]
        for f in report.get("findings") or []:
            summary = f.get("summary") if isinstance(f, dict) else f
            lines.append(f"- {_clip(summary)}")
    else:
        lines.append("(no report)")
    shown = ", ".join(m["title"] for m in row["members"])
    lines += ["", f"Members ({len(row['members'])} of {row['members_total']}, by PageRank): "
              f"{shown}"]
    if row["children"]:
        lines.append("Children: " + ", ".join(str(c["community"]) for c in row["children"]))
    return data, "\n".join(lines + ["", _footer(build_id)])


def documents(graph: GraphView, build_id: str | None,
              docs: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """(structured content, text) of :meth:`GraphView.documents`; the citations are each
    document's first text unit."""
    firsts = [d["first_text_unit_id"] for d in docs["documents"] if d["first_text_unit_id"]]
    data = {**docs, "build_id": build_id, "citations": citations(graph, firsts)}
    lines = [f"{_count(len(docs['documents']), 'document')} (build published "
             f"{docs['published_at']}):"]
    lines += [f"- {d['title']} ({d['source']}): {d['text_units']} text units, id {d['id']}"
              for d in docs["documents"]]
    return data, "\n".join(lines + ["", _footer(build_id)])


def text_unit(graph: GraphView, build_id: str | None,
              unit: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """(structured content, text) of :meth:`GraphView.text_unit`'s ``unit``."""
    data = {**unit, "build_id": build_id, "citations": citations(graph, [unit["id"]])}
    text = (f"[{unit['ref']}] {unit['document_title']} (text unit {unit['id']})\n"
            f"{unit['text']}\n\n{_footer(build_id)}")
    return data, text
