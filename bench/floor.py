"""The floor of an index's model time: how long the index's own model takes to read the
passages once (llama.cpp prompt evaluation of their tokens, nothing generated).

Every LLM call the pipeline makes evaluates at least the tokens of the text it is about,
so evaluating each passage's tokens exactly once, packed densely into full contexts, is
a lower bound on the model time of any pipeline over them with that model on that
machine; ``ratio`` = the pipeline's wall seconds / the floor's seconds is what every
speed issue after issue 27 is measured against.

Method: the GGUF is opened once the way the pipeline opens it
(:class:`kgloom.llm.LlamaCppBackend`, so the same ``n_ctx``, ``n_batch``, ``n_ubatch``,
``flash_attn`` and the SHA-256 check of the bundled model; the probe,
bench/bench_llama_probe.py, opens it the same way), with a fixed thread count: the one the
index used for most of its calls (its summary's per-stage ``llm.threads``), else the
index's ``llm.n_threads`` setting, else every usable core (:func:`kgloom.llm.cpu.
usable_cores`). Each text is tokenized (``Llama.tokenize``, no BOS, as ``count_tokens``),
the token lists are packed in order into chunks of at most ``n_ctx`` tokens (a text longer
than ``n_ctx`` is cut across chunks; texts are never split otherwise), and every chunk is
evaluated from an empty KV cache (``Llama.reset``, then ``Llama.eval``, which decodes
``n_batch`` tokens at a time). Seconds are the wall time of the evaluation alone; loading
and tokenizing are reported beside it. Packing into full contexts makes each token attend
to about ``n_ctx / 2`` earlier ones, more than in the pipeline's prompts (a few hundred
to 1.7 k tokens); ``chunk_tokens`` (e.g. ``n_batch``) gives the tighter floor. A time
budget measures the rate on a spread sample of the chunks and extrapolates (the whole
pool takes about an hour on 2 busy cores). No Dagster, no pipeline stage here.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.stamp import load_average


def floor_settings(summary: dict | None = None, threads: int = 0) -> dict:
    """The llama.cpp settings the floor runs with: ``n_ctx``, ``n_batch``, ``n_ubatch``,
    ``flash_attn``, ``weights`` (``llm.weights``, as the index resolved it) and
    ``n_threads`` (an int), and ``threads_from`` (where the thread
    count came from).

    Args:
        summary: an index's ``index-summary.json`` (dict) whose settings and thread
            counts to follow; None: kgloom's defaults (:class:`kgloom.settings.
            LLMSettings`, environment included).
        threads: a thread count that overrides the rest (0: none).
    """
    from kgloom.llm.cpu import usable_cores
    from kgloom.settings import LLMSettings

    defaults = LLMSettings()
    backend = (summary or {}).get("llm_backend") or {}
    out: dict[str, Any] = {k: backend.get(k, getattr(defaults, k))
                           for k in ("n_ctx", "n_batch", "n_ubatch", "flash_attn", "weights")}
    used: Counter[int] = Counter()
    for stage in ((summary or {}).get("stages") or {}).values():
        for n, calls in ((stage.get("llm") or {}).get("threads") or {}).items():
            used[int(n)] += int(calls)
    if threads:
        out["n_threads"], out["threads_from"] = threads, "--threads"
    elif used:
        out["n_threads"] = used.most_common(1)[0][0]
        out["threads_from"] = f"the index's calls (threads: calls {dict(sorted(used.items()))})"
    elif isinstance(backend.get("n_threads"), int) and backend["n_threads"] > 0:
        out["n_threads"], out["threads_from"] = backend["n_threads"], "the index's setting"
    elif defaults.n_threads:
        out["n_threads"], out["threads_from"] = defaults.n_threads, "llm.n_threads"
    else:
        out["n_threads"], out["threads_from"] = usable_cores(), "usable cores"
    return out


def open_model(settings: dict, model_path: str | Path = "") -> Any:
    """The ``llama_cpp.Llama`` of the model at ``model_path`` (empty: the bundled GGUF,
    :func:`kgloom.llm.default_gguf_path`, SHA-256 checked, with its weights converted as
    ``settings["weights"]`` says, as the index loads it), opened by
    :class:`kgloom.llm.LlamaCppBackend` with ``settings`` (:func:`floor_settings`).

    Raises:
        kgloom.llm.ModelFileError: a missing, unreadable or wrong model file.
    """
    from kgloom.llm import LlamaCppBackend
    from kgloom.llm.model_files import locate_model

    load, model_id, _ = locate_model(model_path or None, settings.get("weights", "auto"))
    backend = LlamaCppBackend(load, n_ctx=settings["n_ctx"], n_threads=settings["n_threads"],
                              n_batch=settings["n_batch"], n_ubatch=settings["n_ubatch"],
                              flash_attn=settings["flash_attn"], grammar_first=False,
                              model_id=model_id)
    return backend._llm


def pack(token_lists: Sequence[Sequence[int]], n_ctx: int) -> list[list[int]]:
    """``token_lists`` concatenated in order and cut into chunks of ``n_ctx`` tokens
    (the last one shorter), a list starting a new chunk when it does not fit in the
    current one's room (so no text is split unless it is longer than ``n_ctx``).

    Raises:
        ValueError: when ``n_ctx`` < 1.
    """
    if n_ctx < 1:
        raise ValueError(f"n_ctx must be >= 1, got {n_ctx}")
    chunks: list[list[int]] = []
    cur: list[int] = []
    for tokens in token_lists:
        if cur and len(cur) + len(tokens) > n_ctx:
            chunks.append(cur)
            cur = []
        cur.extend(tokens)
        while len(cur) > n_ctx:  # a text longer than the context: cut it
            chunks.append(cur[:n_ctx])
            cur = cur[n_ctx:]
    if cur:
        chunks.append(cur)
    return chunks


def prompt_floor(texts: Sequence[str], llm: Any, n_ctx: int, chunk_tokens: int = 0,
                 budget_s: float = 0.0) -> dict:
    """Evaluate the tokens of ``texts`` once with ``llm`` (a ``llama_cpp.Llama``, or any
    object with its ``tokenize``, ``reset`` and ``eval``) packed into chunks
    (:func:`pack`) of ``chunk_tokens`` (0: ``n_ctx``), each from an empty cache; return
    the figures.

    With ``budget_s`` > 0 the chunks are evaluated in a fixed shuffled order (seed 0, so
    the sample spreads over the whole corpus) until ``budget_s`` seconds have passed (at
    least one chunk), and ``floor_seconds`` is extrapolated: all tokens / the measured
    tokens per second (chunks are all full but the last, so the rate carries over). On
    2 busy cores prompt evaluation of the bundled model ran at 100-200 tokens/s
    (bench/results/llama_probe.json), so the 6,119-passage pool's 0.69 M tokens take about
    an hour: a budget measures the rate in minutes.

    Returns:
        ``{"texts", "tokens", "chunks", "chunk_tokens", "evaluated_tokens",
        "evaluated_chunks", "extrapolated", "floor_seconds", "tokens_per_s",
        "tokenize_seconds", "load_before", "load_after"}``.

    Raises:
        ValueError: ``chunk_tokens`` above ``n_ctx`` (a chunk must fit the context).
    """
    chunk_tokens = chunk_tokens or n_ctx
    if chunk_tokens > n_ctx:
        raise ValueError(f"chunk_tokens {chunk_tokens} exceeds n_ctx {n_ctx}")
    before = load_average()
    t0 = time.perf_counter()
    token_lists = [llm.tokenize(t.encode("utf-8"), add_bos=False, special=True)
                   for t in texts]
    tokenize_s = time.perf_counter() - t0
    chunks = pack(token_lists, chunk_tokens)
    order = list(range(len(chunks)))
    if budget_s > 0:
        random.Random(0).shuffle(order)
    evaluated = done = 0
    t0 = time.perf_counter()
    seconds = 0.0
    for i in order:
        if done and budget_s > 0 and seconds >= budget_s:
            break
        llm.reset()
        llm.eval(chunks[i])
        evaluated += len(chunks[i])
        done += 1
        seconds = time.perf_counter() - t0
    tokens = sum(len(c) for c in chunks)
    rate = evaluated / seconds if seconds > 0 else None
    partial = done < len(chunks)
    floor = tokens / rate if partial and rate else seconds
    return {"texts": len(texts), "tokens": tokens, "chunks": len(chunks),
            "chunk_tokens": chunk_tokens, "evaluated_tokens": evaluated,
            "evaluated_chunks": done, "extrapolated": partial,
            "floor_seconds": round(floor, 2),
            "tokens_per_s": round(rate, 1) if rate else None,
            "tokenize_seconds": round(tokenize_s, 2), "load_before": before,
            "load_after": load_average()}


def measure_floor(texts: Sequence[str], settings: dict, model_path: str | Path = "",
                  llm: Any = None, chunk_tokens: int = 0, budget_s: float = 0.0) -> dict:
    """:func:`prompt_floor` of ``texts`` (``chunk_tokens``, ``budget_s``: see there) with
    the model opened by :func:`open_model` (or ``llm`` when given), with ``settings`` and
    the model's load seconds beside it."""
    t0 = time.perf_counter()
    model = llm if llm is not None else open_model(settings, model_path)
    load_s = time.perf_counter() - t0
    out = prompt_floor(texts, model, settings["n_ctx"], chunk_tokens, budget_s)
    return {**out, "model_load_seconds": round(load_s, 2), "settings": settings,
            "model": Path(model_path).name if model_path else "bundled GGUF"}
