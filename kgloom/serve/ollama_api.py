"""Ollama's API shapes for ``kgloom serve``: the requests of ``/api/chat`` and
``/api/generate``, their NDJSON lines (streamed) or single object, ``/api/tags``,
``/api/show``, ``/api/ps`` and ``/api/version``. Pure functions over dicts; no Dagster,
no web framework (docs/serve.md, "Ollama").

The kgloom chat models (:data:`kgloom.serve.openai_chat.CHAT_MODELS`: ``kgloom``,
``kgloom-local`` ...) are listed as Ollama models; a name with Ollama's ``:latest`` tag
is the same model. A streamed answer is one line per text piece
(``{"message": {"role": "assistant", "content": piece}, "done": false}``), then a last
line with ``"done": true``, ``done_reason``, the durations in nanoseconds, the token
counts and a ``kgloom`` field (citations, build id: :attr:`ChatAnswer.record`). Errors
are ``{"error": message}``, with a 4xx status before the stream starts, or as the last
line of a stream that fails (the ollama client raises ``ResponseError`` with it).

Ollama's own fields that ask for a model's behaviour (``options``, ``format``,
``keep_alive``, ``tools``, ``think``, ``system``, ``template``, ``images``, ``raw``,
``context``, ``suffix``) are accepted and ignored: the answer is the index's.
"""

from __future__ import annotations

import hashlib
import time
from datetime import UTC, datetime
from typing import Any

from kgloom.serve.openai_chat import CHAT_MODELS, ChatRequestError, chat_turns, check_model

OLLAMA_VERSION = "0.12.0"  # the Ollama API these routes follow (clients read it)
PATHS = ("/api/tags", "/api/chat", "/api/generate", "/api/show", "/api/ps", "/api/version")


def created_at() -> str:
    """Now, as Ollama writes it (RFC 3339, UTC)."""
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _details(model: str) -> dict[str, Any]:
    mode, dynamic = CHAT_MODELS[model]
    return {"parent_model": "", "format": "kgloom", "family": "kgloom",
            "families": ["kgloom"], "parameter_size": "", "quantization_level": "",
            "kgloom_search": {"mode": mode, "dynamic": dynamic}}


def tags(model_id: str) -> dict[str, Any]:
    """``GET /api/tags``: every kgloom chat model; ``kgloom_llm`` names the model that
    writes the answers (``model_id``)."""
    now = created_at()
    return {"models": [{"name": m, "model": m, "modified_at": now, "size": 0,
                        "digest": hashlib.sha256(m.encode()).hexdigest(),
                        "details": _details(m), "kgloom_llm": model_id}
                       for m in CHAT_MODELS]}


def show(body: Any, model_id: str) -> dict[str, Any]:
    """``POST /api/show`` (``{"model": name}``; older clients send ``name``).

    Raises:
        ChatRequestError: 400 without a model, 404 for an unknown one.
    """
    if not isinstance(body, dict):
        raise ChatRequestError("the body must be a JSON object")
    model = check_model(body.get("model", body.get("name")))
    return {"license": "", "modelfile": f"# kgloom search over an index ({model})",
            "parameters": "", "template": "{{ .Prompt }}", "details": _details(model),
            "model_info": {"general.architecture": "kgloom", "kgloom.llm": model_id},
            "capabilities": ["completion"], "modified_at": created_at()}


def _stream_flag(body: dict[str, Any]) -> bool:
    stream = body.get("stream", True)  # Ollama streams unless told not to
    if not isinstance(stream, bool):
        raise ChatRequestError("'stream' must be true or false")
    return stream


def parse_chat(body: Any, max_messages: int) -> tuple[str, list[tuple[str, str]], bool]:
    """(model, turns, stream) of an ``/api/chat`` body: ``model``, ``messages`` (as
    OpenAI's: :func:`kgloom.serve.openai_chat.chat_turns`), ``stream`` (default true).

    Raises:
        ChatRequestError: naming the field that is wrong (404 for an unknown model).
    """
    if not isinstance(body, dict):
        raise ChatRequestError("the body must be a JSON object")
    model = check_model(body.get("model"))
    return model, chat_turns(body.get("messages"), max_messages), _stream_flag(body)


def parse_generate(body: Any) -> tuple[str, list[tuple[str, str]], bool]:
    """(model, turns, stream) of an ``/api/generate`` body: ``model``, ``prompt`` (the
    question; one user turn), ``stream`` (default true).

    Raises:
        ChatRequestError: naming the field that is wrong (404 for an unknown model).
    """
    if not isinstance(body, dict):
        raise ChatRequestError("the body must be a JSON object")
    model = check_model(body.get("model"))
    prompt = body.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise ChatRequestError("'prompt' must be a non-empty string: the question")
    return model, [("user", prompt)], _stream_flag(body)


def _text_field(kind: str, text: str) -> dict[str, Any]:
    if kind == "chat":
        return {"message": {"role": "assistant", "content": text}}
    return {"response": text}


def piece_line(kind: str, model: str, text: str) -> dict[str, Any]:
    """One streamed line of ``kind`` ``chat`` or ``generate`` carrying ``text``."""
    return {"model": model, "created_at": created_at(), **_text_field(kind, text),
            "done": False}


def done_line(kind: str, model: str, record: dict[str, Any], started: float,
              text: str = "") -> dict[str, Any]:
    """The last line of a streamed answer (``text`` ""), or the whole non-streamed
    answer (``text`` the answer): ``done`` true, ``done_reason`` ``stop``, durations in
    nanoseconds since ``started`` (``time.perf_counter()``), token counts, and the
    ``kgloom`` field (``record``: citations, build id)."""
    usage = record.get("usage") or {}
    total = int((time.perf_counter() - started) * 1e9)
    out = {"model": model, "created_at": created_at(), **_text_field(kind, text),
           "done": True, "done_reason": "stop", "total_duration": total,
           "load_duration": 0, "prompt_eval_count": int(usage.get("prompt_tokens", 0)),
           "prompt_eval_duration": 0, "eval_count": int(usage.get("completion_tokens", 0)),
           "eval_duration": total, "kgloom": record}
    if kind == "generate":
        out["context"] = []
    return out


def error_line(message: str) -> dict[str, str]:
    """An error, as Ollama sends it (a 4xx body, or the last line of a stream)."""
    return {"error": message}
