"""What kgloom needs from a model: :class:`LLMBackend`, a JSON-constrained chat completion
returning a :class:`Completion`. Implementations: :class:`kgloom.llm.llamacpp.LlamaCppBackend`
(in-process), :class:`kgloom.llm.http.OpenAIChatBackend` (model servers),
:class:`kgloom.llm.fake.FakeBackend` (tests, demos). No Dagster here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class Completion:
    """One LLM reply. Tokens are the model's own; seconds are wall-clock.

    ``prompt_eval_tokens`` are the prompt tokens the model really evaluated: fewer than
    ``prompt_tokens`` when the KV cache of a shared prefix was reused. ``prompt_seconds``
    and ``generation_seconds`` split the model time (llama.cpp's perf counters); 0 when
    unknown (cached replies, other backends).
    """

    text: str
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    prompt_eval_tokens: int = 0
    prompt_seconds: float = 0.0
    generation_seconds: float = 0.0
    threads: int = 0  # CPU threads the call ran on (0: unknown)


class LLMBackend(Protocol):
    """What kgloom needs from a model: a JSON-constrained chat completion."""

    model_id: str  # identity of the weights (e.g. the GGUF SHA-256)

    def complete(self, messages: list[dict[str, str]], schema: dict[str, Any],
                 max_tokens: int, seed: int, stop_on_loop: bool = False) -> Completion:
        """Return the reply to ``messages`` constrained to ``schema``. With
        ``stop_on_loop`` a backend that decodes token by token may stop once a string
        value of the reply repeats itself (:func:`kgloom.names.grounding.find_reply_loop`) and
        return the JSON written so far; one that cannot (a model server) ignores it."""
        ...
