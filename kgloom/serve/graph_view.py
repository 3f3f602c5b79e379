"""The graph endpoints' view of one build: entities with their degree, PageRank and
communities, neighbourhoods, the community hierarchy with reports, entity name search and
text units (``kgloom serve``). Read-only after it is built; no Dagster.

Built from what a :class:`kgloom.query.query_index.QueryIndex` already holds (text units, its
search tables: entities, relationships, communities of each entity, and the entity
graph's adjacency), plus the build's
``graph-nodes``, ``communities`` and ``community_reports`` tables. Every answer is a
JSON-ready dict; a node is :meth:`GraphView.node` and an edge :meth:`GraphView.edge`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kgloom.core import schemas
from kgloom.query import algorithms as alg
from kgloom.query.query_index import QueryIndex


class UnknownItemError(KeyError):
    """An entity, community or text unit id this build does not hold (HTTP 404)."""

    def __str__(self) -> str:  # KeyError quotes its argument
        return str(self.args[0])


class GraphView:
    """Read-only graph queries over one build (module doc).

    Args:
        index: the build's :class:`QueryIndex`, its search tables and (when the index
            has one) its entity graph loaded.

    Attributes:
        has_graph: whether the index has an entity graph (a vector-only index has not).
        levels: the community levels, ascending (empty without communities).
    """

    def __init__(self, index: QueryIndex) -> None:
        build, tables = index.build, index.tables
        self.entities = tables.entities
        self.relationships = tables.relationships
        self.unit_number = tables.unit_number
        self._units = index.units
        g = index.loaded_graph
        self.has_graph = g is not None
        self._nodes: dict[str, dict[str, Any]] = {}  # entity id -> graph-nodes row
        if build.has(schemas.GRAPH_NODES):
            for row in build.read(schemas.GRAPH_NODES).iter_rows(named=True):
                self._nodes[row["entity_id"]] = row
        self._community_cols = sorted(
            (c for c in next(iter(self._nodes.values()), {}) if c.startswith("community_level_")),
            key=lambda c: int(c.rsplit("_", 1)[1]))
        self.communities: dict[int, dict[str, Any]] = {}
        if build.has(schemas.COMMUNITIES):
            for row in build.read(schemas.COMMUNITIES, columns=[
                    "community", "level", "parent", "children", "title", "entity_ids",
                    "relationship_ids", "text_unit_ids", "size"]).iter_rows(named=True):
                self.communities[row["community"]] = row
        self.reports: dict[int, dict[str, Any]] = {}
        if build.has(schemas.COMMUNITY_REPORTS):
            for row in build.read(schemas.COMMUNITY_REPORTS, columns=[
                    "community", "title", "summary", "full_content", "rank",
                    "rating_explanation", "findings", "generated_by"]).iter_rows(named=True):
                self.reports[row["community"]] = row
        self.levels = sorted({c["level"] for c in self.communities.values()})
        self._documents: list[dict[str, Any]] = []
        if build.has(schemas.DOCUMENTS):
            for row in build.read(schemas.DOCUMENTS, columns=[
                    "id", "title", "source", "text_unit_ids",
                    "creation_date"]).sort("title").iter_rows(named=True):
                units = list(row["text_unit_ids"] or [])
                self._documents.append({
                    "id": row["id"], "title": row["title"], "source": row["source"],
                    "text_units": len(units), "first_text_unit_id": units[0] if units else None,
                    "creation_date": row["creation_date"]})
        self.published_at: str | None = build.info()["published_at"]
        self._adj: alg.Adjacency | None = g.adj if g else None
        self._node_of: dict[str, int] = g.node_of if g else {}
        self._entity_of: list[str] = g.entity_ids if g else []
        self._edge_rel: list[str] = g.relationship_ids if g else []
        self._entity_by_title = {e["title"]: eid for eid, e in self.entities.items()}
        self._search_keys = sorted(
            ((e["title"] or "").casefold(), eid) for eid, e in self.entities.items())

    # --- nodes and edges -------------------------------------------------------------
    def node(self, entity_id: str) -> dict[str, Any]:
        """An entity as a graph node: ``id``, ``title``, ``type``, ``description``,
        ``degree``, ``pagerank``, ``communities`` ({level: community number}, levels as
        strings) and ``text_unit_ids``.

        Raises:
            UnknownItemError: no such entity in this build.
        """
        e = self.entities.get(entity_id)
        if e is None:
            raise UnknownItemError(f"no entity {entity_id!r} in this build")
        n = self._nodes.get(entity_id, {})
        communities = {c.rsplit("_", 1)[1]: n[c] for c in self._community_cols
                       if n.get(c) is not None and n[c] >= 0}
        return {"id": entity_id, "title": e["title"], "type": e["type"],
                "description": e["description"], "degree": e["degree"],
                "pagerank": e["pagerank"], "communities": communities,
                "text_unit_ids": list(e["text_unit_ids"] or [])}

    def edge(self, relationship_id: str) -> dict[str, Any] | None:
        """A relationship as a graph edge: ``id``, ``source`` and ``target`` (entity ids;
        the direction the text gives), ``source_title``, ``target_title``,
        ``description``, ``weight``, ``kind``; None when unknown."""
        r = self.relationships.get(relationship_id)
        if r is None:
            return None
        titles = self._entity_by_title  # relationships name their ends by title (GraphRAG)
        return {"id": relationship_id, "source": titles.get(r["source"], r["source"]),
                "target": titles.get(r["target"], r["target"]),
                "source_title": r["source"], "target_title": r["target"],
                "description": r["description"], "weight": r["weight"], "kind": r["kind"]}

    def subgraph(self, entity_ids: list[str], depth: int = 0, max_nodes: int = 200,
                 text_unit_ids: Sequence[str] = ()) -> dict[str, Any]:
        """The entities ``entity_ids`` and those the text units ``text_unit_ids``
        mention (unknown ids are left out) and, with ``depth`` > 0, every entity within
        ``depth`` hops (edges undirected), nearest first, with the relationships among
        them.

        Returns:
            ``{"nodes": [node + "hop"], "edges": [edge], "truncated": bool,
            "missing": [entity and text unit ids not in this build]}``; at most
            ``max_nodes`` nodes (the nearest hops first, then by PageRank).
        """
        units = list(dict.fromkeys(text_unit_ids))
        row_of = self._units.row_of
        mentioned = [e for u in units if u in row_of
                     for e in self._units.kg_node_ids[row_of[u]] or []]
        wanted = list(dict.fromkeys([*entity_ids, *mentioned]))
        known = [e for e in wanted if e in self.entities]
        missing = [e for e in wanted if e not in self.entities] + \
            [u for u in units if u not in row_of]
        hops: dict[str, int] = {e: 0 for e in known}
        if depth > 0 and self._adj is not None:
            seeds = [self._node_of[e] for e in known if e in self._node_of]
            for key, hop in alg.bfs_hops(self._adj, seeds, depth).items():
                hops.setdefault(self._entity_of[key], hop)
        ordered = sorted(hops, key=lambda e: (hops[e], -(self.entities[e]["pagerank"] or 0.0),
                                              e))
        kept = ordered[:max_nodes]
        nodes = [{**self.node(e), "hop": hops[e]} for e in kept]
        return {"nodes": nodes, "edges": self._edges_among(kept),
                "truncated": len(ordered) > len(kept), "missing": missing}

    def _edges_among(self, entity_ids: list[str]) -> list[dict[str, Any]]:
        """Every relationship whose two ends are both in ``entity_ids``."""
        if self._adj is None:
            return []
        keys = {self._node_of[e] for e in entity_ids if e in self._node_of}
        rels: set[str] = set()
        for v in keys:
            lo, hi = self._adj.indptr[v], self._adj.indptr[v + 1]
            for u, row in zip(self._adj.indices[lo:hi].tolist(),
                              self._adj.edge_rows[lo:hi].tolist()):
                if u in keys:
                    rels.add(self._edge_rel[row])
        return [e for e in (self.edge(r) for r in sorted(rels)) if e is not None]

    def overview(self, level: int | None = None, max_nodes: int = 60,
                 max_communities: int = 12, community: int | None = None) -> dict[str, Any]:
        """The graph at a glance: the largest communities at ``level`` (the first level,
        the coarsest, when None) and their most central entities, with the relationships
        among those entities.

        The communities are taken by size, largest first, at most ``max_communities``
        (only ``community`` when given: its own level is used). Their members, each
        community's by PageRank then degree, are taken in turns (every community's most
        central entity, then every community's second ...) until ``max_nodes``. Without
        communities, the entities by PageRank then degree.

        Returns:
            ``{"level": int or None, "levels": [int], "communities": [community row
            (:meth:`community_tree`) + "shown": int], "nodes": [node + "community": the
            node's community at ``level``, or None], "edges": [edge], "truncated": bool}``;
            ``truncated`` says that the communities shown hold more entities than drawn,
            or that more communities were left out.

        Raises:
            UnknownItemError: ``community`` is not in this build.
            ValueError: ``level`` is not one of :attr:`levels`, or is not ``community``'s.
        """
        if community is not None:
            if community not in self.communities:
                raise UnknownItemError(f"no community {community} in this build")
            own = self.communities[community]["level"]
            if level is not None and level != own:
                raise ValueError(f"community {community} is at level {own}, not {level}")
            level, chosen = own, [community]
        elif self.levels:
            level = self.levels[0] if level is None else level
            if level not in self.levels:
                raise ValueError(f"level must be one of {self.levels}, got {level}")
            chosen = sorted((c for c, row in self.communities.items() if row["level"] == level),
                            key=lambda c: (-(self.communities[c]["size"] or 0), c))
        else:
            if level is not None:
                raise ValueError(f"this index has no community levels, got level {level}")
            chosen = []
        shown = chosen[:max_communities]
        members = {c: self._by_centrality(self.communities[c]["entity_ids"] or [])
                   for c in shown} if shown else {None: self._by_centrality(self.entities)}
        picked = _round_robin(members, max_nodes)
        kept = list(picked)
        total = sum(len(m) for m in members.values())
        return {"level": level, "levels": list(self.levels),
                "communities": [{**self._community_row(c),
                                 "shown": sum(1 for e in kept if picked[e] == c)}
                                for c in shown],
                "nodes": [{**self.node(e), "community": picked[e]} for e in kept],
                "edges": self._edges_among(kept),
                "truncated": len(kept) < total or len(shown) < len(chosen)}

    def _by_centrality(self, entity_ids) -> list[str]:
        """The known ids of ``entity_ids``, by PageRank then degree, highest first."""
        known = [e for e in entity_ids if e in self.entities]
        return sorted(known, key=lambda e: (-(self.entities[e]["pagerank"] or 0.0),
                                            -(self.entities[e]["degree"] or 0), e))

    # --- search ----------------------------------------------------------------------
    def find_entities(self, text: str, limit: int = 20) -> list[dict[str, Any]]:
        """Entities whose title contains ``text`` (case-insensitive), titles starting
        with it first, then by PageRank: ``[{id, title, type, degree, pagerank}]``."""
        needle = text.casefold().strip()
        hits = [(not title.startswith(needle), -(self.entities[eid]["pagerank"] or 0.0), title,
                 eid) for title, eid in self._search_keys if needle and needle in title]
        return [{k: self.entities[eid][k] for k in ("title", "type", "degree", "pagerank")}
                | {"id": eid} for *_, eid in sorted(hits)[:limit]]

    # --- communities -----------------------------------------------------------------
    def community_tree(self) -> list[dict[str, Any]]:
        """Every community, by level then number: ``{community, level, parent,
        children, title (the report's, else the community's), size, has_report}``."""
        return [self._community_row(c) for c in sorted(
            self.communities, key=lambda c: (self.communities[c]["level"], c))]

    def _community_row(self, c: int) -> dict[str, Any]:
        row = self.communities[c]
        report = self.reports.get(c)
        return {"community": c, "level": row["level"], "parent": row["parent"],
                "children": sorted(row["children"] or []),
                "title": (report or {}).get("title") or row["title"], "size": row["size"],
                "has_report": report is not None}

    def community(self, c: int, max_members: int = 200) -> dict[str, Any]:
        """Community ``c`` with its members (nodes, by PageRank, at most
        ``max_members``), its children's rows, its relationship and text unit ids, and
        its report (``title``, ``summary``, ``full_content``, ``rank``,
        ``rating_explanation``, ``findings``, ``generated_by``; None when it has none).

        Raises:
            UnknownItemError: no such community in this build.
        """
        if c not in self.communities:
            raise UnknownItemError(f"no community {c} in this build")
        row = self.communities[c]
        members = sorted((e for e in row["entity_ids"] or [] if e in self.entities),
                         key=lambda e: (-(self.entities[e]["pagerank"] or 0.0), e))
        return {**self._community_row(c),
                "children": [self._community_row(k) for k in sorted(row["children"] or [])
                             if k in self.communities],
                "members": [self.node(e) for e in members[:max_members]],
                "members_total": len(members),
                "relationship_ids": list(row["relationship_ids"] or []),
                "text_unit_ids": list(row["text_unit_ids"] or []),
                "report": self.reports.get(c)}

    # --- documents -------------------------------------------------------------------
    def documents(self) -> dict[str, Any]:
        """The build's documents, by title: ``{"documents": [...], "published_at"}``; each
        document has ``id``, ``title``, ``source`` (the input file's path relative to the
        input folder), ``text_units`` (int: how many), ``first_text_unit_id`` (str or
        None) and ``creation_date`` (ISO text: the input file's modification time).
        ``published_at`` (ISO UTC, None for a folder without ``build.json``) is when the
        build these documents were indexed into was published."""
        return {"documents": [dict(d) for d in self._documents],
                "published_at": self.published_at}

    # --- text units ------------------------------------------------------------------
    def text_unit(self, unit_id: str) -> dict[str, Any]:
        """Text unit ``unit_id``: ``id``, ``ref`` (``T<number>``, as search cites it),
        ``text``, ``document_id``, ``document_title``, ``entity_ids``.

        Raises:
            UnknownItemError: no such text unit in this build.
        """
        u = self._units
        row = u.row_of.get(unit_id)
        if row is None:
            raise UnknownItemError(f"no text unit {unit_id!r} in this build")
        return {"id": unit_id, "ref": f"T{self.unit_number.get(unit_id, row)}",
                "text": u.texts[row], "document_id": u.document_ids[row],
                "document_title": u.document_titles[row],
                "entity_ids": list(u.kg_node_ids[row] or [])}


def _round_robin(ranked: dict[Any, list[str]], limit: int) -> dict[str, Any]:
    """Up to ``limit`` ids taken in turns from the lists of ``ranked`` (group -> ids, best
    first): each group's first, then each group's second ... An id in two groups is
    taken once, for the first. Returns id -> its group, in the order taken."""
    picked: dict[str, Any] = {}
    for turn in range(max((len(ids) for ids in ranked.values()), default=0)):
        for group, ids in ranked.items():
            if len(picked) >= limit:
                return picked
            if turn < len(ids) and ids[turn] not in picked:
                picked[ids[turn]] = group
    return picked
