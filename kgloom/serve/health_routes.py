"""What a ``kgloom serve`` server is serving: ``GET /api/health`` (the build, its
switches, the last failed open, the model) and ``GET /api/modes`` (the modes, the options
each reads, the limits)."""

from __future__ import annotations

import dataclasses

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from kgloom.query.modes import OPTION_MODES, RETRIEVAL_MODES, SEARCH_MODES
from kgloom.serve.query_routes import QUERY_FIELDS
from kgloom.serve.route_kit import GUARDED, json_response, limits_of

health_router = APIRouter(dependencies=GUARDED)


@health_router.get("/api/health")
async def health(request: Request) -> Response:
    live = request.app.state.live
    h = await run_in_threadpool(live.current)  # a new build is opened, as by any request
    return json_response({"status": "ok", "build_id": h.build_id,
                          "opened_at": h.opened_at, "switches": live.switches,
                          "last_open_error": live.last_error,
                          "model": request.app.state.model_id}, h.build_id)


@health_router.get("/api/modes")
async def modes(request: Request) -> Response:
    return json_response({"retrieval": list(RETRIEVAL_MODES), "search": list(SEARCH_MODES),
                          "options": {k: list(v) for k, v in OPTION_MODES.items()
                                      if k in QUERY_FIELDS},  # not the CLI's own
                          "limits": dataclasses.asdict(limits_of(request))})
