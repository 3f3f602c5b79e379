"""Prompts: :class:`PromptTemplate` (its hash keys the cache) and :func:`prompt_room`, the
budget of model tokens a prompt leaves in the context window. No Dagster here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kgloom.core.ids import content_id
from kgloom.llm.client import CachedLLM


@dataclass(frozen=True)
class PromptTemplate:
    """A prompt: system text, few-shot turns and a user template with ``{placeholders}``.

    Its ``hash`` covers every fixed part and the schema, so editing any of them changes
    the cache key of exactly the calls that use this template. ``max_tokens`` is used
    only for an unbounded schema; a bounded one gets :func:`kgloom.llm.grammar.reply_token_bound`.
    """

    name: str
    system: str
    user: str
    schema: dict[str, Any]
    max_tokens: int
    examples: tuple[tuple[str, str], ...] = ()  # (user, assistant) few-shot turns

    @property
    def hash(self) -> str:
        """Hex SHA-256 of the template's fixed parts."""
        return content_id("template", self.name, self.system, self.user,
                          json.dumps(self.examples), json.dumps(self.schema, sort_keys=True),
                          self.max_tokens)

    def messages(self, **inputs: str) -> list[dict[str, str]]:
        """Return chat messages: system, the few-shot turns, then the filled user turn."""
        msgs = [{"role": "system", "content": self.system}]
        for user, assistant in self.examples:
            msgs += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
        msgs.append({"role": "user", "content": self.user.format(**inputs)})
        return msgs


CHAT_OVERHEAD_TOKENS = 8  # per message: role markers of a chat template (SmolLM2: 5)


def prompt_room(llm: CachedLLM, template: PromptTemplate, max_reply_tokens: int,
                **inputs: str) -> int | None:
    """Model tokens left in the context window once the prompt of ``template`` with
    ``inputs`` and a reply of ``max_reply_tokens`` are in it (negative: it does not fit),
    counted with the model's own tokenizer; None when the backend cannot count (the fake
    model, a cache-only run)."""
    backend = llm.backend
    count = getattr(backend, "count_tokens", None)
    n_ctx = getattr(backend, "n_ctx", None)
    if count is None or not n_ctx:
        return None
    msgs = template.messages(**inputs)
    used = sum(count(m["content"]) + CHAT_OVERHEAD_TOKENS for m in msgs)
    return n_ctx - used - max_reply_tokens
