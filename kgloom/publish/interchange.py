"""Interchange files of the graph: GraphML (:func:`write_graphml`) and the CSV files and
import script of a Neo4j bulk import (:func:`write_neo4j_import`).
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import networkx as nx
import polars as pl

from kgloom.core.layout import NEO4J_IMPORT_SCRIPT, neo4j_csv
from kgloom.core.storage import write_text
from kgloom.publish.levels import community_levels


def write_graphml(entities: pl.DataFrame, relationships: pl.DataFrame,
                  path: str | Path, communities: pl.DataFrame | None = None) -> Path:
    """Write the entity graph as GraphML (networkx), atomically; return the path.

    Nodes are entity ids with attributes ``label`` (the title, which Gephi and yEd show
    as the node's name), title, type, description (strings), degree (int),
    weighted_degree, pagerank (float) and, when ``communities`` (COMMUNITIES_SCHEMA) is
    given, ``community_level_<k>`` (int, -1: in no community at level k) per level;
    edges carry relationship_id, description (string) and weight (float). List columns
    are left out (GraphML has no list type). The graph is directed
    (``edgedefault="directed"``): each relationship is one edge from its source to its
    target, as the text gives it. Source: networkx ``generate_graphml``.
    """
    levels = (community_levels(communities) if communities is not None
              else pl.DataFrame(schema={"entity_id": pl.String}))
    level_cols = [c for c in levels.columns if c != "entity_id"]
    rows = (entities.select("id", "title", "type", "description", "degree",
                            "weighted_degree", "pagerank")
            .join(levels.rename({"entity_id": "id"}), on="id", how="left",
                  maintain_order="left")
            .with_columns(pl.col(c).fill_null(-1) for c in level_cols))
    g = nx.DiGraph()
    for row in rows.iter_rows(named=True):
        g.add_node(row["id"], label=row["title"] or "", title=row["title"] or "",
                   type=row["type"] or "", description=row["description"] or "",
                   degree=int(row["degree"] or 0),
                   weighted_degree=float(row["weighted_degree"] or 0.0),
                   pagerank=float(row["pagerank"] or 0.0),
                   **{c: int(row[c]) for c in level_cols})
    for row in relationships.select("id", "source_id", "target_id", "description",
                                    "weight").iter_rows(named=True):
        g.add_edge(row["source_id"], row["target_id"], relationship_id=row["id"],
                   description=row["description"] or "", weight=float(row["weight"] or 0.0))
    return write_text("\n".join(nx.generate_graphml(g)) + "\n", path)


# Neo4j bulk import (neo4j-admin database import full). Each node kind has its own ID
# space (``:ID(Entity)``...), so a document and an entity whose ids happen to be equal
# hashes stay apart; headers follow the Operations Manual's "Import header format".
NEO4J_NODES_HEADER = ["entityId:ID(Entity)", "title", "type", "description", "degree:long",
                      "pagerank:double", ":LABEL"]
NEO4J_RELATIONSHIPS_HEADER = [":START_ID(Entity)", ":END_ID(Entity)", ":TYPE",
                              "relationshipId", "description", "weight:double"]
NEO4J_RELATIONSHIP_TYPE = "RELATED"
NEO4J_TEXT_UNITS_HEADER = ["textUnitId:ID(TextUnit)", "human_readable_id:long", "text",
                           "n_tokens:long", "chunk_index:long", ":LABEL"]
NEO4J_DOCUMENTS_HEADER = ["documentId:ID(Document)", "human_readable_id:long", "title",
                          "source", ":LABEL"]
NEO4J_COMMUNITIES_HEADER = ["communityId:ID(Community)", "community:long", "level:long",
                            "title", "size:long", ":LABEL"]
NEO4J_MENTIONS_HEADER = [":START_ID(TextUnit)", ":END_ID(Entity)", ":TYPE"]
NEO4J_PART_OF_HEADER = [":START_ID(TextUnit)", ":END_ID(Document)", ":TYPE"]
NEO4J_IN_COMMUNITY_HEADER = [":START_ID(Entity)", ":END_ID(Community)", ":TYPE", "level:long"]
NEO4J_CHILD_OF_HEADER = [":START_ID(Community)", ":END_ID(Community)", ":TYPE"]


def _csv_text(header: list[str], rows) -> str:
    buf = io.StringIO()
    # Fields holding a comma, quote or newline are quoted with inner quotes doubled (""),
    # which neo4j-admin import reads by default; numbers stay bare for the typed columns.
    writer = csv.writer(buf, quoting=csv.QUOTE_MINIMAL, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue()


def _neo4j_label(entity_type: str | None) -> str:
    clean = re.sub(r"[^A-Za-z0-9_]", "_", (entity_type or "").strip())
    return f"Entity;{clean}" if clean else "Entity"


def neo4j_import_command(nodes: list[str], relationships: list[str],
                         database: str = "neo4j") -> str:
    """The ``neo4j-admin database import full`` command line (Neo4j 5 / 2025) for the
    given node and relationship file names: the database name first (from Neo4j 5.19 a
    name after ``--nodes`` is read as a file), ``--multiline-fields=true`` (text and
    descriptions hold newlines), ``--overwrite-destination`` (a full import needs an
    empty database). Source: Neo4j Operations Manual, "Full import" and "Import header
    format"."""
    parts = [f"neo4j-admin database import full {database}",
             *(f"--nodes=\"$DIR/{n}\"" for n in nodes),
             *(f"--relationships=\"$DIR/{r}\"" for r in relationships),
             "--multiline-fields=true", "--overwrite-destination=true"]
    return " \\\n    ".join(parts)


def write_neo4j_import(entities: pl.DataFrame, relationships: pl.DataFrame,
                       folder: str | Path, text_units: pl.DataFrame | None = None,
                       documents: pl.DataFrame | None = None,
                       communities: pl.DataFrame | None = None) -> tuple[Path, Path]:
    """Write CSV files for ``neo4j-admin database import full`` and ``import.sh``, the
    command that imports them.

    Files (each with its header line; ``(X)`` is the ID space)::

        nodes.csv
            entityId:ID(Entity),title,type,description,degree:long,pagerank:double,:LABEL
        relationships.csv
            :START_ID(Entity),:END_ID(Entity),:TYPE,relationshipId,description,weight:double
        text_units.csv
            textUnitId:ID(TextUnit),human_readable_id:long,text,n_tokens:long,chunk_index:long,:LABEL
        documents.csv
            documentId:ID(Document),human_readable_id:long,title,source,:LABEL
        communities.csv
            communityId:ID(Community),community:long,level:long,title,size:long,:LABEL
        mentions.csv       :START_ID(TextUnit),:END_ID(Entity),:TYPE            (MENTIONS)
        part_of.csv        :START_ID(TextUnit),:END_ID(Document),:TYPE          (PART_OF)
        in_community.csv   :START_ID(Entity),:END_ID(Community),:TYPE,level:long (IN_COMMUNITY)
        child_of.csv       :START_ID(Community),:END_ID(Community),:TYPE
            (CHILD_OF: child -> parent)

    ``text_units.csv``, ``mentions.csv`` (from entities' ``text_unit_ids``),
    ``documents.csv`` / ``part_of.csv`` and ``communities.csv`` / ``in_community.csv`` /
    ``child_of.csv`` are written when ``text_units`` (TEXT_UNITS_SCHEMA),
    ``documents`` (DOCUMENTS_SCHEMA) and ``communities`` (COMMUNITIES_SCHEMA) are given;
    a link whose end is not among the written nodes is left out (e.g. a text unit of a
    document not given). ``RELATED`` edges run ``source_id -> target_id`` as the
    relationships table stores them: the direction the text gives (one per entity pair).
    How fields are written: :meth:`_Neo4jFiles.put`. Each file is written atomically.

    Returns:
        ``(nodes_path, relationships_path)``: the entity files; the others sit beside them.
    """
    files = _Neo4jFiles(Path(folder))
    ents = entities.sort("id")
    nodes_path, rels_path = _put_entity_files(files, ents, relationships)
    if text_units is not None:
        _put_text_unit_files(files, ents, text_units)
    if documents is not None:
        _put_document_files(files, documents, text_units)
    if communities is not None:
        _put_community_files(files, communities, set(ents["id"].to_list()))
    script = ("#!/bin/sh\n# Import this folder into an empty Neo4j database (stop the "
              "database first; Neo4j 5 / 2025).\n# Usage: sh import.sh  (neo4j-admin on "
              "PATH, or run it from $NEO4J_HOME/bin)\nset -e\nDIR=\"$(cd \"$(dirname \"$0\")\" "
              "&& pwd)\"\n" + neo4j_import_command(files.nodes, files.relationships) + "\n")
    write_text(script, files.folder / NEO4J_IMPORT_SCRIPT)
    return nodes_path, rels_path


class _Neo4jFiles:
    """The CSV files of one :func:`write_neo4j_import` under ``folder``, and the names of
    the node files (``nodes``) and relationship files (``relationships``) written so
    far, in order, for ``import.sh``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.nodes: list[str] = []
        self.relationships: list[str] = []

    def put(self, name: str, header: list[str], rows, kind: list[str]) -> Path:
        """Write ``rows`` (tuples of fields) under ``header`` to ``folder/name``
        atomically, list ``name`` in ``kind`` (``nodes`` or ``relationships``) and
        return the path.

        A field holding a comma, quote or newline is quoted with inner quotes doubled
        (RFC 4180, Python's ``csv``); text holds newlines, so ``import.sh`` passes
        ``--multiline-fields=true``. An empty string or null becomes an empty field,
        which neo4j-admin skips (no property)."""
        kind.append(name)
        return write_text(_csv_text(header, rows), self.folder / name)


def _put_entity_files(files: _Neo4jFiles, ents: pl.DataFrame,
                      relationships: pl.DataFrame) -> tuple[Path, Path]:
    """``nodes.csv`` (entities ``ents``, sorted by id; labels ``Entity`` plus the entity
    type with characters outside ``[A-Za-z0-9_]`` as ``_``: :func:`_neo4j_label`) and
    ``relationships.csv`` (``RELATED`` edges by relationship id); their paths."""
    nodes_path = files.put(neo4j_csv("nodes"), NEO4J_NODES_HEADER, (
        (r["id"], r["title"], r["type"], r["description"], r["degree"], r["pagerank"],
         _neo4j_label(r["type"])) for r in ents.iter_rows(named=True)), files.nodes)
    rels_path = files.put(neo4j_csv("relationships"), NEO4J_RELATIONSHIPS_HEADER, (
        (r["source_id"], r["target_id"], NEO4J_RELATIONSHIP_TYPE, r["id"], r["description"],
         r["weight"]) for r in relationships.sort("id").iter_rows(named=True)),
        files.relationships)
    return nodes_path, rels_path


def _put_text_unit_files(files: _Neo4jFiles, ents: pl.DataFrame,
                         text_units: pl.DataFrame) -> None:
    """``text_units.csv`` (by id) and ``mentions.csv`` (text unit -> entity of ``ents``,
    from their ``text_unit_ids``, units among ``text_units`` only, by unit then entity)."""
    units = text_units.sort("id")
    unit_ids = set(units["id"].to_list())
    files.put(neo4j_csv("text_units"), NEO4J_TEXT_UNITS_HEADER, (
        (r["id"], r.get("human_readable_id"), r["text"], r["n_tokens"], r.get("chunk_index"),
         "TextUnit") for r in units.iter_rows(named=True)), files.nodes)
    mentions = (ents.select(pl.col("text_unit_ids").alias("unit"), pl.col("id").alias("e"))
                .explode("unit").drop_nulls("unit").unique()
                .filter(pl.col("unit").is_in(list(unit_ids))).sort("unit", "e"))
    files.put(neo4j_csv("mentions"), NEO4J_MENTIONS_HEADER,
              ((u, e, "MENTIONS") for u, e in mentions.iter_rows()), files.relationships)


def _put_document_files(files: _Neo4jFiles, documents: pl.DataFrame,
                        text_units: pl.DataFrame | None) -> None:
    """``documents.csv`` (by id) and, with ``text_units``, ``part_of.csv`` (text unit ->
    its document, by unit id, documents among ``documents`` only)."""
    docs = documents.sort("id")
    files.put(neo4j_csv("documents"), NEO4J_DOCUMENTS_HEADER, (
        (r["id"], r["human_readable_id"], r["title"], r.get("source"), "Document")
        for r in docs.iter_rows(named=True)), files.nodes)
    if text_units is not None:
        doc_ids = set(docs["id"].to_list())
        files.put(neo4j_csv("part_of"), NEO4J_PART_OF_HEADER, (
            (r["id"], r["document_id"], "PART_OF")
            for r in text_units.sort("id").iter_rows(named=True)
            if r["document_id"] in doc_ids), files.relationships)


def _put_community_files(files: _Neo4jFiles, communities: pl.DataFrame,
                         entity_ids: set[str]) -> None:
    """``communities.csv`` (by level, community), ``in_community.csv`` (entity ->
    community with its level, entities among ``entity_ids`` only, by level, community id,
    entity) and ``child_of.csv`` (community -> its parent, when the parent is listed)."""
    comms = communities.sort("level", "community")
    files.put(neo4j_csv("communities"), NEO4J_COMMUNITIES_HEADER, (
        (r["id"], r["community"], r["level"], r["title"], r["size"], "Community")
        for r in comms.iter_rows(named=True)), files.nodes)
    members = (comms.select("id", "level", pl.col("entity_ids").alias("e"))
               .explode("e").drop_nulls("e")
               .filter(pl.col("e").is_in(list(entity_ids))).sort("level", "id", "e"))
    files.put(neo4j_csv("in_community"), NEO4J_IN_COMMUNITY_HEADER, (
        (e, c, "IN_COMMUNITY", level) for c, level, e in members.iter_rows()),
        files.relationships)
    id_of = dict(zip(comms["community"].to_list(), comms["id"].to_list()))
    files.put(neo4j_csv("child_of"), NEO4J_CHILD_OF_HEADER, (
        (r["id"], id_of[r["parent"]], "CHILD_OF") for r in comms.iter_rows(named=True)
        if r["parent"] is not None and r["parent"] in id_of), files.relationships)
