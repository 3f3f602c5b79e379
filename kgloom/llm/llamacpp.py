"""A GGUF model run in-process by llama-cpp-python (:class:`LlamaCppBackend`), with the
greedy grammar-first sampler that makes its constrained decoding cheap. Every call is
decoded under a llama.cpp grammar built from a JSON schema
(:func:`kgloom.llm.grammar.json_grammar`); llama-cpp-python keeps the KV cache of the
longest common token prefix between consecutive calls (``Llama.generate``), so prompts
put their fixed part first. No Dagster here.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from tenacity import retry, stop_after_attempt, wait_exponential

from kgloom.llm.backend import Completion
from kgloom.llm.model_files import verify_model_file

if TYPE_CHECKING:  # llama_cpp itself is imported where a model is loaded
    from llama_cpp.llama_types import ChatCompletionRequestMessage, CreateChatCompletionResponse

_PREV_TOKENS = 8  # tokens before the new ones _LoopStop passes when it detokenizes them
_COUNTED_MAX = 256  # texts whose token counts a backend remembers (count_tokens)

# llama.cpp's CPU "extra buffer types" (the AMX kernels, repacked weights) crashed
# llama_decode with SIGSEGV at the first prompt of the bundled Q4_1 file on a machine
# whose CPU backend reports AMX_INT8 (2026-12-06, llama-cpp-python 0.3.36: every call,
# any thread count or batch size, choice or grammar path); without them the same calls
# run. The BF16/F16 copy the pipeline loads by default uses none.
_AMX = "AMX_INT8 = 1"
_PARAMS_LOCK = threading.Lock()


def needs_plain_buffers(system_info: str) -> bool:
    """True when llama.cpp's ``system_info`` line reports the AMX kernels, under which a
    quantized model must load without extra buffer types (:func:`plain_cpu_buffers`)."""
    return _AMX in system_info


@contextlib.contextmanager
def plain_cpu_buffers() -> Iterator[bool]:
    """While open, a ``llama_cpp.Llama`` built in this process loads with llama.cpp's
    ``use_extra_bufts`` off where :func:`needs_plain_buffers` says so; yields whether it
    did. ``Llama`` takes no such argument, so the model's default parameters are wrapped
    for that time (one load at a time)."""
    import llama_cpp
    import llama_cpp.llama_cpp as lowlevel  # what llama_cpp.Llama reads its defaults from

    info = llama_cpp.llama_print_system_info().decode(errors="replace")
    original = lowlevel.llama_model_default_params
    if not needs_plain_buffers(info) or not hasattr(original(), "use_extra_bufts"):
        yield False
        return

    def params() -> Any:
        p = original()
        p.use_extra_bufts = False
        return p

    with _PARAMS_LOCK:
        lowlevel.llama_model_default_params = params
        try:
            yield True
        finally:
            lowlevel.llama_model_default_params = original

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


class _LoopStop:
    """A llama-cpp-python stopping criterion: True once the reply being decoded has a loop
    in a string value (:func:`kgloom.names.grounding.find_reply_loop`). A 135M model that
    cannot end a report repeats a phrase until the field's length limit: measured on the
    2Wiki pool's 600 passages, its three report replies looped from 8-11 % of their
    1,390 / 703 / 1,395 characters on, and were rejected after 5-14 s of decoding each.

    ``Llama.generate`` calls it with the context's tokens before each new token is
    returned (the first call: the prompt alone), and ``create_completion`` once more at
    the end. The reply's bytes are detokenized as they come; the check runs when a new
    piece holds a character that ends a word (cost measured: under 0.1 ms a check).
    """

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        self.start: int | None = None
        self.seen = 0
        self.raw = b""
        self.checked = 0
        self.found = False

    def __call__(self, input_ids: Any, logits: Any) -> bool:
        from kgloom.names.grounding import find_reply_loop

        if self.found:
            return True
        if self.start is None:
            self.start = len(input_ids)
        end = self.start + self.seen
        new = [int(t) for t in input_ids[end:]]
        if not new:
            return False
        # a few tokens before: all a tokenizer needs to place the new pieces' spaces (the
        # GGUF's own ignores them), not the whole prompt rebuilt at every token
        piece = self.llm.detokenize(new, prev_tokens=[int(t) for t in input_ids[max(
            0, end - _PREV_TOKENS):end]])
        self.seen += len(new)
        self.raw += piece
        if piece.isalnum():  # no word ended: nothing new to find
            return False
        rep, self.checked = find_reply_loop(self.raw.decode("utf-8", errors="ignore"),
                                            self.checked)
        self.found = rep is not None
        return self.found


@contextlib.contextmanager
def _stopping(llm: Any, criterion: Any) -> Iterator[None]:
    """While inside, ``llm.create_completion`` also stops on ``criterion`` (None: no
    change). ``create_chat_completion`` has no ``stopping_criteria`` argument; its chat
    handler formats the prompt and calls ``llm.create_completion`` with the handler's
    own criteria (the end-of-turn token), to which this adds ``criterion`` by shadowing
    the method on the instance (the caller holds the model's lock)."""
    if criterion is None:
        yield
        return
    from llama_cpp import StoppingCriteriaList

    original = llm.create_completion

    def create_completion(*args: Any, stopping_criteria: Any = None, **kw: Any) -> Any:
        both = StoppingCriteriaList([*(stopping_criteria or []), criterion])
        return original(*args, stopping_criteria=both, **kw)

    llm.create_completion = create_completion
    try:
        yield
    finally:
        del llm.create_completion


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


def _eval_with_logits(llm: Any, tokens: list[int], at: list[int]) -> list[Any]:
    """Evaluate ``tokens`` after the ``llm.n_tokens`` already in ``llm``'s KV cache, in
    batches of ``llm.n_batch``, asking llama.cpp for the logits after ``tokens[i]`` for
    each ``i`` in ``at`` only (``Llama.eval`` asks for the last token's or every
    token's); return copies of those rows (numpy float32, vocabulary size)."""
    import llama_cpp
    import numpy as np

    n_vocab = llm.n_vocab()
    want = set(at)
    rows: dict[int, Any] = {}
    llm._ctx.kv_cache_seq_rm(-1, llm.n_tokens, -1)
    for lo in range(0, len(tokens), llm.n_batch):
        part = tokens[lo:lo + llm.n_batch]
        n_past = llm.n_tokens
        llm._batch.set_batch(batch=part, n_past=n_past, logits_all=False)
        flagged = [i for i in range(len(part)) if lo + i in want]
        for i in range(len(part)):
            llm._batch.batch.logits[i] = (lo + i) in want
        llm._ctx.decode(llm._batch)
        llm.input_ids[n_past:n_past + len(part)] = part
        llm.n_tokens += len(part)
        for i in flagged:
            rows[lo + i] = np.ctypeslib.as_array(
                llama_cpp.llama_get_logits_ith(llm._ctx.ctx, i), shape=(n_vocab,)).copy()
    return [rows[i] for i in at]


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
            from the cores other processes leave free (:class:`kgloom.llm.cpu.BurstThreads`).
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
        model_id: the model's identity when the caller has verified the file
            (:func:`kgloom.llm.model_files.locate_model`); None: verify it here.
        choice_decoding: greedy replies under a choice-only schema (enums, booleans,
            bounded arrays: :func:`kgloom.llm.choices.is_choice_schema`, such as the
            extraction reply) are decoded by :func:`kgloom.llm.choices.decode_choices`,
            which evaluates the forced text between two choices as one batch, and
            speculates up to ``lookahead`` (4) branchings or ``lookahead_tokens`` (32)
            tokens ahead of its logits (attributes; 0 and 0: one evaluation per
            branching; ``bench/bench_choice_lookahead.py``); False: every reply is
            decoded token by token under its grammar.

    Raises:
        ModelFileError: when the model file is missing, unreadable or fails its checksum.
    """

    def __init__(self, model_path: str | Path, n_ctx: int = 4096, n_threads: int | None = None,
                 n_gpu_layers: int = 0, temperature: float = 0.0,
                 expected_sha256: str | None = None, reuse_prefix: bool = True,
                 n_batch: int = 512, n_ubatch: int = 512, flash_attn: bool = False,
                 grammar_first: bool = True, choice_decoding: bool = True,
                 model_id: str | None = None) -> None:
        self.model_path = Path(model_path)
        # a caller that verified the file already (locate_model) names it: no second hash
        self.model_id = model_id or verify_model_file(self.model_path, expected_sha256)
        from llama_cpp import Llama  # heavy import, only when a model is really used

        from kgloom.llm.cpu import usable_cores

        cls = _fast_llama_class() if grammar_first else Llama
        start = n_threads or usable_cores()
        # the weights load at the first model call (:attr:`_llm`), not here: a stage whose
        # calls are all in the LLM cache (a rerun, a resumed run) never loads them, and a
        # stage loads them only once its model calls begin
        self._make = functools.partial(
            cls, model_path=str(self.model_path), n_ctx=n_ctx, n_threads=start,
            n_threads_batch=start, n_gpu_layers=n_gpu_layers, n_batch=n_batch,
            n_ubatch=n_ubatch, flash_attn=flash_attn, verbose=False)
        self._model: Any = None
        self._vocab: Any = None
        self._load_lock = threading.Lock()
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.temperature = temperature
        self.reuse_prefix = reuse_prefix
        self.settings = {"n_ctx": n_ctx, "n_threads": n_threads or "auto (by load)",
                         "n_batch": n_batch, "n_ubatch": n_ubatch, "flash_attn": flash_attn,
                         "n_gpu_layers": n_gpu_layers,
                         "grammar_first": grammar_first and cls is not Llama,
                         "choice_decoding": choice_decoding,
                         "reuse_prefix": reuse_prefix, "temperature": temperature}
        self.choice_decoding = choice_decoding
        # branchings a choice reply assumes ahead of its logits (kgloom.llm.choices
        # decode_choices; 0: one evaluation per branching)
        self.lookahead, self.lookahead_tokens = 4, 32
        self.settings["choice_lookahead"] = [self.lookahead, self.lookahead_tokens]
        self._formatter: Any = None
        self._grammars: dict[str, Any] = {}
        # a prompt's system and few-shot messages are the same at every call
        self._counted: dict[str, int] = {}
        self._lock = threading.Lock()
        from kgloom.llm.cpu import BurstThreads

        self._threads = BurstThreads(n_threads)

    def close(self) -> None:
        """Free the model, its context and KV cache (``Llama.close``) now; a later call
        loads them again."""
        with self._lock, self._load_lock:
            model, self._model = self._model, None
            close = getattr(model, "close", None)
            if close is not None:
                close()

    @property
    def _llm(self) -> Any:
        """The ``Llama`` object, its weights loaded on first use (and again after
        :meth:`close`).

        Raises:
            ValueError: llama-cpp-python's, when the file does not load.
        """
        if self._model is None:
            with self._load_lock:
                if self._model is None:
                    with plain_cpu_buffers():
                        self._model = self._make()
                    self._vocab = None
        return self._model

    def _tokenizer(self) -> Any:
        """What counts tokens: the loaded model, else the GGUF's vocabulary alone
        (llama.cpp ``vocab_only``: 17 MB resident for the bundled model against ~420 MB
        with weights, context and buffers; the same tokens), so counting a prompt's
        tokens for a call the LLM cache answers loads no weights."""
        if self._model is not None:
            return self._model
        if self._vocab is None:
            with self._load_lock:
                if self._vocab is None:
                    import llama_cpp
                    from llama_cpp import _internals

                    params = llama_cpp.llama_model_default_params()
                    params.vocab_only = True
                    self._vocab = _internals.LlamaModel(path_model=str(self.model_path),
                                                        params=params, verbose=False)
        return self._vocab

    def _grammar(self, schema: dict[str, Any]):
        from llama_cpp import LlamaGrammar

        from kgloom.llm.grammar import json_grammar

        # property order is the order the model writes them in: never sort the keys here
        key = json.dumps(schema)
        if key not in self._grammars:
            self._grammars[key] = LlamaGrammar.from_string(json_grammar(schema), verbose=False)
        return self._grammars[key]

    def count_tokens(self, text: str) -> int:
        """Return the number of model tokens in ``text``. The counts of up to
        ``_COUNTED_MAX`` texts are remembered (a prompt's fixed messages are counted at
        every call: ~1 ms each for a few-shot example)."""
        n = self._counted.get(text)
        if n is None:
            n = len(self._tokenizer().tokenize(text.encode("utf-8"), add_bos=False,
                                               special=True))
            if len(self._counted) >= _COUNTED_MAX:
                self._counted.clear()
            self._counted[text] = n
        return n

    @retry(stop=stop_after_attempt(3), wait=wait_exponential(multiplier=0.5, max=5),
           reraise=True)
    def complete(self, messages: list[dict[str, str]], schema: dict[str, Any],
                 max_tokens: int, seed: int, stop_on_loop: bool = False) -> Completion:
        """Run one chat completion under ``schema``'s grammar (see class doc).

        With ``stop_on_loop``, decoding stops as soon as a string value of the reply
        repeats itself (:class:`_LoopStop`): the reply returned is then the JSON written
        so far, not a whole document (:func:`kgloom.llm.structured_call` tells it from
        other invalid replies by the same check). Choice-only replies have no free text
        and ignore it.

        Retries twice with exponential backoff (tenacity) on an exception from llama.cpp.
        Thread-safe: one call at a time holds the model (see class doc).
        """
        import llama_cpp

        from kgloom.llm.choices import is_choice_schema

        if self.choice_decoding and self.temperature == 0.0 and is_choice_schema(schema):
            return self._complete_choices(messages, schema)
        with self._lock:
            if not self.reuse_prefix:
                self._llm.reset()
            ctx = self._llm._ctx.ctx  # llama.cpp perf counters: prompt vs generation time
            threads = self._threads.pick()
            llama_cpp.llama_set_n_threads(ctx, threads, threads)
            llama_cpp.llama_perf_context_reset(ctx)
            t0 = time.perf_counter()
            # casts: llama_cpp types messages as its per-role TypedDicts (ours are plain
            # {"role", "content"} string dicts of that shape), and its return without an
            # overload on ``stream``: stream=False returns the response dict, not chunks
            with _stopping(self._llm, _LoopStop(self._llm) if stop_on_loop else None):
                out = cast("CreateChatCompletionResponse", self._llm.create_chat_completion(
                    messages=cast("list[ChatCompletionRequestMessage]", messages),
                    grammar=self._grammar(schema), max_tokens=max_tokens,
                    temperature=self.temperature, seed=seed))
            seconds = time.perf_counter() - t0
            perf = llama_cpp.llama_perf_context(ctx)
        usage = out.get("usage") or {}
        return Completion(text=out["choices"][0]["message"]["content"] or "",
                          prompt_tokens=int(usage.get("prompt_tokens", 0)),
                          completion_tokens=int(usage.get("completion_tokens", 0)),
                          seconds=seconds, prompt_eval_tokens=int(perf.n_p_eval),
                          prompt_seconds=perf.t_p_eval_ms / 1000.0,
                          generation_seconds=perf.t_eval_ms / 1000.0, threads=threads)

    def _prompt_tokens(self, messages: list[dict[str, str]]) -> list[int]:
        """The chat prompt's tokens, formatted and tokenized as llama-cpp-python's
        ``create_chat_completion`` does for the model's own chat template."""
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        llm = self._llm
        if self._formatter is None:
            eos, bos = llm.token_eos(), llm.token_bos()
            self._formatter = Jinja2ChatFormatter(
                template=llm.metadata["tokenizer.chat_template"],
                eos_token=llm._model.token_get_text(eos) if eos != -1 else "",
                bos_token=llm._model.token_get_text(bos) if bos != -1 else "")
        result = self._formatter(messages=messages)
        return llm.tokenize(result.prompt.encode("utf-8"), add_bos=not result.added_special,
                            special=True)

    def _complete_choices(self, messages: list[dict[str, str]],
                          schema: dict[str, Any]) -> Completion:
        """One greedy reply by :func:`kgloom.llm.choices.decode_choices` (see the class
        doc), reusing the KV cache of the prompt prefix shared with the previous call as
        ``Llama.generate`` does. ``prompt_seconds`` is the first batch (the prompt's new
        tokens and the reply's opening); ``generation_seconds`` the rest.

        Raises:
            ValueError: the prompt, or prompt and reply, do not fit ``n_ctx``.
        """
        import llama_cpp

        from kgloom.llm.choices import decode_choices

        llm = self._llm
        with self._lock:
            prompt = self._prompt_tokens(messages)
            if len(prompt) >= self.n_ctx:
                raise ValueError(f"prompt of {len(prompt)} tokens does not fit n_ctx "
                                 f"{self.n_ctx}")
            keep = self._kept_prefix(prompt)
            llm.n_tokens = keep  # Llama.eval drops the KV cache from n_tokens on
            threads = self._threads.pick()
            llama_cpp.llama_set_n_threads(llm._ctx.ctx, threads, threads)
            model = _LlamaChoiceModel(llm, self.n_ctx)
            t0 = time.perf_counter()
            reply = decode_choices(model, prompt[keep:], schema, lookahead=self.lookahead,
                                   budget=self.lookahead_tokens)
            seconds = time.perf_counter() - t0
        timing = model.timing
        return Completion(text=reply.text, prompt_tokens=len(prompt),
                          completion_tokens=reply.tokens, seconds=seconds,
                          prompt_eval_tokens=len(prompt) - keep,
                          prompt_seconds=timing[0] if timing else 0.0,
                          generation_seconds=sum(timing[1:]), threads=threads)

    def _kept_prefix(self, prompt: list[int]) -> int:
        """How many leading tokens of ``prompt`` the context already holds (its
        ``input_ids`` up to ``n_tokens``), at most all but one (one token is left to
        give fresh logits); 0 without ``reuse_prefix``."""
        llm = self._llm
        keep = 0
        if self.reuse_prefix:
            for a, b in zip(llm.input_ids[:llm.n_tokens], prompt):
                if a != b:
                    break
                keep += 1
            keep = min(keep, len(prompt) - 1)  # one token left to give fresh logits
        return keep


class _LlamaChoiceModel:
    """A ``llama_cpp.Llama`` as :func:`kgloom.llm.choices.decode_choices`' model
    (:class:`kgloom.llm.choices.ChoiceModel`, with the speculative ``logits_many`` and
    ``rewind``): evaluations go on from the context's ``n_tokens``, each timed into
    ``timing`` (seconds, one entry per evaluated batch, in order).

    Raises (on evaluation): ValueError when the tokens would pass ``n_ctx``.
    """

    def __init__(self, llm, n_ctx: int) -> None:
        self.llm, self.n_ctx = llm, n_ctx
        self.n_vocab = llm.n_vocab()
        self.timing: list[float] = []

    def tokenize(self, text: bytes) -> list[int]:
        return self.llm.tokenize(text, add_bos=False, special=False)

    def detokenize(self, tokens: list[int]) -> bytes:
        return self.llm.detokenize(tokens, special=False)

    def logits_after(self, tokens: list[int]):
        """The (n_vocab,) float32 logits after evaluating ``tokens``."""
        import llama_cpp
        import numpy as np

        llm = self.llm
        if llm.n_tokens + len(tokens) > self.n_ctx:
            raise ValueError(f"reply does not fit n_ctx {self.n_ctx}")
        t = time.perf_counter()
        llm.eval(tokens)
        self.timing.append(time.perf_counter() - t)
        return np.ctypeslib.as_array(
            llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1), shape=(self.n_vocab,))

    def logits_many(self, tokens: list[int], at: list[int]) -> list[Any]:
        """The logits at each position ``at`` of ``tokens``, evaluated as one batch
        (:func:`_eval_with_logits`)."""
        if self.llm.n_tokens + len(tokens) > self.n_ctx:
            raise ValueError(f"reply does not fit n_ctx {self.n_ctx}")
        t = time.perf_counter()
        out = _eval_with_logits(self.llm, tokens, at)
        self.timing.append(time.perf_counter() - t)
        return out

    def rewind(self, n: int) -> None:
        """Forget the last ``n`` evaluated tokens."""
        self.llm.n_tokens -= n  # the next evaluation drops their KV cache entries
