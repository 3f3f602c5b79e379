"""A chat answer from the index as text pieces, then a record of what it was answered
from: what every chat surface of ``kgloom serve`` sends (OpenAI's
``/v1/chat/completions``, Ollama's ``/api/chat`` and ``/api/generate``), and what any
other surface (an MCP tool) can call. No web framework, no Dagster.

Use::

    answer = ChatAnswer.prepare(handle, turns, mode="auto")  # blocking: the context
    for piece in answer.pieces():                           # text, as it is written
        send(piece)
    send(answer.record)                                     # citations, build id, ...

:meth:`ChatAnswer.prepare` runs the search (:meth:`kgloom.query.searcher.Searcher.search`)
for the conversation's retrieval query (:func:`retrieval_query`). Then there are two ways
to answer:

- **A model server** (``--llm-url``, settings ``llm.urls``: the backend is a
  :class:`kgloom.llm.http.OpenAIChatBackend`): the search builds the context as usual
  (routing and global search's map calls included) but makes no answer call
  (``defer_answer``); :meth:`ChatAnswer.pieces` sends the context, the earlier turns and
  the question to the server as one plain chat request with ``stream=True`` and yields
  its tokens as they arrive, then the sources block. The citations are the context ids
  the answer writes (``[T3]``); when it writes none, the context's first text units
  (global search: the reports its key points cite). The text is the server's as
  written: it is not grounded by ``check_answer`` as the in-process answer is.
  A complete answer is kept in the answer cache (stage ``chat_answer``), so the same
  conversation is answered again from it; an answer the server broke off is not.
- **The in-process model** (the bundled GGUF, ``--model-path``, ``--fake-llm``): the
  grounded JSON answer of :class:`kgloom.query.structured_search.search_base.BaseSearch`,
  known whole before it is shown; :meth:`ChatAnswer.pieces` yields it in pieces.
"""

from __future__ import annotations

import json
import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from kgloom.core.ids import content_id
from kgloom.llm import Completion, PromptTemplate
from kgloom.query.context_builder.context import refs_in
from kgloom.query.structured_search.search_base import model_notice
from kgloom.serve import openai_chat

STREAM_STAGE = "chat_answer"
STREAM_TEMPLATE = PromptTemplate(
    name=STREAM_STAGE,
    system=("You answer questions using only the numbered context you are given. After "
            "each fact, cite the ids of the context lines it comes from in square "
            "brackets, like [T3]. If the context does not hold the answer, say so."),
    user="Context:\n{context}\n\nQuestion: {question}",
    schema={"type": "string"},  # plain text
    max_tokens=512,
)
EARLIER_QUESTIONS = 2  # earlier user turns that may join the retrieval query
EARLIER_TURNS = 4  # earlier user / assistant messages the model server is shown
PIECE_CHARS = 64  # characters of a piece when a known answer is sent in pieces
CONTEXT_CITATIONS = 5  # text units cited when a streamed answer cites nothing
# where what kgloom appends to an answer starts (a notice, the sources)
APPENDED_MARKS = ("\n\nNote: ", "\n\nSources:\n")

Turn = tuple[str, str]  # (role "user" or "assistant", text)


class AnswerStreamError(RuntimeError):
    """The model server broke off an answer it had started (the pieces already yielded
    are all there is; nothing was cached)."""


def retrieval_query(turns: Sequence[Turn], max_chars: int,
                    earlier: int = EARLIER_QUESTIONS) -> str:
    """What a conversation's search retrieves with: its last user message, preceded by up
    to ``earlier`` of the user messages before it (newest first), each on its own line,
    while the whole stays within ``max_chars`` (the question limit); a follow-up such as
    "and his nephew?" then still finds the units the first question found.

    Raises:
        ValueError: when ``turns`` holds no user message.
    """
    users = [text for role, text in turns if role == "user"]
    if not users:
        raise ValueError("no message has role 'user': the last user message is the question")
    kept = [users[-1]]
    for text in reversed(users[:-1][-earlier:] if earlier else []):
        if len(text) + 1 + sum(len(t) + 1 for t in kept) - 1 > max_chars:
            break
        kept.insert(0, text)
    return "\n".join(kept)


def _own_text(text: str) -> str:
    """An earlier assistant message without the notices and sources kgloom appended."""
    for mark in APPENDED_MARKS:
        text = text.split(mark, 1)[0]
    return text


def _in_pieces(text: str, piece_chars: int = PIECE_CHARS) -> Iterator[str]:
    """``text`` in pieces of about ``piece_chars`` characters, cut after spaces."""
    while text:
        cut = text.rfind(" ", 0, piece_chars) + 1 if len(text) > piece_chars else len(text)
        cut = cut or piece_chars
        yield text[:cut]
        text = text[cut:]


@dataclass
class ChatAnswer:
    """One chat answer being sent (module doc).

    Attributes:
        result: the search's :class:`SearchResult` (streamed: no answer yet).
        query: the retrieval query (:func:`retrieval_query`).
        messages: the chat request for the model server (None: the answer is known).
        llm: the :class:`kgloom.llm.CachedLLM` (its backend streams; its cache keeps
            complete answers).
        unit_titles: text unit id -> document title, of the context's text units.
        record: None until :meth:`pieces` is exhausted, then the ``kgloom`` record
            (:func:`kgloom.serve.openai_chat.kgloom_extension`, with ``retrieval_query``,
            ``context_units`` (ref, id, document title of each text unit in the context),
            ``streamed``, ``cached`` and ``usage``).
    """

    result: Any
    query: str
    messages: list[dict[str, str]] | None = None
    llm: Any = None
    unit_titles: dict[str, str | None] = field(default_factory=dict)
    record: dict[str, Any] | None = None
    text: list[str] = field(default_factory=list)

    @classmethod
    def prepare(cls, handle: Any, turns: Sequence[Turn], mode: str = "auto",
                dynamic: bool = False, max_chars: int = 2000,
                **search_params: Any) -> ChatAnswer:
        """Search ``handle`` (an :class:`kgloom.serve.live_index.IndexHandle`) for the
        conversation ``turns`` (the last user message is the question) with ``mode``
        (and ``search_params``, such as ``level`` and ``budget``, passed on to
        :meth:`Searcher.search`). Blocking (embedding, and any routing or map call).

        Raises:
            ValueError / IndexFilesMissingError / ModelFileError: as
                :meth:`Searcher.search` (a 4xx of the caller's).
        """
        query = retrieval_query(turns, max_chars)
        llm = handle.searcher.llm
        streams = streams_answers(handle)
        result = handle.search(query, mode=mode, dynamic=dynamic, defer_answer=streams,
                               **search_params)
        titles = unit_titles(handle, result)
        if not result.info.get("deferred_answer"):
            return cls(result, query, unit_titles=titles)
        question = next(text for role, text in reversed(turns) if role == "user")
        earlier = [{"role": role, "content": _own_text(text)}
                   for role, text in list(turns)[:-1][-EARLIER_TURNS:]]
        msgs = STREAM_TEMPLATE.messages(context=result.context.text, question=question)
        return cls(result, query, msgs[:1] + earlier + msgs[1:], llm, titles)

    def pieces(self) -> Generator[str, None, None]:
        """The answer's text, piece by piece, then its sources block; :attr:`record` is
        set once the last piece is taken.

        Raises:
            AnswerStreamError: the model server failed after its first token (a server
                that fails before it gives the answer "No answer: the model could not be
                asked (...)" instead, as the in-process model does).
        """
        if self.messages is None:
            yield from _in_pieces(openai_chat.answer_text(self.result.to_dict()))
            self.record = self._record(streamed=False, cached=False)
            return
        cached = yield from self._streamed()
        out = self.result.to_dict()
        yield from _in_pieces(openai_chat.sources_text(out))
        self.record = self._record(streamed=True, cached=cached)

    def _streamed(self) -> Generator[str, None, bool]:
        """Yield the model server's answer (or the cached one); set the result's answer
        and citations; return whether it came from the cache."""
        llm, msgs = self.llm, self.messages
        assert msgs is not None
        params = {"max_tokens": STREAM_TEMPLATE.max_tokens, "seed": 0, "stream": True}
        input_hash = content_id("inputs", json.dumps(msgs, sort_keys=True))
        key = llm.cache.key(llm.model_id, STREAM_TEMPLATE.hash, input_hash, params)
        hit = llm.cache.get(key)
        if hit is not None:
            yield from _in_pieces(hit.text)
            self._answered(hit.text)
            return True
        t0 = time.perf_counter()
        try:
            for piece in llm.backend.stream_text(msgs, STREAM_TEMPLATE.max_tokens, 0):
                if piece:
                    self.text.append(piece)
                    yield piece
        except Exception as exc:
            detail = f"{type(exc).__name__}: {str(exc)[:300]}"
            if self.text:
                raise AnswerStreamError(f"the model server failed in the middle of the "
                                        f"answer ({detail})") from exc
            self.result.failures.append({"stage": STREAM_STAGE, "item_id": self.query[:80],
                                         "reason": "LLM call failed", "detail": detail})
            yield openai_chat.answer_line(self.result.to_dict())
            return False
        text = "".join(self.text)
        llm.cache.put(key, STREAM_STAGE, llm.model_id, STREAM_TEMPLATE.hash, input_hash,
                      params, Completion(text, 0, 0, time.perf_counter() - t0))
        self._answered(text)
        return False

    def _answered(self, text: str) -> None:
        result = self.result
        citable = result.info["deferred_answer"]["citable"]
        cites = [r for r in refs_in(text) if r in citable]
        result.info["citations_from"] = "answer" if cites else "context"
        if not cites:  # the context the answer was given: its text units, else its ids
            cites = ([x.ref for x in result.context.items if x.kind == "text_units"]
                     or citable)[:CONTEXT_CITATIONS]
        result.answer, result.citations = text, cites
        result.notice = model_notice(self.llm.model_id)  # the demo model, when it is served

    def _record(self, streamed: bool, cached: bool) -> dict[str, Any]:
        out = self.result.to_dict()
        context_units = [{"ref": x.ref, "id": x.source_id,
                          "document_title": self.unit_titles.get(x.source_id)}
                         for x in self.result.context.items if x.kind == "text_units"]
        return {**openai_chat.kgloom_extension(out), "retrieval_query": self.query,
                "context_units": context_units, "streamed": streamed, "cached": cached,
                "failures": out.get("failures", []), "usage": openai_chat.usage(out)}


def streams_answers(handle: Any) -> bool:
    """Does ``handle``'s answering model stream (a model server's backend)?"""
    return callable(getattr(handle.searcher.llm.backend, "stream_text", None))


def unit_titles(handle: Any, result: Any) -> dict[str, str | None]:
    """text unit id -> its document's title, for the text units of ``result``'s context
    (read from ``handle``'s index)."""
    units = handle.searcher.index.units
    rows = {x.source_id: units.row_of.get(x.source_id) for x in result.context.items
            if x.kind == "text_units"}  # a look-up per context unit, not a scan of all
    return {i: units.document_titles[r] for i, r in rows.items() if r is not None}
