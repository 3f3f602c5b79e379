"""``multihop``: BFS to ``depth`` from the question's linked entities over
graph-edges.parquet (DuckDB recursive CTE, or in memory); the reached entities' text
units ranked by hop depth, edge weight and similarity."""

from __future__ import annotations

from kgloom.query.query_index import QueryIndex
from kgloom.query.retrieval.result import RetrievalResult
from kgloom.query.retrieval.steps import DEFAULT_SETTINGS, Call, RetrievalSettings
from kgloom.settings.retrieval_settings import DEFAULT_DEPTH, DEFAULT_TOP_K

NO_LINK = "no entity of the question was found in the index"


def retrieve(index: QueryIndex, question: str, top_k: int = DEFAULT_TOP_K,
             settings: RetrievalSettings = DEFAULT_SETTINGS,
             depth: int = DEFAULT_DEPTH) -> RetrievalResult:
    """BFS to ``depth`` hops from the question's linked entities (DuckDB over
    graph-edges.parquet, or in memory), then the reached entities' text units ranked
    by hop depth, edge weight and similarity (:meth:`Call.graph_result`). With no
    linked entity it returns ``vector`` results and says so in ``info["fallback"]``.

    Raises:
        ValueError: an empty question, top_k <= 0 or depth < 0.
        IndexFilesMissingError / IndexInconsistentError: the graph files (see
            :class:`kgloom.query.query_index.QueryIndex`).
    """
    call = Call.begin(index, settings, question, top_k, depth)
    links, seeds, score = call.linked_seeds()
    if not seeds:
        return call.vector_result("multihop", top_k, links, NO_LINK)
    return call.graph_result("multihop", top_k, call.reach(seeds, depth), score, links, "bfs",
                             depth=depth)
