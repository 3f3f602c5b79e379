"""The HTTP application of ``kgloom serve`` (FastAPI on Starlette, served by uvicorn): the
JSON API, the OpenAI- and Ollama-compatible chat endpoints
(:mod:`kgloom.serve.chat_routes`), the graph endpoints and the explorer page, over a
:class:`kgloom.serve.live_index.LiveIndex`. No Dagster; nothing is written
(docs/serve.md lists every route).

Every error is ``{"error": {"message", "type"}}`` (OpenAI's shape; on Ollama's routes
``{"error": message}``) with a 4xx status when
the request is at fault: a bad or missing field, a question, ``top_k``, depth, budget or
body over its :class:`Limits`, an unknown id (404), a missing or wrong API key (401).
A 5xx means a fault of the server or of its model, never of the request.
"""

from __future__ import annotations

import dataclasses
import hmac
import json
import math
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from kgloom.llm import ModelFileError
from kgloom.query.modes import (
    OPTION_MODES,
    RETRIEVAL_MODES,
    SEARCH_MODES,
    check_options,
    ignored_options,
    retrieval_params,
)
from kgloom.query.retriever import IndexFilesMissingError
from kgloom.serve import ollama_api
from kgloom.serve.chat_routes import RouteKit, add_ollama_routes, add_openai_routes
from kgloom.serve.graph_view import UnknownItemError
from kgloom.serve.guards import BUILD_HEADER, ApiError, Limits, check_question
from kgloom.serve.live_index import IndexHandle, LiveIndex
from kgloom.serve.request_json import JSONBodyError, parse_json_body

STATIC_DIR = Path(__file__).resolve().parent / "static"
DEFAULT_LIMITS = Limits()
def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by None (JSON has neither)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


# the query body's fields and their JSON types (bool is not an int here)
QUERY_FIELDS: dict[str, tuple[type, ...]] = {
    "question": (str,), "mode": (str,), "top_k": (int,), "depth": (int,),
    "lam": (int, float), "oversample": (int,), "damping": (int, float), "dynamic": (bool,),
    "keep_parent": (bool,), "level": (int,), "answer": (bool,), "budget": (int,)}
SEARCH_OPTIONS = ("dynamic", "keep_parent", "level", "answer", "budget")


def parse_query(body: Any, limits: Limits) -> dict[str, Any]:
    """The checked fields of a ``POST /api/query`` body (the options of ``kgloom query``:
    ``question``, ``mode`` (default ``bridge``), ``top_k``, ``depth``, ``lam``,
    ``oversample``, ``damping``, ``dynamic``, ``keep_parent``, ``level``, ``answer``,
    ``budget``), with ``ignored``: the given options the mode does not read.

    Raises:
        ApiError: 400 for an unknown field, a value of the wrong type or out of its
            range (:func:`kgloom.query.modes.check_options`) or over ``limits``.
    """
    if not isinstance(body, dict):
        raise ApiError(400, "the body must be a JSON object")
    unknown = sorted(set(body) - set(QUERY_FIELDS))
    if unknown:
        raise ApiError(400, f"unknown field(s) {', '.join(unknown)}; the fields are "
                       f"{', '.join(QUERY_FIELDS)}")
    for name, value in body.items():
        kinds = QUERY_FIELDS[name]
        if value is not None and (not isinstance(value, kinds) or
                                  (isinstance(value, bool) and bool not in kinds)):
            raise ApiError(400, f"{name} must be {' or '.join(k.__name__ for k in kinds)}, "
                           f"got {json.dumps(value)[:80]}")
    q = {"mode": "bridge", **{k: v for k, v in body.items() if v is not None}}
    check_question(q.get("question"), limits)
    try:
        check_options(q["mode"], q)
    except ValueError as exc:
        raise ApiError(400, str(exc)) from exc
    for name, cap in (("top_k", limits.max_top_k), ("depth", limits.max_depth),
                      ("budget", limits.max_budget)):
        if name in q and q[name] > cap:
            raise ApiError(400, f"{name} must be at most {cap}, got {q[name]}")
    q["ignored"] = ignored_options(q["mode"], [k for k in body if k in OPTION_MODES])
    return q


def run_query(handle: IndexHandle, q: dict[str, Any]) -> dict[str, Any]:
    """Answer a parsed query (:func:`parse_query`) on ``handle``: the dict ``kgloom query
    --json`` prints (:meth:`RetrievalResult.to_dict` or :meth:`SearchResult.to_dict`),
    with ``info["ignored_options"]`` when options were ignored.

    Raises:
        ValueError / IndexFilesMissingError: as the Retriever and the Searcher.
    """
    mode = q["mode"]
    if mode in RETRIEVAL_MODES:
        out = handle.retrieve(q["question"], mode, **retrieval_params(mode, q)).to_dict()
    else:
        config = handle.searcher.config
        changes = {k: q[k] for k in ("top_k", "keep_parent") if k in q}
        result = handle.search(q["question"], config.model_copy(update=changes),
                               mode=mode, dynamic=q.get("dynamic", False),
                               level=q.get("level"), answer=q.get("answer", True),
                               budget=q.get("budget"))
        out = result.to_dict()
    if q["ignored"]:
        out["info"]["ignored_options"] = q["ignored"]
    return out


KEY_REQUIRED = ("a valid API key is required: send 'Authorization: Bearer KEY' or "
                "'X-API-Key: KEY'")


def api_key_accepted(headers: Any, api_key: str | None) -> bool:
    """Whether a request with ``headers`` (a case-insensitive mapping, e.g. Starlette's
    ``Headers``) may be answered: always when ``api_key`` is None, else when it sends the
    key as ``Authorization: Bearer KEY`` or ``X-API-Key: KEY`` (compared in constant
    time)."""
    if api_key is None:
        return True
    auth = headers.get("authorization", "")
    given = auth[7:].strip() if auth[:7].lower() == "bearer " else headers.get("x-api-key", "")
    return bool(given) and hmac.compare_digest(given.encode(), api_key.encode())


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
    from in the ``X-Kgloom-Build`` header and in their body.
    """
    app = FastAPI(title="kgloom", docs_url=None, redoc_url=None,
                  summary="A kgloom index over HTTP: retrieval, search, chat, graph.")
    app.state.live = live

    def json_response(content: Any, build_id: str | None = None, status: int = 200) -> Response:
        body = json.dumps(_finite(content), ensure_ascii=False, default=str)
        headers = {BUILD_HEADER: build_id} if build_id else None
        return Response(body, status_code=status, media_type="application/json",
                        headers=headers)

    def error(status: int, message: str, kind: str = "invalid_request_error",
              path: str = "") -> Response:
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        body = ollama_api.error_line(message) if path in ollama_api.PATHS else \
            {"error": {"message": message, "type": kind}}  # Ollama's shape on its routes
        r = json_response(body, status=status)
        if headers:
            r.headers.update(headers)
        return r

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> Response:
        return error(exc.status, exc.message, exc.kind, request.url.path)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> Response:
        parts = [f"{'.'.join(str(x) for x in e.get('loc', ())[1:]) or 'request'}: {e.get('msg')}"
                 for e in exc.errors()]
        return error(400, "; ".join(parts) or "invalid request", path=request.url.path)

    @app.exception_handler(Exception)
    async def _fault(request: Request, exc: Exception) -> Response:  # a bug, in our shape
        return error(500, f"internal error ({type(exc).__name__}); the server log has "
                     "the traceback", "server_error", request.url.path)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        kind = "not_found" if exc.status_code == 404 else "invalid_request_error"
        return error(exc.status_code, str(exc.detail), kind, request.url.path)

    def require_key(request: Request) -> None:
        if not api_key_accepted(request.headers, api_key):
            raise ApiError(401, KEY_REQUIRED, "authentication_error")

    async def read_json(request: Request) -> Any:
        """The body as JSON (:func:`kgloom.serve.request_json.parse_json_body`): 413 over
        ``limits.max_body_bytes``, 400 naming what else is wrong with it."""
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limits.max_body_bytes:
            raise ApiError(413, f"the body has {declared} bytes; at most "
                           f"{limits.max_body_bytes}")
        chunks, size = [], 0
        async for part in request.stream():
            size += len(part)
            if size > limits.max_body_bytes:
                raise ApiError(413, f"the body is over {limits.max_body_bytes} bytes")
            chunks.append(part)
        try:
            return parse_json_body(b"".join(chunks), limits.max_json_depth)
        except JSONBodyError as exc:
            raise ApiError(400, str(exc)) from exc

    async def on_index(fn):
        """``fn(handle)`` in a worker thread on the current build; request faults the
        query side raises become 4xx."""
        try:
            return await run_in_threadpool(live.call, fn)
        except UnknownItemError as exc:
            raise ApiError(404, str(exc), "not_found") from exc
        except IndexFilesMissingError as exc:  # e.g. global search on a vector-only index
            raise ApiError(409, str(exc), "index_lacks_table") from exc
        except ModelFileError as exc:
            raise ApiError(503, str(exc), "model_unavailable") from exc
        except ValueError as exc:  # the query side's checks of a question or option
            raise ApiError(400, str(exc)) from exc

    guarded = [Depends(require_key)]

    # --- explorer ------------------------------------------------------------------
    @app.get("/", include_in_schema=False)
    async def explorer() -> Response:
        return FileResponse(STATIC_DIR / "explorer.html", media_type="text/html")

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    # --- API -----------------------------------------------------------------------
    @app.get("/api/health", dependencies=guarded)
    async def health() -> Response:
        h = await run_in_threadpool(live.current)  # a new build is opened, as by any request
        return json_response({"status": "ok", "build_id": h.build_id,
                              "opened_at": h.opened_at, "switches": live.switches,
                              "last_open_error": live.last_error, "model": model_id},
                             h.build_id)

    @app.get("/api/modes", dependencies=guarded)
    async def modes() -> Response:
        return json_response({"retrieval": list(RETRIEVAL_MODES), "search": list(SEARCH_MODES),
                              "options": {k: list(v) for k, v in OPTION_MODES.items()
                                          if k in QUERY_FIELDS},  # not the CLI's own
                              "limits": dataclasses.asdict(limits)})

    @app.post("/api/query", dependencies=guarded)
    async def query(request: Request) -> Response:
        q = parse_query(await read_json(request), limits)
        out = await on_index(lambda h: run_query(h, q))
        return json_response(out, out["info"].get("build_id"))

    async def graph_answer(fn) -> Response:
        """``{"build_id", **fn(handle)}`` of the current build, as JSON."""
        out = await on_index(lambda h: {"build_id": h.build_id, **fn(h)})
        return json_response(out, out["build_id"])

    @app.get("/api/text_units/{unit_id}", dependencies=guarded)
    async def text_unit(unit_id: str) -> Response:
        return await graph_answer(lambda h: h.graph.text_unit(unit_id))

    @app.get("/api/graph/entities", dependencies=guarded)
    async def find_entities(q: str = Query(..., min_length=1, max_length=200),
                            limit: int = Query(20, ge=1, le=200)) -> Response:
        return await graph_answer(lambda h: {"entities": h.graph.find_entities(q, limit)})

    @app.get("/api/graph/entities/{entity_id}", dependencies=guarded)
    async def entity(entity_id: str) -> Response:
        return await graph_answer(lambda h: h.graph.node(entity_id))

    @app.get("/api/graph/entities/{entity_id}/neighbourhood", dependencies=guarded)
    async def neighbourhood(entity_id: str, depth: int = Query(1, ge=0, le=limits.max_depth),
                            max_nodes: int = Query(100, ge=1, le=limits.max_nodes)) -> Response:
        def run(h: IndexHandle) -> dict[str, Any]:
            h.graph.node(entity_id)  # 404 for an unknown entity
            return h.graph.subgraph([entity_id], depth, max_nodes)

        return await graph_answer(run)

    @app.get("/api/graph/overview", dependencies=guarded)
    async def overview(level: int | None = Query(None, ge=0),
                       community: int | None = Query(None, ge=0),
                       max_nodes: int = Query(60, ge=1, le=limits.max_nodes),
                       max_communities: int = Query(12, ge=1, le=100)) -> Response:
        return await graph_answer(lambda h: h.graph.overview(level, max_nodes,
                                                             max_communities, community))

    @app.post("/api/graph/subgraph", dependencies=guarded)
    async def subgraph(request: Request) -> Response:
        body = await read_json(request)
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
        return await graph_answer(lambda h: h.graph.subgraph(
            lists["entity_ids"], depth, max_nodes, lists["text_unit_ids"]))

    @app.get("/api/graph/communities", dependencies=guarded)
    async def communities() -> Response:
        return await graph_answer(lambda h: {"levels": h.graph.levels,
                                                   "communities": h.graph.community_tree()})

    @app.get("/api/graph/communities/{community}", dependencies=guarded)
    async def community(community: int) -> Response:
        return await graph_answer(lambda h: h.graph.community(community))

    @app.get("/api/documents", dependencies=guarded)
    async def documents() -> Response:
        return await graph_answer(lambda h: h.graph.documents())

    # --- chat: OpenAI-compatible (/v1) and Ollama-compatible (/api/chat ...) ------------
    kit = RouteKit(model_id, limits, read_json, json_response, on_index, guarded)
    add_openai_routes(app, kit)
    add_ollama_routes(app, kit)

    if cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(cors_origins),
                           allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "X-API-Key", "Content-Type"],
                           expose_headers=[BUILD_HEADER])
    return app


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
