"""One input file's extraction: its text units' entity and relationship mentions (by the
model, or with ``method=fast`` from candidate names and their co-occurrence), its
optional claims, and the share of its units that failed. Polars in, polars out, no
Dagster (the ``extracted_graph`` asset reads and writes the tables)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import polars as pl

from kgloom.core import schemas
from kgloom.extraction.claims import extract_claims
from kgloom.extraction.cooccurrence import cooccurrence_graph
from kgloom.extraction.extract import ExtractionResult, extract_graph
from kgloom.llm import CachedLLM
from kgloom.settings.indexing import IndexSettings

Progress = Callable[[int, int], None]


def extract_partition_graph(text_units: pl.DataFrame, llm: CachedLLM | None,
                            settings: IndexSettings, progress: Progress | None = None,
                            documents: pl.DataFrame | None = None) -> ExtractionResult:
    """The mentions of one partition's text units: :func:`extract_graph` with the model,
    :func:`cooccurrence_graph` (no model opened) when ``llm`` is None (``method=fast``).

    Args:
        text_units: the partition's CHUNKS_SCHEMA frame; documents: its DOCUMENTS frame.
        llm: the cached model, or None with ``method=fast``.

    Returns:
        the :class:`ExtractionResult` (entity and relationship mentions, unit status,
        failures, counts).

    Raises:
        as :func:`extract_graph` / :func:`cooccurrence_graph`.
    """
    if llm is None:
        return cooccurrence_graph(text_units, settings, progress, documents=documents)
    return extract_graph(text_units, llm, settings, progress, documents=documents)


def extract_partition_claims(text_units: pl.DataFrame, entity_mentions: pl.DataFrame,
                             llm: CachedLLM | None, settings: IndexSettings,
                             progress: Progress | None = None
                             ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The claims of one partition's text units (:func:`extract_claims`) when
    ``settings.extract_claims`` and a model is open (``method=fast`` refuses
    extract_claims), else empty frames: claims are always written, so turning them off
    leaves no stale rows.

    Returns:
        ``(claim mentions, failures)``: CLAIM_MENTIONS_SCHEMA and FAILURES_SCHEMA frames.
    """
    if settings.extract_claims and llm is not None:
        return extract_claims(text_units, entity_mentions, llm, settings, progress)
    return schemas.empty(schemas.CLAIM_MENTIONS_SCHEMA), schemas.empty(schemas.FAILURES_SCHEMA)


def failed_units_rate(counts: Mapping[str, int], units: int) -> tuple[int, float]:
    """``(failed units, their share of the partition's units)``: ``counts["units_failed"]``
    (0 when absent) over ``units`` (at least 1)."""
    failed = counts.get("units_failed", 0)
    return failed, failed / max(units, 1)
