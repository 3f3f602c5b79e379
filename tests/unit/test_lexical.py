"""kgloom.query.lexical: BM25 scores of text units for a question."""

from __future__ import annotations

import numpy as np

from kgloom.query.lexical import LexicalIndex, titled

UNITS = [
    "Ada kept the counting-house with Bram Lowe, her partner in business.",
    "At the winter fair Ada met Cora and sang carols by the bridge.",
    "Ada walked home through the fog after the fair.",
    "The partners of the firm dined with Ada at the fair.",
]


def test_the_unit_sharing_the_rarest_word_scores_highest_and_scores_are_shares():
    scores = LexicalIndex(UNITS).scores("Who was Bram Lowe?")
    assert scores.shape == (4,) and scores.dtype == np.float64
    assert scores[0] == 1.0 and (scores[1:] == 0.0).all()
    # "fair" is in three units, "fog" in one: the rare word outweighs the common one
    fog = LexicalIndex(UNITS).scores("the fair in the fog")
    assert int(np.argmax(fog)) == 2 and fog.max() == 1.0
    assert 0.0 < fog[1] < fog[2] and fog[0] == 0.0


def test_words_are_stemmed_and_stop_words_do_not_count():
    scores = LexicalIndex(UNITS).scores("partnered")  # Snowball: partner
    assert scores[0] > 0 and scores[3] > 0 and scores[1] == scores[2] == 0.0
    assert not LexicalIndex(UNITS).scores("Who was it that the").any()


def test_a_question_no_unit_shares_a_word_with_and_an_empty_index_score_nothing():
    assert not LexicalIndex(UNITS).scores("xylophone quartz").any()
    assert LexicalIndex([]).scores("Ada").shape == (0,)
    assert not LexicalIndex(["", "Ada"]).scores("Bram")[0]


def test_a_unit_is_indexed_after_its_document_title_once():
    assert titled("Born in Oxford.", "Jonny Greenwood") == "Jonny Greenwood\nBorn in Oxford."
    assert titled("Jonny Greenwood is a guitarist.", "Jonny Greenwood") == \
        "Jonny Greenwood is a guitarist."
    assert titled(None, None) == "" and titled("text", "") == "text"


def test_units_without_a_word_score_nothing_instead_of_failing():
    """Units of only blanks or stop words gave bm25s an empty vocabulary, which it cannot
    index (ValueError): every question scores 0.0 instead."""
    assert not LexicalIndex(["", "  ", "the of and"]).scores("Ada").any()
