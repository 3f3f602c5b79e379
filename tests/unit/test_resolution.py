"""Entity resolution on mentions shaped like extractions from A Christmas Carol."""

from __future__ import annotations

from collections import Counter

import numpy as np
import polars as pl
import pytest

from kgloom.core import schemas
from kgloom.core.ids import content_id
from kgloom.graph.resolution import resolve_entities
from kgloom.names.normalize import normalize_title

P = "PERSON"

MENTIONS = [
    ("u1", "Ebenezer Scrooge", P, "A covetous old sinner."),
    ("u1", "Scrooge", P, "Marley's sole executor."),
    ("u1", "Jacob Marley", P, "Scrooge's dead partner."),
    ("u2", "Mr. Scrooge", P, "Addressed by the portly gentlemen."),
    ("u2", "SCROOGE", P, "A covetous old sinner."),
    ("u2", "Bob Cratchit", P, "Scrooge's clerk."),
    ("u3", "Mrs. Cratchit", P, "Bob's wife, dressed out but poorly."),
    ("u3", "Cratchit", P, "Somebody in the Cratchit house."),
    ("u3", "Mr Fezziwig", P, "Scrooge's old master."),
    ("u3", "Mr. Fezziwig", P, "A kind employer."),
    ("u3", "Mrs. Fezziwig", P, "One vast substantial smile."),
    ("u4", "the Ghost of Christmas Past", P, "A strange figure like a child."),
    ("u4", "Ghost of Christmas Past", P, "It wore a tunic of the purest white."),
    ("u4", "Ghost of  Christmas-Past", P, None),
    ("u4", "London", "LOCATION", "The city."),
]

REL_MENTIONS = [
    ("u1", "Scrooge", "Jacob Marley", "Partners in business.", 8.0, "extracted"),
    ("u2", "Mr. Scrooge", "jacob marley", "Marley's ghost visits Scrooge.", 9.0, "extracted"),
    ("u2", "Ebenezer Scrooge", "Scrooge", "Same person: a self-loop.", 5.0, "extracted"),
    ("u2", "Bob Cratchit", "Scrooge", "Bob works for Scrooge.", 7.0, "extracted"),
    ("u3", "Bob Cratchit", "Mrs. Cratchit", "", 1.0, "co_mention"),
    ("u3", "Mr. Fezziwig", "Mrs. Fezziwig", "Husband and wife.", 6.0, "extracted"),
    ("u3", "Mrs. Fezziwig", "Mr Fezziwig", "They dance together.", 4.0, "extracted"),
    ("u4", "Ghost of Christmas Past", "Nobody Known", "Dangling endpoint.", 3.0, "extracted"),
]


def _frames(mentions=MENTIONS, rels=REL_MENTIONS):
    em = pl.DataFrame(mentions, schema=schemas.ENTITY_MENTIONS_SCHEMA, orient="row")
    rm = pl.DataFrame(rels, schema=schemas.RELATIONSHIP_MENTIONS_SCHEMA, orient="row")
    return em, rm


@pytest.fixture(scope="module")
def resolved():
    return resolve_entities(*_frames())


def _entity(entities: pl.DataFrame, alias: str) -> dict:
    rows = entities.filter(pl.col("aliases").list.contains(alias)).to_dicts()
    assert len(rows) == 1, f"{alias!r} is in {len(rows)} entities"
    return rows[0]


def test_normalize_title_keeps_honorifics_and_drops_noise():
    assert normalize_title("Mr Scrooge") == normalize_title("Mr. Scrooge") == "mr scrooge"
    assert normalize_title("Mrs. Fezziwig") != normalize_title("Mr. Fezziwig")
    assert normalize_title("the Ghost of Christmas Past") == "ghost of christmas past"
    assert normalize_title("  GHOST of Christmas-Past ") == "ghost of christmas past"
    assert normalize_title("Scrooge\u2019s") == normalize_title("Scrooge's") == "scrooge"
    assert normalize_title("The") == "the"  # a lone "the" is not emptied


def test_outputs_conform_to_schemas(resolved):
    entities, relationships, aliases = resolved
    assert entities.schema == pl.Schema(schemas.ENTITIES_SCHEMA)
    assert relationships.schema == pl.Schema(schemas.RELATIONSHIPS_SCHEMA)
    assert aliases.schema == pl.Schema(schemas.ENTITY_ALIASES_SCHEMA)
    assert entities["human_readable_id"].to_list() == list(range(entities.height))
    assert entities["id"].to_list() == sorted(entities["id"].to_list())
    assert relationships["human_readable_id"].to_list() == list(range(relationships.height))


def test_scrooge_names_become_one_entity(resolved):
    entities, _, aliases = resolved
    scrooge = _entity(entities, "Scrooge")
    assert scrooge["title"] == "Ebenezer Scrooge"
    assert scrooge["id"] == content_id("entity", "ebenezer scrooge")
    assert scrooge["aliases"] == ["Ebenezer Scrooge", "Mr. Scrooge", "SCROOGE", "Scrooge"]
    assert scrooge["text_unit_ids"] == ["u1", "u2"]
    assert scrooge["frequency"] == 2
    # distinct descriptions, first-seen order ("A covetous old sinner." only once)
    assert scrooge["description"].split("\n") == [
        "A covetous old sinner.", "Marley's sole executor.", "Addressed by the portly gentlemen."]
    methods = dict(aliases.filter(pl.col("entity_id") == scrooge["id"])
                   .select("alias", "method").iter_rows())
    assert methods == {"Ebenezer Scrooge": "exact", "Scrooge": "name_extension",
                       "SCROOGE": "name_extension", "Mr. Scrooge": "name_extension"}


def test_honorific_gender_keeps_fezziwigs_apart(resolved):
    entities, _, aliases = resolved
    mr, mrs = _entity(entities, "Mr. Fezziwig"), _entity(entities, "Mrs. Fezziwig")
    assert mr["id"] != mrs["id"]
    assert mr["aliases"] == ["Mr Fezziwig", "Mr. Fezziwig"]
    assert aliases.filter(pl.col("alias") == "Mr Fezziwig")["method"].item() in {
        "exact", "normalized"}


def test_ambiguous_bare_cratchit_stays_alone(resolved):
    entities, _, _ = resolved
    bob, mrs, bare = (_entity(entities, t) for t in ("Bob Cratchit", "Mrs. Cratchit", "Cratchit"))
    assert len({bob["id"], mrs["id"], bare["id"]}) == 3
    assert bare["aliases"] == ["Cratchit"]


def test_bare_name_joins_unique_longer_name_even_with_mrs_absent():
    em, rm = _frames([("u1", "Bob Cratchit", P, "clerk"), ("u2", "Cratchit", P, "clerk")], [])
    entities, _, aliases = resolve_entities(em, rm)
    assert entities["title"].to_list() == ["Bob Cratchit"]
    assert aliases.sort("alias")["method"].to_list() == ["exact", "name_extension"]


def test_mrs_never_joins_a_bare_name():
    em, rm = _frames([("u1", "Mrs. Cratchit", P, "wife"), ("u1", "Bob Cratchit", P, "clerk")], [])
    entities, _, _ = resolve_entities(em, rm)
    assert entities.height == 2


def test_case_whitespace_punctuation_variants_merge(resolved):
    entities, _, aliases = resolved
    ghost = _entity(entities, "Ghost of  Christmas-Past")
    assert set(ghost["aliases"]) == {
        "the Ghost of Christmas Past", "Ghost of Christmas Past", "Ghost of  Christmas-Past"}
    assert ghost["text_unit_ids"] == ["u4"] and ghost["frequency"] == 1
    by_alias = dict(aliases.filter(pl.col("entity_id") == ghost["id"])
                    .select("alias", "method").iter_rows())
    assert sorted(by_alias.values()) == ["exact", "normalized", "normalized"]


def test_every_extracted_title_has_one_alias_row(resolved):
    entities, _, aliases = resolved
    titles = {m[1] for m in MENTIONS}
    assert sorted(aliases["alias"].to_list()) == sorted(titles)
    assert set(aliases["entity_id"]) == set(entities["id"])
    assert (aliases["score"] == 1.0).all()


def test_type_vote_most_common_then_alphabetical():
    em, rm = _frames([("u1", "Marley", "PERSON", "a"), ("u2", "Marley", "EVENT", "b"),
                      ("u3", "Marley", "PERSON", "c"), ("u1", "Fog", "LOCATION", ""),
                      ("u2", "Fog", "EVENT", "")], [])
    entities, _, _ = resolve_entities(em, rm)
    assert dict(entities.select("title", "type").iter_rows()) == {"Marley": "PERSON",
                                                                  "Fog": "EVENT"}


def test_relationships_aggregate_and_drop_self_loops(resolved):
    entities, relationships, _ = resolved
    scrooge, marley = _entity(entities, "Scrooge"), _entity(entities, "Jacob Marley")
    pair = sorted([scrooge["id"], marley["id"]])
    rel = relationships.filter(pl.col("id") == content_id("relationship", *pair)).to_dicts()[0]
    assert rel["weight"] == 17.0
    assert rel["text_unit_ids"] == ["u1", "u2"]
    assert rel["description"] == "Partners in business.\nMarley's ghost visits Scrooge."
    # both mentions run Scrooge -> Marley: the text's direction, not the sorted ids
    assert (rel["source_id"], rel["target_id"]) == (scrooge["id"], marley["id"])
    assert (rel["source"], rel["target"]) == ("Ebenezer Scrooge", "Jacob Marley")
    assert rel["kind"] == "extracted" and rel["combined_degree"] == 0
    assert (relationships["source_id"] != relationships["target_id"]).all()
    # the two Fezziwig mentions (either direction) are one undirected edge; the dangling
    # "Nobody Known" mention is dropped
    fez = relationships.filter(pl.col("description").str.contains("dance"))
    assert fez["weight"].to_list() == [10.0]
    assert relationships.height == 4
    assert relationships.filter(pl.col("description") == "")["kind"].to_list() == ["co_mention"]


def _direction(rels: list[tuple]) -> dict[frozenset, tuple[str, str, str]]:
    """{pair of titles: (source, target, description)} of the relationships resolved
    from ``rels`` (the entities are Yarrow Textiles, Alder Retail and Birch Mills)."""
    ents = [("u1", t, "ORGANIZATION", None) for t in ("Yarrow Textiles", "Alder Retail",
                                                      "Birch Mills")]
    _, relationships, _ = resolve_entities(*_frames(ents, rels))
    return {frozenset((r["source"], r["target"])): (r["source"], r["target"], r["description"])
            for r in relationships.iter_rows(named=True)}


def test_relationship_direction_is_the_texts_not_the_sorted_ids():
    # LightRAG #934: merged under the sorted id pair, "Yarrow Textiles sells to Alder
    # Retail" came out as Alder Retail -> Yarrow Textiles (the smaller id first)
    yarrow, alder = (content_id("entity", normalize_title(t))
                     for t in ("Yarrow Textiles", "Alder Retail"))
    assert alder < yarrow  # so the sorted order is the wrong one here
    got = _direction([("u1", "Yarrow Textiles", "Alder Retail",
                       "Yarrow Textiles sells to Alder Retail.", 5.0, "extracted")])
    assert got[frozenset(("Yarrow Textiles", "Alder Retail"))][:2] == (
        "Yarrow Textiles", "Alder Retail")


def test_relations_running_both_ways_are_one_edge_in_the_majority_direction():
    both = [
        ("u1", "Yarrow Textiles", "Alder Retail", "Yarrow Textiles sells to Alder Retail.",
         5.0, "extracted"),
        ("u2", "Alder Retail", "Yarrow Textiles", "Alder Retail pays Yarrow Textiles.",
         3.0, "extracted"),
        ("u3", "Alder Retail", "Yarrow Textiles", "Alder Retail audits Yarrow Textiles.",
         2.0, "extracted"),
        ("u1", "Birch Mills", "Alder Retail", "Birch Mills supplies Alder Retail.",
         4.0, "extracted"),
        ("u2", "Alder Retail", "Birch Mills", "Alder Retail returns goods to Birch Mills.",
         4.0, "extracted"),
    ]
    got = _direction(both)
    assert len(got) == 2  # one relationship per pair, whichever way its mentions ran
    src, dst, desc = got[frozenset(("Yarrow Textiles", "Alder Retail"))]
    assert (src, dst) == ("Alder Retail", "Yarrow Textiles")  # 2 mentions against 1
    assert desc.splitlines() == ["Yarrow Textiles sells to Alder Retail.",
                                 "Alder Retail pays Yarrow Textiles.",
                                 "Alder Retail audits Yarrow Textiles."]  # both ways kept
    # a tie (1 against 1) goes to the first mention's direction, in input order
    assert got[frozenset(("Birch Mills", "Alder Retail"))][:2] == ("Birch Mills", "Alder Retail")
    flipped = _direction([both[4], both[3]])
    assert flipped[frozenset(("Birch Mills", "Alder Retail"))][:2] == (
        "Alder Retail", "Birch Mills")


def test_deterministic_and_order_independent():
    a = resolve_entities(*_frames())
    b = resolve_entities(*_frames())
    for x, y in zip(a, b):
        assert x.equals(y)
    shuffled = resolve_entities(*_frames(list(reversed(MENTIONS)), list(reversed(REL_MENTIONS))))
    assert shuffled[0].select("id", "title", "aliases", "frequency").equals(
        a[0].select("id", "title", "aliases", "frequency"))


def test_methods_switch_passes_off():
    em, rm = _frames()
    entities, _, _ = resolve_entities(em, rm, methods=frozenset({"normalized"}))
    assert _entity(entities, "Scrooge")["aliases"] == ["SCROOGE", "Scrooge"]
    with pytest.raises(ValueError, match="unknown resolution methods"):
        resolve_entities(em, rm, methods=frozenset({"llm"}))


def _fake_embed(vectors: dict[str, list[float]]):
    def embed(texts: list[str]) -> np.ndarray:
        return np.array([vectors[t.split(":")[0]] for t in texts], dtype=float)
    return embed


def test_embedding_merges_similar_same_type_and_respects_gender():
    em, rm = _frames([
        ("u1", "Ghost of Christmas Past", P, "a spirit"),
        ("u2", "Spirit of Christmas Past", P, "a spirit"),
        ("u3", "Christmas Past", "EVENT", "a time"),  # near in vector space, other type
        ("u1", "Mr. Fezziwig", P, "dancer"),
        ("u2", "Mrs. Fezziwig", P, "dancer"),  # identical vector, other honorific gender
    ], [])
    embed = _fake_embed({"Ghost of Christmas Past": [1, 0, 0], "Spirit of Christmas Past":
                         [0.95, 0.05, 0], "Christmas Past": [1, 0, 0],
                         "Mr. Fezziwig": [0, 0, 1], "Mrs. Fezziwig": [0, 0, 1]})
    entities, _, aliases = resolve_entities(em, rm, embed=embed, similarity_threshold=0.9)
    ghost = _entity(entities, "Spirit of Christmas Past")
    assert ghost["aliases"] == ["Ghost of Christmas Past", "Spirit of Christmas Past"]
    assert ghost["title"] == "Ghost of Christmas Past"  # tie in count -> alphabetical
    row = aliases.filter(pl.col("alias") == "Spirit of Christmas Past").to_dicts()[0]
    assert row["method"] == "embedding" and 0.99 < row["score"] <= 1.0
    assert entities.height == 4
    # without embed, nothing beyond the rule-based passes happens
    assert resolve_entities(em, rm)[0].height == 5


def test_embed_with_wrong_shape_raises():
    em, rm = _frames([("u1", "Belle", P, ""), ("u1", "Fan", P, "")], [])
    with pytest.raises(ValueError, match="shape"):
        resolve_entities(em, rm, embed=lambda texts: np.zeros((1, 3)))


def test_name_extension_ignores_noisy_types_but_never_splits_a_conjunction():
    # a tiny model typed "Marley" LOCATION once; it is still Jacob Marley
    mentions = [("u1", "Jacob Marley", P, "Scrooge's partner."),
                ("u2", "Marley", "LOCATION", "Dead as a door-nail."),
                ("u4", "Marley", P, "His ghost visits Scrooge."),
                ("u3", "Scrooge and Marley", "ORGANIZATION", "The firm."),
                ("u3", "Scrooge", P, "The surviving partner.")]
    ents, _, aliases = resolve_entities(*_frames(mentions, []))
    owner = dict(zip(aliases["alias"], aliases["entity_id"]))
    assert owner["Marley"] == owner["Jacob Marley"]
    assert owner["Scrooge and Marley"] not in {owner["Marley"], owner["Scrooge"]}
    assert ents.filter(pl.col("id") == owner["Marley"])["type"].item() == P


def test_a_short_name_joins_a_longer_one_only_when_most_of_its_documents_name_both():
    """On the 2Wiki pool (one passage a document) "Ireland" joined "Northern Ireland" and
    "Rome" "Tony Rome" though no passage names both; on the HotpotQA sample "Canada"
    (named by many passages) joined "Air Canada" through the one passage naming both. A
    short name is a long one's short form where the documents that write it introduce
    the long one: more than half of them must name both. A novel in chapter files that
    names "Ebenezer Scrooge" in most chapters joins "Scrooge" to him; one that names him
    in one chapter of five keeps them apart (a split, not a wrong merge)."""
    L = "LOCATION"
    mentions = [("a1", "Jacob Marley", P, "Scrooge's partner."),  # document A
                ("a2", "Marley", P, "Dead as a door-nail."),
                ("b1", "Ireland", L, "Birthplace."), ("c1", "Ireland", L, "Where he died."),
                ("d1", "Northern Ireland", L, "A part of the United Kingdom."),
                ("g1", "Tony Rome", P, "A detective."), ("h1", "Rome", L, "A city."),
                ("m1", "Air Canada", "ORGANIZATION", "An airline."),
                *[(f"m{i}", "Canada", L, "A country.") for i in range(1, 5)]]
    docs = {"a1": "A", "a2": "A", "b1": "B", "c1": "C", "d1": "D", "g1": "G", "h1": "H",
            **{f"m{i}": f"M{i}" for i in range(1, 5)}}
    mentions += [*[(f"k{i}", "Ebenezer Scrooge", P, "A squeezing old sinner.") for i in (1, 2, 3)],
                 *[(f"k{i}", "Scrooge", P, "The miser.") for i in range(1, 6)],
                 ("n1", "Ebenezer Crump", P, "A grocer."),
                 *[(f"n{i}", "Crump", P, "The grocer.") for i in range(1, 6)]]
    docs |= {f"k{i}": f"Stave {i}" for i in range(1, 6)}
    docs |= {f"n{i}": f"Chapter {i}" for i in range(1, 6)}
    em, rm = _frames(mentions, [])
    owner = dict(zip(*resolve_entities(em, rm, unit_documents=docs)[2].select(
        "alias", "entity_id")))
    assert owner["Marley"] == owner["Jacob Marley"]  # the same document
    assert owner["Ireland"] != owner["Northern Ireland"]  # none of its 2 documents
    assert owner["Rome"] != owner["Tony Rome"]
    assert owner["Canada"] != owner["Air Canada"]  # 1 of its 4 documents
    assert owner["Scrooge"] == owner["Ebenezer Scrooge"]  # named together in 3 of 5 staves
    assert owner["Crump"] != owner["Ebenezer Crump"]  # in 1 of 5 chapters
    # without documents (one document, or a caller without them) every one merges
    owner = dict(zip(*resolve_entities(em, rm)[2].select("alias", "entity_id")))
    assert owner["Ireland"] == owner["Northern Ireland"]


def test_bare_surname_joins_the_only_mr_when_the_rest_are_mrs():
    mentions = [("u1", "Mr. Fezziwig", P, "Scrooge's old master."),
                ("u1", "Mrs. Fezziwig", P, "One vast substantial smile."),
                ("u2", "Fezziwig", P, "Old Fezziwig laid down his pen."),
                ("u3", "Bob Cratchit", P, "The clerk."),
                ("u3", "Mrs. Cratchit", P, "His wife."),
                ("u3", "Cratchit", P, "The family name.")]
    rule_only = frozenset({"normalized", "name_extension"})
    _, _, aliases = resolve_entities(*_frames(mentions, []), methods=rule_only)
    owner = dict(zip(aliases["alias"], aliases["entity_id"]))
    assert owner["Fezziwig"] == owner["Mr. Fezziwig"] != owner["Mrs. Fezziwig"]
    # "Bob Cratchit" has no honorific: by the rule alone bare "Cratchit" stays ambiguous
    assert owner["Cratchit"] not in {owner["Bob Cratchit"], owner["Mrs. Cratchit"]}
    # by context it joins Bob, the only candidate it could be that shares its unit
    _, _, aliases = resolve_entities(*_frames(mentions, []))
    owner = dict(zip(aliases["alias"], aliases["entity_id"]))
    assert owner["Cratchit"] == owner["Bob Cratchit"] != owner["Mrs. Cratchit"]


def test_a_short_name_joins_a_longer_one_only_where_the_longer_one_is_introduced():
    """In a novel (one document, units in order) a rag-dealer "Joe" of the fourth
    chapter is not the jest-book "Joe Miller" named once in the fifth: a short form
    refers to a name the reader has met, in one of its own units or before them. A
    narrator who writes "Marley" (and "Mr. Marley") for pages before "Jacob Marley", in
    a unit that also says "Marley", still joins them; so does a short name first
    written after the long one, and an honorific alone never counts as a longer name.
    Invented names, so that no word list of one book passes."""
    mentions = [("u0", "Orrin Vale", P, "Cast list: a clerk."),
                ("u1", "Tallow", P, "A rag-dealer."), ("u2", "Tallow", P, "He buys rags."),
                ("u3", "Tallow", P, "He counts coins."),
                ("u9", "Tallow Quince", P, "A jest-book name."),
                ("u1", "Brisk", P, "Dead as a nail."), ("u2", "Mr. Brisk", P, "The partner."),
                ("u4", "Brisk", P, "The ghost."), ("u4", "Edmund Brisk", P, "The ghost's name."),
                ("u5", "Orrin", P, "The clerk at his desk."),
                ("u6", "Mr. Orrin Vale", P, "The clerk, addressed.")]
    units = ["u0", "u1", "u2", "u3", "u4", "u5", "u6", "u9"]
    em, rm = _frames(mentions, [])
    docs = dict.fromkeys(units, "novel")
    positions = {u: i for i, u in enumerate(units)}
    owner = dict(zip(*resolve_entities(em, rm, unit_documents=docs,
                                       unit_positions=positions)[2].select(
        "alias", "entity_id")))
    assert owner["Tallow"] != owner["Tallow Quince"]  # written only after, never beside
    assert owner["Brisk"] == owner["Edmund Brisk"] == owner["Mr. Brisk"]  # beside, in u4
    assert owner["Orrin"] == owner["Orrin Vale"] == owner["Mr. Orrin Vale"]  # introduced
    # the same mentions with the long name first: it is introduced, the short one joins
    early = {**positions, "u9": -1}
    owner = dict(zip(*resolve_entities(em, rm, unit_documents=docs,
                                       unit_positions=early)[2].select(
        "alias", "entity_id")))
    assert owner["Tallow"] == owner["Tallow Quince"]
    # without positions order is not compared
    owner = dict(zip(*resolve_entities(em, rm, unit_documents=docs)[2].select(
        "alias", "entity_id")))
    assert owner["Tallow"] == owner["Tallow Quince"]


def test_embedding_never_merges_names_that_share_a_text_unit():
    def same(texts):  # every pair looks identical
        return np.ones((len(texts), 4))

    mentions = [("u1", "Stave One", P, "List of Illustrations."),
                ("u1", "List of Coloured Illustrations", P, "List of Illustrations."),
                ("u2", "The Phantom", P, "A solemn shape, draped and hooded."),
                ("u3", "Spirit of the Future", P, "A solemn shape, draped and hooded.")]
    _, _, aliases = resolve_entities(*_frames(mentions, []), embed=same)
    owner = dict(zip(aliases["alias"], aliases["entity_id"]))
    assert owner["Stave One"] != owner["List of Coloured Illustrations"]
    assert owner["The Phantom"] == owner["Spirit of the Future"]
    assert set(aliases.filter(pl.col("method") == "embedding")["alias"]) >= {"The Phantom"} or \
        set(aliases.filter(pl.col("method") == "embedding")["alias"]) >= {"Spirit of the Future"}


def test_ambiguous_short_name_joins_the_candidate_it_shares_most_units_with():
    mentions = [("u1", "Tiny Tim", P, "Bob's crippled son."),
                ("u1", "Tim", P, "Sat upon his father's knee."),
                ("u2", "Tiny Tim", P, "God bless us every one."),
                ("u2", "Tim", P, "His active little crutch."),
                ("u3", "Tim Cratchit", P, "A Cratchit child."),
                ("u3", "Tim", P, "Mentioned once."),
                ("u4", "Mr. Fezziwig", P, "Old master."),
                ("u4", "Mrs. Fezziwig", P, "His wife."),
                ("u5", "Mrs. Fezziwig", P, "Dancing."),
                ("u5", "Fezziwig", P, "Dancing too.")]
    _, _, aliases = resolve_entities(*_frames(mentions, []))
    owner = dict(zip(aliases["alias"], aliases["entity_id"]))
    method = dict(zip(aliases["alias"], aliases["method"]))
    assert owner["Tim"] == owner["Tiny Tim"] != owner["Tim Cratchit"]
    assert method["Tim"] == "name_context"
    # context never overrides gender: "Fezziwig" shares u5 with "Mrs. Fezziwig" only,
    # and still joins the only "Mr." name
    assert owner["Fezziwig"] == owner["Mr. Fezziwig"] != owner["Mrs. Fezziwig"]
    off = resolve_entities(*_frames(mentions, []),
                           methods=frozenset({"normalized", "name_extension"}))[2]
    owner_off = dict(zip(off["alias"], off["entity_id"]))
    assert owner_off["Tim"] not in {owner_off["Tiny Tim"], owner_off["Tim Cratchit"]}


# The Cratchit household as the extractor saw it in A Christmas Carol: Stave Three names
# the whole family; in Stave Four the unit quoting Fred ("I am heartily sorry for it,
# Mr. Cratchit") names the father only as "Bob" and the son only as "Peter".
CRATCHITS = [
    ("u1", "Bob Cratchit", P, "Scrooge's clerk, with Tiny Tim upon his shoulder."),
    ("u1", "Mrs. Cratchit", P, "Dressed out but poorly in a twice-turned gown."),
    ("u1", "Master Peter Cratchit", P, "Plunged a fork into the saucepan of potatoes."),
    ("u1", "Belinda Cratchit", P, "The second of her daughters."),
    ("u2", "Bob", P, "Told them of the extraordinary kindness of Mr. Scrooge's nephew."),
    ("u2", "Peter", P, "'Everybody knows that,' said Peter."),
    ("u2", "Mrs. Cratchit", P, "'I'm sure he's a good soul!' said Mrs. Cratchit."),
    ("u2", "Mr. Cratchit", P, "'I am heartily sorry for it, Mr. Cratchit,' he said."),
    ("u3", "Bob", P, "Came in with his comforter hanging down before him."),
    ("u3", "Bob Cratchit", P, "The clerk."),
    ("u4", "Peter", P, "Read the book aloud."),
]


def _owners(mentions, **kwargs) -> tuple[dict[str, str], dict[str, str]]:
    """(alias -> entity id, alias -> method) after resolving ``mentions``."""
    aliases = resolve_entities(*_frames(mentions, []), **kwargs)[2]
    return (dict(zip(aliases["alias"], aliases["entity_id"])),
            dict(zip(aliases["alias"], aliases["method"])))


def test_mr_surname_joins_the_father_not_the_master_son_nor_the_wife():
    owner, method = _owners(CRATCHITS)
    assert owner["Mr. Cratchit"] == owner["Bob Cratchit"] == owner["Bob"]
    assert method["Mr. Cratchit"] == "name_context"
    assert owner["Peter"] == owner["Master Peter Cratchit"] != owner["Bob Cratchit"]
    assert len({owner["Bob Cratchit"], owner["Mrs. Cratchit"], owner["Belinda Cratchit"]}) == 3
    # without the context pass "Mr. Cratchit" has five Cratchit candidates and stays alone
    owner_off, _ = _owners(CRATCHITS, methods=frozenset({"normalized", "name_extension"}))
    assert owner_off["Mr. Cratchit"] not in {owner_off["Bob Cratchit"],
                                             owner_off["Master Peter Cratchit"]}


def test_context_counts_units_of_names_already_merged_into_a_candidate():
    # "Mr. Wilkins" shares no unit with "Dick Wilkins" itself, only with "Dick", which
    # has no other candidate and belongs to Dick Wilkins
    mentions = [("u1", "Dick Wilkins", P, "Scrooge's fellow-'prentice at Fezziwig's."),
                ("u2", "Tom Wilkins", P, "A cousin."),
                ("u3", "Dick", P, "Poor Dick! Dear, dear!"),
                ("u3", "Mr. Wilkins", P, "The other apprentice.")]
    owner, method = _owners(mentions)
    assert owner["Mr. Wilkins"] == owner["Dick"] == owner["Dick Wilkins"] != owner["Tom Wilkins"]
    assert method["Mr. Wilkins"] == "name_context" and method["Dick"] == "name_extension"


@pytest.mark.parametrize("short, other_stage, same_stage", [
    ("Mr. Cratchit", "Master Peter Cratchit", "Bob Cratchit"),  # a man is not the boy
    ("Mrs. Bennet", "Miss Lydia Bennet", "Mrs. Fanny Bennet"),  # the wife is not the girl
])
def test_a_tie_in_context_is_broken_by_life_stage_honorifics(short, other_stage, same_stage):
    mentions = [("u1", short, P, "x"), ("u1", other_stage, P, "y"), ("u1", same_stage, P, "z")]
    owner, method = _owners(mentions)
    assert owner[short] == owner[same_stage] != owner[other_stage]
    assert method[short] == "name_context"


def test_master_and_mr_of_one_unique_name_stay_one_person():
    # the schoolboy and the old man: "Master Scrooge" has one candidate, Ebenezer Scrooge
    # (who is also "Mr. Scrooge"), and joins him
    mentions = [("u1", "Ebenezer Scrooge", P, "A squeezing, wrenching old sinner."),
                ("u2", "Mr. Scrooge", P, "Addressed by the portly gentlemen."),
                ("u3", "Master Scrooge", P, "'Bring down Master Scrooge's box, there!'"),
                ("u3", "Scrooge", P, "A solitary child, neglected by his friends.")]
    owner, _ = _owners(mentions)
    assert len(set(owner.values())) == 1


def test_resolution_embeds_a_bounded_text_per_entity_however_many_descriptions():
    from kgloom.graph.resolution import RESOLUTION_TEXT_CHARS

    hub = [(f"u{i}", "Scrooge", P, f"Scrooge counted coin number {i} alone.")
           for i in range(2000)]
    em, rm = _frames(hub + [("u1", "Bob Cratchit", P, "The clerk."),
                            ("u2", "Jacob Marley", P, "The dead partner.")], [])
    seen: list[str] = []

    def embed(texts: list[str]) -> np.ndarray:
        seen.extend(texts)
        return np.eye(len(texts), 8)[:, :8] if len(texts) <= 8 else np.eye(len(texts))

    resolve_entities(em, rm, embed=embed, similarity_threshold=0.99)
    assert len(seen) == 3
    assert max(len(t) for t in seen) <= RESOLUTION_TEXT_CHARS
    scrooge = next(t for t in seen if t.startswith("Scrooge"))
    # whole descriptions, in order, as many as fit
    assert scrooge.startswith("Scrooge: Scrooge counted coin number 0 alone.\nScrooge counted")
    assert scrooge.endswith("alone.")


def test_a_name_with_and_without_its_honorific_decides_together():
    # the book's case: "Mr. Scrooge" shares no unit with "Ebenezer Scrooge" but one with a
    # one-off sentence-opener name; "Scrooge", the same man, shares two with Ebenezer
    mentions = [("u1", "Ebenezer Scrooge", P, "A covetous old sinner."),
                ("u1", "Scrooge", P, "Marley's sole executor."),
                ("u2", "Ebenezer", P, "His name."),
                ("u2", "Scrooge", P, "He signed it."),
                ("u3", "Mr. Scrooge", P, "Addressed by the gentlemen."),
                ("u4", "Mr. Scrooge", P, "Addressed again."),
                ("u4", "Whereat Scrooge", P, "A sentence opener."),
                ("u5", "Scrooge", P, "Alone."),
                ("u6", "Mrs. Scrooge", P, "Nobody: a woman is never pooled with him.")]
    owner, method = _owners(mentions)
    assert owner["Mr. Scrooge"] == owner["Scrooge"] == owner["Ebenezer Scrooge"] \
        == owner["Ebenezer"]
    assert owner["Whereat Scrooge"] != owner["Scrooge"] != owner["Mrs. Scrooge"]
    assert method["Mr. Scrooge"] == "name_context"


def test_the_carol_fixture_ids_are_the_entities_stage_ids():
    from conftest import CAROL_ENTITIES, CAROL_RELATIONSHIPS, build_carol_tables, carol_entity_id

    mentions = [(unit, title, typ, f"{title} in {unit}.")
                for title, (typ, units, _) in CAROL_ENTITIES.items() for unit in units]
    rel_mentions = [(units[0], s, t, d, 5.0, "extracted")
                    for s, t, d, units in CAROL_RELATIONSHIPS]
    ents, rels, _ = resolve_entities(*_frames(mentions, rel_mentions))
    assert dict(zip(ents["title"], ents["id"])) == {t: carol_entity_id(t) for t in CAROL_ENTITIES}
    fixture = build_carol_tables()["relationships"]
    assert (sorted(zip(rels["source_id"], rels["target_id"], rels["id"]))
            == sorted(zip(fixture["source_id"], fixture["target_id"], fixture["id"])))


def test_embedding_merges_do_not_depend_on_the_search_block():
    # 300 groups in 60 tight clusters: every block size, down to one row, finds the same
    # merges (the search's memory is bounded by its block, its result is not)
    from kgloom.graph.resolution import _Key, _merge_embeddings, _UnionFind

    rng = np.random.default_rng(7)
    centres = rng.normal(size=(60, 16))
    names = [f"Name {i:03d}" for i in range(300)]
    vectors = {n: (centres[i % 60] + rng.normal(scale=0.05, size=16)).tolist()
               for i, n in enumerate(names)}
    embed = _fake_embed(vectors)

    def merged(block_cells: int) -> list[set[str]]:
        keys = {n: _Key(n.lower().split(), Counter({n: 1}), [P], [(i, "a person")])
                for i, n in enumerate(names)}
        uf = _UnionFind(names)
        _merge_embeddings(keys, uf, embed, 0.95, block_cells=block_cells)
        groups: dict[str, set[str]] = {}
        for n in names:
            groups.setdefault(uf.find(n), set()).add(n)
        return sorted(groups.values(), key=min)

    whole = merged(300 * 300)
    assert 60 <= len(whole) < 300  # the clusters merged
    for cells in (1, 299, 300 * 7):
        assert merged(cells) == whole


def test_the_complement_of_of_is_another_entity_but_a_leading_part_is_the_whole():
    # "Bank of Wessex" is not Wessex, the "Keeper of Aldric Venn" is not Aldric Venn, and
    # the bare head "Bank" is the class, not that bank; the cut-off "Keeper of Aldric"
    # and "Kestrel" (a word of its head) still join the whole name
    em, rm = _frames([("u1", "Bank of Wessex", "ORGANIZATION", "a bank"),
                      ("u1", "Wessex", "LOCATION", "a kingdom"),
                      ("u2", "Keeper of Aldric Venn", P, "a spirit"),
                      ("u2", "Aldric Venn", P, "a clerk"),
                      ("u2", "Keeper of Aldric", P, "a spirit"),
                      ("u1", "Bank", "ORGANIZATION", "the bank"),
                      ("u3", "Kestrel Bank of Hexham", "ORGANIZATION", "a bank"),
                      ("u3", "Kestrel", "ORGANIZATION", "the bank")], [])
    entities, _, _ = resolve_entities(em, rm)
    groups = {t: set(a) for t, a in zip(entities["title"], entities["aliases"])}
    assert set(groups) == {"Bank of Wessex", "Wessex", "Keeper of Aldric Venn", "Aldric Venn",
                           "Bank", "Kestrel Bank of Hexham"}
    assert groups["Keeper of Aldric Venn"] == {"Keeper of Aldric Venn", "Keeper of Aldric"}
    assert groups["Bank of Wessex"] == {"Bank of Wessex"}
    assert groups["Kestrel Bank of Hexham"] == {"Kestrel Bank of Hexham", "Kestrel"}


def test_co_mention_edges_keep_the_direction_their_mentions_give():
    got = _direction([("u1", "Yarrow Textiles", "Alder Retail", "", 1.0, "co_mention"),
                      ("u2", "Yarrow Textiles", "Alder Retail", "", 1.0, "co_mention"),
                      ("u3", "Alder Retail", "Yarrow Textiles", "", 1.0, "co_mention")])
    assert got[frozenset(("Yarrow Textiles", "Alder Retail"))][:2] == (
        "Yarrow Textiles", "Alder Retail")


def test_an_untyped_mention_never_outvotes_a_typed_one():
    # the fast method types a name only where a cue fires: "Orla Venn" three times with
    # none, "Orla" twice after "said"; the merged entity is a PERSON, not OTHER
    em, rm = _frames([*[(f"u{i}", "Orla Venn", "OTHER", "x") for i in range(3)],
                      ("u1", "Orla", P, "said Orla"), ("u2", "Orla", P, "said Orla"),
                      ("u4", "Kestrel Point", "OTHER", "y")], [])
    entities, _, _ = resolve_entities(em, rm)
    types = dict(zip(entities["title"], entities["type"]))
    assert types == {"Orla Venn": P, "Kestrel Point": "OTHER"}  # untyped alone stays OTHER


def _owner_of(mentions, docs=None, texts=None) -> dict[str, str]:
    em, rm = _frames(mentions, [])
    aliases = resolve_entities(em, rm, unit_documents=docs, unit_texts=texts)[2]
    return dict(zip(aliases["alias"], aliases["entity_id"]))


def test_a_name_is_not_extended_past_a_function_word_an_apposition_or_into_a_description():
    """Made-up names: what follows "with" or "in" is another entity than the show or the
    film ("Late Night with Oren Dask", "Death in Velmar"); the state after a town's
    comma is not the town ("Pirn, Upper Hallow"), the town before it is; a title that
    adds a lower-case word describes a thing about the name ("Oren Dask discography"),
    names joined by "&" are a pair; "Tamsin" still leads "Tamsin the Bold"."""
    G, L = "ORGANIZATION", "LOCATION"
    owner = _owner_of([("u1", "Late Night with Oren Dask", G, "A show."),
                     ("u1", "Oren Dask discography", G, "A list."),
                     ("u1", "Oren Dask", P, "A host."),
                     ("u2", "Death in Velmar", G, "A film."), ("u2", "Velmar", L, "A city."),
                     ("u3", "Pirn, Upper Hallow", L, "A town."),
                     ("u3", "Upper Hallow", L, "A state."),
                     ("u3", "Pirn", L, "The town."),
                     ("u4", "Itta & Brandel", G, "A duo."), ("u4", "Brandel", P, "A singer."),
                     ("u5", "Tamsin the Bold", P, "A queen."), ("u5", "Tamsin", P, "The queen.")])
    assert owner["Oren Dask"] not in {owner["Late Night with Oren Dask"],
                                      owner["Oren Dask discography"]}
    assert owner["Velmar"] != owner["Death in Velmar"]
    assert owner["Upper Hallow"] != owner["Pirn, Upper Hallow"]
    assert owner["Pirn"] == owner["Pirn, Upper Hallow"]
    assert owner["Brandel"] != owner["Itta & Brandel"]
    assert owner["Tamsin"] == owner["Tamsin the Bold"]


def test_a_name_is_not_extended_by_a_word_the_corpus_writes_in_lower_case_or_a_number():
    """"Orvland" is not "Air Orvland" when the corpus writes "air" in lower case, nor
    "Velland" "Velland Cup 1998"; "Kesk" is "Tiny Kesk" when the corpus writes "Tiny"
    capitalized (it is his name) more often than "tiny"; without the texts, words are not
    compared."""
    G, L = "ORGANIZATION", "LOCATION"
    mentions = [("u1", "Air Orvland", G, "An airline."), ("u1", "Orvland", L, "A country."),
                ("u2", "Velland Cup 1998", G, "A match."), ("u2", "Velland", L, "The host."),
                ("u3", "Tiny Kesk", P, "A boy."), ("u3", "Kesk", P, "The boy.")]
    texts = ["Air Orvland flies from Orvland; the air is cold.", "The air was thin.",
             "Velland Cup 1998 was held in Velland.",
             "Tiny Kesk smiled. Tiny Kesk sang. A tiny bird. Kesk laughed."]
    owner = _owner_of(mentions, texts=texts)
    assert owner["Orvland"] != owner["Air Orvland"]
    assert owner["Velland"] != owner["Velland Cup 1998"]
    assert owner["Kesk"] == owner["Tiny Kesk"]
    assert _owner_of(mentions[:2])["Orvland"] == _owner_of(mentions[:2])["Air Orvland"]


def test_a_class_noun_written_after_an_article_does_not_join_a_name_ending_in_it():
    """A novel calls each of its ghosts "the Wyrm" as it appears; "Oskar's Wyrm" is one
    of them and "Pale Wyrm" another's epithet: the bare "Wyrm" is every one of them, not
    the one name ending in it (the book's "Ghost" had joined "Marley's Ghost" and
    "Spirit" the "Evil Spirit" of one aside). A name the text writes without an article
    ("Brannoch ... Edda Brannoch") still joins its longer form. Invented words, and
    the decision is the text's own article counts, so no word list passes."""
    texts = ["The Wyrm rose. 'Oskar's Wyrm!' cried Edda Brannoch. The Wyrm said nothing.",
             "Brannoch looked at the Wyrm, and a Wyrm looked back. Brannoch ran.",
             "Pale Wyrm came by night. Brannoch slept; the Wyrm did not."]
    mentions = [("u1", "Wyrm", P, "The Wyrm rose."), ("u1", "Oskar's Wyrm", P, "A wyrm."),
                ("u1", "Edda Brannoch", P, "She cried."), ("u2", "Brannoch", P, "She ran."),
                ("u2", "Wyrm", P, "It looked back."), ("u3", "Wyrm", P, "It did not."),
                ("u3", "Brannoch", P, "She slept.")]
    owner = _owner_of(mentions, texts=texts)
    assert owner["Wyrm"] != owner["Oskar's Wyrm"]
    assert owner["Brannoch"] == owner["Edda Brannoch"]
    # without the texts, articles are not counted and the bare noun joins the one name
    owner = _owner_of(mentions)
    assert owner["Wyrm"] == owner["Oskar's Wyrm"]
