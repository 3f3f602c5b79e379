"""The HTTP application of ``kgloom serve`` (FastAPI on Starlette, served by uvicorn) over a
:class:`kgloom.serve.live_index.LiveIndex`: :func:`create_app` assembles the route groups,
each an ``APIRouter`` in its module: :mod:`kgloom.serve.health_routes` (health, modes),
:mod:`kgloom.serve.query_routes` (the JSON query API), :mod:`kgloom.serve.graph_routes`
(the graph endpoints and the explorer page), :mod:`kgloom.serve.chat_routes` (the OpenAI-
and Ollama-compatible chat endpoints), over what they share
(:mod:`kgloom.serve.route_kit`). No Dagster; nothing is written (docs/serve.md lists
every route).

Every error is ``{"error": {"message", "type"}}`` (OpenAI's shape; on Ollama's routes
``{"error": message}``) with a 4xx status when
the request is at fault: a bad or missing field, a question, ``top_k``, depth, budget or
body over its :class:`Limits`, an unknown id (404), a missing or wrong API key (401).
A 5xx means a fault of the server or of its model, never of the request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute
from starlette.routing import Mount

from kgloom.serve.chat_routes import ollama_router, openai_router
from kgloom.serve.graph_routes import STATIC_DIR, explorer_router, graph_router
from kgloom.serve.guards import BUILD_HEADER, ApiError, Limits
from kgloom.serve.health_routes import health_router
from kgloom.serve.live_index import IndexHandle, LiveIndex
from kgloom.serve.query_routes import (
    QUERY_FIELDS,
    SEARCH_OPTIONS,
    parse_query,
    query_router,
    run_query,
)
from kgloom.serve.route_kit import KEY_REQUIRED, add_error_handlers, api_key_accepted
from kgloom.serve.route_kit import finite as _finite

__all__ = ["DEFAULT_LIMITS", "KEY_REQUIRED", "QUERY_FIELDS", "SEARCH_OPTIONS", "STATIC_DIR",
           "ApiError", "Limits", "_finite", "api_key_accepted", "create_app", "open_app",
           "open_live_index", "parse_query", "run_query"]

DEFAULT_LIMITS = Limits()


def create_app(live: LiveIndex, model_id: str, api_key: str | None = None,
               cors_origins: tuple[str, ...] = (), limits: Limits = DEFAULT_LIMITS):
    """The FastAPI application.

    Args:
        live: the index (its handles hold the model the answers come from).
        model_id: the answering model's id, listed by ``/v1/models``.
        api_key: when given, every ``/api`` and ``/v1`` request must carry it
            (``Authorization: Bearer KEY`` or ``X-API-Key: KEY``); the explorer page and
            its static files need none (they hold no data).
        cors_origins: origins allowed to call the API from a browser (none: no CORS
            header is sent, so browsers refuse other origins).
        limits: :class:`Limits`.

    Routes: see docs/serve.md. JSON responses carry the build id they were answered
    from in the ``X-Kgloom-Build`` header and in their body. The routes read ``live``,
    ``model_id``, ``api_key`` and ``limits`` from ``app.state``.
    """
    app = FastAPI(title="kgloom", docs_url=None, redoc_url=None,
                  summary="A kgloom index over HTTP: retrieval, search, chat, graph.")
    app.state.live, app.state.model_id = live, model_id
    app.state.api_key, app.state.limits = api_key, limits
    add_error_handlers(app)
    for router in (explorer_router, health_router, query_router, graph_router(limits),
                   openai_router, ollama_router):
        add_routes(app, router)
    if cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(cors_origins),
                           allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "X-API-Key", "Content-Type"],
                           expose_headers=[BUILD_HEADER])
    return app


def add_routes(app: FastAPI, router: APIRouter) -> None:
    """Every route of ``router`` added to ``app`` itself, in order, with its dependencies
    (what ``app.include_router`` did before FastAPI 0.137, which now keeps an included
    router as one node of ``app.routes``): ``app.routes`` lists each route and its path.
    """
    for route in router.routes:
        if isinstance(route, APIRoute):
            app.add_api_route(route.path, route.endpoint, methods=sorted(route.methods or ()),
                              name=route.name, dependencies=route.dependencies,
                              include_in_schema=route.include_in_schema)
        elif isinstance(route, Mount):
            app.mount(route.path, route.app, route.name)
        else:
            raise TypeError(f"a route kgloom does not add: {route!r}")


def open_app(output_dir: str | Path, llm: Any, embedder: Any = None,
             api_key: str | None = None, cors_origins: tuple[str, ...] = (),
             limits: Limits = DEFAULT_LIMITS, settings: Any = None):
    """Open the index in ``output_dir`` once (the build its marker names) and return the
    application of :func:`create_app` over it; later builds are opened with the same
    embedder and model.

    Args:
        output_dir: the index folder (only read).
        llm: the open :class:`kgloom.llm.CachedLLM` that writes answers (its cache must
            lie outside ``output_dir``).
        embedder: the index's embedder (a folder, or None: see
            :class:`kgloom.query.retriever.Retriever`).
        api_key / cors_origins / limits: see :func:`create_app`.
        settings: the :class:`kgloom.settings.Settings` whose ``retrieval`` and ``search``
            sections the handles open with (None: the defaults), see
            :meth:`IndexHandle.open`.

    Raises:
        IndexFilesMissingError / IndexInconsistentError / EmbedderMismatchError: the
            index cannot be opened (each names the file or the difference).
    """
    live = open_live_index(output_dir, llm, embedder, settings)
    return create_app(live, llm.model_id, api_key, cors_origins, limits)


def open_live_index(output_dir: str | Path, llm: Any, embedder: Any = None,
                    settings: Any = None) -> LiveIndex:
    """The :class:`LiveIndex` of ``output_dir``, its current build opened now; later
    builds are opened with the same embedder (loaded once) and model. What ``kgloom
    serve`` and ``kgloom mcp`` answer from.

    Args:
        output_dir / llm / embedder / settings: see :func:`open_app`.

    Raises:
        IndexFilesMissingError / IndexInconsistentError / EmbedderMismatchError: the
            index cannot be opened (each names the file or the difference).
    """
    shared = {"embedder": embedder}

    def opener() -> IndexHandle:
        handle = IndexHandle.open(output_dir, llm, shared["embedder"], settings)
        shared["embedder"] = handle.retriever.embedder  # loaded once
        return handle

    return LiveIndex(output_dir, opener)
