"""Lazy community reports: the LLM report of a community that an index built with
``llm_reports: lazy`` left to global search, written the first time a global search
reaches the community, then kept for the next query.

LazyGraphRAG's idea (Microsoft Research blog "LazyGraphRAG: Setting a new standard for
quality and cost", 2024): an index summarizes nothing with the model up front; a query
spends the model only on the communities it reaches. Here a lazy index's reports stage
publishes every community's rule report, those that eager mode would have given an LLM
report with ``generated_by`` ``lazy`` (:mod:`kgloom.reports.community_reports`). Global
search calls :meth:`LazyReports.resolve` on the communities it is about to read (each
dynamic-selection step's communities after the shortlist, the static selection, the map
fallback's broader reports); for each one awaiting an LLM report it:

1. computes the report's reuse key exactly as the reports stage would have
   (:func:`kgloom.report_writer.report_key`, method ``llm``, the searcher's model, the
   index's report settings: ``report_settings`` in the stage's stats);
2. takes the report from the side table when a query wrote it before (no model call);
3. otherwise writes it with the reports stage's own code (:func:`kgloom.report_writer.
   build_report_context` and :func:`kgloom.report_writer.write_llm_report`: the same
   prompt, context, schema and checks; a rejected reply gives the rule report and a
   failures row) and stores it.

The side table (:class:`LazyReportStore`) is a SQLite file, ``lazy_reports.sqlite``
beside the query's LLM cache (by default in the index folder), keyed by that reuse key:
why not the LLM cache alone: a cache hit still needs the model opened and the reply
checked again, and a rejected reply would be replayed as a call on every query, while
the key is content-addressed, so a report stays valid across rebuilds that keep the
community. Each report is one ``INSERT OR IGNORE`` transaction in WAL mode (atomic:
concurrent readers see a report whole or not at all; two searchers writing the same
report keep the first, which is the same report). No published parquet is touched. An
unwritable folder (a read-only index) keeps the report for the search handle's life
and counts it as ``unsaved``.

A community repeated unchanged one level deeper shares its lazy report (same
``report_key``); one write serves every copy. Its context's sub-community reports are
those the tree holds at the time (rule reports, or LLM reports already written), so
which reports stand in for an over-budget community's members can depend on what
earlier queries wrote; the eager stage always has the LLM reports of every child.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kgloom.core import layout, schemas
from kgloom.core.cache_db import open_cache_db
from kgloom.embedding.tokenizer import default_tokenizer
from kgloom.llm import LLMCaller
from kgloom.report_writer import (
    build_report_context,
    member_claims,
    report_columns,
    report_key,
    rule_report,
    write_llm_report,
)
from kgloom.settings.indexing import IndexSettings

if TYPE_CHECKING:
    from kgloom.query.context_builder.community_context import CommunityTree
    from kgloom.query.query_index import QueryIndex

from kgloom.core.layout import LAZY_REPORTS_FILE as LAZY_REPORTS_FILE

LAZY = "lazy"  # generated_by of a rule report awaiting its LLM report

_DDL = """
CREATE TABLE IF NOT EXISTS lazy_reports (
  report_key TEXT PRIMARY KEY, generated_by TEXT NOT NULL, title TEXT NOT NULL,
  summary TEXT NOT NULL, full_content TEXT NOT NULL, rank REAL NOT NULL,
  full_content_json TEXT NOT NULL, model_id TEXT NOT NULL, reason TEXT NOT NULL,
  created_at TEXT DEFAULT CURRENT_TIMESTAMP)
"""
_COLUMNS = ("generated_by", "title", "summary", "full_content", "rank", "full_content_json",
            "model_id", "reason")


class LazyReportStore:
    """The side table of lazy reports: SQLite table ``lazy_reports`` in ``path``, one row
    per written report (reuse key -> generated_by ``llm`` or ``rules`` (a rejected
    reply), title, summary, full_content, rank, full_content_json, model id, the
    rejection reason or ""). Opened on first use; a file that cannot be opened or
    written (a read-only folder) reads as empty and refuses writes (``put`` returns
    False), never raising.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._db: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._broken = False

    def _connect(self) -> sqlite3.Connection | None:
        if self._db is None and not self._broken:
            try:
                db = open_cache_db(self.path)
                db.execute(_DDL)
                db.commit()
                self._db = db
            except sqlite3.Error:
                self._broken = True
        return self._db

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored report of ``key`` ({generated_by, title, summary, full_content,
        rank, full_content_json, model_id, reason}), or None."""
        with self._lock:
            db = self._connect()
            if db is None:
                return None
            row = db.execute(f"SELECT {', '.join(_COLUMNS)} FROM lazy_reports "
                             "WHERE report_key=?", (key,)).fetchone()
        return dict(zip(_COLUMNS, row)) if row else None

    def put(self, key: str, row: dict[str, Any]) -> bool:
        """Store ``row`` (the keys of :meth:`get`) under ``key`` in one transaction; a
        row already there is kept. False when the file cannot be written."""
        with self._lock:
            db = self._connect()
            if db is None:
                return False
            try:
                with db:  # one transaction: committed whole or rolled back
                    db.execute(f"INSERT OR IGNORE INTO lazy_reports (report_key, "
                               f"{', '.join(_COLUMNS)}) VALUES (?{', ?' * len(_COLUMNS)})",
                               (key, *(row[c] for c in _COLUMNS)))
            except sqlite3.Error:
                return False
        return True

    def __len__(self) -> int:
        with self._lock:
            db = self._connect()
            return 0 if db is None else db.execute(
                "SELECT COUNT(*) FROM lazy_reports").fetchone()[0]

    def close(self) -> None:
        """Close the connection (reopened on next use)."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None


def index_report_settings(summary: dict[str, Any] | None) -> IndexSettings | None:
    """The report settings the index's reports stage recorded (``report_settings`` in
    its stats, part of ``index-summary.json``), as :class:`IndexSettings` (the other
    fields at their defaults); None when the summary has none."""
    stage = ((summary or {}).get("stages") or {}).get(layout.COMMUNITY_REPORTS) or {}
    recorded = stage.get("report_settings")
    return IndexSettings(**recorded) if recorded else None


def _awaiting_keys(tree: CommunityTree, communities: Iterable[int]) -> list[str]:
    """The report keys of ``communities`` whose community report awaits its LLM report
    (``generated_by`` ``lazy`` in ``tree``), each once, in the order of
    ``communities``; communities without a report are skipped."""
    return list(dict.fromkeys(
        tree.reports[c].report_key for c in communities
        if c in tree.reports and tree.reports[c].generated_by == LAZY))


def _copies(tree: CommunityTree, keys: list[str]) -> dict[str, list[int]]:
    """report key -> every community of ``tree`` holding that report (a community
    repeated unchanged one level deeper shares its parent's), for each of ``keys``."""
    wanted = set(keys)
    sharing: dict[str, list[int]] = {}
    for c, rep in tree.reports.items():
        if rep.report_key in wanted:
            sharing.setdefault(rep.report_key, []).append(c)
    return sharing


class LazyReports:
    """Writes and keeps the LLM reports a lazy index's global search reaches (module doc).

    Args:
        index: the open index (its build's tables are read on first need).
        store_path: the side table's file (:data:`LAZY_REPORTS_FILE` beside the query
            cache).
    """

    def __init__(self, index: QueryIndex, store_path: str | Path) -> None:
        self.index = index
        self.store = LazyReportStore(store_path)
        self._lock = threading.Lock()
        self._tables: dict[str, Any] | None = None

    def _load(self) -> dict[str, Any]:
        """The build's communities, entities, relationships, claims and report settings
        (read once)."""
        if self._tables is None:
            b = self.index.build
            comms = b.read(schemas.COMMUNITIES)
            ents = b.read(schemas.ENTITIES, columns=["id", "title", "type", "description",
                                                     "degree"])
            rels = b.read(schemas.RELATIONSHIPS, columns=["id", "source", "target",
                                                          "description", "combined_degree"])
            claims = b.read(schemas.COVARIATES) if b.has(schemas.COVARIATES) else None
            settings = index_report_settings(b.read_json(layout.SUMMARY_FILE))
            self._tables = {
                "communities": {r["community"]: r for r in comms.iter_rows(named=True)},
                "entities": ents, "relationships": rels, "claims": claims,
                "title_of": dict(zip(ents["id"].to_list(), ents["title"].to_list())),
                "settings": settings or IndexSettings(),
                "recorded_settings": settings is not None}
        return self._tables

    def resolve(self, tree: CommunityTree, communities: Iterable[int], llm: LLMCaller,
                model_id: str, failures: list[dict], limit: int | None = None
                ) -> dict[str, int]:
        """Give each of ``communities`` awaiting an LLM report (``generated_by`` ``lazy``
        in ``tree``) its LLM report, in ``tree``: from the side table when a query
        wrote it before, else written now (deepest level first, so a parent's context
        can use its children's new reports). Every copy of a report (a community
        repeated one level deeper) gets it at once.

        Args:
            tree: the index's community tree (changed in place).
            communities: community numbers, most wanted first; those without a lazy
                report are skipped.
            llm: the model global search calls (a logged cached LLM).
            model_id: its model id (part of the report key).
            failures: failure rows are appended here (a rejected reply, a reply that
                failed twice).
            limit: write at most this many reports (model calls; the first ones of
                ``communities`` not in the side table); the others keep their rule
                report in this search (``capped``). None: no limit.

        Returns:
            counts: ``written`` (model replies published), ``rejected`` (replies
            :func:`kgloom.report_writer.check_report` rejected: the rule report stays),
            ``failed`` (replies that failed twice: the rule report stays, not stored,
            so a later search handle asks again), ``reused`` (taken from the side
            table), ``unsaved`` (written but not stored: the folder is not writable),
            ``capped`` (left as rule reports by ``limit``).

        Raises:
            IndexChangedError / IndexFilesMissingError: as :meth:`kgloom.core.builds.Build.read`.
        """
        counts = {"written": 0, "rejected": 0, "failed": 0, "reused": 0, "unsaved": 0,
                  "capped": 0}
        with self._lock:
            wanted = _awaiting_keys(tree, communities)
            if not wanted:
                return counts
            t = self._load()
            sharing = _copies(tree, wanted)
            # each lazy report is written from its deepest copy, as the reports stage does
            deepest = {k: max(cs, key=lambda c: (tree.reports[c].level, -c))
                       for k, cs in sharing.items()}
            to_write = self._reuse_stored(tree, t, wanted, sharing, deepest, model_id,
                                          counts)
            if limit is not None:
                counts["capped"] = max(0, len(to_write) - limit)
                to_write = to_write[:max(0, limit)]
            for lazy_key, key in sorted(to_write, key=lambda lk: (
                    -tree.reports[deepest[lk[0]]].level, deepest[lk[0]])):
                fields, how = self._write(tree, t, t["communities"][deepest[lazy_key]], key,
                                          llm, model_id, failures)
                counts[how] += 1
                self._apply(tree, sharing[lazy_key], fields)
        return counts

    def _reuse_stored(self, tree: CommunityTree, t: dict[str, Any], wanted: list[str],
                      sharing: dict[str, list[int]], deepest: dict[str, int], model_id: str,
                      counts: dict[str, int]) -> list[tuple[str, str]]:
        """Give every copy of each ``wanted`` lazy report (``sharing``) its LLM report from
        the side table when a query wrote it before (counted as ``reused``); the LLM
        report key is that of the report's deepest copy (``deepest``).

        Returns:
            (lazy report key, LLM report key) of each report not in the side table, in
            the order of ``wanted``.
        """
        to_write: list[tuple[str, str]] = []
        for lazy_key in wanted:
            key = self._key(t, t["communities"][deepest[lazy_key]], model_id)
            stored = self.store.get(key)
            if stored is None:
                to_write.append((lazy_key, key))
                continue
            counts["reused"] += 1
            self._apply(tree, sharing[lazy_key], _tree_fields(stored, key))
        return to_write

    @staticmethod
    def _apply(tree: CommunityTree, communities: list[int], fields: dict[str, Any]) -> None:
        for k in communities:
            tree.reports[k] = replace(tree.reports[k], **fields)

    @staticmethod
    def _key(t: dict[str, Any], row: dict, model_id: str) -> str:
        """The LLM report key of community ``row`` (:func:`kgloom.report_writer.report_key`,
        method ``llm``, the index's report settings)."""
        own_claims = member_claims(row, t["entities"], t["claims"])
        return report_key(row, model_id, t["settings"],
                          own_claims["id"].to_list() if own_claims is not None else None,
                          "llm")

    def _write(self, tree: CommunityTree, t: dict[str, Any], row: dict, key: str,
               llm: LLMCaller, model_id: str, failures: list[dict]
               ) -> tuple[dict[str, Any], str]:
        """Write community ``row``'s LLM report (key ``key``) and store it; returns the
        report fields for the tree (title, summary, full_content, rank, report_key,
        generated_by) and how they came (a key of :meth:`resolve`'s counts)."""
        settings: IndexSettings = t["settings"]
        own_claims = member_claims(row, t["entities"], t["claims"])
        children = [{"title": tree.reports[k].title, "summary": tree.reports[k].summary,
                     "size": t["communities"][k]["size"]}
                    for k in (row["children"] or []) if k in tree.reports]
        context, _ = build_report_context(row, t["entities"], t["relationships"], children,
                                          settings.report_max_input_tokens,
                                          default_tokenizer(), own_claims)
        written = write_llm_report(llm, row, context, settings, t["entities"],
                                   t["relationships"], t["title_of"])
        if written.report is None:  # failed twice: the rule report stays for this handle
            failures.extend([written.failure] if written.failure else [])
            obj = rule_report(row, t["entities"], t["relationships"])
            return _tree_fields({**report_columns(obj), "generated_by": "rules"}, key), \
                "failed"
        if written.rejected:
            failures.append(written.rejected)
        stored = {**report_columns(written.report), "generated_by": written.generated_by,
                  "model_id": model_id,
                  "reason": written.rejected["reason"] if written.rejected else ""}
        saved = self.store.put(key, stored)
        how = "written" if written.generated_by == "llm" else "rejected"
        return _tree_fields(stored, key), how if saved else "unsaved"


def _tree_fields(stored: dict[str, Any], key: str) -> dict[str, Any]:
    """The :class:`~kgloom.query.context_builder.community_context.Report` fields of a
    stored report."""
    return {"title": stored["title"] or "", "summary": stored["summary"] or "",
            "full_content": stored["full_content"] or "", "rank": float(stored["rank"] or 0.0),
            "report_key": key, "generated_by": stored["generated_by"]}


def awaiting(tree: CommunityTree) -> int:
    """Reports of ``tree`` still awaiting their LLM report (distinct report keys)."""
    return len({r.report_key for r in tree.reports.values() if r.generated_by == LAZY})
