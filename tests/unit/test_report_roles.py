"""Reports say who their members are and quote what joins them: the role a sentence gives
a name (kgloom.report_writer.roles), a long sentence cut at a clause break, a passage's
sentence about its subject. Invented names throughout, so no list of the book's or the
pool's words passes these."""

from __future__ import annotations

import polars as pl
import pytest

from kgloom.report_writer import rule_report
from kgloom.report_writer.roles import member_role


@pytest.mark.parametrize(("title", "description", "role"), [
    ("Orla Venn", "Orla Venn, a lamplighter.", "a lamplighter"),
    ("Tamsin", "Tamsin, Orrin's niece.\nTamsin laughed.", "Orrin's niece"),
    ("Mrs. Quill", "Mrs. Quill, wife of Brisk Quill.", "wife of Brisk Quill"),
    # a passage's title before its text, a parenthesis of dates, "was" and an article
    ("Orla Venn", "Orla Venn Orla Venn (1901-1960) was a Vessian glass painter.",
     "a Vessian glass painter"),
    # a long role cut before its first conjunction after two words
    ("Brisk Quill", "Brisk Quill is a Vessian carter and the keeper of the old toll-house "
     "on the north road to Dunmere.", "a Vessian carter"),
    # after a sentence's end
    ("Orrin", "The snow fell. Orrin, the ferryman, waited.", "the ferryman"),
])
def test_the_role_a_sentence_gives_a_name_right_after_it(title, description, role):
    assert member_role(title, description) == role


@pytest.mark.parametrize(("title", "description"), [
    ("Vessel", "Maria of Vessel was the elder daughter."),  # inside a longer name
    ("Dunmere", "Old Dunmere Hall is a house."),  # a longer name ending elsewhere
    ("Orla", "Orla, to be sure, was late."),  # no role: an adverbial aside
    ("Orla", "Orla, a kind-hearted, jovial old soul."),  # a list of adjectives
    ("Orla", "Orla was a film produced by J. Venn."),  # cut at an initial
    ("Orla", "Orla, and the rest."),  # a conjunction
    ("Orla", "Orla, a shrewd--no, a cunning woman."),  # a run-on aside
    ("Orla", ""),
])
def test_no_role_where_the_words_after_a_name_are_no_role(title, description):
    assert member_role(title, description) == ""


def _tables(descriptions: list[str], ent_descriptions: list[str] | None = None):
    ents = pl.DataFrame({
        "id": ["o", "t", "b"], "title": ["Orla Venn", "Tamsin Quill", "Brisk"],
        "description": ent_descriptions or ["Orla Venn, a lamplighter.", "A weaver.",
                                            "A carter."],
        "degree": [3, 2, 1], "type": ["PERSON"] * 3,
        "text_unit_ids": [["u1"], ["u1", "u2"], ["u2"]]})
    rels = pl.DataFrame({
        "id": ["r1", "r2"], "source": ["Orla Venn", "Tamsin Quill"],
        "target": ["Tamsin Quill", "Brisk"], "description": descriptions,
        "combined_degree": [5, 3], "text_unit_ids": [["u1"], ["u2"]]})
    community = {"entity_ids": ["o", "t", "b"], "relationship_ids": ["r1", "r2"],
                 "text_unit_ids": ["u1", "u2"]}
    return community, ents, rels


def test_a_long_sentence_is_quoted_to_the_clause_that_names_both_never_cut_mid_clause():
    long = ("So Orla Venn lit the lamp, and in came Tamsin Quill, the weaver, with at "
            "least three bolts of grey wool under her arm, " + "and more and more, " * 20
            + "until the shop was full.")
    community, ents, rels = _tables([long, "Brisk drove off. … Tamsin Quill waved."])
    obj = rule_report(community, ents, rels)
    first = obj["findings"][0]["explanation"]
    quote = first.split(" [Sources:")[0]
    # the text's own words up to a clause break, a full stop put there, within the bound
    assert quote.startswith("So Orla Venn lit the lamp, and in came Tamsin Quill, the weaver")
    assert long.startswith(quote[:-1] + ",") and quote.endswith(".")
    assert "…" not in first and len(first) <= 320
    # no sentence names both Tamsin Quill and Brisk: a count, not half-sentences
    assert obj["findings"][1]["explanation"].startswith(
        "Tamsin Quill and Brisk are named together in 1 text unit.")
    # the summary names the role the text gives its central member
    assert obj["summary"].startswith("Orla Venn (a lamplighter), Tamsin Quill and Brisk form")


def test_a_passage_about_one_end_is_quoted_where_it_names_the_other():
    """In the passage on Orla Venn, "She married Tamsin Quill." is about Orla Venn; in a
    passage on neither, a sentence naming only one end says nothing of the pair."""
    desc = "Orla Venn was a glass painter. … She married Tamsin Quill in 1930."
    community, ents, rels = _tables([desc, "Tamsin Quill hired Brisk to carry wool."])
    on_orla = rule_report(community, ents, rels,
                          places={"u1": ("Orla Venn", 0), "u2": ("Carters", 0)})
    assert any(f["explanation"].startswith("She married Tamsin Quill in 1930.")
               for f in on_orla["findings"])
    elsewhere = rule_report(community, ents, rels,
                            places={"u1": ("Glass", 0), "u2": ("Carters", 0)})
    assert not any("She married" in f["explanation"] for f in elsewhere["findings"])


def test_findings_do_not_quote_one_sentence_twice():
    """Two pairs whose evidence is the same sentence: the second pair's finding would
    repeat the first; a pair with a sentence of its own is preferred to it."""
    same = "Orla Venn, Tamsin Quill and Brisk sailed on the Heron."
    ents = pl.DataFrame({
        "id": ["o", "t", "b", "h"], "title": ["Orla Venn", "Tamsin Quill", "Brisk", "Heron"],
        "description": ["-"] * 4, "degree": [3, 2, 2, 1], "type": ["PERSON"] * 4,
        "text_unit_ids": [["u1"]] * 4})
    rels = pl.DataFrame({
        "id": ["r1", "r2", "r3"], "source": ["Orla Venn", "Orla Venn", "Brisk"],
        "target": ["Tamsin Quill", "Brisk", "Heron"],
        "description": [same, same, "Brisk had built the Heron himself."],
        "combined_degree": [9, 8, 1], "text_unit_ids": [["u1"]] * 3})
    community = {"entity_ids": ["o", "t", "b", "h"], "relationship_ids": ["r1", "r2", "r3"],
                 "text_unit_ids": ["u1"]}
    bodies = [f["explanation"] for f in rule_report(community, ents, rels)["findings"]]
    assert bodies[0].startswith(same)
    assert bodies[1].startswith("Brisk had built the Heron himself.")
    assert sum(b.startswith(same) for b in bodies) == 1


def test_headings_of_a_long_document_and_the_section_of_each_unit():
    """Plain upper-case lines standing alone and Markdown headings are headings; a
    heading split over lines by blank or bracketed lines is one; a line of text set in
    capitals inside a paragraph, a contents row with its page number and a bracketed
    note are not."""
    from kgloom.report_writer.sections import headings, unit_sections

    text = ("THE VESSEL PAPERS\n\nCONTENTS\n\nPART ONE--THE MILL   3\nPART TWO   9\n\n"
            "PART ONE\n\n[Illustration]\n\nTHE MILL ON THE WEIR\n\n"
            "Orla Venn kept the mill.\nShe shouted STOP THE WHEEL at noon.\n\n"
            "## The ferry\n\nTamsin Quill rowed across.\n")
    found = headings(text)
    assert [name for _, name in found] == [
        "The Vessel Papers – Contents", "Part One – The Mill on the Weir", "The ferry"]
    assert all(text[at:].lstrip("# ").upper().startswith(name.split(" – ")[0].upper())
               for at, name in found)
    mill, ferry = text.index("Orla Venn"), text.index("Tamsin")
    spans = [(0, 10), (mill, mill + 20), (ferry, ferry + 10)]
    assert unit_sections(text, spans) == [
        "The Vessel Papers – Contents", "Part One – The Mill on the Weir", "The ferry"]
    assert unit_sections("no headings here", [(0, 5)]) == [""]


def test_a_summary_says_in_which_sections_of_a_long_document_its_members_are():
    community, ents, rels = _tables(["Orla Venn met Tamsin Quill.",
                                     "Tamsin Quill hired Brisk."])
    places = {"u1": ("The Vessel Papers", 4, "Part One – The Mill"),
              "u2": ("The Vessel Papers", 9, "Part Two – The Ferry")}
    summary = rule_report(community, ents, rels, places=places)["summary"]
    assert "(The Vessel Papers #4, #9, in Part One and Part Two)." in summary
    one = {u: (doc, k, "Part One – The Mill") for u, (doc, k, _) in places.items()}
    assert "in Part One – The Mill)." in rule_report(community, ents, rels, places=one)["summary"]


def test_unit_places_name_the_section_of_each_unit_of_a_long_document_only():
    from kgloom.reports.community_reports import unit_places

    text = "PART ONE\n\nOrla Venn kept the mill.\n\nPART TWO\n\nTamsin Quill rowed."
    two = text.index("PART TWO")
    docs = pl.DataFrame({"id": ["d1", "d2"], "title": ["Vessel", "Heron"],
                         "text": [text, "HERON\n\nA boat."]})
    units = pl.DataFrame({"id": ["a", "b", "c"], "document_id": ["d1", "d1", "d2"],
                          "chunk_index": [0, 1, 0], "start_char": [0, two, 0],
                          "end_char": [two, len(text), 14]})
    assert unit_places(units, docs) == {"a": ("Vessel", 0, "Part One"),
                                        "b": ("Vessel", 1, "Part Two"),
                                        "c": ("Heron", 0, "")}  # one unit: no section
    # without the texts (or the spans) there are no sections
    assert unit_places(units.drop("start_char"), docs)["b"] == ("Vessel", 1, "")
    assert unit_places(units, docs.drop("text"))["a"] == ("Vessel", 0, "")


def test_a_quote_is_never_a_fragment_split_at_an_abbreviation_or_an_initial():
    """"married c. 1353 Tamsin Quill" is one sentence: split at "c." its tail "1353 Tamsin
    Quill and they had issue:" was quoted; a line ending in a colon is no whole one."""
    from kgloom.report_writer.rules import _quote

    desc = ("Orla Venn was a Vessian lord. … Orla Venn married c. 1353 Tamsin Quill, "
            "daughter of J. B. Quill.")
    assert _quote(desc, 300, ("Orla Venn", "Tamsin Quill")) == (
        "Orla Venn married c. 1353 Tamsin Quill, daughter of J. B. Quill.")
    assert _quote("1353 Tamsin Quill and they had issue:", 300,
                  ("Tamsin Quill",)) == ""


def test_a_composed_report_is_not_refused_for_its_own_citations_or_a_subject_named_thrice():
    """A choices report's sentences are kgloom's: its "[Sources: ...]" label is no name and
    a passage's subject named in the who, the quote and the where is no loop. A free
    reply with the same text is still refused for both, and two findings alike are
    refused either way."""
    from kgloom.report_writer import check_report

    summary = ('Orla Venn of Vessel (a glass painter) and 2 others form a community of 3 '
               'entities. The text says: "Orla Venn of Vessel married Tamsin Quill." They '
               'appear in 1 text unit (Orla Venn of Vessel #0).')
    report = {"title": "Orla Venn of Vessel and 2 others", "summary": summary, "rating": 3,
              "rating_explanation": "Rated by the model.",
              "findings": [{"summary": "Orla Venn of Vessel and Tamsin Quill",
                            "explanation": "She had issue [Sources: Orla Venn of Vessel #0]"},
                           {"summary": "Tamsin Quill and Heron",
                            "explanation": "Tamsin Quill sailed the Heron. [Sources: Orla "
                                           "Venn of Vessel #0; Heron…"}]}
    context = ("Orla Venn of Vessel, a glass painter. Orla Venn of Vessel married Tamsin "
               "Quill. She had issue. Tamsin Quill sailed the Heron.")
    members = ["Orla Venn of Vessel", "Tamsin Quill", "Heron"]
    assert check_report(report, context, members, composed=True) == []
    free = check_report(report, context, members)
    assert any("Sources" in p for p in free)
    assert any("repeats itself" in p for p in free)
    twice = dict(report, findings=report["findings"] * 2)
    assert any("repeats itself" in p for p in check_report(twice, context, members,
                                                           composed=True))


def test_a_run_of_capital_lines_is_at_most_four_headings_joined_and_a_name_said_often_ends():
    from kgloom.report_writer.sections import HEADING_MAX_PARTS, headings

    found = headings("\n".join(["", "PART"] * 10) + "\n\ntext")
    assert all(name.count(" – ") <= HEADING_MAX_PARTS - 1 for _, name in found)
    assert len(found) == 3  # ten lines: four, four and two
    # a name said again and again with no role: "" (and not one slice per occurrence)
    assert member_role("Orla", "and Orla " * 5000 + ". Orla, a lamplighter.") == ""
    assert member_role("Orla", "Orla, a lamplighter. " + "and Orla " * 5000) == "a lamplighter"


def test_markdown_headings_are_never_joined_across_their_levels():
    from kgloom.report_writer.sections import headings

    text = "# The Vessel Papers\n\n## The mill\n\nOrla Venn kept it.\n\n## The ferry\n\nrowed."
    assert [name for _, name in headings(text)] == ["The Vessel Papers", "The mill",
                                                    "The ferry"]
