"""docs/outputs.md against the code and a fake-model index: every published column with its
type, the LanceDB columns, the DuckDB two-hop query, GraphML attributes and the Neo4j
import files (headers, ID spaces, every relationship's ends among the nodes)."""

from __future__ import annotations

import csv
import json
import re
from collections import defaultdict
from pathlib import Path

import networkx as nx
import polars as pl
import pytest

from kgloom.core import schemas
from kgloom.publish import tables

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "outputs.md"
BOOK = ROOT / "data" / "input" / "a-christmas-carol.txt"


def type_name(dtype: pl.DataType) -> str:
    """A polars type as docs/outputs.md writes it: String, List(String),
    List(Struct(summary: String, explanation: String))."""
    if isinstance(dtype, pl.List):
        return f"List({type_name(dtype.inner)})"
    if isinstance(dtype, pl.Struct):
        return "Struct(" + ", ".join(f"{f.name}: {type_name(f.dtype)}"
                                     for f in dtype.fields) + ")"
    return dtype.base_type().__name__ if hasattr(dtype, "base_type") else str(dtype)


def doc_sections() -> dict[str, str]:
    """docs/outputs.md split at its level-2 headings: heading text -> body."""
    parts = re.split(r"^## (.+)$", DOC.read_text(encoding="utf-8"), flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def doc_columns(body: str) -> list[tuple[str, str]]:
    """(column, type) of the first `| column | type | meaning |` table in ``body``."""
    rows, seen_header = [], False
    for line in body.splitlines():
        if line.startswith("| column | type |"):
            seen_header = True
            continue
        if seen_header:
            if not line.startswith("|"):
                break
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            if cells[0].startswith("`"):
                rows.append((cells[0].strip("`"), cells[1]))
    return rows


def test_the_doc_lists_every_published_column_with_its_type():
    sections = doc_sections()
    for name, schema in schemas.PUBLISHED_TABLES.items():
        heading = f"`{name}.parquet`"
        assert heading in sections, f"docs/outputs.md has no section {heading}"
        documented = [(c, t) for c, t in doc_columns(sections[heading]) if "<" not in c]
        assert documented == [(c, type_name(t)) for c, t in schema.items()], name


def test_the_doc_lists_the_lancedb_columns_and_neo4j_headers():
    sections = doc_sections()
    lance = [c for c, _ in doc_columns(sections["LanceDB: `lancedb/`"])]
    assert lance == ["embedding_key", "row_hash", "vector"]
    neo = sections["Neo4j: `neo4j/`"]
    for header in (tables.NEO4J_NODES_HEADER, tables.NEO4J_RELATIONSHIPS_HEADER,
                   tables.NEO4J_TEXT_UNITS_HEADER, tables.NEO4J_DOCUMENTS_HEADER,
                   tables.NEO4J_COMMUNITIES_HEADER, tables.NEO4J_MENTIONS_HEADER,
                   tables.NEO4J_PART_OF_HEADER, tables.NEO4J_IN_COMMUNITY_HEADER,
                   tables.NEO4J_CHILD_OF_HEADER):
        assert f"`{','.join(header)}`" in neo, header


# --- a fake-model index ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Path:
    import dagster as dg

    from kgloom.cli.runner import index_folder
    from kgloom.definitions import build_resources

    text = BOOK.read_text(encoding="utf-8")
    start = text.index("\n\n", 20000)
    inp = tmp_path_factory.mktemp("input")
    (inp / "stave1.txt").write_text(text[start:start + 6000].strip(), encoding="utf-8")
    out = tmp_path_factory.mktemp("output")
    resources = build_resources(str(inp), str(out), fake_llm=True, chunk_size=200,
                                chunk_overlap=40)
    _, report = index_folder(resources, dg.DagsterInstance.ephemeral(), force=True)
    assert report.success
    return out


def test_published_parquet_files_have_the_documented_columns(index):
    for name, schema in schemas.PUBLISHED_TABLES.items():
        path = index / f"{name}.parquet"
        if name == schemas.COVARIATES and not path.exists():
            continue  # written only with claims on
        got = pl.read_parquet_schema(path)
        extra = [c for c in got if c not in schema]
        assert list(got)[:len(schema)] == list(schema), name
        assert {c: got[c] for c in schema} == schema, name
        if name == schemas.GRAPH_NODES:
            assert extra and all(re.fullmatch(r"community_level_\d+", c) for c in extra)
        else:
            assert extra == [], name


def test_lancedb_tables_mirror_their_parquet_plus_the_documented_columns(index):
    import lancedb

    from kgloom.core.layout import LANCEDB_DIR
    from kgloom.embedding.store import VECTOR_TABLES

    db = lancedb.connect(str(index / LANCEDB_DIR))
    for table, (parquet, _) in VECTOR_TABLES.items():
        names = db.open_table(table).schema.names
        assert names == [*schemas.PUBLISHED_TABLES[parquet], "embedding_key", "row_hash",
                         "vector"], table
    vector = db.open_table("text_units").schema.field("vector").type
    assert vector.list_size == 384 and str(vector.value_type) == "float"
    manifest = json.loads((index / LANCEDB_DIR / "embedder.json").read_text())
    assert set(manifest) == {"model", "model_path", "key", "dim"}


def test_the_docs_two_hop_duckdb_query_runs_and_finds_every_two_hop_pair(index, monkeypatch):
    import duckdb

    body = doc_sections()["`graph-edges.parquet`"]
    query = re.search(r"```sql\n(-- two-hop\n.*?)```", body, flags=re.S).group(1)
    rels = pl.read_parquet(index / "relationships.parquet")
    ents = pl.read_parquet(index / "entities.parquet")
    g = nx.Graph()
    g.add_nodes_from(ents["id"].to_list())
    g.add_edges_from(rels.select("source_id", "target_id").iter_rows())
    title = dict(zip(ents["id"].to_list(), ents["title"].to_list()))
    start = max(g.nodes, key=lambda n: (g.degree(n), n))
    # the bundled book's title (run verbatim on the book: tests/integration/test_doc_examples.py)
    assert "'Ebenezer Scrooge'" in query
    monkeypatch.chdir(index)  # the doc says: run it in the output folder
    got = duckdb.sql(query.replace("'Ebenezer Scrooge'",
                                   "'" + title[start].replace("'", "''") + "'")).pl()
    want = {(title[m], title[t]) for m in g[start] for t in g[m] if t != start}
    assert want, "the fixture index should have two-hop paths"
    assert set(got.select("via", "reached").iter_rows()) == want
    assert set(got["start"].to_list()) == {title[start]}


def test_graphml_nodes_carry_label_and_community_per_level(index):
    g = nx.read_graphml(index / "graph.graphml")
    nodes = pl.read_parquet(index / "graph-nodes.parquet")
    levels = [c for c in nodes.columns if c.startswith("community_level_")]
    assert levels
    for row in nodes.iter_rows(named=True):
        attrs = g.nodes[row["entity_id"]]
        assert attrs["label"] == row["title"]
        for col in levels:
            assert attrs[col] == row[col], (row["title"], col)


def test_graphml_levels_from_the_carol_tables(carol_tables, tmp_path):
    t = carol_tables
    path = tables.write_graphml(t["entities"], t["relationships"], tmp_path / "g.graphml",
                                t["communities"])
    g = nx.read_graphml(path)
    member = defaultdict(dict)
    for row in t["communities"].iter_rows(named=True):
        for e in row["entity_ids"]:
            member[e][row["level"]] = row["community"]
    levels = sorted(t["communities"]["level"].unique().to_list())
    for node, attrs in g.nodes(data=True):
        assert attrs["label"] == attrs["title"] != ""
        for level in levels:
            assert attrs[f"community_level_{level}"] == member[node].get(level, -1)


def _read(path: Path) -> tuple[list[str], list[list[str]]]:
    with path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    return rows[0], rows[1:]


def test_neo4j_files_have_id_spaces_and_every_relationship_end_exists(index):
    folder = index / "neo4j"
    node_files = {"nodes.csv": tables.NEO4J_NODES_HEADER,
                  "text_units.csv": tables.NEO4J_TEXT_UNITS_HEADER,
                  "documents.csv": tables.NEO4J_DOCUMENTS_HEADER,
                  "communities.csv": tables.NEO4J_COMMUNITIES_HEADER}
    rel_files = {"relationships.csv": tables.NEO4J_RELATIONSHIPS_HEADER,
                 "mentions.csv": tables.NEO4J_MENTIONS_HEADER,
                 "part_of.csv": tables.NEO4J_PART_OF_HEADER,
                 "in_community.csv": tables.NEO4J_IN_COMMUNITY_HEADER,
                 "child_of.csv": tables.NEO4J_CHILD_OF_HEADER}
    ids: dict[str, set[str]] = {}
    for name, want in node_files.items():
        header, rows = _read(folder / name)
        assert header == want, name
        space = re.fullmatch(r"\w+:ID\((\w+)\)", header[0]).group(1)
        assert space not in ids, "one ID space per node file"
        ids[space] = {r[0] for r in rows}
        assert len(ids[space]) == len(rows) > 0, name  # unique, non-empty
        assert all(r[-1] for r in rows), name  # every node has a label
    counts = {}
    for name, want in rel_files.items():
        header, rows = _read(folder / name)
        assert header == want, name
        start = re.fullmatch(r":START_ID\((\w+)\)", header[0]).group(1)
        end = re.fullmatch(r":END_ID\((\w+)\)", header[1]).group(1)
        assert header[2] == ":TYPE"
        for r in rows:
            assert r[0] in ids[start] and r[1] in ids[end], (name, r[:3])
        counts[name] = len(rows)
    ents = pl.read_parquet(index / "entities.parquet")
    units = pl.read_parquet(index / "text_units.parquet")
    comms = pl.read_parquet(index / "communities.parquet")
    assert counts["relationships.csv"] == pl.read_parquet(index / "relationships.parquet").height
    assert counts["mentions.csv"] == ents["text_unit_ids"].list.len().sum()
    assert counts["part_of.csv"] == units.height
    assert counts["in_community.csv"] == comms["entity_ids"].list.len().sum()
    assert counts["child_of.csv"] == comms.filter(pl.col("level") > 0).height
    # typed columns hold values of their type
    header, rows = _read(folder / "nodes.csv")
    assert all(int(r[header.index("degree:long")]) >= 0 for r in rows)
    # the import script names every file, the database first
    script = (folder / tables.NEO4J_IMPORT_SCRIPT).read_text()
    command = script[script.index("neo4j-admin database"):]
    assert command.split()[:5] == ["neo4j-admin", "database", "import", "full", "neo4j"]
    for name in node_files:
        assert f'--nodes="$DIR/{name}"' in command
    for name in rel_files:
        assert f'--relationships="$DIR/{name}"' in command
    assert "--multiline-fields=true" in command
