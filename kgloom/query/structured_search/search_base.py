"""What every structured search shares: the knobs (:class:`SearchSettings`), the result
(:class:`SearchResult`), the model opened on first use (:class:`SearchModel`), the call
log, and the answer: one structured call whose citations are an enum of the context's
ids, grounded by :func:`check_answer` (:class:`BaseSearch`). The knobs and
:class:`BaseSearch` are here, the rest in the modules beside it (their names importable
from here too):

- :mod:`~kgloom.query.structured_search.answer_prompt`: the answer's prompt and its
  reply schema, whose citations are an enum of the context's ids;
- :mod:`~kgloom.query.structured_search.answer_check`: :func:`check_answer`, which
  grounds every reply in its context;
- :mod:`~kgloom.query.structured_search.search_model`: the model opened on first use
  (:class:`SearchModel`), the call log (:class:`CallLog`) and the notice an answer of
  the bundled demo model carries (:func:`model_notice`);
- :mod:`~kgloom.query.structured_search.search_result`: the result
  (:class:`SearchResult`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kgloom.core.layout import QUERY_CACHE_FILE as QUERY_CACHE_FILE
from kgloom.llm import CachedLLM, PromptTemplate, structured_call
from kgloom.query.context_builder.context import Context, TokenCounter
from kgloom.query.query_index import QueryIndex
from kgloom.query.structured_search.answer_check import (  # noqa: F401 (re-exported)
    AnswerCheck,
    check_answer,
)
from kgloom.query.structured_search.answer_prompt import (  # noqa: F401 (re-exported)
    ANSWER_TEMPLATE,
    MAX_CITATIONS,
    answer_schema,
    loose_answer_schema,
)
from kgloom.query.structured_search.search_model import (  # noqa: F401 (re-exported)
    DEMO_MODEL_NOTICE,
    FAKE_MODEL_NOTICE,
    CallLog,
    SearchModel,
    model_notice,
)
from kgloom.query.structured_search.search_result import SearchResult
from kgloom.settings.search_settings import SearchSettings  # the settings' search section

SEARCH_STAGES = ("search_route", "search_rate", "search_map", "search_answer")


@dataclass
class BaseSearch:
    """One search method over an index (GraphRAG's ``BaseSearch``): the index, the
    knobs, the model; :meth:`answer` is the answer call every method ends with.

    Attributes:
        index: the index (its search tables loaded).
        config: the search knobs of this call.
        model: the model and its token counter.
        defer_answer: build the answer's context but make no answer call: the caller
            asks the model itself (``kgloom serve`` streams it from a model server;
            :mod:`kgloom.serve.answer_stream`); the ids it may cite go to
            ``info["deferred_answer"]["citable"]``.
    """

    index: QueryIndex
    config: SearchSettings
    model: SearchModel
    defer_answer: bool = False

    @property
    def llm(self) -> CachedLLM:
        """The model (opened on first use)."""
        return self.model.llm

    @property
    def counter(self) -> TokenCounter:
        """The model's token counter."""
        return self.model.counter

    def answered(self, question: str, mode: str, route: str, reason: str, context: Context,
                 sources: dict[str, dict[str, str]], answer: bool, log: CallLog | None,
                 info: dict[str, Any], failures: list[dict]) -> SearchResult:
        """The result of a context-then-answer search (local, basic): the answer to
        ``question`` from ``context`` (citable: all its ids) when ``answer``."""
        text, cites = self.answer(question, context, context.refs, log, failures, info) \
            if answer else (None, [])
        return SearchResult(question, mode, route, reason, text, cites, context, sources,
                            info=info, failures=failures)

    def answer(self, question: str, context: Context, citable: list[str],
               log: CallLog | None, failures: list[dict],
               info: dict[str, Any] | None = None) -> tuple[str | None, list[str]]:
        """One answer call (stage ``search_answer``); (None, []) with no context or a
        failed reply (its row added to ``failures``). The reply is grounded by
        :func:`check_answer` (citations outside ``citable`` dropped, invented inline
        citations removed, a loop cut, names the context lacks flagged, with the index's
        text units as the evidence of ordinary words); what it did goes to
        ``info["answer_check"]``.

        Raises:
            ValueError: the context and prompt do not fit the model's window.
        """
        if not context.items or not citable or log is None:
            return None, []
        schema = answer_schema(citable, self.config.answer_max_chars)
        self.check_fit(ANSWER_TEMPLATE, schema, context.tokens, context.budget,
                       context=context.text, question=question)
        if self.defer_answer:
            if info is not None:
                info["deferred_answer"] = {"citable": list(citable)}
            return None, []
        obj, failure = structured_call(log, ANSWER_TEMPLATE, "search_answer", question[:80],
                                       self.config.seed, schema=schema,
                                       check_schema=loose_answer_schema(schema),
                                       context=context.text, question=question)
        if obj is None:
            assert failure is not None  # structured_call: no object, then a failure row
            failures.append(failure)
            return None, []
        check = check_answer(obj["answer"], obj["citations"], citable, context.text,
                             self.index.units.texts)
        if info is not None:
            info["answer_check"] = check.info()
        return check.answer, check.citations

    def check_question_fits(self, question: str) -> None:
        """Refuse a question that does not fit the model's window in the answer prompt
        even with an empty context (no budget could help it).

        Raises:
            ValueError: naming the question's tokens and the model's window.
        """
        from kgloom.llm import prompt_room, reply_token_bound

        schema = answer_schema(["T0"], self.config.answer_max_chars)
        reply = reply_token_bound(schema) or ANSWER_TEMPLATE.max_tokens
        room = prompt_room(self.llm, ANSWER_TEMPLATE, reply, context="", question=question)
        # only the question's fault when the prompt without it fits (else the window is
        # too small for any question: the budget check says so)
        if room is not None and room < 0 and (prompt_room(
                self.llm, ANSWER_TEMPLATE, reply, context="", question="?") or 0) >= 0:
            n_ctx = getattr(self.llm.backend, "n_ctx", "?")
            raise ValueError(
                f"the question is too long: {self.counter(question)} tokens, {-room} more "
                f"than the model's context window (n_ctx {n_ctx}) holds with the answer "
                "prompt and reply even with no context; shorten the question")

    def check_fit(self, template: PromptTemplate, schema: dict, tokens: int, budget: int,
                  **inputs: str) -> None:
        """Refuse a prompt of ``template`` with ``inputs`` that, with its reply, does not
        fit the model's window.

        Raises:
            ValueError: naming the context's tokens, its budget and the model's window.
        """
        from kgloom.llm import prompt_room, reply_token_bound

        room = prompt_room(self.llm, template, reply_token_bound(schema) or template.max_tokens,
                           **inputs)
        if room is not None and room < 0:
            raise ValueError(
                f"the context ({tokens} tokens of a budget of {budget}) with "
                f"its prompt and reply needs {-room} tokens more than the model's context "
                f"window (n_ctx {getattr(self.llm.backend, 'n_ctx', '?')}): lower the budget")
