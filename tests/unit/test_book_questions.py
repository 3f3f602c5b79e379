"""The book's question sets quote the book: every evidence span of every question is in the
bundled book, whitespace folded as bench/eval_sets.py folds it (a span that is not could
never be found, and its question would count as a miss of every mode)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "data" / "input" / "a-christmas-carol.txt"
SETS = sorted((ROOT / "bench" / "data").glob("book-questions*.jsonl"))


def _fold(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("path", SETS, ids=[p.name for p in SETS])
def test_every_evidence_span_of_a_book_question_is_in_the_book(path):
    book = _fold(BOOK.read_text(encoding="utf-8"))
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]
    assert rows and len({r["id"] for r in rows}) == len(rows)
    missing = [(r["id"], e) for r in rows for e in r["evidence"] if _fold(e) not in book]
    assert not missing
    assert all(r["question"].strip() and r["answer"].strip() and r["evidence"] for r in rows)

