"""``kgloom mcp``: the index as a Model Context Protocol server (docs/mcp.md), on the
official ``mcp`` SDK (2.x, ``MCPServer``), over stdio or streamable HTTP. No Dagster.

It answers from the same :class:`kgloom.serve.live_index.LiveIndex` as ``kgloom serve``
and through the same functions its routes call: :func:`kgloom.serve.query_routes.parse_query`
and :func:`kgloom.serve.query_routes.run_query` for retrieval and search, the
:class:`kgloom.serve.graph_view.GraphView` of the current build for the graph tools, with
serve's :class:`kgloom.serve.guards.Limits`. Every tool call first looks for a newly
published build (:meth:`LiveIndex.call`), so a build published during a client's session
answers its next call; every result names its ``build_id``.

Tools (:func:`create_mcp_server`): ``retrieve``, ``search``, ``find_entities``,
``entity``, ``neighbourhood``, ``community``, ``list_documents``, ``text_unit``. Each
returns structured content (its schema: :mod:`kgloom.serve.mcp_results`) and text a model
reads. A bad argument (unknown, of the wrong type, out of range, over a limit), an
unknown id or an unknown tool is a tool error (``isError`` with the reason), never a
crash of the server.
"""

# No `from __future__ import annotations`: the SDK reads each tool's signature, and the
# annotations name the limits of the closure that defines the tool.
import importlib.metadata
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import ConfigDict, Field, StrictBool, StrictFloat, StrictInt
from starlette.datastructures import Headers
from starlette.responses import Response

from kgloom.llm import ModelFileError
from kgloom.query.modes import RETRIEVAL_MODES, SEARCH_MODES
from kgloom.query.retriever import IndexFilesMissingError
from kgloom.serve import mcp_results as res
from kgloom.serve.answer_stream import AnswerStreamError, ChatAnswer, streams_answers
from kgloom.serve.graph_view import UnknownItemError
from kgloom.serve.guards import ApiError, Limits
from kgloom.serve.live_index import IndexHandle, LiveIndex
from kgloom.serve.query_routes import parse_query as parse_serve_query
from kgloom.serve.query_routes import run_query as run_serve_query
from kgloom.serve.route_kit import KEY_REQUIRED, api_key_accepted
from kgloom.serve.route_kit import finite as _finite

MCP_PATH = "/mcp"  # the streamable HTTP endpoint
INSTRUCTIONS = (
    "kgloom: a GraphRAG index (a knowledge graph of entities, relationships and "
    "communities with reports, over text units of the indexed documents). `search` "
    "answers a question with citations; `retrieve` returns the ranked text units a "
    "question needs; `find_entities` turns a name into entity ids for `entity` and "
    "`neighbourhood`; `community` gives a community's members and report; "
    "`list_documents` lists what was indexed; `text_unit` reads a cited unit. Every "
    "result names the build it was read from and the text units it rests on.")
READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False,
                            idempotent_hint=True, open_world_hint=False)

Number = StrictFloat | StrictInt  # a JSON number; true/false and "0.5" are refused
if TYPE_CHECKING:  # a Literal built from the registry is a run-time type (the SDK's schema)
    RetrievalMode = SearchMethod = str
else:
    RetrievalMode = Literal[RETRIEVAL_MODES]  # the enum of `retrieve`'s mode
    SearchMethod = Literal[SEARCH_MODES]
Question = Annotated[str, Field(description="the question, in plain text")]
Id = Annotated[str, Field(min_length=1, max_length=200)]


def answer_search(handle: IndexHandle, q: dict[str, Any],
                  on_piece: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The ``search`` tool's answer on ``handle`` for the parsed query ``q``
    (:func:`kgloom.serve.query_routes.parse_query`): exactly what ``POST /api/query`` answers.

    With a model server as the answering model (``--llm-url``), the answer is the one the
    chat surfaces stream (:class:`kgloom.serve.answer_stream.ChatAnswer`): its text is
    handed to ``on_piece`` piece by piece as the server writes it, the sources block
    last; with the in-process model it is :func:`kgloom.serve.query_routes.run_query`'s.

    Raises:
        ValueError / IndexFilesMissingError / ModelFileError: as :func:`run_query`.
        ToolError: the model server broke off the answer (nothing of it is cached).
    """
    if not streams_answers(handle):
        return run_serve_query(handle, q)
    params = {k: q[k] for k in ("level", "budget") if q.get(k) is not None}
    answer = ChatAnswer.prepare(handle, [("user", q["question"])], mode=q["mode"],
                                dynamic=q.get("dynamic", False),
                                max_chars=len(q["question"]), **params)
    try:
        for piece in answer.pieces():
            if on_piece is not None:
                on_piece(piece)
    except AnswerStreamError as exc:
        raise ToolError(str(exc)) from exc
    out = answer.result.to_dict()
    if q["ignored"]:
        out["info"]["ignored_options"] = q["ignored"]
    return out


def _on_index(live: LiveIndex, fn: Callable[[IndexHandle], Any]) -> Any:
    """``fn(handle)`` on the current build (:meth:`LiveIndex.call`), the faults of a
    request turned into tool errors, as ``kgloom serve`` turns them into 4xx.

    Raises:
        ToolError: an unknown id, a table the index lacks, the model unavailable, or a
            question or option the query side refuses (ValueError).
    """
    try:
        return live.call(fn)
    except UnknownItemError as exc:
        raise ToolError(str(exc)) from exc
    except IndexFilesMissingError as exc:  # e.g. global search on a vector-only index
        raise ToolError(f"this index cannot answer that: {exc}") from exc
    except ModelFileError as exc:
        raise ToolError(f"the answering model is unavailable: {exc}") from exc
    except ValueError as exc:
        raise ToolError(str(exc)) from exc


def _result(data_text: tuple[dict[str, Any], str]) -> CallToolResult:
    """A tool result: the text a model reads and the structured content."""
    data, text = data_text
    return CallToolResult(content=[TextContent(type="text", text=text)],
                          structured_content=_finite(data))


def _parse(body: dict[str, Any], limits: Limits) -> dict[str, Any]:
    """``body`` (the given arguments, None: not given) checked as ``kgloom serve`` checks
    a query (:func:`kgloom.serve.query_routes.parse_query`: question length, options' ranges,
    ``limits``).

    Raises:
        ToolError: naming the bad argument.
    """
    try:
        return parse_serve_query({k: v for k, v in body.items() if v is not None}, limits)
    except ApiError as exc:
        raise ToolError(exc.message) from exc


def _strict(tool: Tool) -> Tool:
    """``tool`` refusing arguments it does not declare (as ``kgloom serve`` refuses
    unknown fields); the SDK ignores them."""
    base = tool.fn_metadata.arg_model
    model = type(base.__name__, (base,), {"model_config": ConfigDict(
        extra="forbid", arbitrary_types_allowed=True)})
    tool.fn_metadata.arg_model = model
    tool.parameters = model.model_json_schema(by_alias=True)
    return tool


def create_mcp_server(live: LiveIndex, limits: Limits | None = None) -> MCPServer:
    """The MCP server over ``live``: its tools, each answering from the build current
    at the call (see the module doc).

    Args:
        live: the index (its handles hold the model search answers with).
        limits: serve's :class:`Limits`: question length, ``top_k``, depth, budget,
            nodes per graph answer (None: its defaults).

    Returns:
        An ``MCPServer``: run it with :func:`run_stdio`, or serve :func:`http_app`.
    """
    limits = limits or Limits()
    tools = [_strict(Tool.from_function(fn, annotations=READ_ONLY))
             for fn in (*_query_tools(live, limits), *_graph_tools(live, limits))]
    return MCPServer("kgloom", title="kgloom index", instructions=INSTRUCTIONS,
                     version=_version(), tools=tools, log_level="WARNING")


def _version() -> str:
    """kgloom's version, as installed ("" when it runs from a checkout only)."""
    try:
        return importlib.metadata.version("kgloom")
    except importlib.metadata.PackageNotFoundError:
        return ""


def _query_tools(live: LiveIndex, limits: Limits) -> list[Callable[..., Any]]:
    """The ``retrieve`` and ``search`` tools."""
    return [_retrieve_tool(live, limits), _search_tool(live, limits)]


def _retrieve_tool(live: LiveIndex, limits: Limits) -> Callable[..., Any]:
    """The ``retrieve`` tool (its ``top_k`` description names ``limits``)."""

    def retrieve(question: Question, mode: RetrievalMode = "bridge",
                 top_k: Annotated[StrictInt | None, Field(
                     description=f"text units to return (1 to {limits.max_top_k}; "
                     "default: the settings' retrieval.top_k, 5)")] = None,
                 depth: Annotated[StrictInt | None, Field(
                     description="BFS hops (multihop, fused, two_step; default: "
                     "retrieval.depth, 1)")] = None,
                 lam: Annotated[Number | None, Field(
                     description="fused: weight of the graph score (default: "
                     "retrieval.lam, 1.0)")] = None,
                 oversample: Annotated[StrictInt | None, Field(
                     description="fused: candidates per result (default: "
                     "retrieval.oversample, 5)")] = None,
                 damping: Annotated[Number | None, Field(
                     description="ppr, hybrid: in [0, 1) (default: retrieval.damping, "
                     "0.5)")] = None,
                 ) -> Annotated[CallToolResult, res.RetrieveResult]:
        """The text units of the index that answer `question`, ranked (no model call):
        each with its id, T<n> ref, document title, score, the entities that brought it
        in, and its full text. Modes: bridge (default: vector search, then the graph
        between the entities it finds), vector, one_hop, multihop, fused, ppr
        (personalised PageRank), hybrid, two_step."""
        q = _parse({"question": question, "mode": mode, "top_k": top_k, "depth": depth,
                    "lam": lam, "oversample": oversample, "damping": damping},
                   limits)
        return _result(_on_index(live, lambda h: res.retrieval(
            h.graph, run_serve_query(h, q))))

    return retrieve


def _search_tool(live: LiveIndex, limits: Limits) -> Callable[..., Any]:
    """The ``search`` tool (its ``budget`` description names ``limits``)."""

    async def search(question: Question, method: SearchMethod = "auto",
               dynamic: Annotated[StrictBool | None, Field(
                   description="global: dynamic community selection")] = None,
               level: Annotated[StrictInt | None, Field(
                   description="global: the community level (default 1)")] = None,
               budget: Annotated[StrictInt | None, Field(
                   description=f"local, direct: context tokens (at most "
                   f"{limits.max_budget})")] = None,
               ctx: Context | None = None,
               ) -> Annotated[CallToolResult, res.SearchAnswer]:
        """An answer to `question` written by the index's model from a cited context,
        with what each citation points to (text units with their document titles,
        entities, relationships, community reports). Methods: auto (routed by the
        question), local (entities and their text units), global (community reports:
        questions about the whole corpus), direct (the nearest text units). When kgloom
        answers through a model server, the answer's text also comes as it is written, in
        progress notifications (each message a piece), to a client that asks for
        progress."""
        q = _parse({"question": question, "mode": method, "dynamic": dynamic,
                    "level": level, "budget": budget}, limits)
        sent = [0]

        def on_piece(piece: str) -> None:  # in the worker thread: to the client's loop
            sent[0] += 1
            if ctx is not None:
                anyio.from_thread.run(ctx.report_progress, sent[0], None, piece)

        return _result(await anyio.to_thread.run_sync(lambda: _on_index(
            live, lambda h: res.search(h.graph, answer_search(h, q, on_piece)))))

    return search


def _graph_tools(live: LiveIndex, limits: Limits) -> list[Callable[..., Any]]:
    """The tools over the build's graph: entities, neighbourhoods, communities,
    documents and text units (``GraphView``, as serve's graph routes)."""
    def find_entities(name: Annotated[str, Field(min_length=1, max_length=200, description=(
                          "part of an entity's name, any case"))],
                      limit: Annotated[StrictInt, Field(ge=1, le=200)] = 20,
                      ) -> Annotated[CallToolResult, res.FoundEntities]:
        """Entities whose name contains `name`: names that start with it first, then by
        PageRank. Their ids are what `entity` and `neighbourhood` take."""
        return _result(_on_index(live, lambda h: res.found_entities(
            h.build_id, name, h.graph.find_entities(name, limit))))

    def entity(entity_id: Id) -> Annotated[CallToolResult, res.EntityResult]:
        """An entity: its type, description, degree, PageRank, its community at each
        level, and the text units that mention it."""
        return _result(_on_index(live, lambda h: res.entity(
            h.graph, h.build_id, h.graph.node(entity_id))))

    def neighbourhood(entity_id: Id,
                      depth: Annotated[StrictInt, Field(ge=0, le=limits.max_depth)] = 1,
                      max_nodes: Annotated[StrictInt, Field(ge=1, le=limits.max_nodes)] = 100,
                      ) -> Annotated[CallToolResult, res.Neighbourhood]:
        """The entities within `depth` hops of an entity (nearest first, then by
        PageRank, at most `max_nodes`) and the relationships among them."""
        def run(h: IndexHandle) -> tuple[dict[str, Any], str]:
            h.graph.node(entity_id)  # an unknown entity is an error, not an empty graph
            return res.neighbourhood(h.graph, h.build_id, entity_id, depth,
                                     h.graph.subgraph([entity_id], depth, max_nodes))

        return _result(_on_index(live, run))

    def community(number: Annotated[StrictInt, Field(ge=0, description=(
                      "the community's number"))],
                  max_members: Annotated[StrictInt, Field(ge=1, le=limits.max_nodes)] = 50,
                  ) -> Annotated[CallToolResult, res.CommunityResult]:
        """A community of the graph: its level, parent and children, its members (by
        PageRank, at most `max_members`), and its report (title, summary, findings)."""
        return _result(_on_index(live, lambda h: res.community(
            h.graph, h.build_id, h.graph.community(number, max_members))))

    def list_documents() -> Annotated[CallToolResult, res.Documents]:
        """The indexed documents: title, source file, number of text units, first unit,
        and when their build was published."""
        return _result(_on_index(live, lambda h: res.documents(
            h.graph, h.build_id, h.graph.documents())))

    def text_unit(text_unit_id: Id) -> Annotated[CallToolResult, res.TextUnit]:
        """A text unit's full text, with its T<n> ref, document and entities (to read a
        citation)."""
        return _result(_on_index(live, lambda h: res.text_unit(
            h.graph, h.build_id, h.graph.text_unit(text_unit_id))))

    return [find_entities, entity, neighbourhood, community, list_documents, text_unit]


def run_stdio(server: MCPServer) -> None:
    """Serve ``server`` on this process's stdin/stdout until the client closes them."""
    server.run("stdio")


def http_app(server: MCPServer, host: str = "127.0.0.1", api_key: str | None = None):
    """The ASGI application serving ``server`` over streamable HTTP at :data:`MCP_PATH`.

    Args:
        server: from :func:`create_mcp_server` (one application per server).
        host: the address it will listen on; on a loopback address the SDK also refuses
            requests whose Host or Origin header is not loopback (DNS rebinding).
        api_key: when given, every request must send ``Authorization: Bearer KEY`` (or
            ``X-API-Key: KEY``), as ``kgloom serve`` asks; else a 401.
    """
    app = server.streamable_http_app(streamable_http_path=MCP_PATH, host=host)
    if api_key is None:
        return app

    async def guarded(scope, receive, send) -> None:
        if scope["type"] == "http" and not api_key_accepted(Headers(scope=scope), api_key):
            body = json.dumps({"error": {"message": KEY_REQUIRED,
                                         "type": "authentication_error"}})
            await Response(body, 401, {"WWW-Authenticate": "Bearer"},
                           "application/json")(scope, receive, send)
            return
        await app(scope, receive, send)

    return guarded
