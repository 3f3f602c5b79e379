"""The LLM resource: a GGUF run by llama.cpp, OpenAI-compatible model servers, or the fake
backend, behind the cache."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

from kgloom.llm import (CACHE_FILE, SMOLLM2_SHA256, CachedLLM, LLMCache, default_gguf_path,
                        open_llm, verify_model_file)
from kgloom.llm.http import OpenAIChatBackend, common_model, parse_urls

__all__ = ["CACHE_FILE", "LLMResource", "NO_MODEL"]

NO_MODEL = "no-model"  # the model identity of an index built with method=fast


class LLMResource(dg.ConfigurableResource):
    """A local LLM. ``model_path`` empty means the bundled SmolLM2-135M-Instruct (its
    SHA-256 is verified; ``definitions.build_resources`` fills ``model_path`` from env
    ``KGLOOM_MODEL_PATH``). ``fake`` uses
    :class:`kgloom.llm.fake.FakeBackend` (tests and demos; no model needed).

    ``urls`` (env ``KGLOOM_LLM_URL``, several separated by commas) selects OpenAI-compatible
    model servers instead (:class:`kgloom.llm.http.OpenAIChatBackend`); the GGUF fields
    are then unused. ``llm_concurrency`` calls of a stage go out at once, spread over the
    servers; in-process they queue on the one model (its lock). ``llm_slots`` is how many
    sequences the servers decode at once in total (0: one per server, 1 in-process);
    :meth:`pool_limit` derives the Dagster pool ``llm`` limit from it.
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
    temperature: float = 0.0
    fake: bool = False
    urls: list[str] = []  # OpenAI-compatible servers; empty: the GGUF in-process
    model: str = ""  # the served model to use; "": the one each server lists
    api_key: str = ""
    request_timeout_s: float = 300.0  # per request; a slow server is retried elsewhere
    schema_format: str = "auto"  # auto | json_schema (vLLM, llama-server) | json_object
    llm_concurrency: int = 1  # calls in flight per stage
    llm_slots: int = 0  # sequences the servers decode at once in total; 0: one per URL
    # the LLM cache file; "": <output_dir>/llm_cache.sqlite. SQLite's WAL needs a local
    # disk: on several machines sharing data/output over NFS, point this at local storage
    cache_path: str = ""

    def _check(self) -> None:
        if self.llm_concurrency <= 0:
            raise ValueError(f"llm_concurrency must be >= 1, got {self.llm_concurrency}")
        if self.llm_slots < 0:
            raise ValueError(f"llm_slots must be >= 0, got {self.llm_slots}")
        if self.n_threads < 0:
            raise ValueError(f"n_threads must be >= 0 (0: by load), got {self.n_threads}")

    def server_urls(self) -> list[str]:
        """The configured server URLs (validated), [] for the in-process model.

        Raises:
            ValueError: naming a malformed URL.
        """
        return [] if self.fake else parse_urls(self.urls)

    def model_slots(self) -> int:
        """Sequences the model(s) decode at once: ``llm_slots``, else one per server URL
        (llama-cpp-python's server decodes one request at a time), 1 in-process."""
        return self.llm_slots or max(1, len(self.server_urls()))

    def pool_limit(self) -> int:
        """The Dagster pool ``llm`` limit that fills the model slots: LLM steps at once =
        max(1, slots // llm_concurrency), since each step keeps ``llm_concurrency`` calls
        in flight.

        Raises:
            ValueError: when ``llm_concurrency`` <= 0 or ``llm_slots`` < 0.
        """
        self._check()
        return max(1, self.model_slots() // self.llm_concurrency)

    def resolved_model_path(self) -> Path:
        """Return the GGUF path this resource will load."""
        return Path(self.model_path) if self.model_path else default_gguf_path()

    def verify(self) -> str:
        """Check the model before any work; return its identity: the GGUF's SHA-256, the
        model the servers serve, or ``fake-llm``.

        Raises:
            kgloom.llm.ModelFileError: with the path and the fix.
            kgloom.llm.http.LLMServerError: naming a server that is unreachable or does
                not serve the model.
            ValueError: when ``llm_concurrency`` <= 0 or a URL is malformed.
        """
        self._check()
        if self.fake:
            return "fake-llm"
        urls = self.server_urls()
        if urls:
            return common_model(urls, self.api_key, min(self.request_timeout_s, 10.0),
                                self.model)
        path = self.resolved_model_path()
        expected = self.expected_sha256 or (None if self.model_path else SMOLLM2_SHA256)
        return verify_model_file(path, expected)

    def index_model_id(self, method: str) -> str:
        """The model identity an index built with ``method`` depends on: :data:`NO_MODEL`
        for ``fast`` (the model is neither checked nor loaded, so a fast index needs no
        model file and a model change does not rebuild it), else :meth:`verify`.

        Raises:
            see :meth:`verify`.
        """
        return NO_MODEL if method == "fast" else self.verify()

    def open_for(self, settings, output_dir: str | Path, log=None) -> CachedLLM | None:
        """:meth:`open`, or None when ``settings`` (IndexSettings) use no model
        (``settings.uses_model`` False: ``method=fast``), so nothing is loaded."""
        return self.open(output_dir, log=log) if settings.uses_model else None

    def open(self, output_dir: str | Path, log=None) -> CachedLLM:
        """Return the cached LLM whose cache lives in ``<output_dir>/llm_cache.sqlite`` (or
        ``cache_path``).

        The model is loaded here (about 1 s for the bundled one), or the servers are
        asked for their model. ``log`` (e.g. a Dagster ``context.log``) receives the
        warnings about failing servers.

        Raises:
            see :meth:`verify`.
        """
        self._check()
        cache_path = Path(self.cache_path) if self.cache_path else Path(output_dir) / CACHE_FILE
        urls = self.server_urls()
        if urls:
            http = OpenAIChatBackend(urls, timeout_s=self.request_timeout_s,
                                     temperature=self.temperature, api_key=self.api_key,
                                     model=self.model, schema_format=self.schema_format,
                                     log=log)
            return CachedLLM(http, LLMCache(cache_path), http.model_id,
                             concurrency=self.llm_concurrency)
        # the fake model or the GGUF in-process: the one way the query side opens it too
        return open_llm(cache_path, self.model_path or None, fake=self.fake, n_ctx=self.n_ctx,
                        n_threads=self.n_threads or None, n_gpu_layers=self.n_gpu_layers,
                        temperature=self.temperature,
                        expected_sha256=self.expected_sha256 or None,
                        concurrency=self.llm_concurrency,
                        # env KGLOOM_FAKE_LLM_DELAY_S slows each fake call (crash tests, demos)
                        fake_delay_s=float(os.environ.get("KGLOOM_FAKE_LLM_DELAY_S", "0") or 0),
                        n_batch=self.n_batch, n_ubatch=self.n_ubatch, flash_attn=self.flash_attn,
                        grammar_first=self.grammar_first)
