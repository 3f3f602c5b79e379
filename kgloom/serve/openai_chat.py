"""OpenAI's chat-completions shapes for ``kgloom serve``: the request a client sends,
the answer with its sources, and the server-sent events of a streamed answer. Pure
functions over dicts; no Dagster, no web framework.

The chat endpoint answers the last user message with :meth:`kgloom.query.searcher.Searcher.search`
(earlier turns are not read: a search answers one question from the index). The model a
client picks chooses the search (:data:`CHAT_MODELS`). The reply's text is the answer
followed by its sources (``[T3] a-christmas-carol: "Marley was dead ..."``), so any chat
UI shows them; ``system_fingerprint`` is ``kgloom-build-<build id>``, and a ``kgloom``
field carries the route, the citations with what each points to, and the build id.
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


def parse_chat_request(body: Any, max_messages: int) -> tuple[str, str, bool, bool]:
    """(model, question, stream, dynamic) of a ``/v1/chat/completions`` body; the search
    mode is ``CHAT_MODELS[model][0]``.

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
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ChatRequestError(f"'model' must be one of {', '.join(CHAT_MODELS)}")
    if model not in CHAT_MODELS:
        raise ChatRequestError(f"the model {model!r} does not exist; this server has "
                               f"{', '.join(CHAT_MODELS)}", 404, "model_not_found")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ChatRequestError("'messages' must be a non-empty list of {role, content}")
    if len(messages) > max_messages:
        raise ChatRequestError(f"'messages' holds {len(messages)} messages; at most "
                               f"{max_messages}")
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
        raise ChatRequestError("each message must be an object with a 'role'")
    users = [m for m in messages if m["role"] == "user"]
    if not users:
        raise ChatRequestError("no message has role 'user': the last user message is the "
                               "question")
    question = _text(users[-1].get("content"))
    if question is None or not question.strip():
        raise ChatRequestError("the last user message's 'content' must be a non-empty "
                               "string (or a list of text parts)")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ChatRequestError("'stream' must be true or false")
    return model, question, stream, CHAT_MODELS[model][1]


def models_list(model_id: str) -> dict[str, Any]:
    """``/v1/models``: every id of :data:`CHAT_MODELS`; ``kgloom_llm`` names the model
    that writes the answers (``model_id``, e.g. a GGUF's SHA-256 or a server's model)."""
    return {"object": "list", "data": [
        {"id": m, "object": "model", "created": 0, "owned_by": "kgloom",
         "kgloom_search": {"mode": mode, "dynamic": dynamic}, "kgloom_llm": model_id}
        for m, (mode, dynamic) in CHAT_MODELS.items()]}


def answer_text(result: dict[str, Any]) -> str:
    """The reply a person reads: the answer (or why there is none), the relevance notice
    when nothing in the index is relevant to the question (``info["notice"]``), then
    ``Sources:`` with one line per cited source, then the model notice when there is one.

    Args:
        result: :meth:`kgloom.query.searcher.SearchResult.to_dict`.
    """
    answer = result.get("answer")
    if answer is None:
        failed = result.get("failures") or []
        # a call that failed (server down, HTTP 500) has no reply to check
        calls = [f for f in failed if str(f.get("reason", "")).startswith("LLM call failed")]
        answer = (f"No answer: the model could not be asked ({calls[-1]['reason']}: "
                  f"{calls[-1].get('detail') or 'no detail'})." if calls else
                  "No answer: the model's reply failed its checks." if failed else
                  "No answer: nothing in the index matched the question.")
    lines = [answer]
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
    return "\n".join(lines)


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


def _fingerprint(result: dict[str, Any]) -> str:
    return f"kgloom-build-{(result.get('info') or {}).get('build_id')}"


def _usage(result: dict[str, Any]) -> dict[str, int]:
    total = ((result.get("info") or {}).get("llm") or {}).get("total") or {}
    p, c = int(total.get("prompt_tokens", 0)), int(total.get("completion_tokens", 0))
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def chat_completion(model: str, result: dict[str, Any]) -> dict[str, Any]:
    """The non-streamed ``chat.completion`` object answering with ``result``
    (:meth:`SearchResult.to_dict`)."""
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
            "created": int(time.time()), "model": model,
            "system_fingerprint": _fingerprint(result),
            "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                         "message": {"role": "assistant", "content": answer_text(result)}}],
            "usage": _usage(result), "kgloom": kgloom_extension(result)}


def chunk(completion_id: str, model: str, delta: dict[str, Any],
          finish_reason: str | None = None, **extra: Any) -> dict[str, Any]:
    """One ``chat.completion.chunk`` of a streamed reply."""
    return {"id": completion_id, "object": "chat.completion.chunk",
            "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason,
                         "logprobs": None}], **extra}


def answer_chunks(completion_id: str, model: str, result: dict[str, Any],
                  piece_chars: int = 64) -> list[dict[str, Any]]:
    """The content chunks of a streamed answer (the text of :func:`answer_text` in
    pieces of about ``piece_chars`` characters, cut at spaces), then the closing chunk
    with ``finish_reason`` ``stop``, the usage and the ``kgloom`` field.

    The answer is one structured model call (its JSON must parse before it can be
    checked and shown), so it is streamed once it is known, not token by token.
    """
    text, pieces = answer_text(result), []
    while text:
        cut = text.rfind(" ", 0, piece_chars) + 1 if len(text) > piece_chars else len(text)
        cut = cut or piece_chars
        pieces.append(text[:cut])
        text = text[cut:]
    fp = _fingerprint(result)
    return ([chunk(completion_id, model, {"content": p}, system_fingerprint=fp)
             for p in pieces]
            + [chunk(completion_id, model, {}, "stop", system_fingerprint=fp,
                     usage=_usage(result), kgloom=kgloom_extension(result))])
