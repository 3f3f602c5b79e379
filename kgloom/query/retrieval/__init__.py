"""Retrieval over a kgloom index: one module per mode, one signature, one result shape.

Every mode of :data:`kgloom.query.modes.RETRIEVAL_MODES` is a module here with

    retrieve(index, question, top_k, settings, **options) -> RetrievalResult

over a :class:`kgloom.query.query_index.QueryIndex`, with :class:`RetrievalSettings` (the
scoring knobs :class:`RetrievalConfig`, the graph backend, BFS threads) and the mode's
own keyword options (``depth``, ``lam``, ``oversample``, ``damping``: see
:data:`kgloom.query.modes.OPTION_MODES`). The steps they share (vector search, linking,
BFS, graph ranking, the top-up with vector hits, the result frames) are
:mod:`kgloom.query.retrieval.steps`.

- ``vector``: ANN over the LanceDB ``text_units`` table; the baseline.
- ``one_hop``: vector hits expanded through the text units' own graph columns.
- ``multihop``: BFS to ``depth`` from the linked entities.
- ``fused``: entity ANN, diversity rerank of the seeds, BFS from them.
- ``two_step``: the two-call baseline of ``fused`` (entity search, then the walk).
- ``ppr``: personalized PageRank from the linked entities (HippoRAG's recipe).
- ``hybrid``: reciprocal-rank fusion of ``vector`` and ``ppr``.
- ``bridge``: the nearest units, then the units most about the entities they mention.

To add a mode: write ``kgloom/query/retrieval/<mode>.py`` with ``retrieve`` and add its
name to :data:`kgloom.query.modes.RETRIEVAL_MODES` (and its options to ``OPTION_MODES``).
"""

from __future__ import annotations

import importlib
from typing import Any

from kgloom.query.modes import RETRIEVAL_MODES, check_mode
from kgloom.query.query_index import QueryIndex
from kgloom.query.retrieval.result import RetrievalResult
from kgloom.query.retrieval.retrieval_config import DEFAULT_TOP_K, RetrievalConfig
from kgloom.query.retrieval.steps import RetrievalSettings

__all__ = ["RetrievalConfig", "RetrievalResult", "RetrievalSettings", "retrieve"]


def retrieve(index: QueryIndex, question: str, mode: str, top_k: int = DEFAULT_TOP_K,
             settings: RetrievalSettings | None = None, **options: Any) -> RetrievalResult:
    """Run retrieval mode ``mode`` (its module ``kgloom.query.retrieval.<mode>``).

    Raises:
        ValueError: an unknown mode (every retrieval mode listed), or a bad option.
        TypeError: an option the mode does not take.
    """
    check_mode(mode, RETRIEVAL_MODES)
    module = importlib.import_module(f"kgloom.query.retrieval.{mode}")
    return module.retrieve(index, question, top_k, settings or RetrievalSettings(), **options)
