"""Names of every language of the multilingual suite come back byte for byte from parquet,
LanceDB, GraphML and the Neo4j import CSV."""

from __future__ import annotations

import csv
import itertools
import json
import unicodedata
from pathlib import Path

import networkx as nx
import numpy as np
import polars as pl
import pytest

from kgloom.core import schemas, storage
from kgloom.graph.communities import compute_graph_metrics
from kgloom.graph.resolution import resolve_entities
from kgloom.publish import tables
from kgloom.publish.vectors import write_lancedb

SUITE = Path(__file__).resolve().parents[2] / "bench" / "data" / "multilingual"
LANGS = sorted(p.name.split(".")[0] for p in SUITE.glob("*.gold.json"))
# forms the files must keep too: quotes and commas (CSV), right-to-left scripts, NFD
# combining marks, an apostrophe and a name with a line-breaking space
EXTRA = ['"Big Problems", Inc.', "O'Neill Laboratories", "محمد بن موسى الخوارزمي",
         "דוד בן-גוריון", unicodedata.normalize("NFD", "Zoë Brontë"), "Łódź\u00a0Kaliska"]


def _tables(titles: list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    mentions = pl.DataFrame([{"text_unit_id": "u1", "title": t, "type": "PERSON",
                              "description": f"{t} is named here."} for t in titles],
                            schema=schemas.ENTITY_MENTIONS_SCHEMA)
    rels = pl.DataFrame([{"text_unit_id": "u1", "source": a, "target": b,
                          "description": f"{a} — {b}", "strength": 1.0, "kind": "co_mention"}
                         for a, b in itertools.pairwise(titles)],
                        schema=schemas.RELATIONSHIP_MENTIONS_SCHEMA)
    ents, rels, _ = resolve_entities(mentions, rels, methods=frozenset())
    return compute_graph_metrics(ents, rels)


@pytest.mark.parametrize("lang", [*LANGS, "extra"])
def test_names_round_trip_byte_exactly(lang, tmp_path):
    if lang == "extra":
        titles = EXTRA
    else:
        gold = json.loads((SUITE / f"{lang}.gold.json").read_text(encoding="utf-8"))
        titles = [g["name"] for g in gold["names"]]
    ents, rels = _tables(titles)
    assert sorted(ents["title"].to_list()) == sorted(titles)  # nothing merged or changed
    want = sorted(t.encode("utf-8") for t in titles)

    storage.write_table(ents, tmp_path, schemas.ENTITIES)
    back = storage.read_table(tmp_path, schemas.ENTITIES)
    assert sorted(t.encode("utf-8") for t in back["title"]) == want

    vectors = np.random.default_rng(0).normal(size=(ents.height, 8)).astype(np.float32)
    write_lancedb(tmp_path / "lancedb", "entities", ents.select("id", "title"), vectors)
    import lancedb

    table = lancedb.connect(str(tmp_path / "lancedb")).open_table("entities")
    got = table.search().select(["title"]).limit(None).to_arrow()["title"].to_pylist()
    assert sorted(t.encode("utf-8") for t in got) == want

    path = tables.write_graphml(ents, rels, tmp_path / "graph.graphml")
    g = nx.read_graphml(path)
    assert sorted(d["title"].encode("utf-8") for _, d in g.nodes(data=True)) == want

    nodes_csv, rels_csv = tables.write_neo4j_import(ents, rels, tmp_path / "neo4j")
    with open(nodes_csv, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    assert sorted(r["title"].encode("utf-8") for r in rows) == want
    with open(rels_csv, encoding="utf-8", newline="") as f:
        assert sum(1 for _ in csv.DictReader(f)) == rels.height
