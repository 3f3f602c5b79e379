"""What every retrieval mode returns: :class:`RetrievalResult` and its frames' schemas."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from kgloom.core.schemas import TableSchema

_STR_LIST = pl.List(pl.String)
UNIT_RESULT_SCHEMA: TableSchema = {
    "rank": pl.Int64,  # 1..k
    "id": pl.String,  # text unit id
    "score": pl.Float64,  # the mode's ranking score (higher is better)
    "similarity": pl.Float64,  # cosine of question and unit vectors
    "hop_depth": pl.Int64,  # hops from a seed entity to the nearest entity that brought
                            # it in; 0 = a seed's own unit or a direct vector hit
    "via": pl.String,  # vector | one_hop | bfs | ppr | hybrid | vector_fill
    "entity_ids": _STR_LIST,  # the entities that brought it in, strongest first
    "relationship_ids": _STR_LIST,  # the edges they were reached through
    "document_id": pl.String,
    "document_title": pl.String,
    "text": pl.String,
}
ENTITY_RESULT_SCHEMA: TableSchema = {
    "entity_id": pl.String, "title": pl.String, "hop_depth": pl.Int64,
    "score": pl.Float64, "seed_entity_id": pl.String, "via": pl.String}
RELATIONSHIP_RESULT_SCHEMA: TableSchema = {
    "relationship_id": pl.String, "source": pl.String, "relation": pl.String,
    "target": pl.String, "weight": pl.Float64, "hop_depth": pl.Int64}


@dataclass
class RetrievalResult:
    """What every retrieval mode returns.

    Attributes:
        question: the question as given.
        mode: the mode asked for; ``info["used_mode"]`` is the one that ran (differs on a
            fallback, e.g. no entity linked -> ``vector``).
        text_units: UNIT_RESULT_SCHEMA frame, at most top_k rows, rank 1 first.
        entities: ENTITY_RESULT_SCHEMA frame: the entities the mode reached or scored.
        relationships: RELATIONSHIP_RESULT_SCHEMA frame: the edges it went through.
        linked: LINKED_SCHEMA frame: the question's entities and how each was found.
        info: parameters, ``used_mode``, ``fallback`` (None or why), ``ann`` (flat or
            ivf_pq per LanceDB table searched), ``graph_backend``, ``seconds``, whether
            anything is relevant to the question (``best_similarity``: its cosine with
            the nearest text unit; ``low_relevance``: bool; ``notice``: a sentence for a
            person or None; :mod:`kgloom.query.retrieval.relevance`), and mode-specific
            figures (fused: seed overlap and ANN-score sums).
    """

    question: str
    mode: str
    text_units: pl.DataFrame
    entities: pl.DataFrame
    relationships: pl.DataFrame
    linked: pl.DataFrame
    info: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: question, mode, info, and each frame as a list of rows."""
        return {"question": self.question, "mode": self.mode, "info": self.info,
                "text_units": self.text_units.to_dicts(), "entities": self.entities.to_dicts(),
                "relationships": self.relationships.to_dicts(),
                "linked": self.linked.to_dicts()}
