"""The retrieval facade: :class:`Retriever` opens a :class:`~kgloom.query.query_index.QueryIndex`
(or takes an open one) and dispatches each call to its mode's module in
:mod:`kgloom.query.retrieval`; it holds no logic of its own.

This module is what the CLI, the server and the benches import: the facade, the knobs
(:class:`RetrievalConfig`), the result (:class:`RetrievalResult`) and the errors opening
or querying an index raises.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

# the errors a Retriever raises, for its callers (__all__)
from kgloom.core.builds import IndexChangedError, IndexFilesMissingError, IndexInconsistentError
from kgloom.embedding.sentence_embedder import Embedder
from kgloom.query.linking import LinkedEntity
from kgloom.query.modes import RETRIEVAL_MODES
from kgloom.query.query_index import EmbedderMismatchError, QueryIndex
from kgloom.query.retrieval import (
    bridge,
    fused,
    hybrid,
    multihop,
    one_hop,
    ppr,
    retrieve,
    two_step,
    vector,
)
from kgloom.query.retrieval.result import RetrievalResult
from kgloom.query.retrieval.retrieval_config import (
    DEFAULT_DAMPING,
    DEFAULT_DEPTH,
    DEFAULT_LAMBDA,
    DEFAULT_OVERSAMPLE,
    DEFAULT_TOP_K,
    RetrievalConfig,
)
from kgloom.query.retrieval.steps import RetrievalSettings, link_question

# the modes of the one registry (kgloom.query.modes) that take a question alone;
# retrieve() also runs two_step
MODES = tuple(m for m in RETRIEVAL_MODES if m != "two_step")

__all__ = ["MODES", "EmbedderMismatchError", "IndexChangedError", "IndexFilesMissingError",
           "IndexInconsistentError", "RetrievalConfig", "RetrievalResult", "Retriever"]


class Retriever:
    """A read-only query handle on one kgloom output folder: an index and the settings
    its calls run with.

    Args:
        output_dir: the folder ``kgloom index`` wrote, or an open
            :class:`~kgloom.query.query_index.QueryIndex` (shared, e.g. with a Searcher).
        embedder: the index's embedder (see :meth:`QueryIndex.open`); unused with an
            open index.
        graph_backend: ``duckdb`` or ``memory`` (see :class:`RetrievalSettings`).
        config: scoring knobs (:class:`RetrievalConfig`); may be replaced between calls.
        bfs_threads: workers per BFS (see :class:`RetrievalSettings`).

    Attributes:
        index: the :class:`QueryIndex` (text units, entity graph, build, embedder).

    Raises:
        ValueError: an unknown graph_backend or bfs_threads < 1.
        IndexFilesMissingError / IndexChangedError / EmbedderMismatchError /
            IndexInconsistentError: see :meth:`QueryIndex.open`.
    """

    def __init__(self, output_dir: str | Path | QueryIndex,
                 embedder: Embedder | str | Path | None = None, graph_backend: str = "duckdb",
                 config: RetrievalConfig | None = None, bfs_threads: int | None = None) -> None:
        RetrievalSettings(graph_backend=graph_backend, bfs_threads=bfs_threads)  # checks
        self.graph_backend = graph_backend
        self.config = config or RetrievalConfig()
        self.bfs_threads = bfs_threads
        self.index = output_dir if isinstance(output_dir, QueryIndex) else \
            QueryIndex.open(output_dir, embedder)

    @property
    def settings(self) -> RetrievalSettings:
        """The settings of the next call (from ``config``, ``graph_backend``, ``bfs_threads``)."""
        return RetrievalSettings(self.config, self.graph_backend, self.bfs_threads)

    @property
    def output_dir(self) -> Path:
        """The index folder."""
        return self.index.output_dir

    @property
    def build(self) -> Any:
        """The published build read (:class:`kgloom.core.builds.Build`)."""
        return self.index.build

    @property
    def embedder(self) -> Any:
        """The query embedder."""
        return self.index.embedder

    def retrieve(self, question: str, mode: str = "vector", **params: Any) -> RetrievalResult:
        """Run one mode by name (:data:`kgloom.query.modes.RETRIEVAL_MODES`) with its
        keyword parameters (``top_k`` and the mode's options).

        Raises:
            ValueError: an unknown mode (every retrieval mode listed), or a bad parameter
                of the mode.
        """
        top_k = params.pop("top_k", DEFAULT_TOP_K)
        return retrieve(self.index, question, mode, top_k, self.settings, **params)

    def link(self, question: str, qv: np.ndarray | None = None) -> list[LinkedEntity]:
        """The question's entities (:func:`kgloom.query.retrieval.steps.link_question`)."""
        return link_question(self.index, self.config, question, qv)

    # one method per mode, each the mode's ``retrieve``
    def vector(self, question: str, top_k: int = DEFAULT_TOP_K) -> RetrievalResult:
        """:func:`kgloom.query.retrieval.vector.retrieve`."""
        return vector.retrieve(self.index, question, top_k, self.settings)

    def one_hop(self, question: str, top_k: int = DEFAULT_TOP_K,
                oversample: int | None = None) -> RetrievalResult:
        """:func:`kgloom.query.retrieval.one_hop.retrieve`."""
        return one_hop.retrieve(self.index, question, top_k, self.settings, oversample)

    def multihop(self, question: str, top_k: int = DEFAULT_TOP_K,
                 depth: int = DEFAULT_DEPTH) -> RetrievalResult:
        """:func:`kgloom.query.retrieval.multihop.retrieve`."""
        return multihop.retrieve(self.index, question, top_k, self.settings, depth)

    def fused(self, question: str, top_k: int = DEFAULT_TOP_K, depth: int = DEFAULT_DEPTH,
              lam: float = DEFAULT_LAMBDA, oversample: int = DEFAULT_OVERSAMPLE
              ) -> RetrievalResult:
        """:func:`kgloom.query.retrieval.fused.retrieve`."""
        return fused.retrieve(self.index, question, top_k, self.settings, depth, lam,
                              oversample)

    def fused_by_vector(self, vector: np.ndarray, top_k: int = DEFAULT_TOP_K,
                        depth: int = DEFAULT_DEPTH, lam: float = DEFAULT_LAMBDA,
                        oversample: int = DEFAULT_OVERSAMPLE) -> RetrievalResult:
        """:func:`kgloom.query.retrieval.fused.retrieve_by_vector`."""
        return fused.retrieve_by_vector(self.index, vector, top_k, self.settings, depth, lam,
                                        oversample)

    def two_step(self, question: str, top_k: int = DEFAULT_TOP_K,
                 depth: int = DEFAULT_DEPTH) -> RetrievalResult:
        """:func:`kgloom.query.retrieval.two_step.retrieve`."""
        return two_step.retrieve(self.index, question, top_k, self.settings, depth)

    def two_step_by_vector(self, vector: np.ndarray, top_k: int = DEFAULT_TOP_K,
                           depth: int = DEFAULT_DEPTH) -> RetrievalResult:
        """:func:`kgloom.query.retrieval.two_step.retrieve_by_vector`."""
        return two_step.retrieve_by_vector(self.index, vector, top_k, self.settings, depth)

    def entities_by_vector(self, vector: np.ndarray, top_k: int = DEFAULT_TOP_K
                           ) -> RetrievalResult:
        """:func:`kgloom.query.retrieval.two_step.entities_by_vector`."""
        return two_step.entities_by_vector(self.index, vector, top_k, self.settings)

    def expand_by_vector(self, vector: np.ndarray, seeds: list[str], depth: int = DEFAULT_DEPTH,
                         top_k: int = DEFAULT_TOP_K, seed_scores: list[float] | None = None,
                         entity_via: str = "bfs") -> RetrievalResult:
        """:func:`kgloom.query.retrieval.two_step.expand_by_vector`."""
        return two_step.expand_by_vector(self.index, vector, seeds, top_k, self.settings,
                                         depth, seed_scores, entity_via)

    def ppr(self, question: str, top_k: int = DEFAULT_TOP_K,
            damping: float = DEFAULT_DAMPING) -> RetrievalResult:
        """:func:`kgloom.query.retrieval.ppr.retrieve`."""
        return ppr.retrieve(self.index, question, top_k, self.settings, damping)

    def hybrid(self, question: str, top_k: int = DEFAULT_TOP_K,
               damping: float = DEFAULT_DAMPING) -> RetrievalResult:
        """:func:`kgloom.query.retrieval.hybrid.retrieve`."""
        return hybrid.retrieve(self.index, question, top_k, self.settings, damping)

    def bridge(self, question: str, top_k: int = DEFAULT_TOP_K) -> RetrievalResult:
        """:func:`kgloom.query.retrieval.bridge.retrieve`."""
        return bridge.retrieve(self.index, question, top_k, self.settings)
