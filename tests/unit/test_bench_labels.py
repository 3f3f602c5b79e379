"""bench/eval_labels.py: labelled samples scored as counted by hand, and the interval."""

from __future__ import annotations

from bench.eval_labels import score, wilson


def test_entity_and_relationship_labels_are_scored_as_counted():
    ents = [{"title": "Orla", "accept": True, "type_ok": True},
            {"title": "Hurrah", "accept": False, "type_ok": None},
            {"title": "Kestrel Point", "accept": True, "type_ok": False},
            {"title": "Velden"}]  # not labelled yet
    got = score(ents)
    assert (got["labelled"], got["unlabelled"], got["precision"], got["types"]) == (
        3, 1, round(2 / 3, 4), 0.5)
    assert got["rejected"] == ["Hurrah"]
    rels = [{"source": "A", "target": "B", "supported": True, "direction_ok": True},
            {"source": "B", "target": "C", "supported": True, "direction_ok": False},
            {"source": "C", "target": "D", "supported": False, "direction_ok": None}]
    got = score(rels)
    assert (got["supported"], got["precision"]) == (round(2 / 3, 4), round(1 / 3, 4))
    assert got["reversed"] == ["B -> C"] and got["unsupported"] == ["C -> D"]


def test_wilson_interval_brackets_the_share_and_narrows_with_more_trials():
    lo, hi = wilson(83, 100)
    assert lo < 0.83 < hi
    lo2, hi2 = wilson(830, 1000)
    assert lo < lo2 < 0.83 < hi2 < hi
    assert wilson(0, 0) == [0.0, 0.0]


def test_recheck_says_which_labelled_titles_todays_rules_no_longer_find():
    """A rejected title cut from a quoted title is no candidate under today's rules; an
    accepted one still is. Invented names."""
    from bench.eval_labels import recheck

    text = 'Kell Ambry directed " I Am Quorl" in 1990.'
    rows = [{"title": "Quorl", "accept": False, "texts": [text]},
            {"title": "Kell Ambry", "accept": True, "texts": [text]},
            {"title": "I Am Quorl", "accept": True, "texts": [text]},
            {"title": "Vessa", "texts": [text]}]  # not labelled
    got = recheck(rows, [text])
    assert (got["accepted"], got["accepted_found"], got["rejected"], got["rejected_found"]) \
        == (2, 2, 1, 0)
    assert got["gone"] == ["Quorl"] and got["lost"] == []
