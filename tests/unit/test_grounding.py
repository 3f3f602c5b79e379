"""kgloom.grounding: names a text holds that its context lacks, loops, copied examples."""

from __future__ import annotations

import pytest

from kgloom.grounding import (
    cut_repetition,
    find_repetition,
    is_heading,
    shared_phrase,
    ungrounded_names,
)

CONTEXT = """Entities:
- EBENEZER SCROOGE (PERSON): Scrooge was a squeezing, wrenching old sinner.
- FEZZIWIG (PERSON): Old Fezziwig laid down his pen in the street.
Relationships:
- EBENEZER SCROOGE -> FEZZIWIG: Scrooge was apprenticed to old Fezziwig."""


@pytest.mark.parametrize("text, expected", [
    ("Scrooge was apprenticed to Fezziwig.", []),
    ("Mr. Scrooge admired old Fezziwig's ball.", []),  # honorific, possessive
    ("Ebenezer Scrooge and Fezziwig worked together.", []),
    ("Scrooge meets Tiny Tim and Bob Cratchit at home.", ["Tiny Tim", "Bob Cratchit"]),
    ("Sherlock Holmes and Dr. Watson share rooms in Baker Street.",
     ["Sherlock Holmes", "Dr. Watson", "Baker Street"]),
    ("Scrooge visits Fezziwig with Belle.", ["Belle"]),
    # a title-case heading capitalizes common words: no name is read from it
    ("Scrooge's Apprenticeship and Key Relationships", []),
])
def test_ungrounded_names(text, expected):
    assert ungrounded_names(text, CONTEXT) == expected


def test_known_names_ground_too():
    assert ungrounded_names("Scrooge loved Belle.", CONTEXT) == ["Belle"]
    assert ungrounded_names("Scrooge loved Belle.", CONTEXT, known=["BELLE"]) == []


def test_is_heading():
    assert is_heading("Scrooge, Marley and the Counting-House")
    assert not is_heading("Scrooge visits Fezziwig with Belle.")  # a sentence
    assert not is_heading("the firm of scrooge and marley")


@pytest.mark.parametrize("text, phrase, count, kept", [
    ("Tiny Tim is a man named Tiny Tim, a man named Tiny Tim, a man named Tiny Tim, a man "
     "named Tiny Tim, a man named Tiny Tim, a man named Tiny Tim.",
     "a man named Tiny Tim", 6, "Tiny Tim is a man named Tiny Tim…"),
    ("a man named Tiny Tim lives here. Then a man named Tiny Tim went. And a man named "
     "Tiny Tim slept.", "a man named Tiny Tim", 3, "a man named Tiny Tim lives here. Then…"),
    ("no no no no", "no", 4, "no…"),
])
def test_a_loop_is_found_and_cut_after_its_first_time(text, phrase, count, kept):
    rep = find_repetition(text)
    assert rep is not None and (rep.phrase, rep.count) == (phrase, count)
    assert cut_repetition(text)[0] == kept


@pytest.mark.parametrize("text", [
    "very very good", "Scrooge and Marley's firm, Scrooge and Marley's",
    "The Cratchits are poor but the Cratchits are happy.", "", "Scrooge"])
def test_ordinary_text_is_no_loop(text):
    assert find_repetition(text) is None
    assert cut_repetition(text) == (text, None)


def test_shared_phrase_is_a_copy_only_when_the_context_lacks_it():
    example = "Holmes needed a friend to share rooms in Baker Street, and Watson agreed."
    copy = "Scrooge needed a friend to share rooms in his house."
    assert shared_phrase(copy, example) == "needed a friend to share"
    assert shared_phrase(copy, example,
                         context="He needed a friend to share rooms in town.") is None
    assert shared_phrase("Scrooge was apprenticed to Fezziwig.", example) is None


def test_a_word_only_seen_opening_a_sentence_is_no_name():
    assert ungrounded_names("Despite his wealth, Scrooge is alone. Built by rules.",
                            CONTEXT) == []
