"""Per-stage statistics files and the index summary (no Dagster).

Every stage writes ``<output>/stages/<stage>.stats.json`` (wall seconds, LLM counters,
embedder seconds, row counts); :func:`build_index_summary` folds them, with the row count
of every emitted table, into ``index-summary.json``, including the cost table of
:func:`cost_table`: per stage, wall seconds, seconds inside the models (the LLM's calls
and the embedder's forward passes), their share of the wall time, and the LLM's calls
and tokens.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from kgloom.core import schemas
from kgloom.core.layout import PARTITIONS_DIR, STATS_SUFFIX, partition_dir, stages_dir
from kgloom.core.storage import parquet_rows, table_path, write_json

SUMMARY_TABLES = [schemas.DOCUMENTS, schemas.TEXT_UNITS, schemas.ENTITIES, schemas.RELATIONSHIPS,
                  schemas.ENTITY_ALIASES, schemas.COVARIATES, schemas.COMMUNITIES,
                  schemas.GRAPH_STATS, schemas.COMMUNITY_REPORTS,
                  schemas.GRAPH_NODES, schemas.GRAPH_EDGES, schemas.FAILURES]


def write_stage_stats(output_dir: str | Path, stage: str, seconds: float,
                      llm: dict | None = None, partition: str | None = None,
                      embedder_seconds: float = 0.0, part_of: str | None = None,
                      **counts) -> dict:
    """Write ``<folder>/<stage>.stats.json``, the folder being partition ``partition``'s
    (:func:`kgloom.core.layout.partition_dir`) for a partitioned stage, else the corpus level
    ``<output_dir>/stages``:
    ``seconds`` (wall-clock), ``llm`` (a ``StageStats.as_dict()``), ``embedder_seconds``
    (inside the embedder's forward passes), ``part_of`` (the stage whose wall time
    includes this one, e.g. ``summaries`` in ``entities``; None for a top-level stage),
    ``finished_at`` (Unix time) and any counts; return the dict.

    Raises:
        kgloom.core.layout.PartitionKeyError: a malformed partition key.
    """
    stats = {"stage": stage, "seconds": round(seconds, 2), "llm": llm or {},
             "embedder_seconds": round(embedder_seconds, 3), "finished_at": round(time.time(), 3),
             **({"part_of": part_of} if part_of else {}), **counts}
    stats["cost"] = stage_cost(stats)
    folder = partition_dir(output_dir, partition) if partition else stages_dir(output_dir)
    write_json(stats, folder / f"{stage}{STATS_SUFFIX}")
    return stats


COST_FIELDS = ("wall_seconds", "model_seconds", "model_share", "llm_seconds",
               "embedder_seconds", "embedder_load_seconds", "llm_prompt_seconds",
               "llm_decode_seconds", "llm_outside_seconds", "calls", "cache_hits",
               "prompt_tokens", "completion_tokens")


def stage_cost(stats: dict) -> dict:
    """The cost of one stage from its stats dict (see :func:`write_stage_stats`).

    Returns a dict with the keys of ``COST_FIELDS``: ``wall_seconds``; ``llm_seconds``
    (time in LLM calls), split into ``llm_prompt_seconds`` and ``llm_decode_seconds``
    (llama.cpp's own timings) and ``llm_outside_seconds`` (the rest of the calls:
    sampling, grammar, Python); ``embedder_seconds`` (forward passes, plus the embedder's
    one-time load, ~5 s on 2 cores: importing sentence-transformers with transformers and
    torch and reading the weights, on the stage that loaded it), of which
    ``embedder_load_seconds`` is that load; ``model_seconds`` = LLM + embedder seconds;
    ``model_share`` = model seconds / wall seconds (0 for a stage without wall time;
    above 1 only if a stage's wall time was taken over less than its model work); the
    LLM's ``calls`` (that reached the model), ``cache_hits``, ``prompt_tokens`` and
    ``completion_tokens``.
    """
    llm = stats.get("llm") or {}
    wall = float(stats.get("seconds", 0.0))
    llm_s = float(llm.get("seconds", 0.0))
    emb = float(stats.get("embedder_seconds", 0.0))
    prompt = float(llm.get("prompt_seconds", 0.0))
    decode = float(llm.get("generation_seconds", 0.0))
    return {"wall_seconds": round(wall, 2), "model_seconds": round(llm_s + emb, 2),
            "model_share": round((llm_s + emb) / wall, 4) if wall > 0 else 0.0,
            "llm_seconds": round(llm_s, 2), "embedder_seconds": round(emb, 2),
            "embedder_load_seconds": round(float(stats.get("embedder_load_seconds", 0.0)), 2),
            "llm_prompt_seconds": round(prompt, 2), "llm_decode_seconds": round(decode, 2),
            "llm_outside_seconds": round(max(0.0, llm_s - prompt - decode), 2)
            if prompt + decode else 0.0,
            "calls": int(llm.get("calls", 0)), "cache_hits": int(llm.get("cache_hits", 0)),
            "prompt_tokens": int(llm.get("prompt_tokens", 0)),
            "completion_tokens": int(llm.get("completion_tokens", 0))}


def cost_table(stats: dict[str, dict]) -> dict:
    """Per-stage costs (:func:`stage_cost`) and their total over the top-level stages.

    Args:
        stats: :func:`read_stage_stats`'s result.

    Returns:
        ``{"stages": {stage: cost}, "total": cost}``; ``total`` sums the stages without
        ``part_of`` (a part's wall and model time are already inside its parent's), and
        its ``model_share`` is total model seconds / total wall seconds of the stages
        (the time between stages, e.g. process start and Dagster's own work, is not in
        it: ``kgloom index`` prints the share of its whole run as well).
    """
    stages = {k: {**stage_cost(v), **({"part_of": v["part_of"]} if v.get("part_of") else {})}
              for k, v in stats.items()}
    total = {f: 0.0 for f in COST_FIELDS}
    for c in stages.values():
        if "part_of" not in c:
            for f in COST_FIELDS:
                total[f] += c[f]
    total = {f: round(v, 2) if isinstance(v, float) else v for f, v in total.items()}
    for f in ("calls", "cache_hits", "prompt_tokens", "completion_tokens"):
        total[f] = int(total[f])
    total["model_share"] = (round(total["model_seconds"] / total["wall_seconds"], 4)
                            if total["wall_seconds"] else 0.0)
    return {"stages": stages, "total": total}


def cost_markdown(cost: dict) -> str:
    """A markdown table of :func:`cost_table`'s result (asset metadata, CLI)."""
    head = ("| stage | wall s | model s | model share | LLM s (prompt / decode / outside) "
            "| embedder s | calls | prompt tok | completion tok |")
    lines = [head, "|" + "---|" * 9]
    rows = list(cost["stages"].items()) + [("total", cost["total"])]
    for name, c in rows:
        label = f"{name} (in {c['part_of']})" if c.get("part_of") else name
        lines.append(
            f"| {label} | {c['wall_seconds']:.1f} | {c['model_seconds']:.1f} | "
            f"{c['model_share']:.0%} | {c['llm_seconds']:.1f} ({c['llm_prompt_seconds']:.1f} / "
            f"{c['llm_decode_seconds']:.1f} / {c['llm_outside_seconds']:.1f}) | "
            f"{c['embedder_seconds']:.1f} | {c['calls']} | {c['prompt_tokens']} | "
            f"{c['completion_tokens']} |")
    return "\n".join(lines)


def _add(total: dict, part: dict) -> dict:
    """Sum the numeric fields of two stats dicts (recursively); keep total's others."""
    out = dict(total)
    for k, v in part.items():
        if isinstance(v, bool) or k in ("stage", "cost"):  # cost: recomputed from the sums
            continue
        if k == "finished_at":
            out[k] = max(out.get(k, 0.0), v)
            continue
        if k == "llm_backend":  # settings, not counters
            out[k] = v
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
    for p in sorted(sd.glob(f"*{STATS_SUFFIX}")):
        d = json.loads(p.read_text())
        out[d["stage"]] = d
    summed: dict[str, dict] = {}
    for p in sorted(sd.glob(f"{PARTITIONS_DIR}/*/*{STATS_SUFFIX}")):
        d = json.loads(p.read_text())
        summed[d["stage"]] = _add(summed.get(d["stage"], {"stage": d["stage"]}),
                                  {**d, "partitions": 1})
    for d in summed.values():
        d["cost"] = stage_cost(d)
    out.update(summed)  # a partitioned stage's sum replaces any pre-partition file
    return out


def build_index_summary(output_dir: str | Path, method: str = "standard") -> dict:
    """Return the index summary: the index ``method`` that built it (``standard`` or
    ``fast``, :class:`kgloom.settings.indexing.IndexSettings`), rows per emitted table, seconds per
    stage, the cost table (:func:`cost_table`: wall and model seconds, model share, LLM
    calls and tokens per stage and in total), the LLM backend's settings (``llm_backend``:
    threads, batch sizes, flash attention, context size, sampler; from the stages that
    ran the model),
    LLM counters per stage and in total (calls, cache hits, prompt and completion tokens).

    Counters are those of each stage's latest materialization; for a partitioned stage
    (documents, text_units, extraction) the sum over the stored partitions' latest
    materializations, so partitions an incremental run skipped still count the calls
    that built them. ``kgloom index`` prints the calls of its own run separately.
    """
    stats = read_stage_stats(output_dir)
    rows = {name: parquet_rows(table_path(output_dir, name))
            for name in SUMMARY_TABLES if table_path(output_dir, name).exists()}
    llm = {k: v["llm"] for k, v in stats.items() if v.get("llm")}
    backend = next((v["llm_backend"] for k, v in sorted(stats.items())
                    if v.get("llm_backend")), {})
    return {
        "method": method,
        "rows": rows,
        "seconds_per_stage": {k: v["seconds"] for k, v in stats.items()},
        "cost": cost_table(stats),
        "llm_backend": backend,
        "llm": llm,
        "llm_calls": sum(v.get("calls", 0) for v in llm.values()),
        "llm_cache_hits": sum(v.get("cache_hits", 0) for v in llm.values()),
        "prompt_tokens": sum(v.get("prompt_tokens", 0) for v in llm.values()),
        "completion_tokens": sum(v.get("completion_tokens", 0) for v in llm.values()),
        "stages": stats,
    }
