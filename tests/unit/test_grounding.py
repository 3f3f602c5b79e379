"""kgloom.names.grounding: names a text holds that its context lacks, loops, copied examples."""

from __future__ import annotations

import json
import random

import pytest

from kgloom.names.grounding import (
    cut_repetition,
    find_repetition,
    find_reply_loop,
    is_heading,
    shared_phrase,
    ungrounded_answer_names,
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


def test_known_names_that_share_no_word_with_the_text_change_nothing():
    """A community's member titles are passed whole (thousands on the 2Wiki pool); those
    sharing no word with the report, function words aside, are left out of the check,
    which must not change its answer: a name is still grounded by the title that holds
    it, and still flagged when no title does."""
    text = "Vellmar Quist led the Osterfeld Guild. Brannoc Hale kept its books."
    known = ["Vellmar Quist", "Osterfeld Guild of the North"]
    others = [f"Sir Tamsin of the Dunmere Way {i}" for i in range(200)] + ["Of The And"]
    assert ungrounded_names(text, "", known) == ["Brannoc Hale"]
    assert ungrounded_names(text, "", known + others) == ["Brannoc Hale"]
    assert ungrounded_names(text, "", others + ["Brannoc Hale"] + known) == []


def test_is_heading():
    assert is_heading("Scrooge, Marley and the Counting-House")
    assert not is_heading("Scrooge visits Fezziwig with Belle.")  # a sentence
    assert not is_heading("the firm of scrooge and marley")


# --- answers: every capitalized word the context holds in no case or form ---------------
# an invented company history (no real firm is meant): the search context of the issue's
# question "Who founded Nordlicht Robotics?"
FIRM = ("[E1] ILSE BRANDT (person): founder of Nordlicht Robotics.\n"
        "[T1] Nordlicht Robotics was founded by Ilse Brandt in Kiel in 1998. Brandt had "
        "worked for twelve years at the Hafenwerft shipyard before she built harbour cranes "
        "of her own. Its chief engineer, Tomasz Wierzba, designed the self-levelling boom; "
        "the cranes go by barge to Tromsø and to the Auwald Stadium.")


def test_a_one_word_answer_naming_nothing_of_its_context_is_flagged():
    """The issue: "Calais-Lille" passed, a bare name being all sentence start."""
    assert ungrounded_answer_names("Calais-Lille", FIRM) == ["Calais-Lille"]
    assert ungrounded_answer_names("Ilse Brandt", FIRM) == []


def _invented(rng: random.Random) -> str:
    """A name made of random syllables: in no word list, and in no context unless put
    there."""
    syllables = "ka vor len dru mi sel tov ra bex qui zan hol per ut nav gro fi".split()
    return "".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))).capitalize()


# (answer with a made-up name, the same name as the context may write it: case,
# possessive, hyphenation, plural)
_FORMS = [
    ("{a}", "{a}"), ("{a}.", "{lower}"), ("{a} founded it in Kiel.", "{upper}"),
    ("It was founded by {a} in 1998.", "{a}'s"), ("{a}'s cranes", "{a}"),
    ("{a}-{b}", "{a} {b}"), ("{a} {b}", "{a}-{b}"), ("In {a}.", "the {a}s"),
    ("Brandt and {a} founded it.", "{upper}"), ("Ilse {a}", "{a}"),
]


@pytest.mark.parametrize("answer, in_context", _FORMS)
def test_a_made_up_name_is_flagged_until_the_context_holds_it(answer, in_context):
    """One-word, multi-word, hyphenated, sentence-initial and mid-sentence names, each a
    random invented one: flagged against the firm's context, not flagged once the context
    holds the same name in another case, possessive or hyphenation."""
    rng = random.Random(answer)
    for _ in range(20):
        a, b = _invented(rng), _invented(rng)
        text = answer.format(a=a, b=b)
        name = a if "{b}" not in answer else text[text.index(a):text.index(b) + len(b)]
        assert ungrounded_answer_names(text, FIRM) == [name], text
        said = in_context.format(a=a, b=b, lower=a.lower(), upper=a.upper())
        assert ungrounded_answer_names(text, FIRM + f" Later {said} came too.") == [], text


@pytest.mark.parametrize("answer", [
    "Ilse Brandt", "Brandt", "Brandt.", "BRANDT", "ilse brandt", "In 1998.", "1998",
    "Twelve years.", "harbour cranes", "Harbour cranes.", "Brandt's cranes",
    "Nordlicht's founder was Brandt.", "The founder was Ilse Brandt.", "Tomasz Wierzba",
    "Wierzba designed it.", "Self levelling boom.", "By barge to Tromso.",
    "Auwald-Stadium", "Hafenwerft", "He worked at the Hafenwerft shipyard.",
    "Who knows? Brandt, in Kiel.", "Dr. T. Wierzba",
])
def test_an_answer_built_from_its_context_is_not_flagged(answer):
    """Names as the context writes them or in another case, possessive, hyphenation or
    without a diacritic, numbers, dates, lower-case phrases, and sentence openers that
    are function words or words of the context."""
    assert ungrounded_answer_names(answer, FIRM) == []


def test_a_capitalized_opener_is_judged_by_the_context_not_by_a_word_list():
    """The same opening word is grounded by a context that writes it in lower case and
    flagged by one that lacks it; an invented word written in lower case elsewhere in the
    answer is an ordinary word of that answer."""
    rng = random.Random(7)
    for _ in range(20):
        word = _invented(rng)
        answer = f"{word} of the cranes went to Kiel."
        assert ungrounded_answer_names(answer, FIRM) == [word]
        assert ungrounded_answer_names(answer, FIRM + f" Some {word.lower()} went.") == []
        assert ungrounded_answer_names(f"{word}, and {word.lower()} again.", FIRM) == []
    assert ungrounded_answer_names("Barge.", FIRM) == []
    assert ungrounded_answer_names("Barge.", FIRM.replace("barge", "rail")) == ["Barge"]


def test_a_corpus_that_writes_a_word_in_lower_case_makes_it_no_name():
    """A capitalized word the context lacks is an ordinary word when the corpus the
    context came from writes it mostly in lower case, and still a name when the corpus
    writes it capitalized or not at all."""
    rng = random.Random(11)
    for _ in range(20):
        word = _invented(rng)
        answer = f"{word} the cranes went north."
        ordinary = [f"They {word.lower()} it.", f"To {word.lower()} again, {word} said."]
        named = [f"They met {word}.", f"{word} said it; {word.lower()} was rare."]
        assert ungrounded_answer_names(answer, FIRM, corpus=ordinary) == []
        assert ungrounded_answer_names(answer, FIRM, corpus=named) == [word]
        assert ungrounded_answer_names(answer, FIRM, corpus=[FIRM]) == [word]


def test_inflected_and_caseless_names_are_judged_as_ungrounded_names_judges_them():
    """A Russian name in another case is its context's name (pymorphy3 lemmas); names of
    a caseless script the context lacks stay flagged (the candidate finder's names)."""
    ctx = "Лев Толстой родился в Ясной Поляне и переехал в Москву."
    assert ungrounded_answer_names("Толстой жил в Москве.", ctx) == []
    assert ungrounded_answer_names("Толстой жил в Казани.", ctx) == ["Казани"]
    assert ungrounded_answer_names("北京大学的校长是王明。", "清华大学位于北京。") == [
        "北京大学", "王明"]


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
