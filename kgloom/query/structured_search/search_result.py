"""What a structured search returns (:class:`SearchResult`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kgloom.query.context_builder.community_context import ReportBatch
from kgloom.query.context_builder.context import Context


@dataclass
class SearchResult:
    """What :meth:`Searcher.search` returns.

    Attributes:
        question: as given.
        mode: the mode asked for (auto, local, global, direct).
        route: what ran (direct, local, global); differs from ``mode`` on auto and on a
            fallback.
        route_reason: why (the routing rule or classifier, or the fallback).
        answer: the model's answer; None with ``answer=False`` (context only), when the
            context is empty, or when the answer call failed (see ``failures``).
        citations: ids from the context, in the model's order (each once).
        context: the context the answer was asked from (global: the ranked key points).
        sources: every citable id -> {"kind", "id", "text"}: what a citation points to.
        map_batches: global search: each map call's report ids, tokens and text.
        info: timings, token counter, per-stage LLM calls and prompt tokens
            (``llm``), the community selection, the retrieval used, fallbacks, and
            whether anything is relevant to the question (``best_similarity``,
            ``low_relevance``, and ``notice``: a sentence for a person or None; see
            :mod:`kgloom.query.retrieval.relevance`).
        failures: failure rows (stage, item_id, reason, detail) of failed LLM replies.
        notice: what the reader must know about the answer's model (the bundled demo
            model's answers are unreliable; :func:`model_notice`), or None.
    """

    question: str
    mode: str
    route: str
    route_reason: str
    answer: str | None
    citations: list[str]
    context: Context
    sources: dict[str, dict[str, str]] = field(default_factory=dict)
    map_batches: list[ReportBatch] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    failures: list[dict] = field(default_factory=list)
    notice: str | None = None

    def cited(self) -> list[dict[str, str]]:
        """The cited sources, in citation order ({"ref", "kind", "id", "text"})."""
        return [{"ref": c, **self.sources[c]} for c in self.citations if c in self.sources]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field (the context with its items)."""
        return {"question": self.question, "mode": self.mode, "route": self.route,
                "route_reason": self.route_reason, "answer": self.answer,
                "citations": self.citations, "cited": self.cited(),
                "context": self.context.to_dict(), "context_text": self.context.text,
                "map_batches": [vars(b) for b in self.map_batches], "info": self.info,
                "failures": self.failures, "notice": self.notice}
