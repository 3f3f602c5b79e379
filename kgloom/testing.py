"""A deterministic fake LLM backend, for unit tests and UI demos without a model.

:class:`FakeBackend` answers every call with the JSON instance of the requested schema
that :func:`schema_instance` builds from a hash of the prompt: valid by construction,
the same for the same prompt, different for different prompts. ``broken_every`` makes
every n-th reply invalid JSON, to exercise the retry and failures paths.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from kgloom.llm import Completion


def schema_instance(schema: dict[str, Any], salt: int = 0) -> Any:
    """Return a deterministic instance of the JSON ``schema`` (the subset kgloom uses).

    Supports object (all properties), array (``min(maxItems, 3)`` items, at least
    ``minItems``), string (``enum`` rotated by ``salt``; else text cut to ``maxLength``),
    integer and number (``minimum``, or 0).
    """
    t = schema.get("type")
    if t == "object":
        return {k: schema_instance(v, salt) for k, v in schema.get("properties", {}).items()}
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


class FakeBackend:
    """An ``LLMBackend`` that needs no model (see module doc). Counts its calls."""

    def __init__(self, model_id: str = "fake-llm", broken_every: int = 0) -> None:
        self.model_id = model_id
        self.broken_every = broken_every
        self.calls = 0

    def complete(self, messages: list[dict[str, str]], schema: dict[str, Any],
                 max_tokens: int, seed: int) -> Completion:
        """Return a schema-valid JSON reply derived from a hash of ``messages`` and ``seed``."""
        self.calls += 1
        digest = hashlib.sha256((json.dumps(messages) + str(seed)).encode()).digest()
        if self.broken_every and self.calls % self.broken_every == 0:
            text = '{"entities": [{"name": '  # cut off: invalid JSON
        else:
            text = json.dumps(schema_instance(schema, digest[0]))
        prompt_tokens = sum(len(m["content"].split()) for m in messages)
        return Completion(text=text, prompt_tokens=prompt_tokens,
                          completion_tokens=len(text.split()), seconds=0.0)
