"""kgloom/serve/request_json.py: a request body read as JSON with bounds (nesting,
numbers, encodings, surrogates), each refusal naming what is wrong."""

from __future__ import annotations

import json

import pytest

from kgloom.serve.request_json import (
    INT64_MAX,
    INT64_MIN,
    MAX_JSON_DEPTH,
    JSONBodyError,
    nesting_depth,
    parse_json_body,
)


def nest(depth: int, kind: str) -> object:
    """A value nested ``depth`` levels deep in lists or objects (0: a scalar)."""
    value: object = "x"
    for _ in range(depth):
        value = [value] if kind == "list" else {"k": value}
    return value


@pytest.mark.parametrize("kind", ["list", "object"])
@pytest.mark.parametrize("depth", [0, 1, 2, 7, MAX_JSON_DEPTH])
def test_nesting_depth_counts_levels_of_objects_and_arrays(kind, depth):
    assert nesting_depth(json.dumps(nest(depth, kind))) == depth


def test_nesting_depth_skips_brackets_in_strings_and_escaped_quotes():
    value = {"a": "[[[{{{", "b": ['\\"[[', "]]]}}}"], "c": [["\\\\"]]}
    assert nesting_depth(json.dumps(value)) == 3  # {"c": [[...]]}
    text = json.dumps(["[" * 100, "x"])
    assert nesting_depth(text) == 1


def test_nesting_depth_stops_once_past_the_bound():
    assert nesting_depth("[" * 32000 + "]" * 32000, stop_above=5) == 6


@pytest.mark.parametrize("kind", ["list", "object"])
def test_a_body_past_the_depth_limit_is_refused_at_the_limit_accepted(kind):
    limit = 10
    at = json.dumps(nest(limit, kind)).encode()
    assert parse_json_body(at, limit) == nest(limit, kind)
    with pytest.raises(JSONBodyError, match=f"more than {limit} levels"):
        parse_json_body(json.dumps(nest(limit + 1, kind)).encode(), limit)


@pytest.mark.parametrize("body", [b"[" * 32000 + b"]" * 32000,
                                  b'{"a":' * 13000 + b"1" + b"}" * 13000,
                                  b"[" * 32000])  # unclosed too
def test_the_report_s_deep_bodies_are_refused_without_recursion(body):
    with pytest.raises(JSONBodyError, match=f"more than {MAX_JSON_DEPTH} levels"):
        parse_json_body(body)


@pytest.mark.parametrize("literal, why", [
    ("NaN", "NaN is not a JSON number"), ("Infinity", "Infinity is not a JSON number"),
    ("-Infinity", "-Infinity is not a JSON number"),
    ("1e400", "out of range"), ("-1e400", "out of range"),
    (str(INT64_MAX + 1), "out of range"), (str(INT64_MIN - 1), "out of range"),
    ("1" + "0" * 5000, "5001 digits"),
])
def test_numbers_json_lacks_or_no_field_can_mean_are_refused(literal, why):
    with pytest.raises(JSONBodyError, match=why):
        parse_json_body(f'{{"top_k": {literal}}}'.encode())


def test_numbers_in_range_are_read_as_python_reads_them():
    values = [INT64_MAX, INT64_MIN, 0, -1, 1.7976931348623157e308, 5e-324, -0.0, 0.5]
    assert parse_json_body(json.dumps(values).encode()) == values
    assert parse_json_body(b"[1e-400]") == [0.0]  # underflow is a finite number


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig", "utf-16", "utf-16-le",
                                      "utf-16-be", "utf-32", "utf-32-le", "utf-32-be"])
def test_json_text_in_each_unicode_encoding_reads_alike(encoding):
    value = {"question": "Who is Scrooge? 狄更斯 🎄", "top_k": 3}
    assert parse_json_body(json.dumps(value, ensure_ascii=False).encode(encoding)) == value


@pytest.mark.parametrize("body, why", [
    (b'{"question": "\xff"}', "byte 0xff at position 14"),
    (b'{"question": "\xed\xa0\x80"}', "byte 0xed at position 14"),  # a UTF-8 surrogate
    (b'{"question": "who \\ud800"}', "lone surrogate"),
    (b'{"\\udc00": 1}', "lone surrogate"),
    (b'{"question": "q"', "not JSON"),
    (b"question=q", "not JSON"),
    (b" ", "not JSON"),
])
def test_bodies_that_are_no_json_text_are_refused_naming_why(body, why):
    with pytest.raises(JSONBodyError, match=why):
        parse_json_body(body)


def test_an_empty_body_is_none_and_a_pair_of_surrogates_is_text():
    assert parse_json_body(b"") is None
    assert parse_json_body(b'"\\ud83c\\udf84"') == "🎄"
