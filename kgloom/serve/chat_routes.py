"""The chat routes of ``kgloom serve``: OpenAI's ``/v1/models`` and
``/v1/chat/completions`` (:mod:`kgloom.serve.openai_chat`) and Ollama's ``/api/tags``,
``/api/chat``, ``/api/generate``, ``/api/show``, ``/api/ps`` and ``/api/version``
(:mod:`kgloom.serve.ollama_api`), every answer a
:class:`kgloom.serve.answer_stream.ChatAnswer`: the search first (its 4xx is the HTTP
status), then the text as it is written (from a model server, token by token), then its
citations and build id. A model server that fails mid-answer ends the stream with an
error event (OpenAI's error chunk, Ollama's error line); a non-streamed request gets a 502.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse
from starlette.concurrency import iterate_in_threadpool, run_in_threadpool

from kgloom.serve import ollama_api, openai_chat
from kgloom.serve.answer_stream import AnswerStreamError, ChatAnswer
from kgloom.serve.guards import BUILD_HEADER, ApiError, Limits, check_question
from kgloom.serve.openai_chat import CHAT_MODELS, ChatRequestError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RouteKit:
    """What the chat routes share with :func:`kgloom.serve.app.create_app`: the model
    id, the limits, and its helpers (the body read as bounded JSON, a JSON response
    with the build header, a call on the current build with the query side's errors
    as 4xx, the API key dependency)."""

    model_id: str
    limits: Limits
    read_json: Callable[[Request], Awaitable[Any]]
    json_response: Callable[..., Response]
    on_index: Callable[[Callable[[Any], Any]], Awaitable[Any]]
    guarded: list


async def prepare(kit: RouteKit, turns: list[tuple[str, str]], model: str) -> ChatAnswer:
    """The search of a chat request (the last user message within the question limit).

    Raises:
        ApiError: 400 for a question too long, and the 4xx of :meth:`RouteKit.on_index`.
    """
    check_question(turns[-1][1], kit.limits, "the last user message")
    mode, dynamic = CHAT_MODELS[model]
    return await kit.on_index(lambda h: ChatAnswer.prepare(
        h, turns, mode, dynamic, kit.limits.max_question_chars))


async def parse_and_prepare(kit: RouteKit, parse: Callable[[], tuple[str, Any, bool]]
                            ) -> tuple[str, bool, ChatAnswer, str | None]:
    """(model, stream, the prepared answer, its build id) of a chat request whose
    ``parse()`` gives (model, turns, stream).

    Raises:
        ApiError: the request's 4xx (:func:`_request_error`, :func:`prepare`).
    """
    try:
        model, turns, stream = parse()
    except ChatRequestError as exc:
        raise _request_error(exc) from exc
    answer = await prepare(kit, turns, model)
    return model, stream, answer, answer.result.info.get("build_id")


async def whole_text(answer: ChatAnswer) -> tuple[str, dict[str, Any]]:
    """(every piece of ``answer`` joined, its record), for a non-streamed reply.

    Raises:
        ApiError: 502 when the model server broke off the answer.
    """
    try:
        text = "".join([p async for p in iterate_in_threadpool(answer.pieces())])
    except AnswerStreamError as exc:
        raise ApiError(502, str(exc), "model_server_error") from exc
    assert answer.record is not None  # set once the last piece is taken
    return text, answer.record


async def pieces_or_error(answer: ChatAnswer) -> AsyncIterator[str | Exception]:
    """The pieces of ``answer``; a failure (of the model server, or a bug) comes last,
    as the exception itself, since the response's status is already sent. A client
    that goes away closes the pieces, and with them the model server's stream (an
    answer not finished is not cached)."""
    pieces = answer.pieces()
    try:
        async for piece in iterate_in_threadpool(pieces):
            yield piece
    except AnswerStreamError as exc:
        yield exc
    except Exception as exc:  # a bug: said in the stream, not a hang
        logger.exception("a chat answer failed")
        yield RuntimeError(f"internal error ({type(exc).__name__}); the server log has the "
                           "traceback")
    finally:
        # ValueError: still running in its thread; it ends with its next piece
        with contextlib.suppress(ValueError):
            await run_in_threadpool(pieces.close)


def _request_error(exc: ChatRequestError) -> ApiError:
    return ApiError(exc.status, str(exc), exc.kind)


def add_openai_routes(app: FastAPI, kit: RouteKit) -> None:
    """``GET /v1/models`` and ``POST /v1/chat/completions`` (streamed as server-sent
    events with ``"stream": true``)."""

    @app.get("/v1/models", dependencies=kit.guarded)
    async def models() -> Response:
        return kit.json_response(openai_chat.models_list(kit.model_id))

    @app.post("/v1/chat/completions", dependencies=kit.guarded)
    async def chat(request: Request) -> Response:
        body = await kit.read_json(request)
        model, stream, answer, build = await parse_and_prepare(
            kit, lambda: openai_chat.parse_chat_request(body, kit.limits.max_messages)[:3])
        if not stream:
            text, record = await whole_text(answer)
            return kit.json_response(openai_chat.chat_completion(model, text, record), build)
        cid = f"chatcmpl-{uuid.uuid4().hex}"

        def sse(obj: dict) -> str:
            return f"data: {json.dumps(obj, ensure_ascii=False, default=str)}\n\n"

        async def events() -> AsyncIterator[str]:
            yield sse(openai_chat.chunk(cid, model, {"role": "assistant", "content": ""}))
            async for piece in pieces_or_error(answer):
                if isinstance(piece, Exception):
                    yield sse(openai_chat.error_chunk(cid, model, str(piece)))
                    break
                yield sse(openai_chat.chunk(cid, model, {"content": piece}))
            else:
                assert answer.record is not None
                yield sse(openai_chat.closing_chunk(cid, model, answer.record))
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache",
                                          BUILD_HEADER: str(build)})


def add_ollama_routes(app: FastAPI, kit: RouteKit) -> None:
    """Ollama's API (:mod:`kgloom.serve.ollama_api`): ``GET /api/version``,
    ``/api/tags``, ``/api/ps``, ``POST /api/show``, ``/api/chat``, ``/api/generate``
    (streamed as NDJSON unless ``"stream": false``)."""

    @app.get("/api/version", dependencies=kit.guarded)
    async def version() -> Response:
        return kit.json_response({"version": ollama_api.OLLAMA_VERSION})

    @app.get("/api/tags", dependencies=kit.guarded)
    async def tags() -> Response:
        return kit.json_response(ollama_api.tags(kit.model_id))

    @app.get("/api/ps", dependencies=kit.guarded)
    async def running() -> Response:
        return kit.json_response({"models": []})  # nothing to load or unload

    @app.post("/api/show", dependencies=kit.guarded)
    async def show(request: Request) -> Response:
        try:
            return kit.json_response(ollama_api.show(await kit.read_json(request),
                                                     kit.model_id))
        except ChatRequestError as exc:
            raise _request_error(exc) from exc

    @app.post("/api/chat", dependencies=kit.guarded)
    async def chat(request: Request) -> Response:
        return await ollama_answer(kit, await kit.read_json(request), "chat")

    @app.post("/api/generate", dependencies=kit.guarded)
    async def generate(request: Request) -> Response:
        return await ollama_answer(kit, await kit.read_json(request), "generate")


async def ollama_answer(kit: RouteKit, body: Any, kind: str) -> Response:
    """The answer to an ``/api/chat`` (``kind`` ``chat``) or ``/api/generate`` body."""
    started = time.perf_counter()
    model, stream, answer, build = await parse_and_prepare(
        kit, lambda: (ollama_api.parse_chat(body, kit.limits.max_messages)
                      if kind == "chat" else ollama_api.parse_generate(body)))
    if not stream:
        text, record = await whole_text(answer)
        return kit.json_response(ollama_api.done_line(kind, model, record, started, text),
                                 build)

    def line(obj: dict) -> str:
        return json.dumps(obj, ensure_ascii=False, default=str) + "\n"

    async def lines() -> AsyncIterator[str]:
        async for piece in pieces_or_error(answer):
            if isinstance(piece, Exception):
                yield line(ollama_api.error_line(str(piece)))
                return
            yield line(ollama_api.piece_line(kind, model, piece))
        assert answer.record is not None
        yield line(ollama_api.done_line(kind, model, answer.record, started))

    return StreamingResponse(lines(), media_type="application/x-ndjson",
                             headers={BUILD_HEADER: str(build)})
