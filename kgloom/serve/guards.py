"""What every route of ``kgloom serve`` checks a request against: the :class:`Limits`,
the :class:`ApiError` a refused request raises (answered as ``{"error": ...}`` with its
status) and the question check; and the header naming the build an answer was read
from. No web framework here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kgloom.query.modes import check_question as check_text_question
from kgloom.serve.request_json import MAX_JSON_DEPTH

BUILD_HEADER = "X-Kgloom-Build"


@dataclass(frozen=True)
class Limits:
    """What one request may ask; more gives a 4xx naming the limit.

    Attributes:
        max_question_chars: characters of a question (or of the last chat message).
        max_top_k: text units a query may ask for.
        max_depth: BFS hops of a retrieval mode or a neighbourhood.
        max_budget: context tokens of a local / direct search.
        max_body_bytes: bytes of a request body (413 beyond).
        max_nodes: nodes of a neighbourhood or subgraph answer (the nearest are kept).
        max_entity_ids: entity (and text unit) ids one subgraph request may name.
        max_messages: messages of one chat request.
        max_json_depth: nesting of objects and arrays in a JSON body
            (:data:`kgloom.serve.request_json.MAX_JSON_DEPTH`).
    """

    max_question_chars: int = 2000
    max_top_k: int = 50
    max_depth: int = 3
    max_budget: int = 8000
    max_body_bytes: int = 64 * 1024
    max_nodes: int = 300
    max_entity_ids: int = 500
    max_messages: int = 200
    max_json_depth: int = MAX_JSON_DEPTH


class ApiError(Exception):
    """An error answered as ``{"error": {"message", "type"}}`` with ``status``."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


def check_question(question: Any, limits: Limits, name: str = "question") -> str:
    """``question`` when it is text within ``limits.max_question_chars``
    (:func:`kgloom.query.modes.check_question`, as ``kgloom query`` checks it).

    Raises:
        ApiError: 400 naming the problem.
    """
    try:
        return check_text_question(question, limits.max_question_chars, name)
    except ValueError as exc:
        raise ApiError(400, str(exc)) from exc
