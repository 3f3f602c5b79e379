"""Whether anything in the index is relevant to a question: the judgement every retrieval
and search result carries in ``info`` (``best_similarity``, ``low_relevance``,
``notice``).

A question is judged by its best retrieval score: the cosine of its vector and the
nearest text unit's (the index's embedder). Below
:attr:`kgloom.settings.RetrievalSettings.low_relevance_similarity` nothing in the index is
about the question, and the results, which are the nearest units all the same, say so.
A corpus-wide question (the routing's thematic cue: themes, summarize, what kinds of,
most common, ...; :func:`kgloom.query.question_cues.thematic_cue`) is not judged: no single
unit is meant to match it (on bench/data its best unit is as far as an off-corpus
question's). ``bench/eval_relevance.py`` measured the threshold.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kgloom.query.query_index import QueryIndex
from kgloom.query.question_cues import thematic_cue

NOTICE = ("Nothing in this index looks relevant to the question: the closest text unit has "
          "similarity {best:.2f}, under {threshold:.2f}, so the results are only the least "
          "distant units, likely unrelated. The question may be about something the "
          "indexed documents do not cover.")
NO_UNIT_NOTICE = "This index holds no text unit to compare the question with."


def nearest_unit_similarity(index: QueryIndex, vector: np.ndarray) -> float | None:
    """The cosine of ``vector`` (float32 (dim,), unit length) and its nearest text unit
    (:meth:`QueryIndex.search`: exact on a flat table, IVF_PQ's estimate on an indexed
    one); None when the index holds no text unit."""
    if not index.units.count:
        return None
    _, sims = index.search("text_units", vector, 1)
    return float(sims[0]) if len(sims) else None


def judge_relevance(best_similarity: float | None, threshold: float,
                    question: str = "") -> dict[str, Any]:
    """The relevance judgement of one result.

    Args:
        best_similarity: the cosine of the question and its nearest text unit, in
            [-1, 1] (:func:`nearest_unit_similarity`); None: the index has no text unit.
        threshold: ``RetrievalSettings.low_relevance_similarity`` (a cosine; -1 never
            flags).
        question: the question ("" for a query by vector): one with a corpus-wide cue
            is not flagged.

    Returns:
        ``{"best_similarity": float | None (rounded to 4 places), "low_relevance": bool,
        "notice": str | None}``: ``notice`` is a sentence for a person, set exactly when
        ``low_relevance``.
    """
    if best_similarity is None:
        return {"best_similarity": None, "low_relevance": True, "notice": NO_UNIT_NOTICE}
    low = best_similarity < threshold and not (question and thematic_cue(question))
    return {"best_similarity": round(best_similarity, 4), "low_relevance": low,
            "notice": NOTICE.format(best=best_similarity, threshold=threshold) if low
            else None}


def question_relevance(index: QueryIndex, question: str, threshold: float) -> dict[str, Any]:
    """:func:`judge_relevance` of ``question`` on ``index`` (its vector by the index's
    embedder, then its nearest text unit), for a result that ran no text-unit search of
    its own (a search); see :func:`judge_relevance` for the dict."""
    vector = index.embed([question])[0]
    return judge_relevance(nearest_unit_similarity(index, vector), threshold, question)
