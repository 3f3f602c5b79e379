"""Split documents into overlapping token windows: the ``text_units`` table.

A text unit is at most ``chunk_size`` tokens; consecutive units share about
``chunk_overlap`` tokens (GraphRAG's token chunker, ``chunking.type: tokens``; kgloom
defaults 600/100). Units are cut at token boundaries of :mod:`kgloom.embedding.tokenizer` and keep
the document's own characters (``text == doc_text[start_char:end_char]``). Unlike a plain
token window, a unit never ends or starts inside a word (a name cut at a unit's edge,
``Sc`` of ``Scrooge``, would become an entity of its own): each end moves back to the
last sentence end in the window's last quarter, else to the last word boundary in its
second half (whitespace or punctuation; in Chinese or Japanese text also after a
comma-like mark), and each start moves forward to the first sentence or word start.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    import numpy as np

from kgloom.core import schemas
from kgloom.core.ids import content_id
from kgloom.embedding.tokenizer import Tokenizer

_SENTENCE_END = set(".!?…。！？")
_CLAUSE_END = set(",;:、，；：)]）」』”’\"'»")


def _boundary(text: str, offs: np.ndarray | Sequence[tuple[int, int]], b: int) -> int:
    """How good a cut before token ``b`` is: 2 after a sentence end, 1 at another word
    boundary (whitespace, punctuation), 0 inside a word."""
    if b <= 0 or b >= len(offs):
        return 2
    prev_end, next_start = offs[b - 1][1], offs[b][0]
    last = text[prev_end - 1] if prev_end > 0 else ""
    gap = next_start > prev_end
    if last in _SENTENCE_END and (gap or not text[next_start].isascii()):
        return 2
    if gap or last in _CLAUSE_END or not last.isalnum() or not text[next_start].isalnum():
        return 1
    return 0


def unit_windows(text: str, offs: np.ndarray | Sequence[tuple[int, int]], size: int,
                 overlap: int) -> list[tuple[int, int]]:
    """Return [start, end) token ranges of at most ``size`` tokens over ``text`` whose
    tokens have character spans ``offs`` (:meth:`Tokenizer.offsets`' (n, 2) int array,
    or pairs), cut at sentence or word boundaries (module doc); consecutive ranges
    overlap by at most ``overlap`` tokens and every token is covered. Falls back to the
    plain token window where a stretch has no boundary at all.

    Raises:
        ValueError: when ``overlap`` is not in [0, size).
    """
    if not 0 <= overlap < size:
        raise ValueError(f"overlap must be in [0, {size}), got {overlap}")
    n, out, start = len(offs), [], 0
    while start < n:
        end = min(start + size, n)
        if end < n:
            best = next((b for b in range(end, start + max(1, 3 * size // 4), -1)
                         if _boundary(text, offs, b) == 2), None)
            if best is None:
                best = next((b for b in range(end, start + max(1, size // 2), -1)
                             if _boundary(text, offs, b) >= 1), end)
            end = best
        out.append((start, end))
        if end == n:
            break
        nxt = max(end - overlap, start + 1)
        if overlap:
            nxt = next((b for b in range(nxt, end) if _boundary(text, offs, b) == 2),
                       next((b for b in range(nxt, end) if _boundary(text, offs, b) >= 1),
                            nxt))
        start = nxt
    return out


def split_text_units(documents: pl.DataFrame, tokenizer: Tokenizer, chunk_size: int = 600,
                     chunk_overlap: int = 100) -> pl.DataFrame:
    """Chunk every document into text units.

    Args:
        documents: a ``DOCUMENTS_SCHEMA`` frame.
        tokenizer: sizes the units (tokens of this tokenizer).
        chunk_size / chunk_overlap: in tokens.

    Returns:
        a ``CHUNKS_SCHEMA`` frame (id, text, n_tokens, document_id, chunk_index,
        start_char, end_char), in document (``human_readable_id``) then chunk order. The
        graph columns are added once, from the graph (``kgloom.publish.tables``), the corpus-wide
        ``human_readable_id`` and the documents' ``text_unit_ids`` when the partitions are
        combined (``kgloom.corpus.partitions``).
    """
    rows: list[dict] = []
    for doc in documents.sort("human_readable_id").iter_rows(named=True):
        text = doc["text"]
        offs = tokenizer.offsets(text)
        for idx, (a, b) in enumerate(unit_windows(text, offs, chunk_size, chunk_overlap)):
            start, end = offs[a][0], offs[b - 1][1]
            chunk = text[start:end]
            rows.append({"id": content_id("text_unit", doc["id"], start, chunk), "text": chunk,
                         "n_tokens": b - a, "document_id": doc["id"], "chunk_index": idx,
                         "start_char": start, "end_char": end})
    return pl.DataFrame(rows, schema=schemas.CHUNKS_SCHEMA)


