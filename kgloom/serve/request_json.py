"""A request body read as JSON with bounds, for the servers over an index (``kgloom serve``,
``kgloom serve-embeddings``): :func:`parse_json_body`. Standard library only.

Python's ``json.loads`` recurses once per level of nesting, so a 64 KB body of 32,000
``[`` raised ``RecursionError`` (an HTTP 500); it also reads ``1e400`` as infinity,
``NaN`` / ``Infinity`` as floats, integers of any length, and (from bytes) UTF-8 encoded
surrogates as text. Here each of those is a :class:`JSONBodyError` naming what is wrong.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

# Deepest nesting of objects and arrays a body may have. A kgloom request nests at most
# 5 levels (a chat message's list of content parts); OpenAI fields the chat endpoint
# accepts and ignores (a tool's JSON schema) may nest some more. Python's recursion limit
# (1000 frames) is what this keeps ``json.loads`` and every walk of the body far below.
MAX_JSON_DEPTH = 64
# Integers a body may hold: those of a signed 64-bit integer (what numpy, polars, DuckDB
# and SQLite store); no field of any request means more.
INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1

# a string (escapes skipped; one left open runs to the end) or a bracket: a linear scan,
# since the optional closing quote means a string match never backtracks to fail
_TOKEN = re.compile(r'"(?:[^"\\]+|\\.)*"?|[\[\]{}]', re.DOTALL)


class JSONBodyError(ValueError):
    """A request body that is not a JSON text the server reads; the message says why
    (for the client: it names the limit or the position)."""


def nesting_depth(text: str, stop_above: int | None = None) -> int:
    """The deepest nesting of objects and arrays in JSON ``text`` (0 for a scalar),
    brackets inside strings not counted; well-formedness is not checked.

    Args:
        text: the body as text.
        stop_above: return as soon as the depth exceeds this (None: scan it all).

    Returns:
        the depth (int >= 0); with ``stop_above``, at most ``stop_above + 1``.
    """
    depth = deepest = 0
    for m in _TOKEN.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if stop_above is not None and deepest > stop_above:
                    break
        elif c in "]}":
            depth -= 1
    return deepest


def _refuse_constant(constant: str) -> Any:
    """``json.loads``' hook for NaN, Infinity and -Infinity, which JSON lacks."""
    raise JSONBodyError(f"the body is not JSON: {constant} is not a JSON number")


def _finite_float(literal: str) -> float:
    """``json.loads``' hook for a number with a fraction or exponent: a float that is
    finite (``1e400`` overflows to infinity)."""
    value = float(literal)
    if not math.isfinite(value):
        raise JSONBodyError(f"the number {literal[:40]} is out of range (beyond a 64-bit "
                            "float)")
    return value


def _int64(literal: str) -> int:
    """``json.loads``' hook for an integer: one of [INT64_MIN, INT64_MAX]."""
    # the length test first: int() of thousands of digits is slow (and refused past 4300)
    if len(literal) > 20 or not INT64_MIN <= (value := int(literal)) <= INT64_MAX:
        shown = literal if len(literal) <= 40 else f"{literal[:20]}... ({len(literal)} digits)"
        raise JSONBodyError(f"the integer {shown} is out of range (a 64-bit integer at most)")
    return value


def parse_json_body(data: bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """The JSON value of a request body (an empty body is None).

    Args:
        data: the body's bytes: JSON text in UTF-8 (a byte-order mark allowed), UTF-16
            or UTF-32 (RFC 8259 section 8.1; the encoding is told from the first bytes
            as ``json.loads`` tells it).
        max_depth: deepest nesting of objects and arrays allowed (:data:`MAX_JSON_DEPTH`).

    Returns:
        the parsed value: dict, list, str, int (64-bit range), float (finite), bool or
        None. Strings hold no lone surrogate.

    Raises:
        JSONBodyError: bytes that are not text in the detected encoding; nesting deeper
            than ``max_depth``; text that is not JSON (the parser's message and position);
            NaN, Infinity or -Infinity; a number out of range (an integer beyond 64 bits,
            a float that overflows); a string holding a lone surrogate escape (e.g.
            ``"\\ud800"``), which no UTF-8 answer could quote.
    """
    if not data:
        return None
    encoding = json.detect_encoding(data)
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise JSONBodyError(f"the body is not {encoding.upper()} text: byte "
                            f"0x{data[exc.start]:02x} at position {exc.start} "
                            f"({exc.reason})") from exc
    text = text.removeprefix("\ufeff")
    if nesting_depth(text, stop_above=max_depth) > max_depth:
        raise JSONBodyError(f"the body nests objects and arrays more than {max_depth} "
                            "levels deep")
    try:
        body = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float,
                          parse_int=_int64)
    except JSONBodyError:
        raise
    except ValueError as exc:  # json.JSONDecodeError
        raise JSONBodyError(f"the body is not JSON: {exc}") from exc
    try:  # "\ud800" parses, but no answer quoting it could be sent as UTF-8
        json.dumps(body, ensure_ascii=False).encode()
    except UnicodeEncodeError as exc:
        raise JSONBodyError("the body holds a lone surrogate escape (e.g. \\ud800), which "
                            "is not text") from exc
    return body
