"""What a stage calls: :class:`CachedLLM`, a backend behind the cache counting per-stage
statistics, whose :meth:`CachedLLM.map` sends a stage's independent calls
``concurrency`` at a time (threads); and :func:`open_llm`, the one way to open a model
(a GGUF file, or the fake backend) behind a cache file. No Dagster here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

from kgloom.llm.backend import Completion, LLMBackend
from kgloom.llm.cache import LLMCache
from kgloom.llm.fake import FakeBackend
from kgloom.llm.llamacpp import LlamaCppBackend
from kgloom.llm.model_files import locate_model
from kgloom.llm.stage_stats import StageStats

T = TypeVar("T")
R = TypeVar("R")


def map_concurrent(fn: Callable[[T], R], items: Sequence[T], concurrency: int,
                   progress: Callable[[int, int], None] | None = None) -> list[R]:
    """Return ``[fn(x) for x in items]``, running up to ``concurrency`` calls at once.

    Threads (``concurrent.futures.ThreadPoolExecutor``): the work is waiting on a model
    (llama.cpp releases the GIL, an HTTP call waits on the network). Results keep the
    order of ``items`` whatever order the calls finish in, so the output does not depend
    on ``concurrency``. ``progress(done, total)`` is called from the calling thread after
    each finished item. With ``concurrency`` 1 everything runs in the calling thread.

    Raises:
        ValueError: when ``concurrency`` <= 0.
        the first exception raised by ``fn``: items not yet started are cancelled and the
            calls in flight are waited for (each is bounded by its backend's timeout).
    """
    if concurrency <= 0:
        raise ValueError(f"LLM concurrency must be >= 1, got {concurrency}")
    total = len(items)
    if concurrency == 1 or total <= 1:
        out = []
        for i, x in enumerate(items, 1):
            out.append(fn(x))
            if progress:
                progress(i, total)
        return out
    results: list[Any] = [None] * total
    pool = ThreadPoolExecutor(max_workers=min(concurrency, total),
                              thread_name_prefix="kgloom-llm")
    try:
        futures = {pool.submit(fn, x): i for i, x in enumerate(items)}
        pending, done = set(futures), 0
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in finished:
                results[futures[f]] = f.result()  # re-raises the call's exception
                done += 1
                if progress:
                    progress(done, total)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return results


@dataclass
class CachedLLM:
    """A backend behind the cache, counting per-stage statistics.

    ``backend`` may be None: then every call must hit the cache (a cache-only run) and a
    miss raises :class:`ModelFileError`-free ``LookupError``. Creating the backend lazily
    is the caller's business (see ``resources/model.py``).

    ``concurrency`` is how many calls :meth:`map` sends at once. :meth:`call` is
    thread-safe: statistics are updated under a lock, and two threads asking for the same
    key make one model call (the second waits and gets a cache hit).

    Raises:
        ValueError: when ``concurrency`` <= 0.
    """

    backend: LLMBackend | None
    cache: LLMCache
    model_id: str
    stats: dict[str, StageStats] = field(default_factory=dict)
    concurrency: int = 1
    lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False,
                                 compare=False)
    _inflight: dict[str, list] = field(default_factory=dict, init=False, repr=False,
                                       compare=False)

    def __post_init__(self) -> None:
        if self.concurrency <= 0:
            raise ValueError(f"LLM concurrency must be >= 1, got {self.concurrency}")

    def release(self) -> None:
        """Free the backend's model now (an in-process GGUF's weights, KV cache and
        buffers: about 400 MB for the bundled model as BF16; a server backend's
        connections) instead of whenever the garbage collector reaches it: each asset
        opens its own model, and measured on 200 pool passages a finished partition's
        model was still resident when the next one loaded (+383 MB a model). Statistics,
        :meth:`backend_settings` and the cache stay readable; a model call after this
        raises."""
        close = getattr(self.backend, "close", None)
        if close is not None:
            close()

    def map(self, fn: Callable[[T], R], items: Sequence[T],
            progress: Callable[[int, int], None] | None = None) -> list[R]:
        """:func:`map_concurrent` with this LLM's ``concurrency``: results in item order."""
        return map_concurrent(fn, items, self.concurrency, progress)

    @contextmanager
    def _claim(self, key: str) -> Iterator[None]:
        """Hold the per-key lock of ``key`` (created on first use, dropped when free)."""
        with self.lock:
            entry = self._inflight.setdefault(key, [threading.Lock(), 0])
            entry[1] += 1
        try:
            with entry[0]:
                yield
        finally:
            with self.lock:
                entry[1] -= 1
                if not entry[1]:
                    del self._inflight[key]

    def backend_settings(self) -> dict[str, Any]:
        """The backend's settings (a ``settings`` dict where it has one: threads, batch
        sizes, flash attention, context size, sampler) with the model id, for the
        index metadata."""
        return {"model_id": self.model_id, **(getattr(self.backend, "settings", None) or {})}

    def call(self, stage: str, template_hash: str, input_hash: str,
             messages: list[dict[str, str]], schema: dict[str, Any], max_tokens: int,
             seed: int, stop_on_loop: bool = False) -> Completion:
        """Return the reply for one call, from the cache when the key is known.
        ``stop_on_loop`` (see :meth:`kgloom.llm.backend.LLMBackend.complete`) is part of
        the key when set, so the keys of the calls without it are unchanged.

        Raises:
            LookupError: on a cache miss when no backend is configured.
        """
        with self.lock:
            st = self.stats.setdefault(stage, StageStats())
        params: dict[str, Any] = {"schema": schema, "max_tokens": max_tokens, "seed": seed}
        if stop_on_loop:
            params["stop_on_loop"] = True
        key = LLMCache.key(self.model_id, template_hash, input_hash, params)
        with self._claim(key):
            hit = self.cache.get(key)
            if hit is not None:
                with self.lock:
                    st.cache_hits += 1
                return hit
            if self.backend is None:
                raise LookupError(f"no cached reply for {stage} call {key[:12]} and no backend")
            reply = self.backend.complete(messages, schema, max_tokens, seed,
                                          stop_on_loop=stop_on_loop)
            with self.lock:
                st.add(reply)
            self.cache.put(key, stage, self.model_id, template_hash, input_hash, params, reply)
        return reply


def open_llm(cache_path: str | Path, model_path: str | Path | None = None, fake: bool = False,
             n_ctx: int = 4096, n_threads: int | None = None, n_gpu_layers: int = 0,
             temperature: float = 0.0, expected_sha256: str | None = None,
             concurrency: int = 1, fake_delay_s: float = 0.0, n_batch: int = 512,
             n_ubatch: int = 512, flash_attn: bool = False,
             grammar_first: bool = True, choice_decoding: bool = True,
             weights: str = "auto") -> CachedLLM:
    """Open a model behind the cache in ``cache_path``, with no Dagster import (the one
    way the pipeline's LLM resource and the query side load a model).

    Args:
        cache_path: the SQLite cache file (created when missing).
        model_path: a GGUF file; None or empty: the bundled SmolLM2-135M-Instruct, whose
            SHA-256 is then verified.
        fake: use :class:`kgloom.llm.fake.FakeBackend` (no model file read).
        n_ctx / n_threads / n_gpu_layers / temperature: see :class:`LlamaCppBackend`.
        expected_sha256: verify a given ``model_path`` against this digest.
        concurrency: see :class:`CachedLLM` (in-process calls queue on the model's lock).
        fake_delay_s: seconds each fake call sleeps (crash and concurrency tests).
        n_batch / n_ubatch / flash_attn / grammar_first / choice_decoding: see
            :class:`LlamaCppBackend`.
        weights: how the GGUF's weights are stored when loaded
            (:func:`kgloom.llm.model_files.resolve_weights`: "auto", "file", "f16",
            "bf16", "q8_0", "q4_0"); a converted copy is made once by
            :func:`kgloom.llm.model_files.converted_gguf`.

    Returns:
        a :class:`CachedLLM` (model id = the GGUF's SHA-256, ``+<weights>`` when
        converted: :func:`kgloom.llm.model_files.model_identity`; or ``fake-llm``).

    Raises:
        ModelFileError: a missing, unreadable or wrong model file (before loading it),
            or a conversion that fails.
        ValueError: an unknown ``weights``.
    """
    cache = LLMCache(cache_path)
    if fake:
        return CachedLLM(FakeBackend(delay_s=fake_delay_s), cache, "fake-llm",
                         concurrency=concurrency)
    load, model_id, kind = locate_model(model_path, weights, expected_sha256)
    backend = LlamaCppBackend(load, n_ctx=n_ctx, n_threads=n_threads,
                              n_gpu_layers=n_gpu_layers, temperature=temperature,
                              n_batch=n_batch, n_ubatch=n_ubatch, flash_attn=flash_attn,
                              grammar_first=grammar_first, choice_decoding=choice_decoding,
                              model_id=model_id)
    backend.settings["weights"] = kind  # recorded in index-summary.json's llm_backend
    # cast: tenacity types a @retry method as a _RetryDecorated protocol without
    # __get__, so pyright does not bind ``self`` and misses that complete fits LLMBackend
    return CachedLLM(cast(LLMBackend, backend), cache, model_id, concurrency=concurrency)
