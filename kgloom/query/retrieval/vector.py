"""``vector``: the baseline: ANN over the LanceDB ``text_units`` table."""

from __future__ import annotations

from kgloom.query.query_index import QueryIndex
from kgloom.query.retrieval.result import RetrievalResult
from kgloom.query.retrieval.steps import DEFAULT_SETTINGS, Call, RetrievalSettings
from kgloom.settings.retrieval_settings import DEFAULT_TOP_K


def retrieve(index: QueryIndex, question: str, top_k: int = DEFAULT_TOP_K,
             settings: RetrievalSettings = DEFAULT_SETTINGS) -> RetrievalResult:
    """Top ``top_k`` text units by cosine similarity of their LanceDB vectors to the
    embedded question (exact scan, or IVF_PQ when the table has the index).

    Raises:
        ValueError: an empty question or top_k <= 0.
    """
    return Call.begin(index, settings, question, top_k).vector_result("vector", top_k)
