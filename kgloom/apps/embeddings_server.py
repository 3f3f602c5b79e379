"""The index's embedder as an OpenAI-compatible embeddings endpoint, for Microsoft
GraphRAG's query engine (``kgloom serve-embeddings``; docs/graphrag.md). No Dagster.

GraphRAG embeds each question with its configured embedding model and compares it with the
index's stored vectors, so that model must be the one that embedded the index: this server
answers ``POST /v1/embeddings`` with :class:`kgloom.embedding.sentence_embedder.Embedder`
(opened and checked against the index's ``lancedb/embedder.json`` by
:class:`kgloom.query.retriever.Retriever`, the same model, windows and unit-length
normalisation as the index). ``GET /v1/models`` lists it. Read-only: nothing is written.

Optionally (``chat_upstream``) it also passes ``POST /v1/chat/completions`` through to a
chat server, rewriting OpenAI's structured-output form ``{"type": "json_schema",
"json_schema": {"schema": S}}`` into llama-cpp-python's ``{"type": "json_object",
"schema": S}`` (the same grammar-constrained decoding): llama-cpp-python's server refuses
the first with HTTP 500 and GraphRAG's DRIFT primer sends it. Everything else is passed
unchanged.

Built on Starlette and uvicorn (both come with dagster-webserver); the pass-through uses
the standard library's urllib.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import numpy as np

from kgloom.serve.request_json import JSONBodyError, parse_json_body

MAX_INPUTS = 2048  # inputs per request (OpenAI's limit for /v1/embeddings)


class EmbeddingRequestError(ValueError):
    """A request body the endpoint cannot answer (HTTP 400; the message says why)."""


def parse_embedding_request(body: Any) -> tuple[list[str], str]:
    """(texts, encoding_format) of an OpenAI ``/v1/embeddings`` request body.

    ``input`` is a string or a list of 1..:data:`MAX_INPUTS` strings; token-id arrays are
    refused (this endpoint embeds text with its own tokenizer). ``encoding_format`` is
    ``float`` (default) or ``base64`` (what the ``openai`` Python client asks for).

    Raises:
        EmbeddingRequestError: naming the field that is wrong.
    """
    if not isinstance(body, dict) or "input" not in body:
        raise EmbeddingRequestError("the body must be a JSON object with an 'input' field")
    raw = body["input"]
    texts = [raw] if isinstance(raw, str) else raw
    if not isinstance(texts, list) or not texts:
        raise EmbeddingRequestError("'input' must be a string or a non-empty list of strings")
    if not all(isinstance(t, str) for t in texts):
        raise EmbeddingRequestError("'input' must hold strings (token-id arrays are not "
                                    "accepted: this endpoint tokenizes with the index's "
                                    "embedder)")
    if len(texts) > MAX_INPUTS:
        raise EmbeddingRequestError(f"'input' holds {len(texts)} strings; at most "
                                    f"{MAX_INPUTS} per request")
    fmt = body.get("encoding_format") or "float"
    if fmt not in ("float", "base64"):
        raise EmbeddingRequestError(f"'encoding_format' must be 'float' or 'base64', got "
                                    f"{fmt!r}")
    return texts, fmt


def embedding_response(vectors: np.ndarray, model: str, fmt: str,
                       prompt_tokens: int) -> dict[str, Any]:
    """OpenAI's embeddings response for ``vectors`` (n, dim): ``base64`` is the
    little-endian float32 bytes of each vector, as OpenAI encodes them."""
    vecs = np.asarray(vectors, dtype="<f4")
    data = [{"object": "embedding", "index": i,
             "embedding": (base64.b64encode(v.tobytes()).decode("ascii") if fmt == "base64"
                           else [float(x) for x in v])} for i, v in enumerate(vecs)]
    return {"object": "list", "data": data, "model": model,
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}}


def llama_cpp_response_format(body: Any) -> Any:
    """``body`` with a ``json_schema`` response_format rewritten into llama-cpp-python's
    ``json_object`` + ``schema`` form (:meth:`kgloom.llm.http.OpenAIChatBackend._response_format`);
    any other body (one that is no object included: the chat server answers it) is
    returned unchanged."""
    from kgloom.llm.http import OpenAIChatBackend

    fmt = body.get("response_format") if isinstance(body, dict) else None
    if not (isinstance(fmt, dict) and fmt.get("type") == "json_schema"):
        return body
    spec = fmt.get("json_schema")
    schema = (spec.get("schema") if isinstance(spec, dict) else None) or {"type": "object"}
    return {**body, "response_format": OpenAIChatBackend._response_format("json_object", schema)}


def create_app(embedder: Any, model_id: str, chat_upstream: str | None = None,
               chat_timeout_s: float = 900.0):
    """The Starlette application.

    Args:
        embedder: has ``embed(texts, threads=...) -> (n, dim) float32`` and ``tokenizer``
            (a :class:`kgloom.embedding.sentence_embedder.Embedder`).
        model_id: the embedding model id listed by ``/v1/models`` and echoed in replies.
        chat_upstream: base URL of a chat server (e.g. ``http://127.0.0.1:8000``) whose
            ``/v1/chat/completions`` is passed through (see module doc); None: 404.
        chat_timeout_s: seconds one passed-through chat request may take.

    Routes: ``GET /v1/models``, ``POST /v1/embeddings`` (400 with an OpenAI-style
    ``{"error": {"message", "type"}}`` on a bad body), ``POST /v1/chat/completions``.

    ``app.state.chat_calls`` lists one dict per passed-through chat call: ``status``
    (int), ``seconds`` (float), ``response_format`` (the type sent upstream, or None),
    ``prompt_tokens`` / ``completion_tokens`` (the server's ``usage``; None on an error),
    ``error`` (the server's message, when not 200).
    """
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    lock = threading.Lock()  # one forward pass at a time: torch threads are set per call
    upstream = chat_upstream.rstrip("/").removesuffix("/v1") if chat_upstream else None

    async def models(request: Request) -> JSONResponse:
        data = [{"id": model_id, "object": "model", "owned_by": "kgloom"}]
        if upstream:
            data += await run_in_threadpool(_upstream_models, upstream)
        return JSONResponse({"object": "list", "data": data})

    async def embeddings(request: Request) -> JSONResponse:
        try:
            texts, fmt = parse_embedding_request(parse_json_body(await request.body()))
        except (EmbeddingRequestError, JSONBodyError) as exc:
            return _error(400, str(exc))
        vectors, tokens = await run_in_threadpool(_embed_counting_tokens, embedder, lock,
                                                  texts)
        return JSONResponse(embedding_response(vectors, model_id, fmt, tokens))

    app = Starlette(routes=[Route("/v1/models", models, methods=["GET"]),
                            Route("/v1/embeddings", embeddings, methods=["POST"]),
                            Route("/v1/chat/completions", _chat_endpoint(upstream,
                                                                         chat_timeout_s),
                                  methods=["POST"])])
    app.state.chat_calls = []
    return app


def _error(status: int, message: str, kind: str = "invalid_request_error"):
    """An OpenAI-style error response: ``{"error": {"message", "type"}}`` with HTTP
    ``status``."""
    from starlette.responses import JSONResponse

    return JSONResponse({"error": {"message": message, "type": kind}}, status_code=status)


def _embed_counting_tokens(embedder: Any, lock: threading.Lock, texts: list[str]
                           ) -> tuple[np.ndarray, int]:
    """(the (n, dim) float32 vectors of ``texts``, their tokens with special tokens) by
    ``embedder``, one forward pass at a time (``lock``), on one thread."""
    with lock:
        tok = embedder.tokenizer
        if hasattr(tok, "encode_batch"):  # a `tokenizers.Tokenizer` (the numpy embedder)
            tokens = sum(len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=True))
        else:  # a transformers tokenizer (the sentence-transformers embedder)
            tokens = sum(len(ids) for ids in tok(
                texts, add_special_tokens=True, verbose=False)["input_ids"])
        return embedder.embed(texts, threads=1), tokens


def _upstream_models(base: str) -> list[dict]:
    """The models the chat server at ``base`` lists (``GET /v1/models``); [] when it does
    not answer or answers with no list."""
    try:
        with urllib.request.urlopen(base + "/v1/models", timeout=10) as r:
            return [m for m in json.loads(r.read()).get("data", []) if isinstance(m, dict)]
    except (OSError, ValueError, AttributeError):
        return []  # the chat server is down: list what this server serves itself


def _post_chat(base: str, raw: bytes, auth: str, timeout_s: float) -> tuple[int, bytes, str]:
    """POST the JSON body ``raw`` to the chat server's ``/v1/chat/completions`` with the
    ``Authorization`` header ``auth``.

    Returns:
        (HTTP status, response body, its content type); the server's own HTTP errors
        are returned as they are.

    Raises:
        OSError: the server did not answer (refused, timed out after ``timeout_s``).
    """
    req = urllib.request.Request(base + "/v1/chat/completions", data=raw, headers={
        "Content-Type": "application/json", "Authorization": auth})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return r.status, r.read(), r.headers.get("Content-Type", "application/json")
    except urllib.error.HTTPError as exc:  # the server's own error: passed on as is
        return exc.code, exc.read(), exc.headers.get("Content-Type", "application/json")


def _chat_endpoint(upstream: str | None, timeout_s: float):
    """The ``POST /v1/chat/completions`` endpoint: the request passed through to the
    chat server at ``upstream`` (404 without one; 400 on a body that is no JSON; 502
    when the server does not answer), its ``json_schema`` response format rewritten
    (:func:`llama_cpp_response_format`); each call is logged in the app's
    ``state.chat_calls`` (:func:`_chat_call`)."""
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import Response

    async def chat(request: Request) -> Response:
        if not upstream:
            return _error(404, "no chat model here: start serve-embeddings with "
                          "--chat-upstream URL to pass chat completions through", "not_found")
        try:
            body = llama_cpp_response_format(parse_json_body(await request.body()))
        except JSONBodyError as exc:
            return _error(400, str(exc))
        t0 = time.perf_counter()
        try:
            status, out, kind = await run_in_threadpool(
                _post_chat, upstream, json.dumps(body).encode(),
                request.headers.get("authorization", ""), timeout_s)
        except OSError as exc:
            return _error(502, f"chat server {upstream} did not answer: {exc}",
                          "upstream_error")
        request.app.state.chat_calls.append(
            _chat_call(status, out, time.perf_counter() - t0, body))
        return Response(out, status_code=status, media_type=kind)

    return chat


def _chat_call(status: int, out: bytes, seconds: float, body: dict) -> dict[str, Any]:
    """One row of ``app.state.chat_calls`` (see :func:`create_app`)."""
    row: dict[str, Any] = {"status": status, "seconds": round(seconds, 3),
                           "response_format": (body.get("response_format") or {}).get("type"),
                           "prompt_tokens": None, "completion_tokens": None}
    try:
        reply = json.loads(out)
    except ValueError:
        reply = {}
    if status == 200 and isinstance(reply, dict):
        usage = reply.get("usage") or {}
        row.update(prompt_tokens=usage.get("prompt_tokens"),
                   completion_tokens=usage.get("completion_tokens"))
    else:
        err = reply.get("error") if isinstance(reply, dict) else None
        row["error"] = (err.get("message") if isinstance(err, dict) else str(err or out[:300]))
    return row
