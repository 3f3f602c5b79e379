"""Per-stage statistics of LLM calls (:class:`StageStats`): calls, cache hits, tokens,
model seconds, retries and failures. No Dagster here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kgloom.llm.backend import Completion


@dataclass
class StageStats:
    """Counters of one stage's LLM use. Tokens are model tokens; seconds wall-clock.

    ``seconds`` is the time spent in model calls (the backend's ``complete``);
    ``prompt_seconds`` and ``generation_seconds`` are llama.cpp's own timings of prompt
    evaluation and decoding within it; the rest of ``seconds`` (``outside_seconds`` in
    :meth:`as_dict`) is sampling, grammar and llama-cpp-python's Python per token.
    """

    calls: int = 0  # calls that reached the model
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    failures: int = 0
    retries: int = 0
    prompt_eval_tokens: int = 0  # prompt tokens evaluated (the rest came from the KV cache)
    prompt_seconds: float = 0.0
    generation_seconds: float = 0.0
    threads: dict[str, int] = field(default_factory=dict)  # CPU threads -> calls

    def add(self, reply: Completion) -> None:
        """Count one reply that came from the model (not from the cache)."""
        self.calls += 1
        self.prompt_tokens += reply.prompt_tokens
        self.completion_tokens += reply.completion_tokens
        self.seconds += reply.seconds
        self.prompt_eval_tokens += reply.prompt_eval_tokens
        self.prompt_seconds += reply.prompt_seconds
        self.generation_seconds += reply.generation_seconds
        if reply.threads:
            key = str(reply.threads)
            self.threads[key] = self.threads.get(key, 0) + 1

    @classmethod
    def merged(cls, parts) -> StageStats:
        """One StageStats summing the counters of ``parts`` (None entries skipped)."""
        total = cls()
        for st in parts:
            if st is None:
                continue
            for k, v in st.__dict__.items():
                if k == "threads":
                    for n, calls in v.items():
                        total.threads[n] = total.threads.get(n, 0) + calls
                else:
                    setattr(total, k, getattr(total, k) + v)
        return total

    def as_dict(self) -> dict[str, float]:
        """Return the counters plus derived figures: prompt tokens/s and generation
        tokens/s (llama.cpp's own timings of each phase), the share of prompt tokens
        served from the reused KV-cache prefix, and ``outside_seconds``: model-call
        seconds outside llama.cpp's prompt and decode timings (0 when a backend reports
        no phase timings)."""
        d = dict(self.__dict__)
        d["threads"] = dict(self.threads)
        timed = self.prompt_seconds + self.generation_seconds
        d["outside_seconds"] = round(max(0.0, self.seconds - timed), 4) if timed else 0.0
        d["prompt_tokens_per_s"] = (round(self.prompt_eval_tokens / self.prompt_seconds, 1)
                                    if self.prompt_seconds else 0.0)
        d["generation_tokens_per_s"] = (round(self.completion_tokens / self.generation_seconds, 1)
                                        if self.generation_seconds else 0.0)
        d["prefix_reuse_rate"] = (round(1 - self.prompt_eval_tokens / self.prompt_tokens, 4)
                                  if self.prompt_tokens and self.prompt_eval_tokens else 0.0)
        total = self.calls + self.cache_hits
        d["cache_hit_rate"] = round(self.cache_hits / total, 4) if total else 0.0
        return d
