"""Local search: the local context (:mod:`kgloom.query.context_builder.local_context`),
then the answer."""

from __future__ import annotations

from typing import Any

from kgloom.query.context_builder.local_context import LocalContextBuilder
from kgloom.query.retrieval import RetrievalSettings
from kgloom.query.structured_search.search_base import BaseSearch
from kgloom.query.structured_search.search_model import CallLog
from kgloom.query.structured_search.search_result import SearchResult


class LocalSearch(BaseSearch):
    """Local search over one index (GraphRAG's ``LocalSearch``)."""

    def search(self, question: str, mode: str, reason: str, budget: int, answer: bool,
               log: CallLog | None, info: dict[str, Any], failures: list[dict],
               settings: RetrievalSettings) -> SearchResult:
        """The local context of ``question`` within ``budget`` tokens (its text units
        retrieved with ``settings``) and, when ``answer``, the answer from it.

        Raises:
            ValueError: a budget too small for one item, or a context that does not fit
                the model's window with its prompt.
        """
        cfg = self.config
        builder = LocalContextBuilder(self.index, self.counter, settings, cfg.retrieval_mode,
                                      cfg.top_k, cfg.max_neighbors, cfg.seed_units, cfg.shares)
        context, sources = builder.build_context(question, budget, info)
        return self.answered(question, mode, "local", reason, context, sources, answer, log,
                             info, failures)
