"""Named entities found: when a question names an entity of the index (by title or
alias), one of its text units is in the top 5 of the default retrieval mode (``bridge``).

The index is the whole bundled book, indexed with the fake LLM (its entities are the
book's proper names; the fake model only types them), once per module.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from kgloom.query.retriever import Retriever
from kgloom.query.searcher import SearchSettings
from tests.conftest import index_fake_book

pytestmark = pytest.mark.integration  # the whole book indexed (~55 s)

MODE = SearchSettings().retrieval_mode  # the default mode of local search
TOP_K = 5


@pytest.fixture(scope="module")
def book_index(tmp_path_factory) -> Path:
    return index_fake_book(tmp_path_factory, reports=False)


@pytest.fixture(scope="module")
def retriever(book_index, embedder) -> Retriever:
    return Retriever(book_index, embedder, graph_backend="memory")


def test_default_mode_is_bridge():
    assert MODE == "bridge"


def test_every_entity_of_degree_3_or_more_is_found_by_its_name(book_index, retriever):
    ents = pl.read_parquet(book_index / "entities.parquet",
                           columns=["id", "title", "degree", "text_unit_ids"])
    chosen = ents.filter(pl.col("degree") >= 3)
    assert chosen.height >= 20  # the book's main characters and places
    misses = []
    for r in chosen.iter_rows(named=True):
        res = retriever.retrieve(f"What do we know about {r['title']}?", mode=MODE,
                                 top_k=TOP_K)
        assert res.text_units.height == TOP_K
        if not set(r["text_unit_ids"]) & set(res.text_units["id"].to_list()):
            misses.append(r["title"])
    assert misses == []


def _units_of(book_index: Path, title: str) -> set[str]:
    ents = pl.read_parquet(book_index / "entities.parquet", columns=["title", "text_unit_ids"])
    row = ents.filter(pl.col("title") == title)
    assert row.height == 1, title
    return set(row["text_unit_ids"][0])


def test_both_named_entities_of_a_relation_question_are_found(book_index, retriever):
    """Issue 28: "How is Scrooge related to Fezziwig?" returned five units without
    Fezziwig in bridge mode."""
    res = retriever.retrieve("How is Scrooge related to Fezziwig?", mode=MODE, top_k=TOP_K)
    got = set(res.text_units["id"].to_list())
    assert got & _units_of(book_index, "Fezziwig")
    assert got & _units_of(book_index, "Ebenezer Scrooge")
    # a unit naming both ranks first among Fezziwig's
    both = _units_of(book_index, "Fezziwig") & _units_of(book_index, "Ebenezer Scrooge")
    assert got & both


def test_a_named_entity_by_alias_is_found(book_index, retriever):
    aliases = pl.read_parquet(book_index / "entity_aliases.parquet",
                              columns=["alias", "entity_id"])
    ents = pl.read_parquet(book_index / "entities.parquet",
                           columns=["id", "title", "degree", "text_unit_ids"])
    joined = aliases.join(ents, left_on="entity_id", right_on="id").filter(
        (pl.col("alias") != pl.col("title")) & (pl.col("degree") >= 3))
    assert joined.height >= 1
    for r in joined.head(10).iter_rows(named=True):
        res = retriever.retrieve(f"What do we know about {r['alias']}?", mode=MODE,
                                 top_k=TOP_K)
        assert set(r["text_unit_ids"]) & set(res.text_units["id"].to_list()), r["alias"]
