"""The answer call every structured search ends with: its prompt (:data:`ANSWER_TEMPLATE`)
and its reply schema, ``{"answer": str, "citations": [id, ...]}`` where the citation items
are an enum of the ids present in the context (:func:`answer_schema`), so an answer cannot
cite a line it was not shown; a reply is validated against the looser
:func:`loose_answer_schema`, so a citation a backend let through outside the enum is
dropped by :func:`kgloom.query.structured_search.answer_check.check_answer` rather than
failing the whole answer.
"""

from __future__ import annotations

from typing import Any

from kgloom.llm import PromptTemplate

ANSWER_TEMPLATE = PromptTemplate(
    name="search_answer",
    system=("You answer questions using only the numbered context you are given. Answer "
            "with JSON only."),
    user=("Context:\n{context}\n\nQuestion: {question}\n\n"
          "Answer in as few words as the question allows, using only the context, and "
          "give the ids of the context lines the answer comes from."),
    schema={},  # per call: citations are an enum of the context's ids (answer_schema)
    max_tokens=200,
)
MAX_CITATIONS = 5


def answer_schema(refs: list[str], max_chars: int = 200) -> dict[str, Any]:
    """The answer reply schema: ``answer`` (1-``max_chars`` characters) and 0-5
    ``citations`` drawn from ``refs`` (non-empty). The length bound also bounds the
    reply's max_tokens (:func:`kgloom.llm.reply_token_bound`): a small model that starts
    repeating itself stops there."""
    return {"type": "object", "properties": {
        "answer": {"type": "string", "minLength": 1, "maxLength": max_chars},
        "citations": {"type": "array", "maxItems": min(MAX_CITATIONS, len(refs)),
                      "items": {"type": "string", "enum": list(refs)}}},
        "required": ["answer", "citations"]}


def loose_answer_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` (:func:`answer_schema`) with citations any strings: what a reply is
    validated against, so a citation a backend let through outside the enum is dropped
    by :func:`kgloom.query.structured_search.answer_check.check_answer` rather than
    failing the whole answer."""
    props = {**schema["properties"], "citations": {
        "type": "array", "items": {"type": "string"}}}
    return {**schema, "properties": props}
