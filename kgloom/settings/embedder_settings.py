"""The ``embedder`` section: the sentence-transformers model of the index and its queries."""

from __future__ import annotations

from kgloom.settings.section import Section


class EmbedderSettings(Section):
    """``model_path``: a sentence-transformers model folder; empty means the bundled
    all-MiniLM-L6-v2 (384 dims, 256 tokens). Queries must use the index's embedder."""

    model_path: str = ""
