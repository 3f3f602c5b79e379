"""Graph metrics and hierarchical Leiden on small graphs of Christmas Carol characters."""

from __future__ import annotations

import itertools

import polars as pl
import pytest

from kgloom import schemas
from kgloom.graph.communities import compute_graph_metrics, hierarchical_leiden
from kgloom.ids import content_id


def _eid(title: str) -> str:
    return content_id("entity", title.lower())


def _tables(titles: list[str], edges: list[tuple[str, str, float]]):
    entities = pl.DataFrame([{
        "id": _eid(t), "human_readable_id": i, "title": t, "type": "PERSON", "description": "",
        "text_unit_ids": [f"u-{t}"], "frequency": 1, "degree": 0, "weighted_degree": 0.0,
        "pagerank": 0.0, "aliases": [t]} for i, t in enumerate(titles)],
        schema=schemas.ENTITIES_SCHEMA)
    rels = []
    for i, (a, b, w) in enumerate(edges):
        x, y = sorted([_eid(a), _eid(b)])
        rels.append({"id": content_id("relationship", x, y), "human_readable_id": i,
                     "source": a, "target": b, "description": f"{a} and {b}", "weight": w,
                     "combined_degree": 0, "text_unit_ids": ["u0"], "source_id": x,
                     "target_id": y, "kind": "extracted"})
    return entities, pl.DataFrame(rels, schema=schemas.RELATIONSHIPS_SCHEMA)


# Four planted groups of six (dense inside, one weak bridge between neighbours), a
# second connected component (Belle - her husband) and an isolated node (Tiny Tim).
GROUPS = [
    ["Scrooge", "Marley", "Fred", "Clerk", "Charity Man", "Undertaker"],
    ["Bob", "Mrs Cratchit", "Tiny Tim's Sister", "Peter", "Martha", "Belinda"],
    ["Fezziwig", "Mrs Fezziwig", "Dick Wilkins", "Fiddler", "Housemaid", "Baker"],
    ["Ghost Past", "Ghost Present", "Ghost Yet To Come", "Ignorance", "Want", "Fan"],
]
TITLES = [t for g in GROUPS for t in g] + ["Belle", "Belle's Husband", "Tiny Tim"]
EDGES = ([(a, b, 5.0) for g in GROUPS for a, b in itertools.combinations(g, 2)]
         + [(GROUPS[i][0], GROUPS[(i + 1) % 4][1], 1.0) for i in range(4)]
         + [("Belle", "Belle's Husband", 3.0)])


@pytest.fixture(scope="module")
def book():
    return _tables(TITLES, EDGES)


def test_metrics_star():
    entities, rels = _tables(["Scrooge", "Bob", "Fred", "Tiny Tim"],
                             [("Scrooge", "Bob", 2.0), ("Scrooge", "Fred", 3.0)])
    ents, rels = compute_graph_metrics(entities, rels)
    assert ents.schema == pl.Schema(schemas.ENTITIES_SCHEMA)
    assert ents["title"].to_list() == ["Scrooge", "Bob", "Fred", "Tiny Tim"]  # order kept
    assert ents["degree"].to_list() == [2, 1, 1, 0]
    assert ents["weighted_degree"].to_list() == [5.0, 2.0, 3.0, 0.0]
    pr = ents["pagerank"].to_list()
    assert sum(pr) == pytest.approx(1.0)
    assert pr[0] > pr[2] > pr[1] > pr[3] > 0  # heavier edge, more rank; isolated gets teleport
    assert sorted(rels["combined_degree"].to_list()) == [3, 3]


def test_metrics_reject_unknown_endpoint():
    entities, rels = _tables(["Scrooge", "Bob"], [("Scrooge", "Bob", 1.0)])
    with pytest.raises(ValueError, match="missing from entities"):
        compute_graph_metrics(entities.head(1), rels)


def _levels(communities: pl.DataFrame) -> dict[int, list[list[str]]]:
    return {lvl: grp["entity_ids"].to_list()
            for (lvl,), grp in communities.sort("community").group_by("level", maintain_order=True)}


def test_every_level_partitions_all_entities(book):
    entities, rels = book
    communities, stats = hierarchical_leiden(entities, rels, max_cluster_size=4, period="2024-12-24")
    assert communities.schema == pl.Schema(schemas.COMMUNITIES_SCHEMA)
    assert stats["levels"] >= 2
    all_ids = sorted(entities["id"].to_list())
    for level, groups in _levels(communities).items():
        flat = [e for g in groups for e in g]
        assert sorted(flat) == all_ids, f"level {level} is not a partition"
    last = communities.filter(pl.col("level") == stats["levels"] - 1)
    assert last["size"].max() <= 4
    assert (communities["period"] == "2024-12-24").all()
    assert communities["community"].to_list() == list(range(communities.height))
    assert communities["title"].to_list() == [f"Community {c}" for c in communities["community"]]


def test_planted_groups_found_at_level_zero(book):
    entities, rels = book
    communities, stats = hierarchical_leiden(entities, rels, max_cluster_size=10)
    assert stats["levels"] == 1  # nothing over 10: one level, and that is fine
    found = {frozenset(g) for g in _levels(communities)[0]}
    for group in GROUPS:
        assert frozenset(_eid(t) for t in group) in found
    assert frozenset({_eid("Belle"), _eid("Belle's Husband")}) in found
    assert frozenset({_eid("Tiny Tim")}) in found
    assert stats["modularity_per_level"][0] >= stats["louvain_modularity"] - 1e-12
    assert stats["modularity_per_level"][0] > 0.5


def test_parent_children_consistent(book):
    entities, rels = book
    communities, stats = hierarchical_leiden(entities, rels, max_cluster_size=4)
    by_number = {r["community"]: r for r in communities.to_dicts()}
    for r in by_number.values():
        if r["level"] == 0:
            assert r["parent"] == -1
        else:
            parent = by_number[r["parent"]]
            assert parent["level"] == r["level"] - 1
            assert r["community"] in parent["children"]
            assert set(r["entity_ids"]) <= set(parent["entity_ids"])
        kids = [by_number[c] for c in r["children"]]
        assert all(k["parent"] == r["community"] for k in kids)
        if kids:
            assert sorted(e for k in kids for e in k["entity_ids"]) == r["entity_ids"]
        else:
            assert r["level"] == stats["levels"] - 1
        assert r["size"] == len(r["entity_ids"])
        assert r["id"] == content_id("community", r["level"], *sorted(r["entity_ids"]))
    # a small community is carried down unchanged: same members one level deeper
    tim = communities.filter(pl.col("entity_ids").list.contains(_eid("Tiny Tim")))
    assert tim["size"].to_list() == [1] * stats["levels"]


def test_relationship_and_text_unit_ids(book):
    entities, rels = book
    communities, _ = hierarchical_leiden(entities, rels, max_cluster_size=10)
    belle = communities.filter(pl.col("entity_ids").list.contains(_eid("Belle"))).to_dicts()[0]
    x, y = sorted([_eid("Belle"), _eid("Belle's Husband")])
    assert belle["relationship_ids"] == [content_id("relationship", x, y)]
    assert belle["text_unit_ids"] == ["u-Belle", "u-Belle's Husband"]
    scrooge = communities.filter(pl.col("entity_ids").list.contains(_eid("Scrooge"))).to_dicts()[0]
    assert len(scrooge["relationship_ids"]) == 15  # the clique's edges, not the bridges


def test_deterministic(book):
    entities, rels = book
    a, sa = hierarchical_leiden(entities, rels, max_cluster_size=3)
    b, sb = hierarchical_leiden(entities.reverse(), rels.reverse(), max_cluster_size=3)
    assert a.equals(b)
    assert sa == sb


def test_oversized_clique_is_split_until_small():
    # a 12-clique: modularity sees one community, so the fallbacks must split it
    names = [f"Caroller {i:02d}" for i in range(12)]
    entities, rels = _tables(names, [(a, b, 1.0) for a, b in itertools.combinations(names, 2)])
    communities, stats = hierarchical_leiden(entities, rels, max_cluster_size=5)
    last = communities.filter(pl.col("level") == stats["levels"] - 1)
    assert last["size"].max() <= 5 and last["size"].sum() == 12
    assert stats["oversized_at_last_level"] == 0
    assert stats["splits"]["halves"] == 3  # 12 -> 6 + 6 -> four 3s: no structure to find


def test_empty_and_edgeless():
    entities, rels = _tables([], [])
    communities, stats = hierarchical_leiden(entities, rels)
    assert communities.height == 0 and stats["levels"] == 0
    entities, rels = _tables(["Scrooge", "Marley", "Fred"], [])
    communities, stats = hierarchical_leiden(entities, rels, max_cluster_size=2)
    assert sorted(e for g in _levels(communities)[0] for e in g) == sorted(entities["id"])
    ents, _ = compute_graph_metrics(entities, rels)
    assert ents["pagerank"].to_list() == pytest.approx([1 / 3] * 3)


def test_pagerank_is_rounded_so_an_unchanged_graph_gives_equal_bytes():
    from kgloom.graph.communities import PAGERANK_DECIMALS

    titles = [f"Person {i}" for i in range(30)]
    ents, rels = _tables(titles, [(a, b, 1.0 + i / 7)
                                  for i, (a, b) in enumerate(zip(titles, titles[1:]))])
    pr = compute_graph_metrics(ents, rels)[0]["pagerank"].to_list()
    assert all(x == round(x, PAGERANK_DECIMALS) for x in pr)
    assert abs(sum(pr) - 1.0) < 1e-9 and len(set(pr)) > 5
