"""Choice decoding against the grammar path on the real bundled model: the same text
units give the same entity names, replies valid under their schemas, fewer tokens
decoded one at a time."""

from __future__ import annotations

from collections import Counter

import pytest

from kgloom.extraction.extract import extract_unit
from kgloom.llm import open_llm
from kgloom.settings.indexing import IndexSettings

UNITS = [
    "Teutberga( died 11 November 875) was a queen of Lotharingia by marriage to Lothair II. "
    "She was a daughter of Bosonid Boso the Elder and sister of Hucbert, the lay- abbot of "
    "St. Maurice's Abbey.",
    "It was the voice of Scrooge's nephew, Fred, who came upon him so quickly. Jacob Marley "
    "had been dead these seven years, and Scrooge and Marley was still the name over the "
    "warehouse door in London, where Bob Cratchit copied letters.",
]


@pytest.mark.slow
def test_choice_decoding_finds_what_the_grammar_path_finds(tmp_path):
    settings = IndexSettings()
    found = {}
    for choice in (False, True):
        llm = open_llm(tmp_path / f"cache-{choice}.sqlite")
        llm.backend.choice_decoding = choice  # type: ignore[union-attr]
        rows = []
        for i, text in enumerate(UNITS):
            counts: Counter[str] = Counter()
            ents, rels, fails = extract_unit(llm, f"u{i}", text, settings, counts)
            assert not fails, fails  # every reply parsed and passed its schema
            rows.append(({e["title"] for e in ents}, len(rels)))
        found[choice] = rows
        stats = llm.stats["extraction"]
        assert stats.calls == len(UNITS)
    for (names_g, rels_g), (names_c, rels_c) in zip(found[False], found[True]):
        assert names_c == names_g  # the names are forced: only their types may differ
        assert rels_c >= 1 and rels_g >= 1


@pytest.mark.slow
def test_speculation_gives_the_replies_of_one_evaluation_per_branching(tmp_path):
    from kgloom.llm import choices

    settings = IndexSettings()
    replies, evaluations = {}, {}
    plain = choices.decode_choices
    for lookahead in (0, 4):
        llm = open_llm(tmp_path / f"cache-{lookahead}.sqlite")
        llm.backend.lookahead = lookahead  # type: ignore[union-attr]
        made = []

        def counted(*a, _made=made, **kw):
            reply = plain(*a, **kw)
            _made.append(reply)
            return reply

        choices.decode_choices = counted
        try:
            for i, text in enumerate(UNITS):
                *_, fails = extract_unit(llm, f"u{i}", text, settings, Counter())
                assert not fails, fails
        finally:
            choices.decode_choices = plain
        replies[lookahead] = [r.text for r in made]
        evaluations[lookahead] = sum(r.evaluations for r in made)
        assert len(made) == len(UNITS)
    assert replies[4] == replies[0]
    assert evaluations[4] < evaluations[0]
