"""The chat routes of ``kgloom serve``: OpenAI's ``/v1/models`` and
``/v1/chat/completions`` (:mod:`kgloom.serve.openai_chat`) and Ollama's ``/api/tags``,
``/api/chat``, ``/api/generate``, ``/api/show``, ``/api/ps`` and ``/api/version``
(:mod:`kgloom.serve.ollama_api`), every answer a
:class:`kgloom.serve.answer_stream.ChatAnswer`: the search first (its 4xx is the HTTP
status), then the text as it is written (from a model server, token by token), then its
citations and build id. A model server that fails mid-answer ends the stream with an
error event (OpenAI's error chunk, Ollama's error line); a non-streamed request gets a 502.
The routes read the model id and the limits from ``request.app.state``
(:mod:`kgloom.serve.route_kit`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from starlette.concurrency import iterate_in_threadpool, run_in_threadpool

from kgloom.serve import ollama_api, openai_chat
from kgloom.serve.answer_stream import AnswerStreamError, ChatAnswer
from kgloom.serve.guards import BUILD_HEADER, ApiError, check_question
from kgloom.serve.openai_chat import CHAT_MODELS, ChatRequestError
from kgloom.serve.route_kit import GUARDED, json_response, limits_of, on_index, read_json

logger = logging.getLogger(__name__)


async def prepare(request: Request, turns: list[tuple[str, str]], model: str) -> ChatAnswer:
    """The search of a chat request (the last user message within the question limit).

    Raises:
        ApiError: 400 for a question too long, and the 4xx of
            :func:`kgloom.serve.route_kit.on_index`.
    """
    limits = limits_of(request)
    check_question(turns[-1][1], limits, "the last user message")
    mode, dynamic = CHAT_MODELS[model]
    return await on_index(request, lambda h: ChatAnswer.prepare(
        h, turns, mode, dynamic, limits.max_question_chars))


async def parse_and_prepare(request: Request, parse: Callable[[], tuple[str, Any, bool]]
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
    answer = await prepare(request, turns, model)
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


# OpenAI's API: ``GET /v1/models`` and ``POST /v1/chat/completions`` (streamed as
# server-sent events with ``"stream": true``)
openai_router = APIRouter(dependencies=GUARDED)


@openai_router.get("/v1/models")
async def models(request: Request) -> Response:
    return json_response(openai_chat.models_list(request.app.state.model_id))


@openai_router.post("/v1/chat/completions")
async def chat(request: Request) -> Response:
    body = await read_json(request)
    max_messages = limits_of(request).max_messages
    model, stream, answer, build = await parse_and_prepare(
        request, lambda: openai_chat.parse_chat_request(body, max_messages)[:3])
    if not stream:
        text, record = await whole_text(answer)
        return json_response(openai_chat.chat_completion(model, text, record), build)
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


# Ollama's API (:mod:`kgloom.serve.ollama_api`): ``GET /api/version``, ``/api/tags``,
# ``/api/ps``, ``POST /api/show``, ``/api/chat``, ``/api/generate`` (streamed as NDJSON
# unless ``"stream": false``)
ollama_router = APIRouter(dependencies=GUARDED)


@ollama_router.get("/api/version")
async def version() -> Response:
    return json_response({"version": ollama_api.OLLAMA_VERSION})


@ollama_router.get("/api/tags")
async def tags(request: Request) -> Response:
    return json_response(ollama_api.tags(request.app.state.model_id))


@ollama_router.get("/api/ps")
async def running() -> Response:
    return json_response({"models": []})  # nothing to load or unload


@ollama_router.post("/api/show")
async def show(request: Request) -> Response:
    try:
        return json_response(ollama_api.show(await read_json(request),
                                             request.app.state.model_id))
    except ChatRequestError as exc:
        raise _request_error(exc) from exc


@ollama_router.post("/api/chat", name="chat")
async def ollama_chat(request: Request) -> Response:
    return await ollama_answer(request, await read_json(request), "chat")


@ollama_router.post("/api/generate")
async def generate(request: Request) -> Response:
    return await ollama_answer(request, await read_json(request), "generate")


async def ollama_answer(request: Request, body: Any, kind: str) -> Response:
    """The answer to an ``/api/chat`` (``kind`` ``chat``) or ``/api/generate`` body."""
    started = time.perf_counter()
    max_messages = limits_of(request).max_messages
    model, stream, answer, build = await parse_and_prepare(
        request, lambda: (ollama_api.parse_chat(body, max_messages)
                          if kind == "chat" else ollama_api.parse_generate(body)))
    if not stream:
        text, record = await whole_text(answer)
        return json_response(ollama_api.done_line(kind, model, record, started, text), build)

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
