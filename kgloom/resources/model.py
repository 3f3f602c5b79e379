"""The LLM resource: a GGUF run by llama.cpp, OpenAI-compatible model servers, or the fake
backend, behind the cache."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from kgloom.core.layout import LLM_CACHE_FILE as CACHE_FILE
from kgloom.core.layout import TableStore
from kgloom.llm import CachedLLM, default_gguf_path
from kgloom.llm.http import common_model
from kgloom.llm.model_files import locate_model
from kgloom.settings import LLMSettings

__all__ = ["CACHE_FILE", "NO_MODEL", "LLMResource"]

NO_MODEL = "no-model"  # the model identity of an index built with method=fast


class LLMResource(dg.ConfigurableResource, LLMSettings):
    """The ``llm`` section of the settings (:class:`kgloom.settings.LLMSettings`: its
    fields, checks and :meth:`~kgloom.settings.LLMSettings.open_cached` are this
    resource's) as a Dagster resource; :func:`kgloom.resources.build_resources` fills it
    from :func:`kgloom.settings.load_settings`. :meth:`pool_limit` derives the Dagster pool
    ``llm`` limit from ``llm_slots``.
    """

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
        self.check()
        return max(1, self.model_slots() // self.llm_concurrency)

    def resolved_model_path(self) -> Path:
        """Return the GGUF path this resource will load."""
        return Path(self.model_path) if self.model_path else default_gguf_path()

    def verify(self) -> str:
        """Check the model before any work; return its identity: the GGUF's SHA-256
        (``+<weights>`` when it is loaded converted, as :meth:`open` names it), the
        model the servers serve, or ``fake-llm``.

        Raises:
            kgloom.llm.ModelFileError: with the path and the fix.
            kgloom.llm.http.LLMServerError: naming a server that is unreachable or does
                not serve the model.
            ValueError: when ``llm_concurrency`` <= 0 or a URL is malformed.
        """
        self.check()
        if self.fake:
            return "fake-llm"
        urls = self.server_urls()
        if urls:
            return common_model(urls, self.api_key, min(self.request_timeout_s, 10.0),
                                self.model)
        return locate_model(self.model_path or None, self.weights,
                            self.expected_sha256 or None, convert=False)[1]

    def index_model_id(self, method: str) -> str:
        """The model identity an index built with ``method`` depends on: :data:`NO_MODEL`
        for ``fast`` (the model is neither checked nor loaded, so a fast index needs no
        model file and a model change does not rebuild it), else :meth:`verify`.

        Raises:
            see :meth:`verify`.
        """
        return NO_MODEL if method == "fast" else self.verify()

    def open_for(self, settings, store: TableStore, log=None) -> CachedLLM | None:
        """:meth:`open` with the LLM cache of ``store``'s output folder, or None when
        ``settings`` (IndexSettings) use no model (``settings.uses_model`` False:
        ``method=fast``), so nothing is loaded."""
        return self.open(store.output_dir, log=log) if settings.uses_model else None

    def open(self, output_dir: str | Path, log=None) -> CachedLLM:
        """Return the cached LLM whose cache lives in ``<output_dir>/llm_cache.sqlite`` (or
        ``cache_path``): :meth:`kgloom.settings.LLMSettings.open_cached`, the one way
        index and query open a model.

        Raises:
            see :meth:`verify`.
        """
        cache_path = Path(self.cache_path) if self.cache_path else Path(output_dir) / CACHE_FILE
        return self.open_cached(cache_path, log=log)
