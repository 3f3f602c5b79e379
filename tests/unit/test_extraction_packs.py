"""Several short text units in one extraction call (``extraction_pack_tokens``): the
packed path gives each unit what its own call gives, asks fewer calls, and loses no
unit when a packed reply is bad."""

from __future__ import annotations

import json

import polars as pl

from kgloom.extraction.extract import extract_graph, pack_units
from kgloom.llm import Completion
from kgloom.llm.fake import FakeBackend
from kgloom.settings.indexing import IndexSettings
from tests.unit.test_extraction import (
    BALL,
    FOG,
    GENTLEMEN,
    NO_NAMES,
    ScriptedBackend,
    _llm,
    _units,
    relationship_names,
)

PACKED = IndexSettings(extraction_pack_tokens=400)
# in-unit pairs of GENTLEMEN and BALL, and one pair whose names sit in different units
PAIRS = [("Scrooge", "Marley"), ("Mrs. Fezziwig", "Fezziwig"), ("Scrooge", "Mrs. Fezziwig")]


class PackScripted(ScriptedBackend):
    """:class:`ScriptedBackend` that also answers a packed call: each unit's
    relationships array gets the scripted pairs of its own enum; ``enums`` keeps every
    array's allowed names."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.enums: list[list[str]] = []

    def complete(self, messages, schema, max_tokens, seed, stop_on_loop=False):
        rel = schema["properties"]["relationships"]
        if rel["type"] == "array":
            return super().complete(messages, schema, max_tokens, seed)
        self.calls += 1
        if self.broken_if and self.broken_if in messages[-1]["content"]:
            return Completion("Sure! Here are the entities: Scrooge, Marley", 10, 8, 0.0)
        ents = {n: self.etype for n in schema["properties"]["entities"]["properties"]}
        rels = {}
        for label, arr in rel["properties"].items():
            names = relationship_names(arr)
            self.enums.append(names)
            rels[label] = [[a, b] for a, b in self.pairs if a in names and b in names]
        return Completion(json.dumps({"entities": ents, "relationships": rels}), 10, 8, 0.0)


def _rows(df: pl.DataFrame, *cols: str) -> set[tuple]:
    return set(df.select(cols).iter_rows())


def test_pack_units_groups_consecutive_short_rows_within_the_budget():
    assert pack_units([60, 50, 700, 90, 90, 90], 200) == [[0, 1], [2], [3, 4], [5]]
    assert pack_units([60, 50, 70], 0) == [[0], [1], [2]]  # off: one call per unit
    assert pack_units([300, 20, 20], 200) == [[0], [1, 2]]  # a long row never packs
    assert pack_units([], 200) == []
    # every row in exactly one pack, in order
    sizes = [5, 300, 5, 5, 190, 10, 10]
    assert [i for p in pack_units(sizes, 200) for i in p] == list(range(len(sizes)))


def test_a_packed_call_gives_each_unit_what_its_own_call_gives(tmp_path):
    units = _units(GENTLEMEN, BALL, NO_NAMES, FOG)
    one = ScriptedBackend(etype="PERSON", pairs=PAIRS)
    alone = extract_graph(units, _llm(tmp_path / "a", one), IndexSettings())
    packed_backend = PackScripted(etype="PERSON", pairs=PAIRS)
    packed = extract_graph(units, _llm(tmp_path / "b", packed_backend), PACKED)

    assert one.calls == 3  # NO_NAMES makes no call
    assert packed_backend.calls == 1
    assert packed.counts["packed_calls"] == 1 and packed.counts["packed_units"] == 3
    # the same mentions, each in its own unit
    cols = ("text_unit_id", "title", "type", "description")
    assert _rows(packed.entity_mentions, *cols) == _rows(alone.entity_mentions, *cols)
    cols = ("text_unit_id", "source", "target", "kind", "description")
    assert _rows(packed.relationship_mentions, *cols) == _rows(alone.relationship_mentions,
                                                             *cols)
    # each unit's relationships may name only its own candidates: Scrooge (GENTLEMEN,
    # FOG) and Mrs. Fezziwig (BALL) share no unit, so no array allows the pair
    assert len(packed_backend.enums) == 3
    assert not any({"Scrooge", "Mrs. Fezziwig"} <= set(e) for e in packed_backend.enums)
    assert not packed.relationship_mentions.filter(
        (pl.col("source") == "Scrooge") & (pl.col("target") == "Mrs. Fezziwig")).height
    assert packed.units.to_dicts() == alone.units.to_dicts()
    assert packed.units.filter(pl.col("status") == "no_names").height == 1


def test_a_bad_packed_reply_falls_back_to_one_call_per_unit(tmp_path):
    units = _units(GENTLEMEN, BALL, FOG)
    backend = PackScripted(etype="PERSON", pairs=PAIRS, broken_if="keyhole")
    result = extract_graph(units, _llm(tmp_path, backend), PACKED)

    assert result.counts["packs_split_after_failure"] == 1
    status = dict(result.units.select("text_unit_id", "status").iter_rows())
    ids = units["id"].to_list()
    assert [status[i] for i in ids] == ["extracted", "extracted", "failed"]
    assert result.failures.height == 1  # the unit whose own reply is bad, only
    assert set(result.entity_mentions["text_unit_id"]) == set(ids[:2])


def test_a_rerun_of_packed_units_asks_the_model_nothing(tmp_path):
    units = _units(GENTLEMEN, BALL, FOG, NO_NAMES)
    backend = FakeBackend()
    llm = _llm(tmp_path, backend)
    first = extract_graph(units, llm, PACKED)
    calls = backend.calls
    again = extract_graph(units, _llm(tmp_path, backend), PACKED)
    assert backend.calls == calls == 1
    assert again.entity_mentions.equals(first.entity_mentions)
    assert again.relationship_mentions.equals(first.relationship_mentions)


def test_units_over_the_budget_keep_their_own_calls(tmp_path):
    units = _units(GENTLEMEN, BALL, FOG)
    backend = ScriptedBackend(etype="PERSON", pairs=PAIRS)
    # _units counts words as tokens: each unit is longer than 20
    result = extract_graph(units, _llm(tmp_path, backend),
                           IndexSettings(extraction_pack_tokens=20))
    assert backend.calls == 3 and result.counts.get("packed_calls", 0) == 0


def test_packing_is_part_of_the_extraction_fingerprint_only_when_set():
    from kgloom.corpus.partitions import settings_fingerprint

    default = settings_fingerprint(IndexSettings(), "m")
    # unset: the fingerprint an index built before the setting existed had
    assert settings_fingerprint(IndexSettings(extraction_pack_tokens=0), "m") == default
    assert settings_fingerprint(PACKED, "m") != default
    assert settings_fingerprint(PACKED, "m") != settings_fingerprint(
        IndexSettings(extraction_pack_tokens=200), "m")
