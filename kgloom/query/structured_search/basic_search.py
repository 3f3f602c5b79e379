"""Basic search (``direct``): the ``vector`` retrieval's text units as the whole context,
then the answer."""

from __future__ import annotations

from typing import Any

from kgloom.query.context_builder.local_context import build_basic_context
from kgloom.query.retrieval import RetrievalSettings
from kgloom.query.structured_search.search_base import BaseSearch
from kgloom.query.structured_search.search_model import CallLog
from kgloom.query.structured_search.search_result import SearchResult


class BasicSearch(BaseSearch):
    """Plain vector RAG over one index (GraphRAG's ``BasicSearch``)."""

    def search(self, question: str, mode: str, reason: str, budget: int, answer: bool,
               log: CallLog | None, info: dict[str, Any], failures: list[dict],
               settings: RetrievalSettings) -> SearchResult:
        """The ``config.top_k`` nearest text units within ``budget`` tokens and, when
        ``answer``, the answer from them.

        Raises:
            ValueError: a budget too small for one item, or a context that does not fit
                the model's window with its prompt.
        """
        context, sources = build_basic_context(self.index, question, budget, self.counter,
                                               self.config.top_k, settings, info)
        return self.answered(question, mode, "direct", reason, context, sources, answer, log,
                             info, failures)
