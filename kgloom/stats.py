"""Per-stage statistics files and the index summary (no Dagster).

Every stage writes ``<output>/stages/<stage>.stats.json`` (wall seconds, LLM counters,
row counts); :func:`build_index_summary` folds them, with the row count of every emitted
table, into ``index-summary.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from kgloom import schemas
from kgloom.storage import table_path, write_json

STAGES_DIR = "stages"  # intermediate tables and per-stage stats, under the output folder
SUMMARY_TABLES = [schemas.DOCUMENTS, schemas.TEXT_UNITS, schemas.ENTITIES, schemas.RELATIONSHIPS,
                  schemas.ENTITY_ALIASES, schemas.COVARIATES, schemas.COMMUNITIES,
                  schemas.COMMUNITY_REPORTS,
                  schemas.GRAPH_NODES, schemas.GRAPH_EDGES, schemas.FAILURES]


def stages_dir(output_dir: str | Path) -> Path:
    """Return ``<output_dir>/stages`` (created)."""
    p = Path(output_dir) / STAGES_DIR
    p.mkdir(parents=True, exist_ok=True)
    return p


def write_stage_stats(output_dir: str | Path, stage: str, seconds: float,
                      llm: dict | None = None, folder: str | Path | None = None,
                      **counts) -> dict:
    """Write ``<folder>/<stage>.stats.json`` (default folder: ``<output_dir>/stages``):
    ``seconds`` (wall-clock), ``llm`` (a ``StageStats.as_dict()``) and any counts;
    return the dict. Partitioned stages pass their partition's folder."""
    stats = {"stage": stage, "seconds": round(seconds, 2), "llm": llm or {}, **counts}
    write_json(stats, Path(folder or stages_dir(output_dir)) / f"{stage}.stats.json")
    return stats


def _add(total: dict, part: dict) -> dict:
    """Sum the numeric fields of two stats dicts (recursively); keep total's others."""
    out = dict(total)
    for k, v in part.items():
        if isinstance(v, bool) or k == "stage":
            continue
        if isinstance(v, (int, float)):
            out[k] = round(out.get(k, 0) + v, 4)
        elif isinstance(v, dict):
            out[k] = _add(out.get(k) or {}, v)
    return out


def read_stage_stats(output_dir: str | Path) -> dict[str, dict]:
    """Return the stats of every stage keyed by stage name: ``stages/*.stats.json`` of
    the graph-wide stages, and for each partitioned stage the sum of its partitions'
    ``stages/partitions/*/<stage>.stats.json`` (seconds, counts and LLM counters of each
    partition's latest materialization; derived rates are recomputed per partition, so
    only the additive fields are meaningful in the sum)."""
    sd = stages_dir(output_dir)
    out: dict[str, dict] = {}
    for p in sorted(sd.glob("*.stats.json")):
        d = json.loads(p.read_text())
        out[d["stage"]] = d
    summed: dict[str, dict] = {}
    for p in sorted(sd.glob("partitions/*/*.stats.json")):
        d = json.loads(p.read_text())
        summed[d["stage"]] = _add(summed.get(d["stage"], {"stage": d["stage"]}),
                                  {**d, "partitions": 1})
    out.update(summed)  # a partitioned stage's sum replaces any pre-partition file
    return out


def build_index_summary(output_dir: str | Path) -> dict:
    """Return the index summary: rows per emitted table, seconds per stage, LLM counters
    per stage and in total (calls, cache hits, prompt and completion tokens).

    Counters are those of each stage's latest materialization; for a partitioned stage
    (documents, text_units, extraction) the sum over the stored partitions' latest
    materializations, so partitions an incremental run skipped still count the calls
    that built them. ``kgloom index`` prints the calls of its own run separately.
    """
    stats = read_stage_stats(output_dir)
    rows = {name: pl.scan_parquet(table_path(output_dir, name)).select(pl.len()).collect().item()
            for name in SUMMARY_TABLES if table_path(output_dir, name).exists()}
    llm = {k: v["llm"] for k, v in stats.items() if v.get("llm")}
    return {
        "rows": rows,
        "seconds_per_stage": {k: v["seconds"] for k, v in stats.items()},
        "llm": llm,
        "llm_calls": sum(v.get("calls", 0) for v in llm.values()),
        "llm_cache_hits": sum(v.get("cache_hits", 0) for v in llm.values()),
        "prompt_tokens": sum(v.get("prompt_tokens", 0) for v in llm.values()),
        "completion_tokens": sum(v.get("completion_tokens", 0) for v in llm.values()),
        "stages": stats,
    }
