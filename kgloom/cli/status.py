"""``kgloom status``: what is materialized, stale or failed, read from the Dagster
instance and the input folder (nothing is changed)."""

from __future__ import annotations

import datetime as dt

import dagster as dg

from kgloom.core.inputs import scan_inputs
from kgloom.corpus.partitions import diff_inputs, manifest_hashes
from kgloom.pipelines.input_files import live_partition_keys
from kgloom.pipelines.recovery import in_flight_runs


def _utc(ts: float | None) -> str | None:
    return (dt.datetime.fromtimestamp(ts, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
            if ts else None)


def index_status(instance: dg.DagsterInstance, input_dir: str, output_dir: str,
                 failed_runs_limit: int = 5) -> dict:
    """Return ``{"inputs": InputDiff.as_dict(), "skipped": [...], "assets": [...],
    "in_flight_runs": [...], "failed_runs": [...]}``.

    ``skipped`` are the input folder's entries left out for safety (symlinks leading
    outside it), as the failures rows indexing records for them
    (:func:`kgloom.core.inputs.scan_inputs`).

    ``in_flight_runs`` are the queued and unfinished runs with their age and whether
    their process still lives (:func:`kgloom.pipelines.recovery.in_flight_runs`).

    Each asset row: ``asset``, ``state`` (``ok``, ``stale``, ``missing`` or ``failed``),
    ``last`` (UTC time of its latest materialization) and ``detail``. An unpartitioned
    asset is stale when an upstream asset was materialized after it or an input file
    was added, changed or deleted since the partitions were built; a partitioned one
    when some live partition has no materialization or its file changed. ``failed``
    means a run that targeted the asset failed after its latest materialization.
    """
    from kgloom.definitions import defs

    graph = defs.resolve_asset_graph()
    try:
        current, skipped = scan_inputs(input_dir)
    except FileNotFoundError:
        current, skipped = {}, []
    diff = diff_inputs(manifest_hashes(output_dir), current)
    live = set(live_partition_keys(instance))
    failed = [r for r in instance.get_run_records(
        filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]), limit=50)]
    last: dict[dg.AssetKey, float | None] = {}
    keys = list(graph.toposorted_asset_keys)
    for key in keys:
        ev = instance.get_latest_materialization_event(key)
        last[key] = ev.timestamp if ev else None
    rows = [_asset_row(instance, graph.get(key), key, last, live, diff, failed)
            for key in keys]
    runs = [{"run_id": r.dagster_run.run_id, "job": r.dagster_run.job_name,
             "assets": sorted(k.to_user_string() for k in r.dagster_run.asset_selection or []),
             "partition": r.dagster_run.tags.get("dagster/partition"),
             "ended": _utc(r.end_time)} for r in failed[:failed_runs_limit]]
    return {"inputs": diff.as_dict(), "skipped": skipped, "assets": rows,
            "in_flight_runs": in_flight_runs(instance), "failed_runs": runs}


def _asset_row(instance: dg.DagsterInstance, node, key: dg.AssetKey,
               last: dict[dg.AssetKey, float | None], live: set[str], diff,
               failed: list) -> dict:
    """One asset's row of :func:`index_status`: its state from :func:`_asset_state`, or
    ``failed`` when a run that targeted it failed after its latest materialization."""
    state, detail = _asset_state(instance, node, key, last, live, diff)
    for rec in failed:
        sel = rec.dagster_run.asset_selection or set()
        if key in sel and rec.end_time and (last[key] or 0) < rec.end_time:
            state, detail = "failed", f"run {rec.dagster_run.run_id[:8]} failed"
            break
    return {"asset": key.to_user_string(), "state": state, "last": _utc(last[key]),
            "detail": detail}


def _asset_state(instance: dg.DagsterInstance, node, key: dg.AssetKey,
                 last: dict[dg.AssetKey, float | None], live: set[str],
                 diff) -> tuple[str, str]:
    """(state, detail) of one asset against its materializations (``last``: each asset's
    latest, a timestamp or None), the live partitions and the input files' ``diff``:
    ``missing``, ``stale`` or ``ok`` (:func:`index_status` says when each applies)."""
    mine = last[key]
    if mine is None:
        return "missing", "never materialized"
    if node.is_partitioned:
        done = set(instance.get_materialized_partitions(key)) & live
        todo = sorted(live - done)
        if todo or diff.added or diff.changed:
            return "stale", f"{len(done)}/{len(live)} partitions; to run: " + ", ".join(
                sorted(set(todo) | set(diff.added) | set(diff.changed)))[:120]
        return "ok", f"{len(done)}/{len(live)} partitions"
    newer = [p.to_user_string() for p in node.parent_keys
             if (theirs := last.get(p)) and theirs > mine]
    if newer or diff.added or diff.changed or diff.deleted:
        return "stale", (("newer upstream: " + ", ".join(sorted(newer))) if newer else
                         "input files changed since the last build")
    return "ok", ""
