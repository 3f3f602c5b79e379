"""The LLM resource: a GGUF run by llama.cpp (or the fake backend), behind the cache."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from kgloom.llm import (CACHE_FILE, SMOLLM2_SHA256, CachedLLM, default_model_path, open_llm,
                        verify_model_file)

__all__ = ["CACHE_FILE", "LLMResource"]


class LLMResource(dg.ConfigurableResource):
    """A local LLM. ``model_path`` empty means the bundled SmolLM2-135M-Instruct (its
    SHA-256 is verified; ``definitions.build_resources`` fills ``model_path`` from env
    ``KGLOOM_MODEL_PATH``). ``fake`` uses
    :class:`kgloom.testing.FakeBackend` (tests and demos; no model needed)."""

    model_path: str = ""
    expected_sha256: str = ""
    # prompt (<= ~1.7k model tokens for a 600-token unit or a 1.2k-token report context)
    # plus the longest reply the bounded schemas allow (see llm.reply_char_bound)
    n_ctx: int = 4096
    n_threads: int = 0  # 0: llama.cpp's default (all cores)
    n_gpu_layers: int = 0  # -1 offloads every layer where a GPU exists
    temperature: float = 0.0
    fake: bool = False

    def resolved_model_path(self) -> Path:
        """Return the GGUF path this resource will load."""
        return Path(self.model_path) if self.model_path else default_model_path()

    def verify(self) -> str:
        """Check the model file before any work; return its SHA-256 (or ``fake-llm``).

        Raises:
            kgloom.llm.ModelFileError: with the path and the fix.
        """
        if self.fake:
            return "fake-llm"
        path = self.resolved_model_path()
        expected = self.expected_sha256 or (None if self.model_path else SMOLLM2_SHA256)
        return verify_model_file(path, expected)

    def open(self, output_dir: str | Path) -> CachedLLM:
        """Return the cached LLM whose cache lives in ``<output_dir>/llm_cache.sqlite``
        (:func:`kgloom.llm.open_llm`). The model is loaded here (about 1 s for the
        bundled one)."""
        return open_llm(Path(output_dir) / CACHE_FILE, self.model_path or None, fake=self.fake,
                        n_ctx=self.n_ctx, n_threads=self.n_threads or None,
                        n_gpu_layers=self.n_gpu_layers, temperature=self.temperature,
                        expected_sha256=self.expected_sha256 or None)
