"""The retrieval facade: :class:`Retriever` opens a :class:`~kgloom.query.query_index.QueryIndex`
(or takes an open one) and runs each call through the one door, :meth:`Retriever.retrieve`
(mode by name, from the registry :data:`kgloom.query.retrieval.MODES`); it holds no logic
of its own.

This module is what the CLI, the server and the benches import: the facade, the knobs
(:class:`RetrievalSettings`, the settings' ``retrieval`` section), the result
(:class:`RetrievalResult`) and the errors opening or querying an index raises.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

# the errors a Retriever raises, for its callers (__all__)
from kgloom.core.builds import IndexChangedError, IndexFilesMissingError, IndexInconsistentError
from kgloom.embedding.sentence_embedder import Embedder
from kgloom.query.linking import LinkedEntity
from kgloom.query.modes import RETRIEVAL_MODES
from kgloom.query.query_index import EmbedderMismatchError, QueryIndex
from kgloom.query.retrieval import fused, retrieve, two_step
from kgloom.query.retrieval.result import RetrievalResult
from kgloom.query.retrieval.steps import check_settings, link_question
from kgloom.settings.retrieval_settings import RetrievalSettings

if TYPE_CHECKING:
    from kgloom.settings import Settings

# the modes of the one registry (kgloom.query.modes) that take a question alone;
# retrieve() also runs two_step
MODES = tuple(m for m in RETRIEVAL_MODES if m != "two_step")

__all__ = ["MODES", "EmbedderMismatchError", "IndexChangedError", "IndexFilesMissingError",
           "IndexInconsistentError", "RetrievalResult", "RetrievalSettings", "Retriever"]


class Retriever:
    """A read-only query handle on one kgloom output folder: an index and the settings
    its calls run with. Every mode runs through :meth:`retrieve`; a query vector instead
    of a question through the ``*_by_vector`` methods.

    Args:
        output_dir: the folder ``kgloom index`` wrote, or an open
            :class:`~kgloom.query.query_index.QueryIndex` (shared, e.g. with a Searcher).
        embedder: the index's embedder (see :meth:`QueryIndex.open`); unused with an
            open index.
        settings: the retrieval knobs (:class:`RetrievalSettings`, default its defaults):
            the per-query options' defaults, the graph backend, BFS threads and the
            scoring knobs.
        graph_backend / bfs_threads: when given, replace the settings' value (a
            convenience of benches and tests).

    Attributes:
        index: the :class:`QueryIndex` (text units, entity graph, build, embedder).
        settings: the :class:`RetrievalSettings` of the next call; may be replaced between
            calls (``r.settings = r.settings.model_copy(update={...})``).

    Raises:
        ValueError: an unknown graph_backend or bfs_threads < 1.
        IndexFilesMissingError / IndexChangedError / EmbedderMismatchError /
            IndexInconsistentError: see :meth:`QueryIndex.open`.
    """

    def __init__(self, output_dir: str | Path | QueryIndex,
                 embedder: Embedder | str | Path | None = None,
                 settings: RetrievalSettings | None = None, *,
                 graph_backend: str | None = None, bfs_threads: int | None = None) -> None:
        settings = settings or RetrievalSettings()
        given = {"graph_backend": graph_backend, "bfs_threads": bfs_threads}
        given = {k: v for k, v in given.items() if v is not None}
        self.settings = check_settings(settings.model_copy(update=given) if given else settings)
        self.index = output_dir if isinstance(output_dir, QueryIndex) else \
            QueryIndex.open(output_dir, embedder)

    @classmethod
    def from_settings(cls, output_dir: str | Path | QueryIndex | None, settings: Settings,
                      embedder: Embedder | str | Path | None = None) -> Retriever:
        """The Retriever the settings describe, as ``kgloom query``, ``kgloom serve`` and
        ``kgloom mcp`` open it: the index ``output_dir`` (None: ``paths.output_dir``),
        the embedder ``embedder`` (None: ``embedder.model_path``, else the index's) and
        the ``retrieval`` section.

        Raises:
            as the constructor.
        """
        folder = settings.paths.output_dir if output_dir is None else output_dir
        if embedder is None:
            embedder = settings.embedder.model_path or None
        return cls(folder, embedder, settings.retrieval)

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

    def retrieve(self, question: str, mode: str = "vector", **options: Any) -> RetrievalResult:
        """Run one mode by name (:data:`kgloom.query.retrieval.MODES`) with its keyword
        options: ``top_k`` and those the mode reads (:func:`kgloom.query.modes.mode_options`:
        ``depth``, ``lam``, ``oversample``, ``damping``); an option not given takes the
        settings' value (:attr:`settings`).

        Returns:
            the ranked text units, with the entities and edges that brought them in.

        Raises:
            ValueError: an unknown mode (every retrieval mode listed), or a bad option.
            TypeError: an option the mode does not take.
        """
        top_k = options.pop("top_k", None)
        return retrieve(self.index, question, mode, top_k, self.settings, **options)

    def link(self, question: str, qv: np.ndarray | None = None) -> list[LinkedEntity]:
        """The question's entities (:func:`kgloom.query.retrieval.steps.link_question`)."""
        return link_question(self.index, self.settings, question, qv)

    # a query vector instead of a question (benches, imported graphs); None: the settings'
    def fused_by_vector(self, vector: np.ndarray, top_k: int | None = None,
                        depth: int | None = None, lam: float | None = None,
                        oversample: int | None = None) -> RetrievalResult:
        """:func:`kgloom.query.retrieval.fused.retrieve_by_vector`."""
        s = self.settings
        return fused.retrieve_by_vector(
            self.index, vector, s.top_k if top_k is None else top_k, s,
            s.depth if depth is None else depth, s.lam if lam is None else lam,
            s.oversample if oversample is None else oversample)

    def two_step_by_vector(self, vector: np.ndarray, top_k: int | None = None,
                           depth: int | None = None) -> RetrievalResult:
        """:func:`kgloom.query.retrieval.two_step.retrieve_by_vector`."""
        s = self.settings
        return two_step.retrieve_by_vector(self.index, vector, s.top_k if top_k is None
                                           else top_k, s, s.depth if depth is None else depth)

    def entities_by_vector(self, vector: np.ndarray, top_k: int | None = None
                           ) -> RetrievalResult:
        """:func:`kgloom.query.retrieval.two_step.entities_by_vector`."""
        s = self.settings
        return two_step.entities_by_vector(self.index, vector,
                                           s.top_k if top_k is None else top_k, s)

    def expand_by_vector(self, vector: np.ndarray, seeds: list[str], depth: int | None = None,
                         top_k: int | None = None, seed_scores: list[float] | None = None,
                         entity_via: str = "bfs") -> RetrievalResult:
        """:func:`kgloom.query.retrieval.two_step.expand_by_vector`."""
        s = self.settings
        return two_step.expand_by_vector(self.index, vector, seeds,
                                         s.top_k if top_k is None else top_k, s,
                                         s.depth if depth is None else depth, seed_scores,
                                         entity_via)
