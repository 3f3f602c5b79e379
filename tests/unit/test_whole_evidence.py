"""Relationship evidence read again with every alias once names are resolved
(:func:`kgloom.extraction.evidence.whole_evidence`). Invented names and text."""

import polars as pl

from kgloom.extraction.evidence import whole_evidence


def _tables(description: str, units: list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    rels = pl.DataFrame({"source_id": ["e1"], "target_id": ["e2"], "text_unit_ids": [units],
                         "description": [description], "weight": [2.0]})
    aliases = pl.DataFrame({"alias": ["Orrin Vale", "Orrin", "Mrs. Quill", "Tamsin Quill"],
                            "entity_id": ["e1", "e1", "e2", "e2"]})
    return rels, aliases


TEXT = ("Orrin Vale kept the ledgers of the mill by the river, and had kept them for "
        "thirty-one years without a single blot upon a single page. "
        "The weather turned. Mrs. Quill owned the mill and every barge that called at "
        "its wharf in the long dry summers. Orrin brought the ledgers to Mrs. Quill "
        "every Friday.")


def test_a_sentence_naming_both_ends_under_any_alias_becomes_the_description():
    # extraction saw only "Orrin Vale" and "Mrs. Quill" as written and cut each
    # sentence; the unit's last sentence names both, as "Orrin" and "Mrs. Quill"
    cut = "Orrin Vale kept the ledgers of the mi … Mrs. Quill owned the mill and every ba"
    rels, aliases = _tables(cut, ["u1"])
    out, rewritten = whole_evidence(rels, aliases, {"u1": TEXT})
    assert out["description"].item() == "Orrin brought the ledgers to Mrs. Quill every Friday."
    assert rewritten == 1
    assert out.select("source_id", "target_id", "weight").equals(
        rels.select("source_id", "target_id", "weight"))


def test_without_a_sentence_naming_both_each_end_gets_its_whole_first_sentence():
    text = TEXT.rsplit(" Orrin brought", 1)[0]
    rels, aliases = _tables("cut … cut", ["u1"])
    out, _ = whole_evidence(rels, aliases, {"u1": text})
    one, other = out["description"].item().split(" … ")
    assert one.startswith("Orrin Vale kept") and one.endswith("single page.")
    assert other == ("Mrs. Quill owned the mill and every barge that called at its wharf "
                     "in the long dry summers.")


def test_units_in_order_distinct_lines_and_what_cannot_be_read_is_kept():
    short = "Orrin thanked Tamsin Quill."
    rels, aliases = _tables("as extracted", ["u2", "u1", "u3"])
    out, _ = whole_evidence(rels, aliases, {"u1": TEXT, "u2": short, "u3": short})
    assert out["description"].item().split("\n") == [
        short, "Orrin brought the ledgers to Mrs. Quill every Friday."]
    # no unit text, or sentences longer than the limit: the description stays
    out, rewritten = whole_evidence(rels, aliases, {})
    assert (out["description"].item(), rewritten) == ("as extracted", 0)
    out, rewritten = whole_evidence(rels, aliases, {"u2": short}, max_chars=10)
    assert (out["description"].item(), rewritten) == ("as extracted", 0)
    # a name inside a longer word is no mention: "Orrinsford" is not "Orrin"
    out, _ = whole_evidence(rels, aliases, {"u2": "Orrinsford thanked Tamsin Quill."})
    assert out["description"].item() == "as extracted"


def test_one_name_inside_the_other_is_not_a_sentence_naming_both():
    """"'Orrin Vale, to be sure!'" names Orrin Vale once; it is not a sentence naming
    both "Orrin" and "Orrin Vale" when those are two entities."""
    rels = pl.DataFrame({"source_id": ["e1"], "target_id": ["e2"], "text_unit_ids": [["u1"]],
                         "description": ["as extracted"], "weight": [1.0]})
    aliases = pl.DataFrame({"alias": ["Orrin", "Orrin Vale"], "entity_id": ["e1", "e2"]})
    text = "'Orrin Vale, to be sure!' Orrin laughed. Orrin Vale bowed."
    out, _ = whole_evidence(rels, aliases, {"u1": text})
    assert out["description"].item() == "Orrin laughed. … 'Orrin Vale, to be sure!'"
