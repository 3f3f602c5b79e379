"""Per-input-file partitions of the index (no Dagster here).

One partition per input file: its key is the file's path relative to the input folder,
in POSIX form (``book.txt``, ``letters/1843.jsonl``); a JSONL or CSV file holds many
documents but is one partition. The partitioned stages (documents, text_units,
extraction) write their tables under ``<output>/stages/partitions/<quoted key>/``; the
whole folder belongs to that partition alone, so materializing a partition again
replaces exactly its own files (idempotent) and deleting it removes its contribution.

Provenance: every text unit belongs to one document of one partition, and every entity
or relationship mention carries its text unit id, so the graph-wide stages, which rebuild
entities, relationships, communities and reports from the mentions of the *live*
partitions (:func:`read_partitions`), drop a deleted file's contribution by construction.

Change detection (:func:`diff_inputs`) compares each file's SHA-256 with the one recorded
when its partition was last materialized (``manifest.json``) or with a sensor cursor.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import polars as pl

from kgloom.core import schemas
from kgloom.core.ids import content_id, file_sha256
from kgloom.core.inputs import input_path, refused_inputs, valid_key
from kgloom.core.layout import (
    CLAIMS,
    DOCUMENTS,
    EXTRACTION,
    PARTITION_STAGES,
    PARTITIONS_DIR,
    STAGES_DIR,
    partition_dir,
    partitions_root,
    stages_dir,
    stored_partitions,
)
from kgloom.core.layout import MANIFEST_FILE as MANIFEST
from kgloom.core.schemas import UNIT_STATUS, UNIT_STATUS_SCHEMA
from kgloom.core.storage import failures_frame, read_parquet, write_json, write_table
from kgloom.settings.indexing import IndexSettings

# the partition-level stages in order; each writes its own marker file in the folder

def _marker(output_dir: str | Path, key: str, stage: str) -> Path:
    # not partition_dir: reading a refused key's leftover folder must not raise
    return (Path(output_dir) / STAGES_DIR / PARTITIONS_DIR / quote(key, safe="")
            / f"{stage}.{MANIFEST}")


def read_manifest(output_dir: str | Path, key: str) -> dict:
    """Return partition ``key``'s manifest ({} when it has none): ``key``, ``stages``
    (the finished stages, in order) and the fields each stage recorded (``sha256`` of the
    input file from ``documents``, ``settings`` from ``extraction``).

    Each stage writes its own marker (:func:`mark_stage`), naming the build of the stage
    before it; a stage counts as finished only while that chain holds, so re-running
    ``documents`` makes the later stages unfinished without touching their files. A
    folder written by an older kgloom (one ``manifest.json``) is read as it is.
    """
    markers = [_marker(output_dir, key, st) for st in PARTITION_STAGES]
    if not markers[0].exists():
        old = markers[0].parent / MANIFEST
        return json.loads(old.read_text()) if old.exists() else {}
    out: dict = {"key": key, "stages": []}
    before = None
    for stage, path in zip(PARTITION_STAGES, markers):
        m = json.loads(path.read_text()) if path.exists() else None
        if m is None or m.get("after") != before:
            break
        out.update({k: v for k, v in m.items() if k not in ("after", "build", "stage")})
        out["stages"].append(stage)
        before = m["build"]
    out["key"] = key
    return out


def mark_stage(output_dir: str | Path, key: str, stage: str, **fields) -> dict:
    """Record that ``stage`` (one of :data:`PARTITION_STAGES`) of partition ``key``
    finished, with ``fields`` (``documents`` passes ``sha256``: the input file's hash,
    None when the file was missing). Writes ``<stage>.manifest.json`` in the partition
    folder (atomically; only this stage's asset writes it), holding a new build id and
    the build id of the stage before it. Returns the partition's manifest after it
    (:func:`read_manifest`).

    Raises:
        ValueError: for a stage not in :data:`PARTITION_STAGES`.
    """
    import uuid

    if stage not in PARTITION_STAGES:
        raise ValueError(f"unknown partition stage {stage!r}; known: {PARTITION_STAGES}")
    i = PARTITION_STAGES.index(stage)
    after = None
    if i:
        prev = _marker(output_dir, key, PARTITION_STAGES[i - 1])
        after = json.loads(prev.read_text()).get("build") if prev.exists() else None
    write_json({**fields, "stage": stage, "build": uuid.uuid4().hex, "after": after},
               partition_dir(output_dir, key) / f"{stage}.{MANIFEST}")
    return read_manifest(output_dir, key)


# the settings that change what a partition's stages produce
PARTITION_SETTINGS = ("method", "cooccurrence_window", "cooccurrence_max_pairs",
                      "record_edges", "chunk_size", "chunk_overlap", "entity_types",
                      "max_relationships_per_unit", "max_gleanings", "extract_claims",
                      "llm_descriptions",
                      "co_mention_edges", "co_mention_strength", "seed",
                      "cut_boilerplate", "candidate_source", "title_candidates",
                      "extraction_text", "type_cued_names")
# settings added later: in the fingerprint only when they differ from their default, so
# the partitions an index built before they existed stay valid while they are unset
LATER_PARTITION_SETTINGS = ("extraction_pack_tokens",)


def settings_fingerprint(settings: IndexSettings, model_id: str) -> str:
    """Return a hex SHA-256 of the model id, the :data:`PARTITION_SETTINGS` fields and the
    :data:`LATER_PARTITION_SETTINGS` set to other than their default: a partition built
    under another fingerprint must be rebuilt."""
    later = [f"{f}={getattr(settings, f)!r}" for f in LATER_PARTITION_SETTINGS
             if getattr(settings, f) != IndexSettings.model_fields[f].default]
    return content_id("partition-settings", model_id,
                      *(repr(getattr(settings, f)) for f in PARTITION_SETTINGS), *later)


def code_fingerprint() -> str:
    """Return a hex SHA-256 of kgloom's own source files (``kgloom/**/*.py``): any code
    change, e.g. an edited prompt, makes the graph-wide stages run again."""
    root = Path(__file__).resolve().parent.parent  # kgloom/
    return content_id("code", *(f"{p.relative_to(root)}:{file_sha256(str(p))}"
                                for p in sorted(root.rglob("*.py"))))


def graph_inputs_fingerprint(output_dir: str | Path, live_keys: list[str],
                             settings: IndexSettings, model_id: str, embedder: str) -> str:
    """Return a hex SHA-256 of everything the graph-wide stages read: the live partitions
    with their manifests in ``output_dir`` (input SHA-256, settings fingerprint and
    finished stages), every setting, the LLM's identity (``model_id``, e.g. the GGUF
    SHA-256), the embedder (``embedder``: its model folder, empty for the bundled one)
    and kgloom's code (:func:`code_fingerprint`). Equal fingerprints mean a graph refresh
    would recompute the same tables, so it can be skipped. The folder's path is not part
    of it: an index moved or copied elsewhere, with its instance
    (:mod:`kgloom.pipelines.instance`), is still up to date."""
    parts = [json.dumps({k: read_manifest(output_dir, k) for k in sorted(live_keys)},
                        sort_keys=True)]
    return content_id("graph-inputs", *parts, repr(settings), model_id, embedder,
                      code_fingerprint())


def manifest_hashes(output_dir: str | Path,
                    settings: str | None = None) -> dict[str, str | None]:
    """Return {partition key: input SHA-256} for every stored partition whose last stage
    (extraction) completed after its documents were read, and, when ``settings`` (a
    :func:`settings_fingerprint`) is given, under those settings; any other partition
    maps to None, so it counts as changed."""
    out: dict[str, str | None] = {}
    for key in stored_partitions(output_dir):
        m = read_manifest(output_dir, key)
        done = EXTRACTION in m.get("stages", [])
        same = settings is None or m.get("settings") == settings
        out[key] = m.get("sha256") if done and same else None
    return out


@dataclass
class InputDiff:
    """What changed in the input folder relative to a previous state (keys sorted)."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    # entries of the input folder left out for safety (symlinks leading outside it), as
    # failures rows (:func:`scan_inputs`); filled by ``sync_partitions``
    skipped: list[dict] = field(default_factory=list)

    @property
    def to_materialize(self) -> list[str]:
        """Partitions whose stages must run: added and changed files."""
        return sorted(self.added + self.changed)

    def as_dict(self) -> dict[str, list[str]]:
        """Return the four key lists as a dict."""
        return {"added": self.added, "changed": self.changed, "deleted": self.deleted,
                "unchanged": self.unchanged}


def diff_inputs(previous: dict[str, str | None], current: dict[str, str]) -> InputDiff:
    """Compare two {partition key: SHA-256} maps (e.g. manifests or a sensor cursor,
    and :func:`input_hashes`). Returns an :class:`InputDiff`."""
    return InputDiff(
        added=sorted(k for k in current if k not in previous),
        changed=sorted(k for k in current if k in previous and previous[k] != current[k]),
        deleted=sorted(k for k in previous if k not in current),
        unchanged=sorted(k for k in current if previous.get(k) == current[k]))


def remove_partitions(output_dir: str | Path, keep: set[str] | list[str],
                      input_dir: str | Path) -> list[str]:
    """Delete the folders of stored partitions that are not in ``keep`` and whose input
    file is gone from ``input_dir``, and of every stored partition whose key is refused
    (:func:`input_path`: e.g. ``../secret.txt``, in ``keep`` or not); return their keys.

    This is how a deleted input file's documents, text units and mentions leave the index:
    the graph-wide stages then rebuild without them. A partition whose file still exists
    is never deleted here, even when ``keep`` lacks it (e.g. an instance that has not
    registered it yet), so no finished extraction is thrown away by mistake.
    """
    keep = set(keep)
    gone = [k for k in stored_partitions(output_dir)
            if not valid_key(input_dir, k)
            or (k not in keep and not input_path(input_dir, k).exists())]
    for key in gone:
        shutil.rmtree(partitions_root(output_dir) / quote(key, safe=""), ignore_errors=True)
    return gone


def remove_refused_partitions(output_dir: str | Path, input_dir: str | Path) -> list[str]:
    """Delete the stored partition folders whose key :func:`input_path` refuses (e.g. one
    built from a crafted ``../secret.txt`` key by an older kgloom); return their keys."""
    refused = [k for k in stored_partitions(output_dir) if not valid_key(input_dir, k)]
    for key in refused:
        shutil.rmtree(partitions_root(output_dir) / quote(key, safe=""), ignore_errors=True)
    return refused


def read_partitions(output_dir: str | Path, keys: list[str], table: str,
                    schema: schemas.TableSchema) -> pl.DataFrame:
    """Concatenate table ``table`` of the partitions ``keys`` (in sorted key order), with
    a ``partition`` column (String) appended. Partitions not materialized yet are skipped;
    with none, an empty frame of ``schema`` plus ``partition`` is returned. A schema
    column missing from a stored table (written by an older kgloom) is read as null."""
    frames = []
    for key in sorted(keys):
        path = partitions_root(output_dir) / quote(key, safe="") / f"{table}.parquet"
        if path.exists():
            df = read_parquet(path)
            # a partition written before a column was added (e.g. documents.encoding)
            # reads it as null rather than failing the graph refresh
            df = df.with_columns(pl.lit(None, dtype=t).alias(c)
                                 for c, t in schema.items() if c not in df.columns)
            frames.append(schemas.conform(df, schema).with_columns(partition=pl.lit(key)))
    if not frames:
        return schemas.empty(schema).with_columns(partition=pl.lit(None, dtype=pl.String))
    return pl.concat(frames, how="vertical")


@dataclass
class CorpusTables:
    """The live partitions' tables, combined for the graph-wide stages."""

    documents: pl.DataFrame  # DOCUMENTS_SCHEMA, human_readable_id renumbered, text_unit_ids
    text_units: pl.DataFrame  # CORPUS_UNITS_SCHEMA, human_readable_id numbered
    entity_mentions: pl.DataFrame  # ENTITY_MENTIONS_SCHEMA
    relationship_mentions: pl.DataFrame  # RELATIONSHIP_MENTIONS_SCHEMA
    claim_mentions: pl.DataFrame  # CLAIM_MENTIONS_SCHEMA (empty unless extract_claims)
    failures: pl.DataFrame  # FAILURES_SCHEMA: documents and extraction stages
    unit_status: pl.DataFrame  # extraction status per text unit
    duplicates: int  # documents found in more than one partition (kept once)


def _only(df: pl.DataFrame, schema: schemas.TableSchema) -> pl.DataFrame:
    return schemas.conform(df, schema).select(list(schema))


def combine_partitions(output_dir: str | Path, keys: list[str]) -> CorpusTables:
    """Combine the partition tables of ``keys`` into corpus-wide tables.

    A document whose text appears in several files (same content id) is kept once, from
    the first partition in key order, together with its text units; the other copies'
    units and mentions are dropped and a failures row says so. ``human_readable_id`` is
    numbered 0..n-1 over the corpus (documents by source then title; text units in
    document then chunk order), and the documents' ``text_unit_ids`` filled.
    """
    docs = read_partitions(output_dir, keys, schemas.DOCUMENTS, schemas.DOCUMENTS_SCHEMA)
    units = read_partitions(output_dir, keys, schemas.TEXT_UNITS, schemas.CHUNKS_SCHEMA)
    em = read_partitions(output_dir, keys, schemas.ENTITY_MENTIONS,
                         schemas.ENTITY_MENTIONS_SCHEMA)
    rm = read_partitions(output_dir, keys, schemas.RELATIONSHIP_MENTIONS,
                         schemas.RELATIONSHIP_MENTIONS_SCHEMA)
    cm = read_partitions(output_dir, keys, schemas.CLAIM_MENTIONS, schemas.CLAIM_MENTIONS_SCHEMA)
    status = read_partitions(output_dir, keys, UNIT_STATUS, UNIT_STATUS_SCHEMA)
    fails = pl.concat([read_partitions(output_dir, keys, f"{schemas.FAILURES}.{stage}",
                                       schemas.FAILURES_SCHEMA)
                       for stage in (DOCUMENTS, EXTRACTION, CLAIMS)], how="vertical")
    owner = docs.unique("id", keep="first", maintain_order=True).select(
        "id", owner=pl.col("partition"))
    dup = docs.join(owner, on="id").filter(pl.col("partition") != pl.col("owner"))
    dup_failures = dup.select(
        stage=pl.lit("documents"), item_id=pl.col("source") + ":" + pl.col("title"),
        reason=pl.lit("duplicate document: same text in another input file"),
        detail=pl.lit("kept from ") + pl.col("owner"), partition=pl.col("partition"))
    unit_owner = units.join(owner, left_on="document_id", right_on="id").filter(
        pl.col("partition") == pl.col("owner")).select("id", "partition")

    def owned(df: pl.DataFrame, col: str) -> pl.DataFrame:
        return df.join(unit_owner, left_on=[col, "partition"], right_on=["id", "partition"],
                       how="semi")

    docs = docs.join(owner, on="id").filter(pl.col("partition") == pl.col("owner"))
    docs = docs.sort("source", "title").drop("human_readable_id").with_row_index(
        "human_readable_id")
    order = docs.select(pl.col("id").alias("document_id"), doc_rank=pl.col("human_readable_id"))
    units = owned(units, "id").join(order, on="document_id").sort("doc_rank", "chunk_index")
    units = units.with_row_index("human_readable_id")
    docs = with_text_unit_ids(docs, units)
    return CorpusTables(
        documents=_only(docs.with_columns(pl.col("human_readable_id").cast(pl.Int64)),
                        schemas.DOCUMENTS_SCHEMA),
        text_units=_only(units.with_columns(pl.col("human_readable_id").cast(pl.Int64)),
                         schemas.CORPUS_UNITS_SCHEMA),
        entity_mentions=_only(owned(em, "text_unit_id"), schemas.ENTITY_MENTIONS_SCHEMA),
        relationship_mentions=_only(owned(rm, "text_unit_id"),
                                    schemas.RELATIONSHIP_MENTIONS_SCHEMA),
        claim_mentions=_only(owned(cm, "text_unit_id"), schemas.CLAIM_MENTIONS_SCHEMA),
        failures=_only(pl.concat([fails, dup_failures], how="vertical_relaxed"),
                       schemas.FAILURES_SCHEMA),
        unit_status=_only(owned(status, "text_unit_id"), UNIT_STATUS_SCHEMA),
        duplicates=dup.height)


def refresh_corpus(output_dir: str | Path, live_keys: list[str],
                   input_dir: str | Path) -> tuple[CorpusTables, list[str]]:
    """Bring the corpus-wide stage tables in line with the live partitions.

    Deletes the stored partitions not in ``live_keys`` whose input file is gone, and those
    whose key is refused (:func:`remove_partitions`), then combines the live ones with a
    valid key (:func:`combine_partitions`; a refused key and a symlink leading out of
    ``input_dir`` are each a failures row, :func:`refused_inputs`) and writes,
    atomically, under
    ``<output_dir>/stages/``: documents, text_units, entity_mentions,
    relationship_mentions, claim_mentions, extraction_units, failures.documents,
    failures.extraction, failures.claims.
    These are what the graph-wide stages read.

    Returns:
        (the combined tables, the keys of the partitions removed).
    """
    removed = remove_partitions(output_dir, live_keys, input_dir)
    refused = refused_inputs(input_dir, live_keys)
    live = [k for k in live_keys if valid_key(input_dir, k)]
    corpus = combine_partitions(output_dir, live)  # unbuilt partitions are skipped
    if refused:
        corpus.failures = pl.concat([corpus.failures, failures_frame(refused)],
                                    how="vertical_relaxed")
    sd = stages_dir(output_dir)
    write_table(corpus.documents, sd, schemas.DOCUMENTS)
    write_table(corpus.text_units, sd, schemas.TEXT_UNITS)
    write_table(corpus.entity_mentions, sd, schemas.ENTITY_MENTIONS)
    write_table(corpus.relationship_mentions, sd, schemas.RELATIONSHIP_MENTIONS)
    write_table(corpus.claim_mentions, sd, schemas.CLAIM_MENTIONS)
    write_table(corpus.unit_status, sd, UNIT_STATUS)
    for stage in (DOCUMENTS, EXTRACTION, CLAIMS):
        write_table(corpus.failures.filter(pl.col("stage") == stage), sd,
                    f"{schemas.FAILURES}.{stage}")
    return corpus, removed


def with_text_unit_ids(documents: pl.DataFrame, text_units: pl.DataFrame) -> pl.DataFrame:
    """``documents`` with ``text_unit_ids`` (List[String]) filled: the ids of each
    document's text units in ``chunk_index`` order ([] for a document with none).

    Args:
        documents: frame with ``id``.
        text_units: frame with ``id``, ``document_id``, ``chunk_index``.
    """
    ids = (text_units.sort("document_id", "chunk_index")
           .group_by("document_id", maintain_order=True)
           .agg(pl.col("id").alias("unit_ids")))
    return (documents.drop("text_unit_ids", strict=False)
            .join(ids, left_on="id", right_on="document_id", how="left", maintain_order="left")
            .with_columns(text_unit_ids=pl.col("unit_ids").fill_null(
                pl.lit([], dtype=pl.List(pl.String)))).drop("unit_ids"))
