"""Structured calls: :func:`structured_call` is the one way every stage asks the LLM for
JSON: cached call, parse, JSON-schema validation (``jsonschema``), one retry with
another seed, and a failures row with the raw reply excerpt if it still fails. It never
raises for a bad reply. No Dagster here.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Protocol

import jsonschema
from jsonschema.exceptions import best_match
from jsonschema.validators import validator_for

from kgloom.core.ids import content_id
from kgloom.llm.backend import Completion
from kgloom.llm.grammar import reply_token_bound
from kgloom.llm.prompts import PromptTemplate
from kgloom.llm.stage_stats import StageStats
from kgloom.names.grounding import find_reply_loop


class LLMCaller(Protocol):
    """What :func:`structured_call` needs of an LLM: :class:`kgloom.llm.CachedLLM`, or
    a wrapper of one with the same ``call`` (the query side's
    :class:`kgloom.query.structured_search.search_base.CallLog`, which logs each call)."""

    lock: threading.Lock  # guards ``stats``
    stats: dict[str, StageStats]  # per stage

    def call(self, stage: str, template_hash: str, input_hash: str,
             messages: list[dict[str, str]], schema: dict[str, Any], max_tokens: int,
             seed: int, stop_on_loop: bool = False) -> Completion:
        """The reply for one call (see :meth:`kgloom.llm.CachedLLM.call`)."""
        ...


def _validate(obj: Any, schema: dict[str, Any]) -> None:
    """``jsonschema.validate(obj, schema)`` without its check of ``schema`` against the
    meta-schema, which it repeats at every call: kgloom's schemas are built by its own
    code, and on the extraction's per-unit schemas that check was most of the 12 ms a
    reply's validation took (cProfile of 39 pool units).

    Raises:
        jsonschema.ValidationError: the best-matching error, as ``jsonschema.validate``.
    """
    error = best_match(validator_for(schema)(schema).iter_errors(obj))
    if error is not None:
        raise error


# the reason of a failures row whose reply was stopped because it repeats itself
# (structured_call with stop_on_loop); see is_loop_failure
LOOP_STOPPED = "reply repeats itself"


def is_loop_failure(failure: dict | None) -> bool:
    """True when ``failure`` (a :func:`structured_call` failures row) is a reply stopped
    while decoding because a string value of it repeats itself."""
    return failure is not None and failure["reason"].startswith(LOOP_STOPPED)


def structured_call(llm: LLMCaller, template: PromptTemplate, stage: str, item_id: str,
                    seed: int, schema: dict[str, Any] | None = None,
                    check_schema: dict[str, Any] | None = None, stop_on_loop: bool = False,
                    **inputs: str) -> tuple[dict[str, Any] | None, dict | None]:
    """Ask for one JSON object that validates against ``schema`` (default: the template's).

    A per-call ``schema`` (e.g. an enum of the names found in one text unit) is part of
    the cache key, so it needs no separate hashing. ``check_schema`` (default:
    ``schema``) is what the reply is validated against: a looser one keeps a reply whose
    backend did not enforce the grammar, for the caller to repair (a search answer's
    citation outside the enum is dropped and counted, not the whole answer).

    The reply is parsed and validated (``jsonschema``); an invalid reply is retried once
    with ``seed + 1``. Never raises for a bad reply.

    With ``stop_on_loop`` the backend may stop decoding once a string value of the reply
    repeats itself (:meth:`kgloom.llm.backend.LLMBackend.complete`, part of the cache
    key). A reply that is not JSON and has such a loop
    (:func:`kgloom.names.grounding.find_reply_loop`) is not retried (a greedy retry loops
    again): its failures row's reason starts with :data:`LOOP_STOPPED`
    (:func:`is_loop_failure`), for the caller to treat as a rejected reply.

    Returns:
        (obj, None) on success, or (None, failure_row) where failure_row has the keys of
        ``schemas.FAILURES_SCHEMA`` (stage, item_id, reason, detail = raw reply excerpt).

    Raises:
        LookupError: see :meth:`kgloom.llm.CachedLLM.call`; exceptions of the backend after its
            retries are turned into a failure row, not raised.
    """
    schema = schema or template.schema
    # a bounded schema gets max_tokens = its longest possible reply, so nothing is cut
    max_tokens = reply_token_bound(schema) or template.max_tokens
    input_hash = content_id("inputs", json.dumps(inputs, sort_keys=True))
    messages = template.messages(**inputs)
    problem, raw = "", ""
    with llm.lock:
        st = llm.stats.setdefault(stage, StageStats())
    for attempt in range(2):
        try:
            reply = llm.call(stage, template.hash, input_hash, messages, schema,
                             max_tokens, seed + attempt, stop_on_loop=stop_on_loop)
        except LookupError:
            raise
        except Exception as exc:  # noqa: BLE001 - the model crashed even after retries: record, go on
            problem, raw = f"LLM call failed: {type(exc).__name__}", str(exc)
            continue
        raw = reply.text
        ok, obj, problem = _parsed_reply(raw, check_schema or schema, max_tokens, stop_on_loop)
        if ok:
            return obj, None
        if problem.startswith(LOOP_STOPPED):  # a greedy retry loops again
            break
        if attempt == 0:
            with llm.lock:
                st.retries += 1
    if not problem.startswith(LOOP_STOPPED):  # a loop is the caller's rejection to count
        with llm.lock:
            st.failures += 1
    return None, {"stage": stage, "item_id": item_id, "reason": problem, "detail": raw[:500]}


def _parsed_reply(raw: str, schema: dict[str, Any], max_tokens: int, stop_on_loop: bool,
                  ) -> tuple[bool, Any, str]:
    """(True, the JSON value, "") when reply text ``raw`` parses (``strict=False``) and
    validates against ``schema``; else (False, None, the problem): not JSON (starting
    with :data:`LOOP_STOPPED` when ``stop_on_loop`` and a string of it repeats itself:
    :func:`kgloom.names.grounding.find_reply_loop`), or breaking the schema."""
    try:
        # strict=False: grammar strings may hold raw newlines, which are harmless here
        obj = json.loads(raw, strict=False)
        _validate(obj, schema)
        return True, obj, ""
    except json.JSONDecodeError as exc:
        problem = f"reply is not JSON ({exc.msg}; max_tokens {max_tokens} reached?)"
        loop = find_reply_loop(raw)[0] if stop_on_loop else None
        if loop is not None:
            problem = (f"{LOOP_STOPPED}: \"{loop.phrase}\" {loop.count} times "
                       "(decoding stopped)")
        return False, None, problem
    except jsonschema.ValidationError as exc:
        return False, None, f"reply breaks the schema: {exc.message[:200]}"
