"""Published builds: one marker per publish, and readers that see exactly one build.

A publish (``kgloom index``, a Dagster run of the graph assets, ``kgloom import-graph``)
rewrites the output folder's tables one asset at a time, so a reader that opened the
files while it ran could mix two builds (parquet of the new one, LanceDB of the old).
This module makes a build atomic for readers, with no change to where or how the
tables are written:

- **Publishing** (:func:`publish_build`, the last step of the ``index_summary`` asset
  and of an import): every published parquet table ``<out>/<name>.parquet``, the
  ``index-summary.json`` and the embedder manifest ``lancedb/embedder.json`` get a hard
  link (a copy where the file system has none) in ``<out>/builds/<build id>/``. Every
  table is written by ``kgloom.core.storage`` to a temporary file renamed over the old one,
  so a later write makes a new file and the link keeps this build's bytes. Then the
  marker ``<out>/build.json`` is written atomically, last: the build id, each table's
  size and SHA-256 digest, and each LanceDB table's version with that version's commit time
  and row count. The builds folder keeps the newest :data:`KEEP_BUILDS` builds, and
  any build replaced less than :data:`KEEP_SUPERSEDED_SECONDS` ago.
- **Reading** (:class:`Build`, used by every query handle): the reader reads the marker
  once, then reads each parquet table from the build's folder (checked against the
  recorded size) and opens each LanceDB table with ``checkout(version)`` at the
  recorded version, after checking that version's commit time and row count (a
  ``.lance`` folder copied from another build is refused). LanceDB keeps old versions
  until ``cleanup_old_versions``, which kgloom never runs. A build whose files were
  pruned while a reader still used it (the marker names another build now) raises
  :class:`IndexChangedError`; a handle being opened retries with the new build.

A table the marker lists must also still exist at its live path
(``<out>/<name>.parquet``): a missing one means the folder was damaged or is half
written, and the reader refuses naming it (a republish never removes a live table, it
replaces it). A folder without a marker (written by a kgloom older than this module, or
by hand, or a first build still running) is read from its live files, with the
cross-table checks of the query handles; its ``build_id`` is None.

Why links and a marker rather than checking live files against hashes: a reader must
keep answering from the old build while a new one is being written (minutes on a big
corpus), and the links cost no disk until a table is replaced.

No Dagster here.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from kgloom.core import storage
from kgloom.core.layout import (
    BUILDS_DIR,
    EMBEDDER_MANIFEST,
    LANCEDB_DIR,
    MARKER_FILE,
    SUMMARY_FILE,
)

KEEP_BUILDS = 3  # builds kept in BUILDS_DIR (the newest), so a reader mid-query keeps its own
# an older build is kept this long after a newer one replaced it: a handle that opened it
# just before reads its lazily loaded tables (the graph) within that time
KEEP_SUPERSEDED_SECONDS = 600.0
MARKER_FORMAT = 1
# side files linked with each build: path under the output folder -> name in the build
SIDE_FILES = {SUMMARY_FILE: SUMMARY_FILE,
              f"{LANCEDB_DIR}/{EMBEDDER_MANIFEST}": EMBEDDER_MANIFEST}
OPEN_RETRIES = 3  # a handle being opened retries this often when the build changes under it


class IndexFilesMissingError(FileNotFoundError):
    """The output folder lacks a file a reader needs; the message names each one."""


class IndexInconsistentError(ValueError):
    """The output folder's tables come from different builds (a half-written index)."""


class IndexChangedError(IndexInconsistentError):
    """The index was republished while a reader used it, and the build it read is gone;
    open the index again (handles being opened do so themselves)."""


def new_build_id() -> str:
    """A sortable, unique build id: UTC time to the microsecond, then 8 random hex
    digits, e.g. ``20261202T101500.123456Z-1f2e3d4c``."""
    now = datetime.now(UTC)
    return f"{now.strftime('%Y%m%dT%H%M%S.%f')}Z-{uuid.uuid4().hex[:8]}"


def _digest(path: Path) -> str:
    """``sha256:<hex>`` of the file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return f"sha256:{h.hexdigest()}"


def _link(src: Path, dst: Path) -> None:
    """Hard-link ``src`` at ``dst`` (copy where links are not supported)."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def lancedb_versions(db_path: str | Path) -> dict[str, dict[str, Any]]:
    """Each LanceDB table under ``db_path`` -> ``{"version": int, "committed_at": Unix
    seconds of that version's commit, "rows": int}`` ({} when there is no LanceDB
    folder)."""
    db_path = Path(db_path)
    if not db_path.is_dir():
        return {}
    import lancedb

    db = lancedb.connect(str(db_path))
    out = {}
    for folder in sorted(db_path.glob("*.lance")):
        table = db.open_table(folder.name[:-len(".lance")])
        version = int(table.version)
        out[folder.name[:-len(".lance")]] = {
            "version": version, "committed_at": _committed_at(table, version),
            "rows": int(table.count_rows())}
    return out


def _committed_at(table, version: int) -> float | None:
    """The commit time of ``version`` of a LanceDB table, Unix seconds (None when the
    table has no such version). LanceDB gives a naive local datetime; ``timestamp()``
    turns it back into the time zone free instant."""
    for v in table.list_versions():
        number = v["version"] if isinstance(v, dict) else getattr(v, "version", None)
        if number == version:
            ts = v["timestamp"] if isinstance(v, dict) else getattr(v, "timestamp", None)
            return round(ts.timestamp(), 6) if isinstance(ts, datetime) else None
    return None


def publish_build(output_dir: str | Path, keep: int = KEEP_BUILDS) -> dict[str, Any]:
    """Publish what the output folder holds now as one build (see the module doc): link
    its tables and side files into ``builds/<id>/``, then write ``build.json``
    atomically, then prune the builds folder to the newest ``keep`` builds.

    Call it after every other write of a publish, under the writer lock (the index
    commands and Dagster runs hold it).

    Args:
        output_dir: the index's output folder.
        keep: builds kept (>= 1).

    Returns:
        The marker dict: ``format``, ``build_id``, ``published_at`` (ISO UTC),
        ``snapshot`` (the build's folder, relative), ``tables`` (name -> ``{"bytes",
        "digest"}``, digest ``sha256:<hex>``), ``files`` (side file name -> the same),
        ``lancedb`` (table -> ``{"version", "committed_at", "rows"}``).

    Raises:
        storage.DiskFullError: the disk filled up while writing the marker.
    """
    out = Path(output_dir)
    build_id = new_build_id()
    snap = out / BUILDS_DIR / build_id
    snap.mkdir(parents=True, exist_ok=False)
    tables: dict[str, dict[str, Any]] = {}
    for path in sorted(out.glob("*.parquet")):
        _link(path, snap / path.name)
        linked = snap / path.name
        tables[path.name[:-len(".parquet")]] = {"bytes": linked.stat().st_size,
                                                "digest": _digest(linked)}
    files: dict[str, dict[str, Any]] = {}
    for rel, name in SIDE_FILES.items():
        if (out / rel).is_file():
            _link(out / rel, snap / name)
            files[name] = {"bytes": (snap / name).stat().st_size, "digest": _digest(snap / name)}
    marker = {"format": MARKER_FORMAT, "build_id": build_id,
              "published_at": datetime.now(UTC).isoformat(),
              "snapshot": f"{BUILDS_DIR}/{build_id}", "tables": tables, "files": files,
              "lancedb": lancedb_versions(out / LANCEDB_DIR)}
    storage.write_json(marker, out / MARKER_FILE)
    prune_builds(out, keep, build_id)
    return marker


def prune_builds(output_dir: str | Path, keep: int, current: str,
                 grace_seconds: float | None = None) -> list[str]:
    """Remove the build folders that are neither among the newest ``keep`` (ids sort by
    time; ``current`` is always kept) nor superseded less than ``grace_seconds`` ago
    (default :data:`KEEP_SUPERSEDED_SECONDS`; a reader that opened one just before a
    publish may still be reading it); return the ids removed."""
    if grace_seconds is None:
        grace_seconds = KEEP_SUPERSEDED_SECONDS
    root = Path(output_dir) / BUILDS_DIR
    ids = sorted((p.name for p in root.iterdir() if p.is_dir()), reverse=True)
    kept = set([current] + [i for i in ids if i != current][:max(keep, 1) - 1])
    removed = []
    for newer, i in itertools.pairwise(ids):
        try:  # superseded when the next build's folder was made
            superseded_for = time.time() - (root / newer).stat().st_mtime
        except FileNotFoundError:
            superseded_for = grace_seconds
        if i not in kept and superseded_for >= grace_seconds:
            shutil.rmtree(root / i, ignore_errors=True)
            removed.append(i)
    return removed


def read_marker(output_dir: str | Path) -> dict[str, Any] | None:
    """The marker of ``output_dir`` (``build.json``), or None when there is none.

    Raises:
        IndexInconsistentError: the marker is not a kgloom build marker (names it).
    """
    path = Path(output_dir) / MARKER_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        marker = json.loads(text)
        if not isinstance(marker, dict) or "build_id" not in marker or "tables" not in marker:
            raise ValueError("no build_id or tables")
    except ValueError as exc:
        raise IndexInconsistentError(f"{path} is not a kgloom build marker ({exc}); re-run "
                                     "`kgloom index`") from exc
    return marker


@dataclass
class Build:
    """The one build a reader reads (see the module doc).

    Attributes:
        output_dir: the index's output folder.
        marker: its marker as read at open, None for an unmarked folder.
    """

    output_dir: Path
    marker: dict[str, Any] | None = None
    _checked: set = field(default_factory=set, repr=False)

    @classmethod
    def open(cls, output_dir: str | Path) -> Build:
        """The build ``output_dir``'s marker names now (unmarked: the live files)."""
        return cls(Path(output_dir), read_marker(output_dir))

    @property
    def build_id(self) -> str | None:
        """The build id, None for an unmarked folder."""
        return self.marker["build_id"] if self.marker else None

    @property
    def folder(self) -> Path:
        """Where this build's parquet tables are read: ``builds/<id>/``, or the output
        folder itself for an unmarked one."""
        return self.output_dir / self.marker["snapshot"] if self.marker else self.output_dir

    def info(self) -> dict[str, Any]:
        """What a result records of its build: ``{"build_id", "published_at"}`` (both
        None for an unmarked folder)."""
        m = self.marker or {}
        return {"build_id": m.get("build_id"), "published_at": m.get("published_at")}

    def live_path(self, name: str) -> Path:
        """``<out>/<name>.parquet``, where the pipeline writes table ``name``."""
        return storage.table_path(self.output_dir, name)

    def lists(self, name: str) -> bool:
        """Whether this build has table ``name`` (unmarked: whether its file exists)."""
        if self.marker:
            return name in self.marker["tables"]
        return self.live_path(name).exists()

    def has(self, name: str) -> bool:
        """Whether table ``name`` can be read: the build lists it and its live file is
        there (see :meth:`missing`)."""
        return self.lists(name) and self.live_path(name).exists()

    def missing(self, names: list[str]) -> list[str]:
        """The live paths of the tables of ``names`` this build lists but the output
        folder lacks (a damaged or half-written folder); for an unmarked folder, those
        of ``names`` that do not exist."""
        return [str(self.live_path(n)) for n in names
                if (not self.marker or n in self.marker["tables"])
                and not self.live_path(n).exists()]

    def path(self, name: str) -> Path:
        """The file holding this build's table ``name``."""
        return storage.table_path(self.folder, name)

    def read(self, name: str, columns: list[str] | None = None) -> pl.DataFrame:
        """Table ``name`` of this build (only ``columns`` when given).

        Raises:
            IndexFilesMissingError: the build lacks it, or its live file is missing.
            IndexChangedError: the build's files were pruned after a republish.
            IndexInconsistentError: the file is not the size the marker recorded.
            storage.UnreadableTableError: the file cannot be read (names it).
        """
        missing = self.missing([name]) or ([] if self.lists(name) else [str(self.live_path(name))])
        if missing:
            raise IndexFilesMissingError(
                f"{missing[0]} is missing: this index is half-written or damaged (run "
                f"`kgloom index --output-dir {self.output_dir}` again)")
        path = self.path(name)
        if self.marker and name not in self._checked:
            self._check_size(path, self.marker["tables"][name])
            self._checked.add(name)
        try:
            return storage.read_parquet(path, columns)
        except FileNotFoundError:
            self.gone(path)
            raise  # unreachable: gone() raises

    def _check_size(self, path: Path, recorded: dict[str, Any]) -> None:
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            self.gone(path)
            raise  # unreachable: gone() raises
        if size != recorded["bytes"]:
            raise IndexInconsistentError(
                f"{path} has {size} bytes but build {self.build_id} recorded "
                f"{recorded['bytes']}: it was changed after the build was published; "
                "re-run `kgloom index`")

    def side_file(self, name: str) -> Path | None:
        """This build's copy of side file ``name`` (e.g. ``embedder.json``), None when
        the build has none; for an unmarked folder the live one (if it exists)."""
        if self.marker:
            return self.folder / name if name in self.marker.get("files", {}) else None
        rel = next((r for r, n in SIDE_FILES.items() if n == name), name)
        return self.output_dir / rel if (self.output_dir / rel).exists() else None

    def read_json(self, name: str) -> Any | None:
        """Side file ``name`` of this build parsed as JSON, None when absent."""
        path = self.side_file(name)
        if path is None:
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            self.gone(path)
            raise  # unreachable: gone() raises

    def gone(self, path: Path) -> None:
        """``path``, a file of this build, is gone: raise :class:`IndexChangedError`
        when the marker names another build now (pruned after a republish), else
        :class:`IndexFilesMissingError` naming it (a damaged folder)."""
        now = read_marker(self.output_dir)
        if self.marker and (now is None or now["build_id"] != self.build_id):
            raise IndexChangedError(
                f"the index at {self.output_dir} was republished (build {self.build_id} -> "
                f"{now['build_id'] if now else 'none'}) while this reader used it, and "
                f"{path.name} of build {self.build_id} is gone: open the index again")
        raise IndexFilesMissingError(
            f"{path} is missing: this index is half-written or damaged (run `kgloom index "
            f"--output-dir {self.output_dir}` again)")

    def lancedb_table(self, db, name: str):
        """LanceDB table ``name`` of database ``db`` as of this build: checked out at
        the recorded version after checking its commit time and row count (unmarked:
        the latest version).

        Raises:
            IndexFilesMissingError: no such table.
            IndexInconsistentError: the table lacks the version, or its version is not
                the one the build recorded (a ``.lance`` folder of another build).
        """
        folder = self.output_dir / LANCEDB_DIR / f"{name}.lance"
        if not folder.is_dir():
            raise IndexFilesMissingError(
                f"{folder} is missing: this is not a finished kgloom index (the "
                "vector_index asset writes it; run `kgloom index`)")
        table = db.open_table(name)
        if not self.marker:
            return table
        recorded = self.marker.get("lancedb", {}).get(name)
        if recorded is None:
            raise IndexInconsistentError(
                f"{folder} is not part of build {self.build_id} (its marker "
                f"{self.output_dir / MARKER_FILE} lists no such LanceDB table)")
        version = int(recorded["version"])
        committed = _committed_at(table, version)
        if committed is None or (recorded.get("committed_at") is not None
                                 and abs(committed - recorded["committed_at"]) > 1e-3):
            raise IndexInconsistentError(
                f"{folder} does not hold the version build {self.build_id} published "
                f"(version {version} written at {recorded.get('committed_at')}; this "
                f"table's is {committed or 'absent'}): the LanceDB folder was replaced "
                "or copied from another build; re-run `kgloom index`")
        try:
            table.checkout(version)
        except Exception as exc:  # lance raises several kinds for this
            raise IndexInconsistentError(
                f"{folder} cannot be read as of version {version} (build "
                f"{self.build_id}): {exc}") from exc
        rows = table.count_rows()
        if rows != int(recorded.get("rows", rows)):
            raise IndexInconsistentError(
                f"{folder} has {rows} rows at version {version} but build "
                f"{self.build_id} recorded {recorded['rows']}: re-run `kgloom index`")
        return table
