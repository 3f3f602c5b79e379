"""The tables search reads besides the text units: entities, relationships, communities
and their reports, loaded once per index (:attr:`kgloom.query.query_index.QueryIndex.tables`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kgloom.core import schemas
from kgloom.core.builds import Build
from kgloom.core.layout import SUMMARY_FILE
from kgloom.query.context_builder.community_context import CommunityTree

if TYPE_CHECKING:
    from kgloom.query.query_index import QueryIndex

# The tables local and global search read besides the text units.
SEARCH_TABLES = (schemas.ENTITIES, schemas.RELATIONSHIPS, schemas.COMMUNITIES,
                 schemas.COMMUNITY_REPORTS)
# Graph tables: an index with any of them is a graph index, which needs all of
# SEARCH_TABLES but the reports (an index built with --no-reports has none).
GRAPH_TABLES = (schemas.ENTITIES, schemas.RELATIONSHIPS, schemas.COMMUNITIES,
                schemas.GRAPH_NODES, schemas.GRAPH_EDGES)


@dataclass(frozen=True)
class SearchTables:
    """The tables search reads besides the text units (read-only).

    Attributes:
        entities: entity id -> {human_readable_id, title, type, description, degree,
            pagerank, text_unit_ids} (empty for a vector-only index).
        relationships: relationship id -> {human_readable_id, source, target,
            description, weight, combined_degree, kind}.
        unit_number: text unit id -> human_readable_id (row order when unknown).
        communities_of: entity id -> [community numbers] (all levels).
        tree: the :class:`kgloom.query.context_builder.community_context.CommunityTree`,
            or None when the index has no community reports or no communities.
        no_reports_reason: why ``tree`` is None.
        missing: the live paths of the tables of :data:`SEARCH_TABLES` a half-written
            or damaged index lacks (:func:`missing_tables`).
    """

    entities: dict[str, dict[str, Any]]
    relationships: dict[str, dict[str, Any]]
    unit_number: dict[str, int]
    communities_of: dict[str, list[int]]
    tree: CommunityTree | None
    no_reports_reason: str
    missing: list[str]

    @classmethod
    def load(cls, index: QueryIndex) -> SearchTables:
        """Read the tables of ``index``'s build (every table from the same publish).

        Raises:
            IndexChangedError: the build was pruned meanwhile.
        """
        b = index.build
        entities: dict[str, dict[str, Any]] = {}
        relationships: dict[str, dict[str, Any]] = {}
        missing = missing_tables(b)
        if b.has(schemas.ENTITIES):
            e = b.read(schemas.ENTITIES, columns=["id", "human_readable_id", "title", "type",
                                                  "description", "degree", "pagerank",
                                                  "text_unit_ids"])
            entities = {r["id"]: r for r in e.iter_rows(named=True)}
        if b.has(schemas.RELATIONSHIPS):
            r = b.read(schemas.RELATIONSHIPS, columns=["id", "human_readable_id", "source",
                                                       "target", "description", "weight",
                                                       "combined_degree", "kind"])
            relationships = {x["id"]: x for x in r.iter_rows(named=True)}
        if b.has(schemas.TEXT_UNITS):
            u = b.read(schemas.TEXT_UNITS, columns=["id", "human_readable_id"])
            unit_number = dict(zip(u["id"].to_list(), u["human_readable_id"].to_list()))
        else:
            unit_number = {uid: i for i, uid in enumerate(index.units.ids)}
        communities_of: dict[str, list[int]] = {}
        tree: CommunityTree | None = None
        no_reports_reason = ""
        comm_path = b.live_path(schemas.COMMUNITIES)
        rep_path = b.live_path(schemas.COMMUNITY_REPORTS)
        communities = None
        if b.has(schemas.COMMUNITIES):
            communities = b.read(schemas.COMMUNITIES, columns=["community", "level", "parent",
                                                               "children", "entity_ids"])
            for c, ents in zip(communities["community"].to_list(),
                               communities["entity_ids"].to_list()):
                for e in ents or []:
                    communities_of.setdefault(e, []).append(c)
        if not b.has(schemas.COMMUNITY_REPORTS):
            no_reports_reason = (f"this index has no community reports ({rep_path} is "
                                 "missing; `kgloom index` writes them unless --no-reports)")
        elif communities is None or not communities.height:
            no_reports_reason = f"this index has no communities ({comm_path})"
        else:
            reports = b.read(schemas.COMMUNITY_REPORTS)
            candidate = CommunityTree(reports, communities)
            if len(candidate):
                tree = candidate
            else:
                no_reports_reason = (f"{rep_path} holds no report of a community in "
                                     f"{comm_path}")
        return cls(entities, relationships, unit_number, communities_of, tree,
                   no_reports_reason, missing)


def missing_tables(build: Build) -> list[str]:
    """The live paths of the tables of :data:`SEARCH_TABLES` a half-written or damaged
    index lacks.

    A published build (with a marker) needs every one its marker lists. A folder
    without a marker (an older kgloom's, or one written by hand): none for a
    vector-only index (no graph table at all); otherwise entities, relationships and
    communities, and the community reports when its ``index-summary.json`` counted
    report rows."""
    if build.marker:
        return build.missing(list(SEARCH_TABLES))
    if not any(build.live_path(n).exists() for n in GRAPH_TABLES):
        return []
    need = [schemas.ENTITIES, schemas.RELATIONSHIPS, schemas.COMMUNITIES]
    summary = build.read_json(SUMMARY_FILE) or {}
    if (summary.get("rows") or {}).get(schemas.COMMUNITY_REPORTS):
        need.append(schemas.COMMUNITY_REPORTS)
    return build.missing(need)
