"""What every route group of ``kgloom serve`` shares (:func:`kgloom.serve.app.create_app`
assembles them): JSON responses with the build header, the error shape and the exception
handlers that answer in it, the API key dependency, the body read as bounded JSON and a
call on the current build with the query side's request faults as 4xx.

The routes read what the application was created with from ``request.app.state``:
``live`` (the :class:`kgloom.serve.live_index.LiveIndex`), ``model_id``, ``api_key``
and ``limits`` (:class:`kgloom.serve.guards.Limits`).
"""

from __future__ import annotations

import hmac
import json
import math
from collections.abc import Callable
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from kgloom.llm import ModelFileError
from kgloom.query.retriever import IndexFilesMissingError
from kgloom.serve import ollama_api
from kgloom.serve.graph_view import UnknownItemError
from kgloom.serve.guards import BUILD_HEADER, ApiError, Limits
from kgloom.serve.request_json import JSONBodyError, parse_json_body

KEY_REQUIRED = ("a valid API key is required: send 'Authorization: Bearer KEY' or "
                "'X-API-Key: KEY'")


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by None (JSON has neither)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def json_response(content: Any, build_id: str | None = None, status: int = 200) -> Response:
    """``content`` as JSON (NaN and infinities as null), naming ``build_id`` in the
    build header when given."""
    body = json.dumps(finite(content), ensure_ascii=False, default=str)
    headers = {BUILD_HEADER: build_id} if build_id else None
    return Response(body, status_code=status, media_type="application/json",
                    headers=headers)


def error_response(status: int, message: str, kind: str = "invalid_request_error",
                   path: str = "") -> Response:
    """An error: ``{"error": {"message", "type"}}``, Ollama's ``{"error": message}`` on
    its routes (``path``); a 401 asks for a bearer token."""
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    body = ollama_api.error_line(message) if path in ollama_api.PATHS else \
        {"error": {"message": message, "type": kind}}  # Ollama's shape on its routes
    r = json_response(body, status=status)
    if headers:
        r.headers.update(headers)
    return r


async def _api_error(request: Request, exc: ApiError) -> Response:
    return error_response(exc.status, exc.message, exc.kind, request.url.path)


async def _validation(request: Request, exc: RequestValidationError) -> Response:
    parts = [f"{'.'.join(str(x) for x in e.get('loc', ())[1:]) or 'request'}: {e.get('msg')}"
             for e in exc.errors()]
    return error_response(400, "; ".join(parts) or "invalid request", path=request.url.path)


async def _fault(request: Request, exc: Exception) -> Response:  # a bug, in our shape
    return error_response(500, f"internal error ({type(exc).__name__}); the server log has "
                          "the traceback", "server_error", request.url.path)


async def _http(request: Request, exc: StarletteHTTPException) -> Response:
    kind = "not_found" if exc.status_code == 404 else "invalid_request_error"
    return error_response(exc.status_code, str(exc.detail), kind, request.url.path)


def add_error_handlers(app: FastAPI) -> None:
    """Answer every error of ``app`` in the error shape (:func:`error_response`): an
    :class:`ApiError` with its status, a request FastAPI refuses with a 400 naming the
    bad parameters, Starlette's 404 / 405, and a bug with a 500."""
    app.exception_handler(ApiError)(_api_error)
    app.exception_handler(RequestValidationError)(_validation)
    app.exception_handler(Exception)(_fault)
    app.exception_handler(StarletteHTTPException)(_http)


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


def require_key(request: Request) -> None:
    """The API key dependency: a 401 unless the request carries the application's key
    (:func:`api_key_accepted`)."""
    if not api_key_accepted(request.headers, request.app.state.api_key):
        raise ApiError(401, KEY_REQUIRED, "authentication_error")


GUARDED = [Depends(require_key)]  # the dependencies of every /api and /v1 route


def limits_of(request: Request) -> Limits:
    """The :class:`Limits` of the application answering ``request``."""
    return request.app.state.limits


async def read_json(request: Request) -> Any:
    """The body as JSON (:func:`kgloom.serve.request_json.parse_json_body`): 413 over
    ``limits.max_body_bytes``, 400 naming what else is wrong with it."""
    limits = limits_of(request)
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


async def on_index(request: Request, fn: Callable[[Any], Any]) -> Any:
    """``fn(handle)`` in a worker thread on the current build of the application's live
    index; request faults the query side raises become 4xx."""
    try:
        return await run_in_threadpool(request.app.state.live.call, fn)
    except UnknownItemError as exc:
        raise ApiError(404, str(exc), "not_found") from exc
    except IndexFilesMissingError as exc:  # e.g. global search on a vector-only index
        raise ApiError(409, str(exc), "index_lacks_table") from exc
    except ModelFileError as exc:
        raise ApiError(503, str(exc), "model_unavailable") from exc
    except ValueError as exc:  # the query side's checks of a question or option
        raise ApiError(400, str(exc)) from exc
