"""The graph routes of ``kgloom serve`` (:class:`kgloom.serve.graph_view.GraphView` of the
current build: text units, entities, neighbourhoods, the overview, subgraphs,
communities, documents) and the explorer page that draws them (``GET /`` and
``/static``, which need no API key: they hold no data)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse, Response
from fastapi.staticfiles import StaticFiles

from kgloom.serve.guards import ApiError, Limits
from kgloom.serve.live_index import IndexHandle
from kgloom.serve.route_kit import GUARDED, json_response, limits_of, on_index, read_json

STATIC_DIR = Path(__file__).resolve().parent / "static"

explorer_router = APIRouter()


@explorer_router.get("/", include_in_schema=False)
async def explorer() -> Response:
    return FileResponse(STATIC_DIR / "explorer.html", media_type="text/html")


explorer_router.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")


async def graph_answer(request: Request, fn) -> Response:
    """``{"build_id", **fn(handle)}`` of the current build, as JSON."""
    out = await on_index(request, lambda h: {"build_id": h.build_id, **fn(h)})
    return json_response(out, out["build_id"])


async def text_unit(request: Request, unit_id: str) -> Response:
    return await graph_answer(request, lambda h: h.graph.text_unit(unit_id))


async def find_entities(request: Request, q: str = Query(..., min_length=1, max_length=200),
                        limit: int = Query(20, ge=1, le=200)) -> Response:
    return await graph_answer(request, lambda h: {"entities": h.graph.find_entities(q, limit)})


async def entity(request: Request, entity_id: str) -> Response:
    return await graph_answer(request, lambda h: h.graph.node(entity_id))


def subgraph_args(body: Any, limits: Limits) -> tuple[list[str], list[str], int, int]:
    """(entity ids, text unit ids, depth, max_nodes) of a ``POST /api/graph/subgraph``
    body.

    Raises:
        ApiError: 400 for another field, a value of the wrong type, out of its range or
            over ``limits``.
    """
    fields = {"entity_ids", "text_unit_ids", "depth", "max_nodes"}
    if not isinstance(body, dict) or set(body) - fields:
        raise ApiError(400, "the body must be an object with entity_ids and "
                       "text_unit_ids (lists of ids), depth and max_nodes (integers) only")
    lists = {k: body.get(k, []) for k in ("entity_ids", "text_unit_ids")}
    depth, max_nodes = body.get("depth", 0), body.get("max_nodes", limits.max_nodes)
    for name, ids in lists.items():
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise ApiError(400, f"{name} must be a list of id strings")
        if len(ids) > limits.max_entity_ids:
            raise ApiError(400, f"{name} holds {len(ids)} ids; at most "
                           f"{limits.max_entity_ids}")
    for name, value, cap in (("depth", depth, limits.max_depth),
                             ("max_nodes", max_nodes, limits.max_nodes)):
        if not isinstance(value, int) or isinstance(value, bool) or not \
                ((name == "depth" and 0 <= value <= cap)
                 or (name != "depth" and 1 <= value <= cap)):
            raise ApiError(400, f"{name} must be an integer in "
                           f"[{0 if name == 'depth' else 1}, {cap}], got {value!r}")
    return lists["entity_ids"], lists["text_unit_ids"], depth, max_nodes


async def subgraph(request: Request) -> Response:
    entity_ids, unit_ids, depth, max_nodes = subgraph_args(await read_json(request),
                                                           limits_of(request))
    return await graph_answer(request, lambda h: h.graph.subgraph(
        entity_ids, depth, max_nodes, unit_ids))


async def communities(request: Request) -> Response:
    return await graph_answer(request, lambda h: {"levels": h.graph.levels,
                                                  "communities": h.graph.community_tree()})


async def community(request: Request, community: int) -> Response:
    return await graph_answer(request, lambda h: h.graph.community(community))


async def documents(request: Request) -> Response:
    return await graph_answer(request, lambda h: h.graph.documents())


def graph_router(limits: Limits) -> APIRouter:
    """The graph routes of an application with ``limits``: built per application, since
    FastAPI reads the bounds of the neighbourhood's and the overview's query parameters
    (depth, nodes) from their signatures."""
    router = APIRouter(dependencies=GUARDED)
    router.add_api_route("/api/text_units/{unit_id}", text_unit, methods=["GET"])
    router.add_api_route("/api/graph/entities", find_entities, methods=["GET"])
    router.add_api_route("/api/graph/entities/{entity_id}", entity, methods=["GET"])

    @router.get("/api/graph/entities/{entity_id}/neighbourhood")
    async def neighbourhood(request: Request, entity_id: str,
                            depth: int = Query(1, ge=0, le=limits.max_depth),
                            max_nodes: int = Query(100, ge=1, le=limits.max_nodes)) -> Response:
        def run(h: IndexHandle) -> dict[str, Any]:
            h.graph.node(entity_id)  # 404 for an unknown entity
            return h.graph.subgraph([entity_id], depth, max_nodes)

        return await graph_answer(request, run)

    @router.get("/api/graph/overview")
    async def overview(request: Request, level: int | None = Query(None, ge=0),
                       community: int | None = Query(None, ge=0),
                       max_nodes: int = Query(60, ge=1, le=limits.max_nodes),
                       max_communities: int = Query(12, ge=1, le=100)) -> Response:
        return await graph_answer(request, lambda h: h.graph.overview(
            level, max_nodes, max_communities, community))

    router.add_api_route("/api/graph/subgraph", subgraph, methods=["POST"])
    router.add_api_route("/api/graph/communities", communities, methods=["GET"])
    router.add_api_route("/api/graph/communities/{community}", community, methods=["GET"])
    router.add_api_route("/api/documents", documents, methods=["GET"])
    return router
