"""Retrieval over a kgloom index: one module per mode, one signature, one result shape, and
:data:`MODES`, the explicit registry of mode name -> function.

Every mode of :data:`kgloom.query.modes.RETRIEVAL_MODES` is a module here with

    retrieve(index, question, top_k, settings, **options) -> RetrievalResult

over a :class:`kgloom.query.query_index.QueryIndex`, with
:class:`kgloom.settings.RetrievalSettings` (the scoring knobs, the graph backend, BFS
threads) and the mode's own keyword options (``depth``, ``lam``, ``oversample``,
``damping``: see :data:`kgloom.query.modes.OPTION_MODES`). The steps they share (vector
search, linking, BFS, graph ranking, the top-up with vector hits, the result frames) are
:mod:`kgloom.query.retrieval.steps`.

- ``vector``: ANN over the LanceDB ``text_units`` table; the baseline.
- ``one_hop``: vector hits expanded through the text units' own graph columns.
- ``multihop``: BFS to ``depth`` from the linked entities.
- ``fused``: entity ANN, diversity rerank of the seeds, BFS from them.
- ``two_step``: the two-call baseline of ``fused`` (entity search, then the walk).
- ``ppr``: personalized PageRank from the linked entities (HippoRAG's recipe).
- ``hybrid``: reciprocal-rank fusion of ``vector`` and ``ppr``.
- ``bridge``: the nearest units, then the units most about the entities they mention.

The query-vector entry points (a vector instead of a question: benches, imported graphs)
are the modules' own functions: :func:`fused.retrieve_by_vector`,
:func:`two_step.retrieve_by_vector`, :func:`two_step.entities_by_vector`,
:func:`two_step.expand_by_vector` (and the ``*_by_vector`` methods of
:class:`kgloom.query.retriever.Retriever`).

To add a mode: write ``kgloom/query/retrieval/<mode>.py`` with ``retrieve``, add it to
:data:`MODES` below, and its name to :data:`kgloom.query.modes.RETRIEVAL_MODES` (and the
options it reads to ``OPTION_MODES``); a unit test checks the two lists agree.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kgloom.query.modes import RETRIEVAL_MODES, check_mode, mode_options
from kgloom.query.query_index import QueryIndex
from kgloom.query.retrieval import (
    bridge,
    fused,
    hybrid,
    multihop,
    one_hop,
    ppr,
    two_step,
    vector,
)
from kgloom.query.retrieval.result import RetrievalResult
from kgloom.settings.retrieval_settings import DEFAULT_RETRIEVAL, RetrievalSettings

__all__ = ["MODES", "RetrievalResult", "RetrievalSettings", "RetrieveFn", "mode_function",
           "retrieve"]


# a mode's ``retrieve``: (index, question, top_k, settings, **options) -> the ranked units
RetrieveFn = Callable[..., RetrievalResult]


# the registry: mode name -> its function, in kgloom.query.modes.RETRIEVAL_MODES' order
MODES: dict[str, RetrieveFn] = {
    "bridge": bridge.retrieve,
    "vector": vector.retrieve,
    "one_hop": one_hop.retrieve,
    "multihop": multihop.retrieve,
    "fused": fused.retrieve,
    "ppr": ppr.retrieve,
    "hybrid": hybrid.retrieve,
    "two_step": two_step.retrieve,
}


def mode_function(mode: str) -> RetrieveFn:
    """The function of retrieval mode ``mode`` (:data:`MODES`).

    Raises:
        ValueError: an unknown mode (every retrieval mode listed).
    """
    return MODES[check_mode(mode, RETRIEVAL_MODES)]


def retrieve(index: QueryIndex, question: str, mode: str, top_k: int | None = None,
             settings: RetrievalSettings | None = None, **options: Any) -> RetrievalResult:
    """Run retrieval mode ``mode`` (its function in :data:`MODES`) with ``options`` (the
    mode's own keyword options); ``top_k`` (None) and every option the mode reads that is
    not given (:func:`kgloom.query.modes.mode_options`) take ``settings``' value (None:
    the defaults), so every caller, :class:`kgloom.query.retriever.Retriever` and local
    search alike, runs a mode the same way under the same settings.

    Raises:
        ValueError: an unknown mode (every retrieval mode listed), or a bad option.
        TypeError: an option the mode does not take.
    """
    function = mode_function(mode)
    settings = settings or DEFAULT_RETRIEVAL
    for name in mode_options(mode):
        options.setdefault(name, getattr(settings, name))
    return function(index, question, settings.top_k if top_k is None else top_k, settings,
                    **options)
