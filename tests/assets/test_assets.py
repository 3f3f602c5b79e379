"""Each asset of the graph run alone against golden tables, and the writes of one index run.

A tiny fixture (``tests/data/assets/input``: two short excerpts of the bundled book and
one empty file, so three ``input_files`` partitions and one failures row) is indexed
once per module with the fake LLM (:func:`kgloom.cli.runner.index_folder`,
ephemeral instance, claims on). Every file written through :mod:`kgloom.core.storage` during
that run is recorded with the asset that wrote it and a copy of its content.

Each asset test then rebuilds, in a fresh output folder, the files as they stood just
before that asset ran in the whole run (the copies taken then), materializes that one
asset (one partition for the partitioned ones) with ``dg.materialize`` on a fresh
ephemeral instance, and checks:

- the files it writes are exactly the ones :data:`OUTPUTS` declares for it;
- each output, normalized (rows in any order; today's date, timings and long texts
  folded, see :func:`normalize_file`), equals its golden in ``tests/data/assets/golden``;
- each output it was the last to write in the whole run equals that run's file.

Regenerate the goldens after a deliberate change of an output (and review the diff)::

    KGLOOM_REGEN_GOLDEN=1 PYTHONPATH=$PWD python -m pytest tests/assets/test_assets.py -q

A refactor that moves a file edits its path in :data:`OUTPUTS` only; the goldens, keyed
by the logical names there, stay as they are.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import inspect
import json
import math
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import dagster as dg
import polars as pl
import pytest

from kgloom.assets import ALL_ASSETS
from kgloom.cli.runner import index_folder, register_partitions
from kgloom.core import layout, schemas, storage
from kgloom.core.layout import BUILDS_DIR, Level
from kgloom.core.lock import HOLDER_FILE
from kgloom.definitions import build_resources

DATA = Path(__file__).resolve().parents[1] / "data" / "assets"
INPUT = DATA / "input"
GOLDEN = DATA / "golden"
REGEN = os.environ.get("KGLOOM_REGEN_GOLDEN", "") == "1"

# the fixture's settings: small units so two ~1.2 kB files give a few text units each;
# claims on, so covariates and claim mentions have rows
SETTINGS = {"chunk_size": 120, "chunk_overlap": 20, "extract_claims": True}
MTIME = 1_700_000_000  # the input files' mtime: documents.creation_date is stable
KEYS = ["empty.txt", "fezziwig.md", "marley.txt"]  # the partitions (input files)

P = "stages/partitions/{partition}"  # a partition's folder, key percent-quoted
FOLDER = {Level.PARTITION: f"{P}/", Level.CORPUS: f"{layout.STAGES_DIR}/",
          Level.PUBLISHED: ""}
LANCEDB = layout.LANCEDB_DIR
LLM_CACHE = layout.LLM_CACHE_FILE
EMBEDDING_CACHE = layout.EMBEDDING_CACHE_FILE
# the side files and folders a stage lists in the registry (Stage.files), as
# {logical name: path}; a path without a suffix under lancedb/ is a LanceDB table (not
# written through kgloom.core.storage). The files inside neo4j/ and lancedb/ are named by
# their writers (kgloom.publish.tables, kgloom.publish.vectors).
NEO4J_CSV = layout.NEO4J_CSV
VECTOR_TABLES = ("text_units", "entities", "community_reports")
SIDE_FILES: dict[str, dict[str, str]] = {
    layout.GRAPHML_FILE: {"graphml": layout.GRAPHML_FILE},
    layout.NEO4J_DIR: {**{f"neo4j_{n}": f"{layout.NEO4J_DIR}/{n}.csv" for n in NEO4J_CSV},
                       "neo4j_import_script": f"{layout.NEO4J_DIR}/{layout.NEO4J_IMPORT_SCRIPT}"},
    layout.LANCEDB_DIR: {**{f"lancedb_{t}": f"{LANCEDB}/{t}" for t in VECTOR_TABLES},
                         "embedder_manifest": f"{LANCEDB}/{layout.EMBEDDER_MANIFEST}",
                         **{f"flat_{t}": f"{LANCEDB}/{t}{layout.FLAT_SNAPSHOT_SUFFIX}"
                            for t in VECTOR_TABLES}},
    layout.SUMMARY_FILE: {"summary": layout.SUMMARY_FILE},
    layout.MARKER_FILE: {"build_marker": layout.MARKER_FILE},
}
# a table's logical name: its constant's in kgloom.core.schemas (extraction_units ->
# unit_status, graph-nodes -> graph_nodes)
TABLE_NAMES = {v: k.lower() for k, v in vars(schemas).items()
               if k.isupper() and isinstance(v, str)}


def _table_name(table: str, level: Level) -> str:
    """``table``'s logical name; ``corpus_`` before a corpus-level table's, and
    ``failures.<stage>`` as ``failures_<stage>``."""
    base, _, stage = table.partition(".")
    name = TABLE_NAMES[base] + (f"_{stage}" if stage else "")
    return f"corpus_{name}" if level is Level.CORPUS else name


def stage_outputs() -> dict[str, dict[str, str]]:
    """asset (op) -> {logical name: path under the output folder}, from the stage registry
    (:data:`kgloom.core.layout.STAGES`): each stage's tables, its failures table and stats
    file (named for the stage when its op runs several), a partition stage's marker and
    the side files of :data:`SIDE_FILES`. The goldens are keyed by these logical names."""
    outputs: dict[str, dict[str, str]] = {}
    for op in layout.ASSET_OPS:
        stages = [s for s in layout.STAGES.values() if s.asset == op]
        files: dict[str, str] = {}
        for s in stages:
            files |= {_table_name(t, level): f"{FOLDER[level]}{t}.parquet"
                      for t, level in s.tables}
        for s in stages:
            tag = f"_{s.name}" if len(stages) > 1 else ""
            folder = FOLDER[s.level]
            if s.failures:
                files[f"failures{tag}"] = f"{folder}{layout.failures_table(s.name)}.parquet"
            if s.stats:
                files[f"stats{tag}"] = f"{folder}{s.name}{layout.STATS_SUFFIX}"
            if s.name in layout.PARTITION_STAGES:
                files["manifest"] = f"{folder}{s.name}.{layout.MANIFEST_FILE}"
            for side in s.files:
                files |= SIDE_FILES[side]
        outputs[op] = files
    return outputs


# asset (op) -> {logical name: path under the output folder}
OUTPUTS: dict[str, dict[str, str]] = stage_outputs()
ASSETS = {a.op.name: a for a in ALL_ASSETS}
PARTITIONED = tuple(op for op in layout.ASSET_OPS
                    if any(s.asset == op and s.level is Level.PARTITION
                           for s in layout.STAGES.values()))

# --------------------------------------------------------------------------------------
# recording the writes of kgloom.core.storage
# --------------------------------------------------------------------------------------

@dataclass
class Write:
    """One atomic write: its order in the run, path (relative to the output folder),
    writing asset (op name; "-" outside any asset step), partition key ("" when none)
    and where a copy of the written file was kept (None: not kept)."""

    seq: int
    path: str
    writer: str
    partition: str
    copy: Path | None


@dataclass
class WriteLog:
    """The writes made under one output folder while :func:`record_writes` was active."""

    out: Path
    keep: Path | None = None  # folder for copies of the written files; None: no copies
    writes: list[Write] = field(default_factory=list)

    def by_path(self) -> dict[str, list[str]]:
        """{path: [writer, ...]} in write order (lock notes left out)."""
        paths: dict[str, list[str]] = {}
        for w in self.writes:
            if Path(w.path).name != HOLDER_FILE:
                paths.setdefault(w.path, []).append(w.writer)
        return paths


def _writer() -> tuple[str, str]:
    """The (op name, partition key) of the asset step on the call stack: the frame that
    holds a Dagster ``AssetExecutionContext`` (an asset body) or ``OutputContext`` (an IO
    manager); ("-", "") when there is none."""
    frame = inspect.currentframe()
    while frame is not None:
        for value in frame.f_locals.values():
            if isinstance(value, dg.AssetExecutionContext):
                key = value.partition_key if value.has_partition_key else ""
                return value.op_def.name, key
            if isinstance(value, dg.OutputContext):
                key = value.partition_key if value.has_partition_key else ""
                return value.step_key, key
        frame = frame.f_back
    return "-", ""


@contextmanager
def record_writes(out: Path, keep: Path | None = None) -> Iterator[WriteLog]:
    """Record every write of :mod:`kgloom.core.storage` (its one atomic-write function) under
    ``out`` while the block runs; with ``keep``, a copy of each written file too."""
    log = WriteLog(out.resolve(), keep)
    original = storage._atomic

    def counting(path, write):
        result = original(path, write)
        rel = Path(path).resolve().relative_to(log.out).as_posix()
        writer, partition = _writer()
        copy = None
        if keep is not None:
            copy = keep / str(len(log.writes))
            shutil.copyfile(path, copy)
        log.writes.append(Write(len(log.writes), rel, writer, partition, copy))
        return result

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(storage, "_atomic", counting)
        yield log


def template(path: str) -> str:
    """``path`` with its partition folder replaced by ``{partition}``."""
    parts = path.split("/")
    if parts[:2] == ["stages", "partitions"] and len(parts) > 3:
        parts[2] = "{partition}"
    return "/".join(parts)


# --------------------------------------------------------------------------------------
# normalizing outputs for comparison
# --------------------------------------------------------------------------------------

LONG = 160  # characters: longer strings are kept as head + hash + length
VECTOR_HEAD = 8  # vector components kept
# JSON keys dropped: timings, the random build ids of the partition stage markers, and
# the embedder's install path (this machine's venv; its "model" name is still compared);
# of the build marker (build.json), its time stamps, folder, file sizes and digests
# (parquet bytes vary with the polars version and today's date in communities.period)
VOLATILE_KEYS = ("seconds", "share", "finished_at", "per_s", "threads", "build", "after",
                 "model_path", "published_at", "snapshot", "committed_at", "bytes", "digest")


# counters of embedding work that depend on what the index's embedding cache already
# held (an asset run alone starts with none): compared with the golden, not between a
# run alone and the whole run
CACHE_STATE_KEYS = ("embedded", "reused", "cached", "embedding_cache")

HEX_ID = re.compile(r"[0-9a-f]{64}")  # a SHA-256 id: kept as its first 16 digits


def _short(s: str) -> str:
    if HEX_ID.fullmatch(s):
        return s[:16]
    if len(s) <= LONG:
        return s
    digest = hashlib.sha256(s.encode()).hexdigest()[:16]
    return f"{s[:60]}... [sha256 {digest}, {len(s)} chars]"


def _value(v, today: str):
    if isinstance(v, str):
        return "<today>" if v == today else _short(v)
    if isinstance(v, list):
        return [_value(x, today) for x in v]
    if isinstance(v, dict):
        return {k: _value(x, today) for k, x in v.items()}
    if isinstance(v, float) and not math.isfinite(v):
        return repr(v)
    return v


def _no_floats(v):
    if isinstance(v, float):
        return None
    if isinstance(v, list):
        return [_no_floats(x) for x in v]
    if isinstance(v, dict):
        return {k: _no_floats(x) for k, x in v.items()}
    return v


def normalize_table(df: pl.DataFrame) -> dict:
    """Columns with dtypes, and rows sorted by their non-float content: today's date
    (GraphRAG's ``period``) becomes ``<today>`` (and the ``row_hash`` of such a row, which
    covers it, a placeholder), a string over :data:`LONG` characters its
    head, SHA-256 and length, a ``vector`` its length and first :data:`VECTOR_HEAD`
    components."""
    today = dt.date.today().isoformat()
    rows = []
    for row in df.iter_rows(named=True):
        if "vector" in row and row["vector"] is not None:
            v = list(row["vector"])
            row["vector"] = {"dim": len(v), "head": [float(x) for x in v[:VECTOR_HEAD]]}
        row = {k: _value(v, today) for k, v in row.items()}
        if "row_hash" in row and "<today>" in row.values():
            # LanceDB's row hash covers the row's other columns, today's date among them
            row["row_hash"] = "<hash of a row dated today>"
        rows.append(row)
    rows.sort(key=lambda r: json.dumps(_no_floats(r), sort_keys=True, default=str))
    return {"columns": [[c, str(t)] for c, t in df.schema.items()], "rows": rows}


def _drop_keys(v, words: tuple[str, ...]):
    """``v`` without any dict key that contains one of ``words``, at every depth."""
    if isinstance(v, dict):
        return {k: _drop_keys(x, words) for k, x in v.items()
                if not any(word in k for word in words)}
    if isinstance(v, list):
        return [_drop_keys(x, words) for x in v]
    return v


def _drop_cache_state(v):
    return _drop_keys(v, CACHE_STATE_KEYS)


def _drop_volatile(v):
    return _drop_keys(v, VOLATILE_KEYS)


def normalize_file(out: Path, rel: str) -> dict:
    """The comparable content of output ``rel`` under ``out``: a table (parquet or
    LanceDB), a JSON document without timing keys (:data:`VOLATILE_KEYS`), or the sorted
    lines of a text file; ``{"missing": true}`` when it does not exist."""
    path = out / rel
    if rel.startswith(f"{LANCEDB}/") and not path.suffix:
        import lancedb

        if not path.with_name(f"{path.name}.lance").is_dir():
            return {"missing": True}
        table = lancedb.connect(str(out / LANCEDB)).open_table(path.name)
        return normalize_table(pl.from_arrow(table.to_arrow()))
    if not path.exists():
        return {"missing": True}
    if path.suffix == ".parquet":
        return normalize_table(pl.read_parquet(path))
    if path.suffix == ".json":
        today = dt.date.today().isoformat()
        return {"json": _value(_drop_volatile(json.loads(path.read_text("utf-8"))), today)}
    return {"lines": sorted(_short(line) for line in path.read_text("utf-8").splitlines())}


def differences(actual, golden, where: str = "", limit: int = 20) -> list[str]:
    """Where ``actual`` and ``golden`` (normalized outputs) differ, at most ``limit``
    lines. Floats match within 1e-6 relative (vector components within 1e-4 absolute:
    the embedder's last digits may differ between machines)."""
    found: list[str] = []

    def walk(a, g, at: str) -> None:
        if len(found) >= limit:
            return
        if isinstance(a, dict) and isinstance(g, dict):
            for k in sorted(set(a) | set(g), key=str):
                if k not in a or k not in g:
                    found.append(f"{at}.{k}: {'missing' if k not in a else 'unexpected'}")
                else:
                    walk(a[k], g[k], f"{at}.{k}")
        elif isinstance(a, list) and isinstance(g, list):
            if len(a) != len(g):
                found.append(f"{at}: {len(a)} items, golden {len(g)}")
            for i, (x, y) in enumerate(zip(a, g)):
                walk(x, y, f"{at}[{i}]")
        elif isinstance(a, float) and isinstance(g, (int, float)) and not isinstance(g, bool):
            tol = dict(abs_tol=1e-4) if ".vector." in at else dict(rel_tol=1e-6, abs_tol=1e-9)
            if not math.isclose(a, g, **tol):
                found.append(f"{at}: {a!r} != golden {g!r}")
        elif a != g or type(a) is not type(g):
            found.append(f"{at}: {str(a)[:200]!r} != golden {str(g)[:200]!r}")

    walk(actual, golden, where)
    return found


# --------------------------------------------------------------------------------------
# the fixture index
# --------------------------------------------------------------------------------------

@pytest.fixture(autouse=True, scope="module")
def _no_kgloom_env() -> Iterator[None]:
    """No KGLOOM_* variable of the caller's shell reaches the resources."""
    with pytest.MonkeyPatch.context() as mp:
        for name in list(os.environ):
            if name.startswith("KGLOOM_") and name != "KGLOOM_REGEN_GOLDEN":
                mp.delenv(name)
        yield


@dataclass
class Built:
    """The fixture index: its input and output folders and the writes of its run."""

    input: Path
    out: Path
    log: WriteLog


def _input_copy(base: Path) -> Path:
    """Copy the fixture's input files under ``base/input``, with a fixed mtime."""
    inp = base / "input"
    shutil.copytree(INPUT, inp)
    for p in inp.iterdir():
        os.utime(p, (MTIME, MTIME))
    return inp


@pytest.fixture(scope="module")
def built(tmp_path_factory, _no_kgloom_env) -> Built:
    base = tmp_path_factory.mktemp("fixture")
    inp, out, keep = _input_copy(base), base / "output", base / "copies"
    keep.mkdir()
    with record_writes(out, keep) as log:
        _, report = index_folder(build_resources(str(inp), str(out), fake_llm=True, **SETTINGS),
                                 dg.DagsterInstance.ephemeral(), force=True)
    assert report.success, report
    assert sorted(report.partition_runs) == KEYS
    return Built(inp, out, log)


def upstream_state(built: Built, asset: str, partition: str, out: Path) -> None:
    """Fill the empty folder ``out`` with the files of the fixture run as they stood just
    before ``asset`` (on ``partition``) first wrote: each at its last version written
    before then. LanceDB tables are copied when ``vector_index`` had run by then; the
    LLM cache never is (each asset makes its own calls)."""
    writes = built.log.writes
    start = min(w.seq for w in writes if w.writer == asset and w.partition == partition)
    latest: dict[str, Write] = {}
    for w in writes[:start]:
        if w.writer != "-":
            latest[w.path] = w
    for w in latest.values():
        (out / w.path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(w.copy, out / w.path)
    if any(w.writer == "vector_index" for w in writes[:start]):
        shutil.copytree(built.out / LANCEDB, out / LANCEDB, dirs_exist_ok=True)


def run_alone(built: Built, asset: str, partition: str, out: Path) -> WriteLog:
    """Materialize ``asset`` alone (on ``partition`` when partitioned) with output folder
    ``out`` in a fresh ephemeral instance holding the fixture's partitions; return the
    writes it made."""
    instance = dg.DagsterInstance.ephemeral()
    register_partitions(instance, KEYS)
    resources = build_resources(str(built.input), str(out), fake_llm=True, **SETTINGS)
    with record_writes(out) as log:
        result = dg.materialize([ASSETS[asset]], partition_key=partition or None,
                                resources=resources, instance=instance, raise_on_error=False)
    assert result.success, [str(e.event_specific_data.error) for e in result.all_events
                            if e.is_step_failure]
    return log


def dump_golden(outputs: dict[str, dict]) -> str:
    """JSON of normalized outputs with one line per row or text line (readable diffs)."""
    def line(v) -> str:
        return json.dumps(v, sort_keys=True, ensure_ascii=False)

    parts = []
    for name in sorted(outputs):
        content = outputs[name]
        seq = "rows" if "rows" in content else "lines" if "lines" in content else None
        if seq is None:
            parts.append(f" {line(name)}: {line(content)}")
            continue
        head = {k: v for k, v in content.items() if k != seq}
        body = ",\n".join(f"  {line(item)}" for item in content[seq])
        parts.append(f" {line(name)}: {line(head)[:-1]}{', ' if head else ''}"
                     f"{line(seq)}: [\n{body}\n ]}}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def golden_path(asset: str, partition: str) -> Path:
    """``golden/<asset>.json``, or ``golden/<asset>/<partition key>.json``."""
    return GOLDEN / asset / f"{partition}.json" if partition else GOLDEN / f"{asset}.json"


def check_asset(built: Built, asset: str, partition: str, tmp_path: Path) -> None:
    """Run ``asset`` alone on its upstream files under ``tmp_path`` and make the three
    checks of the module docstring (declared files, golden, whole-run file)."""
    out = tmp_path / "output"
    out.mkdir()
    upstream_state(built, asset, partition, out)
    log = run_alone(built, asset, partition, out)
    folder = quote(partition, safe="")
    paths = {name: p.replace("{partition}", folder) for name, p in OUTPUTS[asset].items()}

    # 1. the files it writes are the declared ones (LanceDB tables: written, not via storage)
    written = set(log.by_path())
    declared = {p for p in paths.values() if not (p.startswith(f"{LANCEDB}/")
                                                  and not Path(p).suffix)}
    assert written == declared, (f"undeclared: {sorted(written - declared)}, "
                                 f"not written: {sorted(declared - written)}")
    actual = {name: normalize_file(out, p) for name, p in paths.items()}
    assert not [n for n, v in actual.items() if v.get("missing")]

    # 2. the same content as its golden
    gpath = golden_path(asset, partition)
    if REGEN:
        gpath.parent.mkdir(parents=True, exist_ok=True)
        gpath.write_text(dump_golden(actual), encoding="utf-8")
    assert gpath.exists(), f"no golden {gpath}: regenerate with KGLOOM_REGEN_GOLDEN=1"
    golden = json.loads(gpath.read_text("utf-8"))
    assert sorted(actual) == sorted(golden), "outputs differ from the golden's"
    diff = [d for name in sorted(actual) for d in differences(actual[name], golden[name], name)]
    assert not diff, f"{asset} [{partition}] differs from {gpath.name}:\n" + "\n".join(diff)

    # 3. what it was the last to write in the whole run is that run's file
    last = {}
    for w in built.log.writes:
        if w.writer != "-":
            last[w.path] = w.writer
    for name, p in paths.items():
        if last.get(p, asset if p.startswith(f"{LANCEDB}/") else None) == asset:
            diff = differences(_drop_cache_state(actual[name]),
                               _drop_cache_state(normalize_file(built.out, p)), name)
            assert not diff, f"{p}: run alone differs from the whole run:\n" + "\n".join(diff)


@pytest.mark.parametrize("partition", KEYS)
@pytest.mark.parametrize("asset", PARTITIONED)
def test_partitioned_asset_alone_matches_golden(built, asset, partition, tmp_path):
    check_asset(built, asset, partition, tmp_path)


@pytest.mark.parametrize("asset", [a for a in ASSETS if a not in PARTITIONED])
def test_graph_asset_alone_matches_golden(built, asset, tmp_path):
    check_asset(built, asset, "", tmp_path)


def test_every_asset_of_the_graph_is_tested_alone():
    """A new asset (e.g. issue 14's ``corpus``) gets its OUTPUTS entry and golden."""
    assert {a.op.name for a in ALL_ASSETS} == set(ASSETS) == set(OUTPUTS)


def test_golden_tables_have_rows():
    """The goldens hold content worth comparing: the fixture yields rows in every table
    of the graph (an empty golden would let an asset that writes nothing pass)."""
    expect_rows: dict[str, list[str]] = {
        "corpus": ["corpus_documents", "corpus_text_units", "corpus_entity_mentions",
                   "corpus_relationship_mentions"],
        "vector_index": ["lancedb_text_units", "lancedb_entities",
                         "lancedb_community_reports"]}
    for stage in layout.STAGES.values():  # every published table of the registry
        for table, level in stage.tables:
            if level is Level.PUBLISHED:
                expect_rows.setdefault(stage.asset, []).append(_table_name(table, level))
    for asset, names in expect_rows.items():
        golden = json.loads(golden_path(asset, "").read_text("utf-8"))
        for name in names:
            assert golden[name]["rows"], (asset, name)
    for key in ("fezziwig.md", "marley.txt"):
        g = json.loads(golden_path("extracted_graph", key).read_text("utf-8"))
        assert g["entity_mentions"]["rows"] and g["claim_mentions"]["rows"], key


def test_normalization_catches_a_changed_cell():
    """The comparison is a hard check: one changed value, one missing row or one
    changed dtype is a difference; row order is not."""
    df = pl.DataFrame({"id": ["a", "b"], "w": [1.0, 2.0], "ids": [["x"], ["y", "z"]]})
    base = normalize_table(df)
    assert not differences(normalize_table(df.reverse()), base)
    assert differences(normalize_table(df.with_columns(w=pl.Series([1.0, 2.5]))), base)
    assert differences(normalize_table(df.head(1)), base)
    assert differences(normalize_table(df.with_columns(pl.col("w").cast(pl.Float32))), base)
    assert differences(normalize_table(df.with_columns(ids=pl.Series([["x"], ["z", "y"]]))),
                       base)


# --------------------------------------------------------------------------------------
# writes per file in one whole index run (issue 14: one write per file per run)
# --------------------------------------------------------------------------------------

def _rewritten(built: Built) -> dict[str, list[str]]:
    return {p: w for p, w in built.log.by_path().items() if len(w) > 1}


def test_each_file_is_written_once_per_index_run(built):
    """Issue 14's figure: one write per file per run (each file has one writing asset)."""
    rewritten = _rewritten(built)
    assert not rewritten, "written more than once in one run: " + json.dumps(rewritten)


def test_the_stage_registry_names_every_asset_and_its_keys():
    """kgloom.core.layout.STAGES is the graph's one list: its ops are the asset modules'
    assets in the order ALL_ASSETS loads them, each op's asset keys are the registry's,
    and the partitioned ops are exactly the partitioned assets. (OUTPUTS, derived from it,
    is checked against the files a run writes by the tests above and below.)"""
    assert [a.op.name for a in ALL_ASSETS] == list(layout.ASSET_OPS)
    keys = {op: tuple(k.to_user_string() for k in ASSETS[op].keys) for op in ASSETS}
    assert {op: sorted(k) for op, k in keys.items()} == \
        {op: sorted(k) for op, k in layout.ASSET_KEYS.items()}
    for stage in layout.STAGES.values():
        assert bool(ASSETS[stage.asset].partitions_def) == (stage.level is Level.PARTITION)
    assert [k for op in layout.ASSET_OPS for k in layout.ASSET_KEYS[op]] == \
        [*layout.PARTITIONED_ASSETS, *layout.GRAPH_ASSETS]


def test_every_output_file_is_written_atomically_by_a_declaring_asset(built):
    """Every file of the output folder but the LanceDB tables and the LLM and embedding
    caches went through kgloom.core.storage's atomic write during the run, from inside an
    asset step (the writer lock's note aside), and OUTPUTS declares it for that asset."""
    by_path = built.log.by_path()
    files = {p.relative_to(built.out).as_posix() for p in built.out.rglob("*") if p.is_file()}
    other = {f for f in files if (f.startswith(f"{LANCEDB}/") and ".lance/" in f)
             or f.startswith((LLM_CACHE, EMBEDDING_CACHE))
             or Path(f).name in (HOLDER_FILE, ".kgloom.lock")
             or f.startswith(f"{BUILDS_DIR}/")}  # links to published files (kgloom.core.builds)
    assert files - other == set(by_path)
    declared = {(a, p) for a, names in OUTPUTS.items() for p in names.values()}
    for p, writers in by_path.items():
        for w in writers:
            assert (w, template(p)) in declared, (p, w)


def test_the_entities_stage_embeds_only_for_the_resolution_embedding_pass(tmp_path,
                                                                          _no_kgloom_env):
    """Extractive summaries rank descriptions by TF-IDF (``summaries.centroid_scores``):
    without resolution's embedding pass the entities stage loads no embedder and embeds
    nothing, while the summaries still rank their descriptions. (It once loaded the
    embedder for the summaries alone.)"""
    inp, out = _input_copy(tmp_path), tmp_path / "output"
    methods = ["normalized", "name_extension", "name_context"]
    _, report = index_folder(build_resources(str(inp), str(out), fake_llm=True,
                                             resolution_methods=methods, **SETTINGS),
                             dg.DagsterInstance.ephemeral(), reports=False)
    assert report.success, report
    stats = json.loads((out / layout.STAGES_DIR / "entities.stats.json").read_text())
    summaries = json.loads((out / layout.STAGES_DIR / "summaries.stats.json").read_text())
    assert summaries["summarized_items"] > 0 and summaries["summary_texts"] > 0
    assert stats["embedding_cache"] == {"hits": 0, "misses": 0}
    assert not stats.get("embedder_seconds") and "embedder_threads" not in stats
