"""A deterministic fake LLM backend, chosen by configuration (``fake=True``) for unit
tests and UI demos without a model.

:class:`FakeBackend` answers every call with the JSON instance of the requested schema
that :func:`schema_instance` builds from a hash of the prompt: valid by construction,
the same for the same prompt, different for different prompts. ``broken_every`` makes
every n-th reply invalid JSON, to exercise the retry and failures paths. ``worst_case``
answers like a model that fills every string with multi-byte characters instead
(:func:`grammar_sample` over the reply's grammar), counts one token per UTF-8 byte (the
most a byte-level vocabulary can take) and is cut at ``max_tokens`` as llama.cpp would.
``delay_s`` makes each call sleep, to catch a run in the middle (crash tests).
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
import time
from typing import Any

from kgloom.llm.backend import Completion
from kgloom.llm.grammar import Node, parse_gbnf


def schema_instance(schema: dict[str, Any], salt: int = 0) -> Any:
    """Return a deterministic instance of the JSON ``schema`` (the subset kgloom uses).

    Supports object (all properties), array (``min(maxItems, 3)`` items, at least
    ``minItems``; a tuple: its ``prefixItems``), string (``enum`` rotated by ``salt``;
    else text cut to ``maxLength``), integer and number (``minimum``, or 0).
    """
    t = schema.get("type")
    if t == "object":
        return {k: schema_instance(v, salt) for k, v in schema.get("properties", {}).items()}
    if t == "array" and "prefixItems" in schema:  # a tuple: item j's enum rotated by j more
        return [schema_instance(v, salt + j) for j, v in enumerate(schema["prefixItems"])]
    if t == "array":
        n = max(schema.get("minItems", 0), min(schema.get("maxItems", 3), 3))
        item = schema.get("items", {})
        if item.get("type") == "object" and any(
                "enum" in p for p in item.get("properties", {}).values()):
            return [_object_with_offset(item, salt + i) for i in range(n)]
        return [schema_instance(item, salt + i) for i in range(n)]
    if t == "string":
        if "enum" in schema:
            return schema["enum"][salt % len(schema["enum"])]
        text = f"fake text {salt}"
        return text[: schema.get("maxLength", len(text))] or "x"
    if t in ("integer", "number"):
        return schema.get("minimum", 0) + (salt % 3)
    return None


def _object_with_offset(schema: dict[str, Any], salt: int) -> dict[str, Any]:
    # relationship items: give source and target different enum values
    return {k: schema_instance(v, salt + (1 if k == "target" else 0))
            for k, v in schema.get("properties", {}).items()}


# characters a worst-case sampler prefers inside a negated class: multi-byte first
_WIDE = "\U0001F469\u200d\U0001F52C\u4e2d\u00e9\u0301a"


def grammar_sample(gbnf: str, rng: random.Random, long: bool = True,
                   start: str = "root") -> str:
    """Return a random text the grammar ``gbnf`` produces (iteratively, so deeply nested
    rules are fine). Characters of a class are drawn preferring the widest in UTF-8; with
    ``long``, optional parts are taken and alternatives other than the empty one are
    preferred, so strings run to their bounds."""
    rules = parse_gbnf(gbnf)
    out: list[str] = []
    todo: list[Node] = [Node("ref", text=start)]
    while todo:
        node = todo.pop()
        if node.kind == "lit":
            out.append(node.text)
        elif node.kind == "class":
            out.append(_class_char(node, rng))
        elif node.kind == "ref":
            todo.append(rules[node.text])
        elif node.kind == "seq":
            todo.extend(reversed(node.items))
        elif node.kind == "alt":
            options = ([n for n in node.items if not _empty(n)] if long
                       else list(node.items))
            todo.append(rng.choice(options or list(node.items)))
        else:
            hi = node.lo + 3 if node.hi is None else node.hi
            count = hi if long else rng.randint(node.lo, hi)
            todo.extend([node.items[0]] * count)
    return "".join(out)


def _empty(node: Node) -> bool:
    """True for an alternative that can only produce "" (e.g. ``""``)."""
    return all(k.kind == "lit" and not k.text for k in node.items)


def _class_char(node: Node, rng: random.Random) -> str:
    def inside(cp: int) -> bool:
        return any(lo <= cp <= hi for lo, hi in node.ranges) != node.negated

    if node.negated:
        return next((c for c in _WIDE if inside(ord(c))), "x")
    lo, hi = max(node.ranges, key=lambda r: r[1])
    for _ in range(100):
        cp = rng.randint(max(lo, hi - 0x3FF), hi)  # the top of the widest range
        if not 0xD800 <= cp <= 0xDFFF:
            return chr(cp)
    return chr(lo)


class FakeBackend:
    """An ``LLMBackend`` that needs no model (see module doc). Counts its calls."""

    def __init__(self, model_id: str = "fake-llm", broken_every: int = 0,
                 worst_case: bool = False, delay_s: float = 0.0) -> None:
        self.model_id = model_id
        self.broken_every = broken_every
        self.worst_case = worst_case
        self.delay_s = delay_s
        self.calls = 0
        self._lock = threading.Lock()

    def complete(self, messages: list[dict[str, str]], schema: dict[str, Any],
                 max_tokens: int, seed: int, stop_on_loop: bool = False) -> Completion:
        """Return a schema-valid JSON reply derived from a hash of ``messages`` and ``seed``
        (with ``worst_case``: a grammar sample cut at ``max_tokens`` bytes). Thread-safe.
        ``stop_on_loop`` is ignored (its replies are made whole, not decoded)."""
        with self._lock:
            self.calls += 1
            n = self.calls
        if self.delay_s:
            time.sleep(self.delay_s)
        digest = hashlib.sha256((json.dumps(messages) + str(seed)).encode()).digest()
        if self.worst_case:
            from kgloom.llm.grammar import json_grammar

            raw = grammar_sample(json_grammar(schema), random.Random(digest)).encode("utf-8")
            text = raw[:max_tokens].decode("utf-8", errors="ignore")  # cut as llama.cpp would
            return Completion(text=text, prompt_tokens=0,
                              completion_tokens=min(len(raw), max_tokens), seconds=0.0)
        if self.broken_every and n % self.broken_every == 0:
            text = '{"entities": [{"name": '  # cut off: invalid JSON
        else:
            text = json.dumps(schema_instance(schema, digest[0]))
        prompt_tokens = sum(len(m["content"].split()) for m in messages)
        return Completion(text=text, prompt_tokens=prompt_tokens,
                          completion_tokens=len(text.split()), seconds=0.0)
