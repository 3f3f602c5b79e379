"""Graph metrics and hierarchical Leiden on small graphs of Christmas Carol characters."""

from __future__ import annotations

import itertools
import random

import polars as pl
import pytest

from kgloom.core import schemas
from kgloom.core.ids import content_id
from kgloom.graph.communities import compute_graph_metrics, hierarchical_leiden


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
    communities, stats = hierarchical_leiden(entities, rels, max_cluster_size=4,
                                             period="2024-12-24")
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


def test_every_community_lists_its_relationships_text_units_and_children():
    """Each row, at every level, against the definitions computed row by row: the
    relationships with both ends among its entities, the distinct text units of its
    entities (shared, repeated, none), its children (sorted) and its parent; on a
    graph deep enough for several levels. The columns are grouped in bulk (per row,
    building the 2Wiki pool's 44,069 rows grew faster than the entities)."""
    entities, rels = _planted_graph(blocks=12, size=30)
    rng = random.Random(3)
    units = [sorted({f"u{rng.randrange(40)}" for _ in range(rng.randrange(4))})
             + (["u0"] if i % 7 == 0 else []) for i in range(entities.height)]
    entities = entities.with_columns(text_unit_ids=pl.Series(units, dtype=pl.List(pl.String)))
    communities, stats = hierarchical_leiden(entities, rels, max_cluster_size=8)
    assert stats["levels"] >= 3
    units_of = dict(zip(entities["id"], units))
    ends = list(rels.select("id", "source_id", "target_id").iter_rows())
    rows = communities.to_dicts()
    children: dict[int, list[int]] = {}
    for r in rows:
        children.setdefault(r["parent"], []).append(r["community"])
    for r in rows:
        inside = set(r["entity_ids"])
        assert r["relationship_ids"] == sorted(i for i, a, b in ends if a in inside and b in inside)
        assert r["text_unit_ids"] == sorted({u for e in inside for u in units_of[e]})
        assert r["children"] == sorted(children.get(r["community"], []))
        assert r["human_readable_id"] == r["community"] and r["size"] == len(inside)
        assert r["id"] == content_id("community", r["level"], *r["entity_ids"])
        if r["level"]:
            assert inside <= set(rows[r["parent"]]["entity_ids"])


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
                                  for i, (a, b) in enumerate(itertools.pairwise(titles))])
    pr = compute_graph_metrics(ents, rels)[0]["pagerank"].to_list()
    assert all(x == round(x, PAGERANK_DECIMALS) for x in pr)
    assert abs(sum(pr) - 1.0) < 1e-9 and len(set(pr)) > 5


def _planted_graph(blocks: int, size: int, seed: int = 7):
    """``blocks`` groups of ``size`` entities: each member linked to 3 random members of
    its group and, twice with probability 1/2, to a random entity anywhere (weight 1.0)."""
    rng = random.Random(seed)
    titles = [f"Guest {i:04d}" for i in range(blocks * size)]
    edges = set()
    for i in range(len(titles)):
        base = i - i % size
        for j in rng.sample([x for x in range(base, base + size) if x != i], 3):
            edges.add((min(i, j), max(i, j)))
        for _ in range(2):
            j = rng.randrange(len(titles))
            if rng.random() < 0.5 and j != i:
                edges.add((min(i, j), max(i, j)))
    return _tables(titles, [(titles[a], titles[b], 1.0) for a, b in sorted(edges)])


def test_level_zero_modularity_matches_leiden_run_to_convergence():
    # kgloom runs a bounded number of Leiden passes; on a planted partition that must
    # reach the modularity of Leiden iterated until nothing moves, and beat Louvain
    from kgloom.graph.communities import _build_graph, _modularity, _seeded_rng

    entities, rels = _planted_graph(blocks=40, size=12)
    _, stats = hierarchical_leiden(entities, rels, max_cluster_size=10_000)
    g, _ = _build_graph(entities, rels)
    with _seeded_rng(1):
        converged = g.community_leiden(objective_function="modularity", weights="weight",
                                       n_iterations=-1).membership
    ours = stats["modularity_per_level"][0]
    assert ours >= _modularity(g, converged) - 1e-3
    assert ours >= stats["louvain_modularity"] - 1e-3


def test_higher_resolution_gives_smaller_communities():
    # a ring of 24 triangles joined by single edges: modularity (resolution 1) merges
    # neighbouring triangles; resolution 4 keeps each triangle apart
    from kgloom.graph.communities import _build_graph, _leiden

    titles = [f"Singer {i:02d}" for i in range(72)]
    edges = [(titles[t * 3 + a], titles[t * 3 + b], 1.0)
             for t in range(24) for a, b in ((0, 1), (0, 2), (1, 2))]
    edges += [(titles[t * 3 + 2], titles[(t * 3 + 3) % 72], 1.0) for t in range(24)]
    g, ids = _build_graph(*_tables(titles, edges))
    coarse, fine = _leiden(g, 3), _leiden(g, 3, resolution=4.0)
    assert len(set(coarse)) < len(set(fine)) == 24
    by_title = dict(zip(ids, fine))
    for t in range(24):
        assert len({by_title[_eid(titles[t * 3 + k])] for k in range(3)}) == 1
    assert _leiden(g, 3) == coarse  # same graph and seed, same membership


def test_every_split_sees_the_induced_subgraph_of_its_community(monkeypatch):
    # deeper parts are cut from their parent's subgraph (cutting from the whole graph costs
    # its vertex count per cut); each must still be exactly the community's induced
    # subgraph: the same vertices in order, edges and weights
    from kgloom.graph import communities as comm

    entities, rels = _planted_graph(blocks=12, size=12)
    g, _ = comm._build_graph(entities, rels)
    seen = []
    real_split = comm._split

    def checked_split(sub, members, seed, backend="igraph"):
        ref = g.induced_subgraph(members)
        assert sub.vcount() == len(members)
        assert (sorted(zip(sub.get_edgelist(), sub.es["weight"]))
                == sorted(zip(ref.get_edgelist(), ref.es["weight"])))
        seen.append(len(members))
        return real_split(sub, members, seed, backend)

    monkeypatch.setattr(comm, "_split", checked_split)
    _, stats = comm.hierarchical_leiden(entities, rels, max_cluster_size=3)
    assert stats["levels"] >= 3 and len(seen) == sum(stats["splits"].values()) > 12


@pytest.mark.parametrize("backend", ["igraph", "leidenalg"])
def test_each_community_backend_gives_a_seeded_valid_hierarchy(book, backend):
    """index.community_backend: igraph's community_leiden (the default) or the leidenalg
    package. They need not agree; each must give every level as a partition, children
    inside their parent, the size bound met, the planted groups, and the same result for
    the same graph and seed."""
    entities, rels = book
    a, sa = hierarchical_leiden(entities, rels, max_cluster_size=4, backend=backend)
    b, sb = hierarchical_leiden(entities.reverse(), rels.reverse(), max_cluster_size=4,
                                backend=backend)
    assert a.equals(b) and sa == sb
    all_ids = sorted(entities["id"].to_list())
    for level, groups in _levels(a).items():
        assert sorted(e for g in groups for e in g) == all_ids, (backend, level)
    by_number = {r["community"]: r for r in a.to_dicts()}
    for r in by_number.values():
        if r["level"]:
            assert set(r["entity_ids"]) <= set(by_number[r["parent"]]["entity_ids"])
    assert a.filter(pl.col("level") == sa["levels"] - 1)["size"].max() <= 4
    level0, stats = hierarchical_leiden(entities, rels, max_cluster_size=10, backend=backend)
    found = {frozenset(g) for g in _levels(level0)[0]}
    for group in GROUPS:
        assert frozenset(_eid(t) for t in group) in found, backend
    assert stats["modularity_per_level"][0] > 0.5
    # a clique with no structure still splits down to the bound (the fallbacks)
    names = [f"Caroller {i:02d}" for i in range(12)]
    ents, edges = _tables(names, [(x, y, 1.0) for x, y in itertools.combinations(names, 2)])
    clique, cs = hierarchical_leiden(ents, edges, max_cluster_size=5, backend=backend)
    last = clique.filter(pl.col("level") == cs["levels"] - 1)
    assert last["size"].max() <= 5 and last["size"].sum() == 12


def test_an_unknown_community_backend_is_refused(book):
    entities, rels = book
    with pytest.raises(ValueError, match="leidenalg"):
        hierarchical_leiden(entities, rels, backend="networkx")
