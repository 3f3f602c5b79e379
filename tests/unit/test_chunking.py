"""Token windows and text units: coverage, overlap, offsets, stable ids."""

from __future__ import annotations

import itertools
from pathlib import Path

import polars as pl
import pytest

from kgloom.core import schemas
from kgloom.core.ids import content_id
from kgloom.corpus.partitions import with_text_unit_ids
from kgloom.embedding.tokenizer import default_tokenizer
from kgloom.ingest.chunking import split_text_units, unit_windows

# A Christmas Carol, Stave One (Project Gutenberg text, lightly trimmed).
STAVE_ONE = """Marley was dead, to begin with. There is no doubt whatever about that. The
register of his burial was signed by the clergyman, the clerk, the undertaker, and the chief
mourner. Scrooge signed it. And Scrooge's name was good upon 'Change for anything he chose to
put his hand to. Old Marley was as dead as a door-nail.

Mind! I don't mean to say that I know of my own knowledge, what there is particularly dead
about a door-nail. I might have been inclined, myself, to regard a coffin-nail as the deadest
piece of ironmongery in the trade. But the wisdom of our ancestors is in the simile; and my
unhallowed hands shall not disturb it, or the country's done for. You will, therefore, permit
me to repeat, emphatically, that Marley was as dead as a door-nail.

Scrooge knew he was dead? Of course he did. How could it be otherwise? Scrooge and he were
partners for I don't know how many years. Scrooge was his sole executor, his sole
administrator, his sole assign, his sole residuary legatee, his sole friend, and sole
mourner."""

SHORT = "Bob Cratchit carried Tiny Tim upon his shoulder."


def _docs(*texts: str) -> pl.DataFrame:
    return pl.DataFrame([
        {"id": content_id("document", t), "human_readable_id": i, "title": f"doc{i}", "text": t,
         "text_unit_ids": [], "creation_date": "2024-12-24T00:00:00+00:00", "raw_data": None,
         "source": f"doc{i}.txt"} for i, t in enumerate(texts)], schema=schemas.DOCUMENTS_SCHEMA)


def _words(n: int) -> tuple[str, list[tuple[int, int]]]:
    """``n`` one-letter words and their token spans."""
    return " ".join("w" * n), [(2 * i, 2 * i + 1) for i in range(n)]


@pytest.mark.parametrize("n, size, overlap", [
    (10, 4, 1), (11, 4, 1), (600, 600, 100), (601, 600, 100), (1000, 600, 100), (7, 3, 0),
    (2, 5, 4), (50, 10, 9)])
def test_windows_cover_all_tokens_with_exact_overlap(n, size, overlap):
    # words with a space between every two: every token edge is a word boundary, so the
    # windows are plain token windows
    windows = unit_windows(*_words(n), size, overlap)
    assert windows[0][0] == 0
    assert windows[-1][1] == n
    assert all(0 < b - a <= size for a, b in windows)
    covered = set().union(*(range(a, b) for a, b in windows))
    assert covered == set(range(n))
    for (a1, b1), (a2, _) in itertools.pairwise(windows):
        assert b1 - a2 == overlap  # consecutive windows share exactly `overlap` tokens
        assert a2 > a1  # always moves forward
    # every window but possibly the last is full
    assert all(b - a == size for a, b in windows[:-1])


def test_windows_edge_cases():
    assert unit_windows(*_words(0), 600, 100) == []
    assert unit_windows(*_words(5), 600, 100) == [(0, 5)]
    assert unit_windows(*_words(600), 600, 100) == [(0, 600)]  # no tail of pure overlap


@pytest.mark.parametrize("overlap", [-1, 10, 11])
def test_windows_reject_bad_overlap(overlap):
    with pytest.raises(ValueError, match="overlap"):
        unit_windows(*_words(100), 10, overlap)


def test_text_units_of_a_real_passage():
    tok = default_tokenizer()
    size, overlap = 40, 8
    docs = _docs(STAVE_ONE)
    units = split_text_units(docs, tok, chunk_size=size, chunk_overlap=overlap)

    # the partition level: no graph columns, no corpus-wide human_readable_id
    assert units.columns == list(schemas.CHUNKS_SCHEMA)
    assert not set(schemas.TEXT_UNIT_GRAPH_COLUMNS) & set(units.columns)
    offs = tok.offsets(STAVE_ONE)
    expected = unit_windows(STAVE_ONE, offs, size, overlap)
    assert units.height == len(expected) > 3
    for u, (a, b) in zip(units.sort("chunk_index").iter_rows(named=True), expected):
        # the unit keeps the document's own characters
        assert u["text"] == STAVE_ONE[u["start_char"]:u["end_char"]]
        assert u["n_tokens"] <= size
        # n_tokens is the number of document tokens inside the unit's character span
        inside = [o for o in offs if o[0] >= u["start_char"] and o[1] <= u["end_char"]]
        assert len(inside) == u["n_tokens"] == b - a
        assert tok.count(u["text"]) <= size
        assert u["document_id"] == docs["id"][0]
    # first unit starts at the text, last ends at its end; neighbours overlap in characters
    ordered = units.sort("chunk_index")
    assert ordered["start_char"][0] == 0
    assert ordered["end_char"][-1] == len(STAVE_ONE)
    assert (ordered["start_char"][1:] < ordered["end_char"][:-1]).all()
    # the document lists its units in chunk order, whatever order the units come in
    docs_out = with_text_unit_ids(docs, units.reverse())
    assert docs_out["text_unit_ids"][0].to_list() == ordered["id"].to_list()


def test_text_unit_ids_are_stable_and_distinct():
    tok = default_tokenizer()
    docs = _docs(STAVE_ONE, SHORT)
    a = split_text_units(docs, tok, chunk_size=40, chunk_overlap=8)
    b = split_text_units(docs, tok, chunk_size=40, chunk_overlap=8)
    assert a["id"].to_list() == b["id"].to_list()
    assert a["id"].n_unique() == a.height
    # units come in document, then chunk order (the corpus numbers them in this order)
    assert a["document_id"].to_list() == sorted(a["document_id"].to_list(),
                                                key=docs["id"].to_list().index)
    # other chunk settings cut other units
    c = split_text_units(docs, tok, chunk_size=50, chunk_overlap=8)
    assert set(c["id"]) != set(a["id"])


def test_document_shorter_than_one_chunk_is_one_unit():
    tok = default_tokenizer()
    units = split_text_units(_docs(SHORT), tok, chunk_size=600, chunk_overlap=100)
    assert units.height == 1
    assert units["text"][0] == SHORT
    assert units["n_tokens"][0] == tok.count(SHORT)
    assert (units["start_char"][0], units["end_char"][0]) == (0, len(SHORT))
    assert with_text_unit_ids(_docs(SHORT), units)["text_unit_ids"][0].to_list() == \
        units["id"].to_list()


def test_default_sizes_on_a_long_document():
    tok = default_tokenizer()
    text = "\n\n".join([STAVE_ONE] * 8)
    units = split_text_units(_docs(text), tok)  # 600 / 100
    n = tok.count(text)
    assert n > 600
    assert units["n_tokens"].max() <= 600
    # every token is in a unit; neighbours share at most 100 tokens
    assert n <= units["n_tokens"].sum() <= n + 100 * (units.height - 1)


def test_tokenizer_truncate_keeps_a_prefix_within_budget():
    tok = default_tokenizer()
    cut = tok.truncate(STAVE_ONE, 12)
    assert STAVE_ONE.startswith(cut)
    assert tok.count(cut) == 12
    assert tok.truncate(SHORT, 1000) == SHORT


def test_a_long_text_is_tokenized_in_pieces_with_the_same_tokens(monkeypatch):
    from kgloom.embedding import tokenizer as tokenizer_module

    tok = default_tokenizer()
    book = (Path(__file__).resolve().parents[2] / "data" / "input" /
            "a-christmas-carol.txt").read_text(encoding="utf-8")[:60000]
    whole = tok.offsets(book)
    monkeypatch.setattr(tokenizer_module, "SEGMENT_CHARS", 997)  # ~60 cuts, odd places
    pieces = tok.offsets(book)
    assert pieces.shape == whole.shape and (pieces == whole).all()
    units = split_text_units(_docs(book), tok, chunk_size=120, chunk_overlap=20)
    monkeypatch.setattr(tokenizer_module, "SEGMENT_CHARS", 1 << 16)
    again = split_text_units(_docs(book), tok, chunk_size=120, chunk_overlap=20)
    assert units.equals(again)
def _word_edges_ok(text: str, start: int, end: int) -> bool:
    inside = lambda i: 0 < i < len(text) and text[i - 1].isalnum() and text[i].isalnum()  # noqa: E731
    return not inside(start) and not inside(end)


@pytest.mark.parametrize("size, overlap", [(40, 8), (25, 5), (60, 0), (600, 100)])
def test_units_never_start_or_end_inside_a_word(size, overlap):
    tok = default_tokenizer()
    text = "\n\n".join([STAVE_ONE] * 3)
    units = split_text_units(_docs(text), tok, chunk_size=size, chunk_overlap=overlap)
    ordered = units.sort("chunk_index")
    for u in ordered.iter_rows(named=True):
        assert _word_edges_ok(text, u["start_char"], u["end_char"]), u["text"][-20:]
        assert u["n_tokens"] <= size
    # together they cover the document (what falls between two units is whitespace)
    assert ordered["start_char"][0] == 0 and ordered["end_char"][-1] == len(text)
    for a, b in zip(ordered["end_char"][:-1], ordered["start_char"][1:]):
        assert a >= b or not text[a:b].strip()


def test_units_prefer_sentence_ends():
    tok = default_tokenizer()
    units = split_text_units(_docs(STAVE_ONE), tok, chunk_size=40, chunk_overlap=8)
    ends = [t.rstrip()[-1] for t in units.sort("chunk_index")["text"].to_list()[:-1]]
    assert sum(e in ".!?" for e in ends) >= len(ends) // 3  # ~5 of 28-40 tokens hold one


def test_chinese_units_end_at_punctuation_and_cover_the_text():
    tok = default_tokenizer()
    text = "李白是唐朝著名的诗人，出生于碎叶城。" * 30
    units = split_text_units(_docs(text), tok, chunk_size=50, chunk_overlap=10)
    ordered = units.sort("chunk_index")
    assert ordered["start_char"][0] == 0 and ordered["end_char"][-1] == len(text)
    assert all(t[-1] in "，。" for t in ordered["text"].to_list()[:-1])
    assert (ordered["n_tokens"] <= 50).all()


def test_a_text_without_boundaries_still_splits_within_size():
    tok = default_tokenizer()
    text = "x" * 3000  # one long "word": falls back to plain token windows
    units = split_text_units(_docs(text), tok, chunk_size=30, chunk_overlap=5)
    assert (units["n_tokens"] <= 30).all()
    assert units.sort("chunk_index")["end_char"][-1] == len(text)
