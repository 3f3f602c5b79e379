"""The output folder's layout and the one registry of stages, assets and their tables.

Everything that knows where a table lives asks here: the assets (through the ``index``
resource's :attr:`~kgloom.resources.IndexConfigResource.store`), the corpus stage, the
stats, the status and the CLI. Three levels, each a folder:

========== ============================================ =====================================
level      folder                                       written by
========== ============================================ =====================================
partition  ``<output>/stages/partitions/<quoted key>/`` ``documents``, ``text_units``,
                                                        ``extracted_graph`` of one input file
corpus     ``<output>/stages/``                         ``corpus`` (the live partitions
                                                        combined) and the graph-wide stages'
                                                        failures and stats
published  ``<output>/``                                the graph and emit assets: GraphRAG's
                                                        tables, graph files, LanceDB
========== ============================================ =====================================

A table is ``<folder>/<table>.parquet``; a stage's failures are
``failures.<stage>.parquet`` and its stats ``<stage>.stats.json`` in the folder of the
stage's level (Microsoft GraphRAG keeps the same idea in its ``PipelineStorage`` plus
``write_table_to_storage(df, "entities", storage)``; Dagster's
``UPathIOManager._get_path`` maps an asset key and partition to a path the same way).
No Dagster here: the resource hands a :class:`TableStore` to the assets.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

import polars as pl

from kgloom.core import schemas
from kgloom.core.storage import read_table, write_table

# --- every file and folder name under the output folder: defined here, imported elsewhere --
# (a table is ``<table>.parquet``, its name in :mod:`kgloom.core.schemas`, the suffix in
# :mod:`kgloom.core.storage`)
STAGES_DIR = "stages"  # the corpus level, under the output folder
PARTITIONS_DIR = "partitions"  # the partition level, under the corpus level
STATS_SUFFIX = ".stats.json"  # <stage>.stats.json in the stage's folder
MANIFEST_FILE = "manifest.json"  # <stage>.manifest.json: a partition stage's marker
SUMMARY_FILE = "index-summary.json"  # the last graph asset's output: gone means rebuild
MARKER_FILE = "build.json"  # the build marker, written last: readers open what it names
BUILDS_DIR = "builds"  # <output>/builds/<build id>/: the links of each kept build
GRAPHML_FILE = "graph.graphml"
NEO4J_DIR = "neo4j"  # the Neo4j import CSVs and their import script
# the files of NEO4J_DIR: <name>.csv for each name (neo4j_csv) and the import script
NEO4J_CSV = ("nodes", "relationships", "text_units", "documents", "communities", "mentions",
             "part_of", "in_community", "child_of")
NEO4J_IMPORT_SCRIPT = "import.sh"
LOCK_FILE = ".kgloom.lock"  # the output folder's writer lock (kgloom.core.lock)
HOLDER_FILE = ".kgloom.lock.json"  # who holds the lock: pid, host, command, since
LANCEDB_DIR = "lancedb"  # the LanceDB database of the vector tables
EMBEDDER_MANIFEST = "embedder.json"  # in LANCEDB_DIR: which embedder wrote the vectors
FLAT_SNAPSHOT_SUFFIX = ".flat.parquet"  # LANCEDB_DIR/<table>.flat.parquet
LLM_CACHE_FILE = "llm_cache.sqlite"  # the LLM reply cache every LLM stage shares
EMBEDDING_CACHE_FILE = "embedding_cache.sqlite"  # texts embedded by earlier runs
QUERY_CACHE_FILE = "query_cache.sqlite"  # the query side's own LLM cache (default path)
LAZY_REPORTS_FILE = "lazy_reports.sqlite"  # global search's lazily written reports
IMPORT_SUMMARY_FILE = "graph-import.json"  # `kgloom import-graph`: what was imported


def neo4j_csv(name: str) -> str:
    """The file name of Neo4j import CSV ``name`` in :data:`NEO4J_DIR` (``<name>.csv``).

    Raises:
        ValueError: ``name`` is not one of :data:`NEO4J_CSV`.
    """
    if name not in NEO4J_CSV:
        raise ValueError(f"no Neo4j import file {name!r}; the files are {', '.join(NEO4J_CSV)}")
    return f"{name}.csv"


class Level(enum.StrEnum):
    """Where a table lives (see the module docstring)."""

    PARTITION = "partition"
    CORPUS = "corpus"
    PUBLISHED = "published"


# --- stage names: the stats and failures files' names, the cost table's rows -------------
DOCUMENTS = "documents"
TEXT_UNITS = "text_units"
EXTRACTION = "extraction"
CLAIMS = "claims"
CORPUS = "corpus"
ENTITIES = "entities"
SUMMARIES = "summaries"
RESOLUTION = "resolution"
COMMUNITIES = "communities"
GRAPH_STATS = "graph_stats"
COMMUNITY_REPORTS = "community_reports"
GRAPH_FILES = "graph_files"
VECTOR_INDEX = "vector_index"
INDEX_SUMMARY = "index_summary"


@dataclass(frozen=True)
class Stage:
    """One stage of the pipeline: what it writes under the output folder, and the Dagster
    asset that runs it.

    Attributes:
        name: the stage's name (stats file ``<name>.stats.json``, failures table
            ``failures.<name>``).
        asset: the Dagster op that runs it: the asset function's name in
            ``kgloom/assets/`` (one op may run several stages).
        level: the level of its stats and failures files.
        tables: the tables it writes, as (table name, level) pairs.
        part_of: the stage whose wall time includes this one (``summaries`` is part of
            ``entities``), None for a top-level stage.
        keys: the asset keys the op materializes when it is a multi-asset, given on the
            op's first stage; () for one asset named as the op (:data:`ASSET_KEYS`).
        failures: whether it writes a failures table ``failures.<name>``.
        stats: whether it writes a stats file ``<name>.stats.json``.
        files: the side files and folders it writes at the published level (file names
            of this module: ``graph.graphml``, ``neo4j``, ...).
    """

    name: str
    asset: str
    level: Level
    tables: tuple[tuple[str, Level], ...] = ()
    part_of: str | None = None
    keys: tuple[str, ...] = ()
    failures: bool = False
    stats: bool = True
    files: tuple[str, ...] = ()


_P, _C, _O = Level.PARTITION, Level.CORPUS, Level.PUBLISHED

PARTITION_STAGES: tuple[str, ...] = (DOCUMENTS, TEXT_UNITS, EXTRACTION)
"""The partitioned stages in order, each with a marker ``<stage>.manifest.json``; a
partition is complete after the last one."""
_PARTITION_FAILURES = (DOCUMENTS, EXTRACTION, CLAIMS)  # combined at the corpus level

# The one registry, in pipeline order: the asset lists, the index summary's dependencies,
# the jobs and the asset tests' table of outputs all derive from it. A new graph-wide
# stage is one entry here (docs/architecture.md, "Add a graph-wide stage").
STAGES: dict[str, Stage] = {s.name: s for s in (
    Stage(DOCUMENTS, "documents", _P, ((schemas.DOCUMENTS, _P),), failures=True),
    Stage(TEXT_UNITS, "text_units", _P, ((schemas.TEXT_UNITS, _P),)),
    Stage(EXTRACTION, "extracted_graph", _P, (
        (schemas.ENTITY_MENTIONS, _P), (schemas.RELATIONSHIP_MENTIONS, _P),
        (schemas.UNIT_STATUS, _P)), failures=True),
    Stage(CLAIMS, "extracted_graph", _P, ((schemas.CLAIM_MENTIONS, _P),), failures=True),
    Stage(CORPUS, "corpus", _C, (
        (schemas.DOCUMENTS, _C), (schemas.TEXT_UNITS, _C), (schemas.ENTITY_MENTIONS, _C),
        (schemas.RELATIONSHIP_MENTIONS, _C), (schemas.CLAIM_MENTIONS, _C),
        (schemas.UNIT_STATUS, _C),
        *((f"{schemas.FAILURES}.{s}", _C) for s in _PARTITION_FAILURES))),
    Stage(ENTITIES, "entity_graph", _C, (
        (schemas.ENTITIES, _O), (schemas.RELATIONSHIPS, _O), (schemas.ENTITY_ALIASES, _O),
        (schemas.COVARIATES, _O)),
        keys=(schemas.ENTITIES, schemas.RELATIONSHIPS, schemas.ENTITY_ALIASES,
              schemas.COVARIATES)),
    Stage(SUMMARIES, "entity_graph", _C, part_of=ENTITIES, failures=True),
    Stage(RESOLUTION, "entity_graph", _C, part_of=ENTITIES),
    Stage(COMMUNITIES, "communities", _C, ((schemas.COMMUNITIES, _O),)),
    Stage(GRAPH_STATS, "graph_stats", _C, ((schemas.GRAPH_STATS, _O),)),
    Stage(COMMUNITY_REPORTS, "community_reports", _C, ((schemas.COMMUNITY_REPORTS, _O),),
          failures=True),
    Stage(GRAPH_FILES, "graph_files", _C, (
        (schemas.GRAPH_NODES, _O), (schemas.GRAPH_EDGES, _O), (schemas.TEXT_UNITS, _O),
        (schemas.DOCUMENTS, _O)), files=(GRAPHML_FILE, NEO4J_DIR)),
    Stage(VECTOR_INDEX, "vector_index", _C, files=(LANCEDB_DIR,)),
    # the last asset: every stage's failures in one table, the summary, the build marker
    Stage(INDEX_SUMMARY, "index_summary", _C, ((schemas.FAILURES, _O),), stats=False,
          files=(SUMMARY_FILE, MARKER_FILE)),
)}


def _ops(partitioned: bool) -> dict[str, tuple[str, ...]]:
    """{op: its asset keys} of the partitioned (or graph-wide) stages, in pipeline order
    (an op's keys are those of its first stage)."""
    ops: dict[str, tuple[str, ...]] = {}
    for s in STAGES.values():
        if (s.level is Level.PARTITION) == partitioned:
            ops.setdefault(s.asset, s.keys or (s.asset,))
    return ops


# --- the Dagster ops and asset names, in pipeline order, derived from STAGES ----------------
ASSET_KEYS: dict[str, tuple[str, ...]] = {**_ops(True), **_ops(False)}
"""{op: the asset keys it materializes}, every asset op (the asset functions of
``kgloom/assets/``) in pipeline order."""
ASSET_OPS: tuple[str, ...] = tuple(ASSET_KEYS)
"""Every asset op in pipeline order: ``ALL_ASSETS``' order."""
PARTITIONED_ASSETS: tuple[str, ...] = tuple(k for ks in _ops(True).values() for k in ks)
GRAPH_ASSETS: tuple[str, ...] = tuple(k for ks in _ops(False).values() for k in ks)
"""The graph-wide asset keys; the last, ``index_summary``, depends on all the others."""
SUMMARY_DEPS: tuple[str, ...] = GRAPH_ASSETS[:-1]
"""The index summary's dependencies: every graph-wide asset before it."""


class PartitionKeyError(ValueError):
    """A partition key that does not name a file inside the input folder (e.g.
    ``../secret.txt``, an absolute path, a hidden or unsupported file, a symlink whose
    target lies outside): refused before anything is read or written for it."""


def check_key_shape(key: str) -> None:
    """Check that partition key ``key`` can name one folder inside the partition level (no
    file system): a relative POSIX path with no empty, ``.``, ``..`` or hidden (``.``-led)
    part and no NUL. (:func:`kgloom.core.inputs.check_key_shape`
    adds that it names a supported input file.)

    Raises:
        PartitionKeyError: naming the key and what is wrong with it.
    """
    what = None
    if not isinstance(key, str) or not key:
        what = "it is empty"
    elif "\0" in key:
        what = "it holds a NUL character"
    elif key.startswith("/") or Path(key).is_absolute():
        what = "it is an absolute path"
    elif any(part in ("", ".", "..") for part in key.split("/")):
        what = "it has an empty, '.' or '..' part"
    elif any(part.startswith(".") for part in key.split("/")):
        what = "it names a hidden file or folder"
    if what:
        raise_key_error(key, what)


def raise_key_error(key: str, what: str) -> None:
    """Raise the :class:`PartitionKeyError` for ``key`` saying ``what`` is wrong.

    Raises:
        PartitionKeyError: always.
    """
    raise PartitionKeyError(
        f"refused partition key {key!r}: {what}; a key is a file's path relative to "
        "the input folder (see `kgloom partitions`); nothing was read")


def stages_dir(output_dir: str | Path) -> Path:
    """Return the corpus level ``<output_dir>/stages`` (created)."""
    p = Path(output_dir) / STAGES_DIR
    p.mkdir(parents=True, exist_ok=True)
    return p


def partitions_root(output_dir: str | Path) -> Path:
    """Return ``<output_dir>/stages/partitions`` (created)."""
    p = stages_dir(output_dir) / PARTITIONS_DIR
    p.mkdir(parents=True, exist_ok=True)
    return p


def partition_dir(output_dir: str | Path, key: str) -> Path:
    """Return (and create) the folder of partition ``key``; the key is percent-quoted
    (``letters%2F1843.jsonl``) so every key is one folder name.

    Raises:
        PartitionKeyError: for a malformed key (:func:`check_key_shape`), e.g. ``..``,
            which would otherwise name a folder outside ``stages/partitions``.
    """
    check_key_shape(key)
    p = partitions_root(output_dir) / quote(key, safe="")
    p.mkdir(parents=True, exist_ok=True)
    return p


def stored_partitions(output_dir: str | Path) -> list[str]:
    """Return the keys of the partitions that have a folder under the output, sorted."""
    return sorted(unquote(p.name) for p in partitions_root(output_dir).iterdir() if p.is_dir())


def failures_table(stage: str) -> str:
    """The name of ``stage``'s failures table: ``failures.<stage>``."""
    return f"{schemas.FAILURES}.{stage}"


class TableStore:
    """Maps (table, level, partition) to a file under one output folder, and reads and
    writes tables there atomically (:mod:`kgloom.core.storage`).

    Args:
        output_dir: the output folder (the published level).
    """

    def __init__(self, output_dir: str | Path):
        self.output_dir = Path(output_dir)

    def folder(self, level: Level, partition: str | None = None) -> Path:
        """The folder of ``level`` (created); ``partition`` is required for
        ``Level.PARTITION`` and ignored otherwise.

        Raises:
            PartitionKeyError: a malformed partition key.
            ValueError: ``Level.PARTITION`` without a partition.
        """
        if level is Level.PARTITION:
            if partition is None:
                raise ValueError("the partition level needs a partition key")
            return partition_dir(self.output_dir, partition)
        if level is Level.CORPUS:
            return stages_dir(self.output_dir)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        return self.output_dir

    def file(self, name: str) -> Path:
        """A published side file or folder (``graph.graphml``, ``neo4j``, the summary)."""
        return self.folder(Level.PUBLISHED) / name

    def read(self, table: str, level: Level = Level.PUBLISHED, partition: str | None = None,
             schema: dict | None = None, columns: list[str] | None = None) -> pl.DataFrame:
        """Read a table (:func:`kgloom.core.storage.read_table`: an empty frame of ``schema``
        when the file is missing and a schema is given).

        Raises:
            FileNotFoundError: the table is missing and no schema was given.
            kgloom.core.storage.UnreadableTableError: the file exists but cannot be read.
        """
        return read_table(self.folder(level, partition), table, schema, columns=columns)

    def write(self, df: pl.DataFrame, table: str, level: Level = Level.PUBLISHED,
              partition: str | None = None) -> Path:
        """Write a table atomically; return its path.

        Raises:
            kgloom.core.storage.DiskFullError: the disk filled up; the old file is kept.
        """
        return write_table(df, self.folder(level, partition), table)

    def stage_folder(self, stage: str, partition: str | None = None) -> Path:
        """The folder of ``stage``'s stats and failures: its partition's folder for a
        partitioned stage, else the corpus level."""
        return self.folder(STAGES[stage].level, partition)

    def write_failures(self, df: pl.DataFrame, stage: str,
                       partition: str | None = None) -> Path:
        """Write ``stage``'s failures table (``failures.<stage>``) in its stage folder."""
        return write_table(df, self.stage_folder(stage, partition), failures_table(stage))

    def failure_files(self) -> list[Path]:
        """The graph-wide stages' and the combined partitions' failures files at the
        corpus level, sorted."""
        return sorted(stages_dir(self.output_dir).glob(f"{schemas.FAILURES}.*.parquet"))
