"""Names of inflected languages (Russian, Polish, Czech): lower-case head nouns, names
that only stand side by side, types from inflected head words and from morphology; and
that English text is left as it was."""

from __future__ import annotations

from kgloom.extraction.type_cues import type_cue
from kgloom.names.candidates import find_candidates, word_counts
from kgloom.names.morphology import is_form_of, name_type, proper_type


def names(text: str) -> list[str]:
    return [c.name for c in find_candidates(text, "auto", word_counts([text]))]


def test_a_capitalized_adjective_takes_its_lower_case_head_noun():
    ru = names("Он учился в Казанском университете. Во время Крымской войны он служил.")
    assert {"Казанском университете", "Крымской войны"} <= set(ru)
    assert not {"Казанском", "Крымской"} & set(ru)
    cs = names("Studoval na Karlově univerzitě. Národní muzeum stojí v Praze.")
    assert {"Karlově univerzitě", "Národní muzeum", "Praze"} <= set(cs)
    # a capitalized noun (not an adjective) does not take the next word along, and
    # English head nouns never follow in lower case
    assert "Москве улица" not in names("В Москве улица была пуста.")
    en = names("Scrooge went to the Christmas party at the Fezziwig house in London.")
    assert "Christmas party" not in en and "Fezziwig house" not in en


def test_a_place_and_a_person_side_by_side_are_two_names():
    got = names("В Москве Толстой купил дом. Лев Николаевич Толстой встречался с Антоном "
                "Чеховым и Максимом Горьким.")
    assert {"Москве", "Толстой", "Лев Николаевич Толстой", "Антоном Чеховым",
            "Максимом Горьким"} <= set(got)
    assert "Москве Толстой" not in got


def test_inflected_head_words_give_types():
    text = ("Учился в Казанском университете. Во время Крымской войны. Maria uczyła się na "
            "Uniwersytecie Latającym i kierowała Instytutem Radowym. Během Krymské války.")
    assert type_cue("Казанском университете", text) == "ORGANIZATION"
    assert type_cue("Крымской войны", text) == "EVENT"
    assert type_cue("Uniwersytecie Latającym", text) == "ORGANIZATION"
    assert type_cue("Instytutem Radowym", text) == "ORGANIZATION"
    assert type_cue("Krymské války", text) == "EVENT"


def test_morphology_types_russian_names_in_any_case():
    text = ("Он переписывался с Махатмой Ганди и встречался с Антоном Чеховым и Максимом "
            "Горьким. Он умер на станции Астапово. Музей находится на Пречистенке.")
    for name in ["Махатмой Ганди", "Антоном Чеховым", "Максимом Горьким"]:
        assert type_cue(name, text) == "PERSON", name
    assert type_cue("Пречистенке", text) == "LOCATION"  # a place name (Geox)
    assert type_cue("Астапово", text) == "LOCATION"  # "станции" (station) in an oblique case
    assert proper_type("Москве") == "LOCATION" and proper_type("Чеховым") == "PERSON"
    assert proper_type("Горьким") == ""  # the adjective "горький" is the likelier parse
    assert name_type(["Ясная", "Поляна"]) == ""


def test_inflected_forms_of_head_nouns():
    heads = frozenset("uniwersytet instytut wojna válka univerzita muzeum ulica stacja "
                      "университет война park company party olympics street".split())
    for word in ["Uniwersytecie", "instytutem", "wojny", "válce", "univerzitě", "muzeu",
                 "ulicy", "stacji", "университете", "войны", "Park"]:
        assert is_form_of(word, heads), word
    # English suffixes are not case endings
    for word in ["Parker", "Companion", "Partner", "Olympic", "streets", "Universities"]:
        assert not is_form_of(word, heads), word


def test_english_cues_are_not_read_as_slavic_prepositions():
    assert type_cue("Got", "I've Got a Secret is a game show.") == ""
    assert type_cue("Gaul", "Philip V Gaul was a count.") == ""
    assert type_cue("Parker", "Parker wrote a book.") == "PERSON"  # not a form of "park"


def test_inflected_forms_of_one_name_are_one_entity_titled_as_written():
    import polars as pl

    from kgloom.core import schemas
    from kgloom.graph.resolution import resolve_entities

    L, P = "LOCATION", "PERSON"
    mentions = [("u1", "Ясная Поляна", L, "a"), ("u2", "Ясной Поляне", L, "b"),
                ("u3", "Ясной Поляне", L, "c"), ("u2", "Москве", L, "d"), ("u3", "Москва", L, "e"),
                ("u3", "Антоном Чеховым", P, "f"), ("u4", "Антон Чехов", P, "g"),
                ("u4", "Софья Андреевна Толстая", P, "h"), ("u5", "Лев Николаевич Толстой", P, "i")]
    em = pl.DataFrame(mentions, schema=schemas.ENTITY_MENTIONS_SCHEMA, orient="row")
    ents, _, aliases = resolve_entities(em, schemas.empty(schemas.RELATIONSHIP_MENTIONS_SCHEMA))
    owner = dict(zip(aliases["alias"], aliases["entity_id"]))
    assert owner["Ясная Поляна"] == owner["Ясной Поляне"]
    assert owner["Москве"] == owner["Москва"] and owner["Антоном Чеховым"] == owner["Антон Чехов"]
    # a wife and her husband keep their genders apart
    assert owner["Софья Андреевна Толстая"] != owner["Лев Николаевич Толстой"]
    # titles are names as written (the most frequent form, ties alphabetical), not lemmas
    assert sorted(ents["title"]) == sorted(["Ясной Поляне", "Москва", "Антон Чехов",
                                            "Софья Андреевна Толстая", "Лев Николаевич Толстой"])
