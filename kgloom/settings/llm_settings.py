"""The ``llm`` section: the model indexing and search use (a GGUF in-process, OpenAI-compatible
model servers, or the fake model)."""

from __future__ import annotations

import os
import typing
from pathlib import Path
from typing import Any

from kgloom.settings.section import Section

if typing.TYPE_CHECKING:
    from kgloom.llm import CachedLLM


class LLMSettings(Section):
    """The LLM. ``model_path`` empty means the bundled SmolLM2-135M-Instruct (its SHA-256 is
    verified); ``fake`` uses :class:`kgloom.llm.fake.FakeBackend` (tests and demos).
    ``urls`` (several allowed) selects OpenAI-compatible model servers instead
    (:class:`kgloom.llm.http.OpenAIChatBackend`); the GGUF fields are then unused.
    ``kgloom.resources.LLMResource`` is this model as a Dagster resource; ``kgloom query``
    and ``kgloom serve`` open it with :meth:`open_cached`, so index and search use the
    same model.

    ``llm_concurrency`` calls of a stage go out at once, spread over the servers;
    in-process they queue on the one model (its lock). ``llm_slots`` is how many
    sequences the servers decode at once in total (0: one per server, 1 in-process).
    Ranges are checked when the model is verified or opened (:meth:`check`).
    """

    model_path: str = ""
    expected_sha256: str = ""
    # prompt (<= ~1.7k model tokens for a 600-token unit or a 1.2k-token report context)
    # plus the longest reply the bounded schemas allow (see llm.reply_token_bound)
    n_ctx: int = 4096
    n_threads: int = 0  # 0: chosen per call from the machine's load (kgloom.llm.cpu)
    n_gpu_layers: int = 0  # -1 offloads every layer where a GPU exists
    n_batch: int = 512  # llama.cpp's logical batch of prompt evaluation (tokens)
    n_ubatch: int = 512  # its physical batch (tokens)
    flash_attn: bool = False  # llama.cpp's fused attention kernel (changes some replies)
    # n_batch / n_ubatch / flash_attn: measured by bench/bench_llama_probe.py (README)
    grammar_first: bool = True  # greedy grammar sampling checks the best token first
    # choice-only replies (extraction) evaluate their forced text in batches (llm.choices)
    choice_decoding: bool = True
    # how the GGUF's weights are loaded: auto (the bundled Q4_1 model as BF16 or F16, about
    # 1.5x faster on the CPU; any other file as it is), file, f16, bf16, q8_0, q4_0
    # (kgloom.llm.model_files.resolve_weights; converted once into ~/.cache/kgloom/models)
    weights: str = "auto"
    temperature: float = 0.0
    fake: bool = False
    urls: list[str] = []  # noqa: RUF012 - pydantic copies it; servers, empty: in-process
    model: str = ""  # the served model to use; "": the one each server lists
    api_key: str = ""
    request_timeout_s: float = 300.0  # per request; a slow server is retried elsewhere
    schema_format: str = "auto"  # auto | json_schema (vLLM, llama-server) | json_object
    llm_concurrency: int = 1  # calls in flight per stage
    llm_slots: int = 0  # sequences the servers decode at once in total; 0: one per URL
    # the index's LLM cache file; "": <output_dir>/llm_cache.sqlite. SQLite's WAL needs a
    # local disk: on several machines sharing data/output over NFS, point this at local storage
    cache_path: str = ""

    def check(self) -> None:
        """Raises:
        ValueError: naming ``llm_concurrency`` (< 1), ``llm_slots`` or ``n_threads`` (< 0).
        """
        if self.llm_concurrency <= 0:
            raise ValueError(f"llm_concurrency must be >= 1, got {self.llm_concurrency}")
        if self.llm_slots < 0:
            raise ValueError(f"llm_slots must be >= 0, got {self.llm_slots}")
        if self.n_threads < 0:
            raise ValueError(f"n_threads must be >= 0 (0: by load), got {self.n_threads}")

    def server_urls(self) -> list[str]:
        """The configured server URLs (validated), [] for the in-process or fake model.

        Raises:
            ValueError: naming a malformed URL.
        """
        from kgloom.llm.http import parse_urls

        return [] if self.fake else parse_urls(self.urls)

    def open_cached(self, cache_path: str | Path, log: Any = None) -> CachedLLM:
        """The model these settings name, behind the cache file ``cache_path``: the servers
        (``urls``), else the fake model, else the GGUF in-process (loaded here, about 1 s
        for the bundled one). ``log`` (e.g. a Dagster ``context.log``) receives the
        warnings about failing servers.

        Raises:
            kgloom.llm.ModelFileError: a missing, unreadable or wrong model file.
            kgloom.llm.http.LLMServerError: a server unreachable or not serving the model.
            ValueError: see :meth:`check` and :meth:`server_urls`.
        """
        from kgloom.llm import CachedLLM, LLMCache, open_llm

        self.check()
        urls = self.server_urls()
        if urls:
            from kgloom.llm.http import OpenAIChatBackend

            http = OpenAIChatBackend(urls, timeout_s=self.request_timeout_s,
                                     temperature=self.temperature, api_key=self.api_key,
                                     model=self.model, schema_format=self.schema_format,
                                     log=log)
            return CachedLLM(http, LLMCache(cache_path), http.model_id,
                             concurrency=self.llm_concurrency)
        return open_llm(cache_path, self.model_path or None, fake=self.fake, n_ctx=self.n_ctx,
                        n_threads=self.n_threads or None, n_gpu_layers=self.n_gpu_layers,
                        temperature=self.temperature,
                        expected_sha256=self.expected_sha256 or None,
                        concurrency=self.llm_concurrency,
                        # env KGLOOM_FAKE_LLM_DELAY_S slows each fake call (crash tests, demos)
                        fake_delay_s=float(os.environ.get("KGLOOM_FAKE_LLM_DELAY_S", "0") or 0),
                        n_batch=self.n_batch, n_ubatch=self.n_ubatch, flash_attn=self.flash_attn,
                        grammar_first=self.grammar_first,
                        choice_decoding=self.choice_decoding, weights=self.weights)
