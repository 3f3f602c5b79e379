"""The model a search answers with: opened on first use with its token counter
(:class:`SearchModel`), seen through a log of every call (:class:`CallLog`), and what an
answer must say about it (:func:`model_notice`: the bundled demo model's and the fake
model's answers are unreliable).
"""

from __future__ import annotations

from typing import Any

from kgloom.llm import SMOLLM2_SHA256, CachedLLM, Completion, StageStats, open_llm
from kgloom.query.context_builder.context import TokenCounter, token_counter

DEMO_MODEL_NOTICE = (
    "This answer comes from the bundled demo model (SmolLM2-135M): it is often wrong and "
    "may repeat or invent things. The retrieved context and the sources it cites are the "
    "reliable part; point --model-path at a larger GGUF (or KGLOOM_LLM_URL at a model "
    "server) for answers worth reading.")
FAKE_MODEL_NOTICE = (
    "This answer comes from the fake test model (--fake-llm): it is placeholder text. The "
    "retrieved context and the sources it cites are the reliable part.")


def model_notice(model_id: str) -> str | None:
    """What an answer must say about the model that wrote it: :data:`DEMO_MODEL_NOTICE`
    for the bundled SmolLM2-135M (its SHA-256 as model id, with any ``+<weights>``),
    :data:`FAKE_MODEL_NOTICE` for the fake model, else None."""
    if model_id.split("+")[0] == SMOLLM2_SHA256:
        return DEMO_MODEL_NOTICE
    if model_id == "fake-llm":
        return FAKE_MODEL_NOTICE
    return None


class CallLog:
    """A :class:`CachedLLM` seen through a log of every call, cache hits included, so a
    search reports the calls and prompt tokens its algorithm needs however warm the cache
    is (``prompt_tokens`` of a hit are those stored with it). Used where
    :func:`kgloom.llm.structured_call` wants an LLM."""

    def __init__(self, llm: CachedLLM) -> None:
        self.llm = llm
        self.stats = llm.stats
        self.lock = llm.lock
        self.model_id = llm.model_id
        self.backend = llm.backend
        self.rows: list[dict[str, Any]] = []

    def call(self, stage: str, *args: Any, **kwargs: Any) -> Completion:
        """Forward to :meth:`CachedLLM.call` and log (stage, tokens, cached, seconds)."""
        with self.lock:
            hits = self.stats.get(stage, StageStats()).cache_hits
        reply = self.llm.call(stage, *args, **kwargs)
        with self.lock:
            cached = self.stats[stage].cache_hits > hits
        self.rows.append({"stage": stage, "prompt_tokens": int(reply.prompt_tokens or 0),
                          "completion_tokens": int(reply.completion_tokens or 0),
                          "cached": cached,
                          "seconds": float(reply.seconds or 0.0)})
        return reply

    def summary(self) -> dict[str, dict[str, float]]:
        """Per stage and ``total``: calls, cache hits, prompt / completion tokens, model
        seconds (of the calls that reached the model)."""
        out: dict[str, dict[str, float]] = {}
        for r in self.rows:
            for key in (r["stage"], "total"):
                s = out.setdefault(key, {"calls": 0, "cache_hits": 0, "prompt_tokens": 0,
                                         "completion_tokens": 0, "model_seconds": 0.0})
                s["calls"] += 1
                s["cache_hits"] += int(r["cached"])
                s["prompt_tokens"] += r["prompt_tokens"]
                s["completion_tokens"] += r["completion_tokens"]
                s["model_seconds"] = round(s["model_seconds"]
                                           + (0.0 if r["cached"] else r["seconds"]), 3)
        return out


class SearchModel:
    """The model search answers with, opened on first use, and its token counter.

    Args:
        llm: an open :class:`CachedLLM`; None opens one on first need with
            :func:`kgloom.llm.open_llm` (``open_args``: ``cache_path``, ``model_path``,
            ``fake``, ``n_ctx``, ``n_threads``).
        open_args: the keyword arguments of :func:`kgloom.llm.open_llm`.
    """

    def __init__(self, llm: CachedLLM | None, open_args: dict[str, Any]) -> None:
        self._llm = llm
        self.open_args = open_args
        self._counter: TokenCounter | None = None

    @property
    def llm(self) -> CachedLLM:
        """The cached model, opened on first use.

        Raises:
            kgloom.llm.ModelFileError: a missing or wrong model file.
        """
        if self._llm is None:
            self._llm = open_llm(**self.open_args)
        return self._llm

    @property
    def counter(self) -> TokenCounter:
        """Token counter of the model (its own tokenizer when it has one)."""
        if self._counter is None:
            self._counter = token_counter(self.llm.backend)
        return self._counter
