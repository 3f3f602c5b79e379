"""OpenAI's chat-completions shapes for ``kgloom serve``: the request a client sends,
the answer with its sources, and the server-sent events of a streamed answer. Pure
functions over dicts; no Dagster, no web framework.

The chat endpoint answers the conversation's last user message with
:class:`kgloom.serve.answer_stream.ChatAnswer` (earlier user turns join the retrieval
query). The model a client picks chooses the search (:data:`CHAT_MODELS`). The reply's
text is the answer followed by its sources (``[T3] a-christmas-carol: "Marley was dead
..."``), so any chat UI shows them; ``system_fingerprint`` is ``kgloom-build-<build
id>``, and a ``kgloom`` field carries the route, the citations with what each points to,
and the build id.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

# model id a client picks -> (search mode, dynamic community selection)
CHAT_MODELS: dict[str, tuple[str, bool]] = {
    "kgloom": ("auto", False),  # routed: local, global or direct, by the question
    "kgloom-local": ("local", False),
    "kgloom-global": ("global", False),
    "kgloom-global-dynamic": ("global", True),
    "kgloom-direct": ("direct", False),
}
SOURCE_CHARS = 160  # characters of a source's text shown under the answer


class ChatRequestError(ValueError):
    """A chat request the endpoint cannot answer (HTTP 400, or 404 for an unknown model:
    ``status``); the message says why."""

    def __init__(self, message: str, status: int = 400, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.kind = status, kind


def _text(content: Any) -> str | None:
    """The text of a message's ``content``: a string, or OpenAI's list of parts (the
    ``text`` parts joined by newlines); None for anything else."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        texts = [p for p in parts if isinstance(p, str)]
        if texts and len(texts) == len(parts):  # every text part holds a string
            return "\n".join(texts)
    return None


def chat_turns(messages: Any, max_messages: int) -> list[tuple[str, str]]:
    """The conversation of a chat request's ``messages``: (role, text) of each ``user``
    and ``assistant`` message with text, in order (system and tool messages, and earlier
    messages without text, are left out); the last is the last user message, the
    question. Ollama's ``/api/chat`` messages have the same shape.

    Raises:
        ChatRequestError: not 1..``max_messages`` objects with a ``role``, no user
            message, or a last user message without text.
    """
    if not isinstance(messages, list) or not messages:
        raise ChatRequestError("'messages' must be a non-empty list of {role, content}")
    if len(messages) > max_messages:
        raise ChatRequestError(f"'messages' holds {len(messages)} messages; at most "
                               f"{max_messages}")
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
        raise ChatRequestError("each message must be an object with a 'role'")
    last = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=None)
    if last is None:
        raise ChatRequestError("no message has role 'user': the last user message is the "
                               "question")
    question = _text(messages[last].get("content"))
    if question is None or not question.strip():
        raise ChatRequestError("the last user message's 'content' must be a non-empty "
                               "string (or a list of text parts)")
    turns = [(m["role"], _text(m.get("content"))) for m in messages[:last]
             if m["role"] in ("user", "assistant")]
    return [(r, t) for r, t in turns if t and t.strip()] + [("user", question)]


def parse_chat_request(body: Any, max_messages: int
                       ) -> tuple[str, list[tuple[str, str]], bool, bool]:
    """(model, turns, stream, dynamic) of a ``/v1/chat/completions`` body; the search
    mode is ``CHAT_MODELS[model][0]``; ``turns`` is :func:`chat_turns` (the last is the
    question).

    Args:
        body: the parsed JSON body: ``model`` (one of :data:`CHAT_MODELS`), ``messages``
            (1..``max_messages`` objects with ``role`` and ``content``; the last with
            role ``user`` is the question), ``stream`` (bool, default False); other
            OpenAI fields (temperature, max_tokens, ...) are accepted and ignored.

    Raises:
        ChatRequestError: naming the field that is wrong (status 404 for an unknown model).
    """
    if not isinstance(body, dict):
        raise ChatRequestError("the body must be a JSON object")
    model = check_model(body.get("model"))
    turns = chat_turns(body.get("messages"), max_messages)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ChatRequestError("'stream' must be true or false")
    return model, turns, stream, CHAT_MODELS[model][1]


def check_model(model: Any) -> str:
    """``model`` when it is one of :data:`CHAT_MODELS` (a trailing ``:latest``, which
    Ollama clients add, is dropped).

    Raises:
        ChatRequestError: 400 when it is no string, 404 for an unknown model.
    """
    if not isinstance(model, str) or not model:
        raise ChatRequestError(f"'model' must be one of {', '.join(CHAT_MODELS)}")
    model = model.removesuffix(":latest")
    if model not in CHAT_MODELS:
        raise ChatRequestError(f"the model {model!r} does not exist; this server has "
                               f"{', '.join(CHAT_MODELS)}", 404, "model_not_found")
    return model


def models_list(model_id: str) -> dict[str, Any]:
    """``/v1/models``: every id of :data:`CHAT_MODELS`; ``kgloom_llm`` names the model
    that writes the answers (``model_id``, e.g. a GGUF's SHA-256 or a server's model)."""
    return {"object": "list", "data": [
        {"id": m, "object": "model", "created": 0, "owned_by": "kgloom",
         "kgloom_search": {"mode": mode, "dynamic": dynamic}, "kgloom_llm": model_id}
        for m, (mode, dynamic) in CHAT_MODELS.items()]}


def answer_line(result: dict[str, Any]) -> str:
    """The answer of ``result`` (:meth:`kgloom.query.searcher.SearchResult.to_dict`), or
    why there is none (the model could not be asked, its reply failed its checks, or
    nothing in the index matched)."""
    answer = result.get("answer")
    if answer is None:
        failed = result.get("failures") or []
        # a call that failed (server down, HTTP 500) has no reply to check
        calls = [f for f in failed if str(f.get("reason", "")).startswith("LLM call failed")]
        answer = (f"No answer: the model could not be asked ({calls[-1]['reason']}: "
                  f"{calls[-1].get('detail') or 'no detail'})." if calls else
                  "No answer: the model's reply failed its checks." if failed else
                  "No answer: nothing in the index matched the question.")
    return answer


def sources_text(result: dict[str, Any]) -> str:
    """What follows the answer (each part after a blank line): the relevance notice when
    nothing in the index is relevant to the question (``info["notice"]``), ``Sources:``
    with one line per cited source, the model notice when there is one; "" for none."""
    lines: list[str] = []
    relevance = (result.get("info") or {}).get("notice")
    if relevance:
        lines += ["", f"Note: {relevance}"]
    if result.get("cited"):
        lines += ["", "Sources:"]
        for c in result["cited"]:
            text = " ".join(str(c.get("text", "")).split())
            text = text.removeprefix(f"[{c['ref']}]").strip()
            if len(text) > SOURCE_CHARS:
                text = text[:SOURCE_CHARS].rstrip() + " ..."
            lines.append(f"[{c['ref']}] ({c['kind']} {c['id']}) {text}")
    if result.get("notice"):
        lines += ["", f"Note: {result['notice']}"]
    return "\n" + "\n".join(lines) if lines else ""


def answer_text(result: dict[str, Any]) -> str:
    """The reply a person reads: :func:`answer_line`, then :func:`sources_text`.

    Args:
        result: :meth:`kgloom.query.searcher.SearchResult.to_dict`.
    """
    return answer_line(result) + sources_text(result)


def kgloom_extension(result: dict[str, Any]) -> dict[str, Any]:
    """The ``kgloom`` field of a reply: ``build_id``, ``route``, ``route_reason``,
    ``citations``, ``cited`` (ref, kind, id, text), ``notice`` (the model's),
    ``low_relevance`` and ``relevance_notice`` (``info["low_relevance"]`` and
    ``info["notice"]``: nothing in the index is relevant to the question)."""
    info = result.get("info") or {}
    return {"build_id": info.get("build_id"), "route": result.get("route"),
            "route_reason": result.get("route_reason"),
            "citations": result.get("citations", []), "cited": result.get("cited", []),
            "notice": result.get("notice"), "low_relevance": info.get("low_relevance"),
            "relevance_notice": info.get("notice")}


def _fingerprint(build_id: Any) -> str:
    return f"kgloom-build-{build_id}"


def usage(result: dict[str, Any]) -> dict[str, int]:
    """OpenAI's ``usage`` of a search result: the prompt and completion tokens of every
    model call it made."""
    total = ((result.get("info") or {}).get("llm") or {}).get("total") or {}
    p, c = int(total.get("prompt_tokens", 0)), int(total.get("completion_tokens", 0))
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def chat_completion(model: str, text: str, record: dict[str, Any]) -> dict[str, Any]:
    """The non-streamed ``chat.completion`` object answering with ``text`` and
    ``record`` (:attr:`kgloom.serve.answer_stream.ChatAnswer.record`: the ``kgloom``
    field, with ``usage``)."""
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
            "created": int(time.time()), "model": model,
            "system_fingerprint": _fingerprint(record.get("build_id")),
            "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                         "message": {"role": "assistant", "content": text}}],
            "usage": record.get("usage"), "kgloom": record}


def chunk(completion_id: str, model: str, delta: dict[str, Any],
          finish_reason: str | None = None, **extra: Any) -> dict[str, Any]:
    """One ``chat.completion.chunk`` of a streamed reply."""
    return {"id": completion_id, "object": "chat.completion.chunk",
            "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason,
                         "logprobs": None}], **extra}


def closing_chunk(completion_id: str, model: str, record: dict[str, Any]) -> dict[str, Any]:
    """The last chunk of a streamed reply: ``finish_reason`` ``stop``, the usage and the
    ``kgloom`` field (``record``: citations, build id)."""
    return chunk(completion_id, model, {}, "stop",
                 system_fingerprint=_fingerprint(record.get("build_id")),
                 usage=record.get("usage"), kgloom=record)


def error_chunk(completion_id: str, model: str, message: str,
                kind: str = "server_error") -> dict[str, Any]:
    """A chunk that ends a stream with an error: OpenAI's ``error`` field (the openai
    client raises ``APIError`` with ``message``) and the message as text for clients
    that only show the content."""
    return chunk(completion_id, model, {"content": f"\n\nerror: {message}"}, "stop",
                 error={"message": message, "type": kind})
