"""kgloom.grounding: names a text holds that its context lacks, loops, copied examples."""

from __future__ import annotations

import json

import pytest

from kgloom.grounding import (
    cut_repetition,
    find_repetition,
    find_reply_loop,
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


# report replies of the bundled 135M model on the 2Wiki pool (first 300 characters; each
# loops to its field's length limit)
_LOOPED = [
    '{ "title": "Community data: Nassau, Henry I, Count of Nassau-Siegen, 134", "summary": '
    '"The Nassau-Siegen-Nassau-Siegen-Siegen-Siegen-Siegen-Siegen-Siegen-Siegen-Siegen-Siege'
    'n-Siegen-Siegen-Siegen-Siegen-Siegen-Siegen-Siegen-Siegen-Siegen-Siegen-Siegen-Siegen-S'
    'iegen-Siegen-Siegen-Siegen-Siegen-Siegen-Sieg',
    '{ "title": "Community data: Sub-community reports: Other recordings of " ,"summary": "T'
    'he 1990s: 1990s: 1990s: 1990s: 1990s: 1990s: 1990s: 1990s: 1990s: 1990s: 1990s: 1990s: '
    '1990s: 1990s: 1990s: 1990s: 1990s: 1990s: 1990s: 1990s: 1990s: 1990s: 1990s: 1990s: 199'
    '0s: 1990s: 1990s: 1990s: 1990s: 1990s: 1990s: 1990s',
]
_WHOLE = json.dumps({
    "title": "Scrooge, Marley and Fred",
    "summary": "Marley was Scrooge's partner; partner and partner again, Fred is his nephew.",
    "rating": 6, "rating_explanation": "Scrooge ties the others together.",
    "findings": [{"summary": "Scrooge and Marley", "explanation": "Scrooge and Marley, "
                  "Scrooge and Marley were partners."},
                 {"summary": "Scrooge and Marley", "explanation": "Fred \"visits\" Scrooge."}]})


def _fields(reply: dict) -> list[str]:
    out = [reply.get("title", ""), reply.get("summary", ""), reply.get("rating_explanation", "")]
    for f in reply.get("findings", []):
        out += [f.get("summary", ""), f.get("explanation", "")]
    return out


@pytest.mark.parametrize("reply", _LOOPED)
def test_a_reply_being_written_is_stopped_early_in_its_loop(reply):
    first = next(i for i in range(1, len(reply) + 1) if find_reply_loop(reply[:i])[0])
    assert first < 160  # of 300 characters: stopped in the loop's first words
    rep, _ = find_reply_loop(reply[:first])
    assert rep is not None and rep.count in (3, 4)
    # the title (a complete string before it) held no loop: the loop is the summary's
    assert find_repetition(json.loads(reply[:reply.index('"summary"')].rstrip(" ,") + "}")[
        "title"]) is None


def test_a_loop_found_in_a_prefix_is_a_loop_of_the_whole_reply():
    """What makes the stop safe: every prefix in which a loop is found (carrying
    ``checked`` as the decoder does) belongs to a reply with a looping field, and a
    reply with none is never stopped, whatever prefix is looked at."""
    looping = _WHOLE.replace("Fred is his nephew.", "Fred is his nephew, his nephew, his "
                             "nephew.")
    for whole, loops in ((_WHOLE, False), (looping, True)):
        assert any(find_repetition(f) for f in _fields(json.loads(whole))) is loops
        checked, found = 0, None
        for i in range(1, len(whole) + 1):
            rep, checked = find_reply_loop(whole[:i], checked)
            if rep is not None:
                found = i
                break
        assert (found is not None) is loops
        if loops:  # found before the summary's end, not once the reply was done
            assert found < whole.index('"rating"')


@pytest.mark.parametrize("partial", [
    "", "not json", '{"summary": "The cat sat', '{"title": "go go go go', '[1, 2',
    # a key said many times is no loop: only values are read
    '{"a": {"summary": 1}, "b": {"summary": 2}, "c": {"summary": 3}, "d": {"summary": 4}',
    # a word the decoder may still be writing is not counted ("go go go go" needs a 4th)
    '{"title": "go go go g'])
def test_what_is_no_loop_while_writing(partial):
    assert find_reply_loop(partial)[0] is None


def test_the_last_word_counts_once_it_is_finished():
    assert find_reply_loop('{"title": "go go go go')[0] is None  # "go" or "gone"?
    rep, _ = find_reply_loop('{"title": "go go go go ')
    assert rep is not None and (rep.phrase, rep.count) == ("go", 4)
