"""Dagster resources: each wraps one external thing (the LLM, the embedder, the paths)."""

from kgloom.resources.embedder import EmbedderResource
from kgloom.resources.llm import LLMResource
from kgloom.resources.paths import IndexConfigResource

__all__ = ["EmbedderResource", "IndexConfigResource", "LLMResource"]
