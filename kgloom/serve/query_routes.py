"""The query route of ``kgloom serve``: ``POST /api/query``, the options of ``kgloom
query`` over HTTP, answered with what ``kgloom query --json`` prints; and the functions
that check and run a query (``kgloom mcp``'s ``retrieve`` and ``search`` call them too)."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from kgloom.query.modes import (
    OPTION_MODES,
    RETRIEVAL_MODES,
    check_options,
    ignored_options,
    retrieval_params,
)
from kgloom.serve.guards import ApiError, Limits, check_question
from kgloom.serve.live_index import IndexHandle
from kgloom.serve.route_kit import GUARDED, json_response, limits_of, on_index, read_json

# the query body's fields and their JSON types (bool is not an int here)
QUERY_FIELDS: dict[str, tuple[type, ...]] = {
    "question": (str,), "mode": (str,), "top_k": (int,), "depth": (int,),
    "lam": (int, float), "oversample": (int,), "damping": (int, float), "dynamic": (bool,),
    "keep_parent": (bool,), "level": (int,), "answer": (bool,), "budget": (int,)}
SEARCH_OPTIONS = ("dynamic", "keep_parent", "level", "answer", "budget")


def parse_query(body: Any, limits: Limits) -> dict[str, Any]:
    """The checked fields of a ``POST /api/query`` body (the options of ``kgloom query``:
    ``question``, ``mode`` (default ``bridge``), ``top_k``, ``depth``, ``lam``,
    ``oversample``, ``damping``, ``dynamic``, ``keep_parent``, ``level``, ``answer``,
    ``budget``), with ``ignored``: the given options the mode does not read.

    Raises:
        ApiError: 400 for an unknown field, a value of the wrong type or out of its
            range (:func:`kgloom.query.modes.check_options`) or over ``limits``.
    """
    if not isinstance(body, dict):
        raise ApiError(400, "the body must be a JSON object")
    unknown = sorted(set(body) - set(QUERY_FIELDS))
    if unknown:
        raise ApiError(400, f"unknown field(s) {', '.join(unknown)}; the fields are "
                       f"{', '.join(QUERY_FIELDS)}")
    for name, value in body.items():
        kinds = QUERY_FIELDS[name]
        if value is not None and (not isinstance(value, kinds) or
                                  (isinstance(value, bool) and bool not in kinds)):
            raise ApiError(400, f"{name} must be {' or '.join(k.__name__ for k in kinds)}, "
                           f"got {json.dumps(value)[:80]}")
    q = {"mode": "bridge", **{k: v for k, v in body.items() if v is not None}}
    check_question(q.get("question"), limits)
    try:
        check_options(q["mode"], q)
    except ValueError as exc:
        raise ApiError(400, str(exc)) from exc
    for name, cap in (("top_k", limits.max_top_k), ("depth", limits.max_depth),
                      ("budget", limits.max_budget)):
        if name in q and q[name] > cap:
            raise ApiError(400, f"{name} must be at most {cap}, got {q[name]}")
    q["ignored"] = ignored_options(q["mode"], [k for k in body if k in OPTION_MODES])
    return q


def run_query(handle: IndexHandle, q: dict[str, Any]) -> dict[str, Any]:
    """Answer a parsed query (:func:`parse_query`) on ``handle``: the dict ``kgloom query
    --json`` prints (:meth:`RetrievalResult.to_dict` or :meth:`SearchResult.to_dict`),
    with ``info["ignored_options"]`` when options were ignored.

    Raises:
        ValueError / IndexFilesMissingError: as the Retriever and the Searcher.
    """
    mode = q["mode"]
    if mode in RETRIEVAL_MODES:
        out = handle.retrieve(q["question"], mode, **retrieval_params(mode, q)).to_dict()
    else:
        config = handle.searcher.config
        changes = {k: q[k] for k in ("top_k", "keep_parent") if k in q}
        result = handle.search(q["question"], config.model_copy(update=changes),
                               mode=mode, dynamic=q.get("dynamic", False),
                               level=q.get("level"), answer=q.get("answer", True),
                               budget=q.get("budget"))
        out = result.to_dict()
    if q["ignored"]:
        out["info"]["ignored_options"] = q["ignored"]
    return out


query_router = APIRouter(dependencies=GUARDED)


@query_router.post("/api/query")
async def query(request: Request) -> Response:
    q = parse_query(await read_json(request), limits_of(request))
    out = await on_index(request, lambda h: run_query(h, q))
    return json_response(out, out["info"].get("build_id"))
