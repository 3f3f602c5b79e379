"""bench/eval_precision.py: precision, recall, wrong merges, splits and types of an index
against a precision gold, on small tables whose right figures are counted by hand."""

from __future__ import annotations

import polars as pl

from bench.eval_precision import score

GOLD = {"entities": [
    {"name": "Orla Brennick", "type": "PERSON", "also_types": [], "required": True,
     "aliases": ["Orla Brennick", "Orla", "Mrs. Brennick"]},
    {"name": "Tam Brennick", "type": "PERSON", "also_types": [], "required": True,
     "aliases": ["Tam Brennick", "Tam"]},
    {"name": "Kestrel Point", "type": "LOCATION", "also_types": ["ORGANIZATION"],
     "required": True, "aliases": ["Kestrel Point"]},
    {"name": "Midwinter", "type": "EVENT", "also_types": [], "required": False,
     "aliases": ["Midwinter", "Brennick"]},
    {"name": "Old Brennick", "type": "PERSON", "also_types": [], "required": False,
     "aliases": ["Brennick"]},  # "Brennick" is ambiguous: accepted, tied to neither
]}


def test_score_counts_precision_merges_splits_recall_and_types():
    entities = pl.DataFrame({
        "id": ["e1", "e2", "e3", "e4", "e5", "e6"],
        "title": ["Orla Brennick", "Orla", "Tam", "Hurrah", "the Kestrel Point's",
                  "Brennick"],
        "type": ["PERSON", "PERSON", "LOCATION", "PERSON", "ORGANIZATION", "PERSON"],
        "frequency": [5, 2, 3, 1, 1, 4]})
    aliases = pl.DataFrame({"alias": ["Tam", "Tam Brennick", "Mrs. Brennick", "Hurrah"],
                            "entity_id": ["e3", "e3", "e3", "e4"]})
    got = score(entities, aliases, GOLD)
    # "Hurrah" is the one title no gold alias names ("the" and "'s" do not count)
    assert got["precision"] == round(5 / 6, 4)
    assert [r["title"] for r in got["rejected"]] == ["Hurrah"]
    # e3 holds Tam's names and Orla's "Mrs. Brennick": a wrong merge; Orla is on e1, e2, e3
    assert got["wrong_merges"] == 1 and got["wrong_merge_nodes"][0]["gold"] == [
        "Orla Brennick", "Tam Brennick"]
    assert got["split_entities"] == {"Orla Brennick": ["Orla", "Orla Brennick", "Tam"]}
    assert got["recall"] == 1.0 and got["missed_required"] == []
    assert got["recall_all"] == round(3 / 5, 4)
    # typed: Orla Brennick, Orla, Tam (LOCATION: wrong), Kestrel Point (also_types ok)
    assert got["types"] == 0.75
    assert got["wrong_types"] == [{"title": "Tam", "type": "LOCATION", "gold": "PERSON"}]
