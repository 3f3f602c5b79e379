"""Runs whose process is gone: find them, mark them failed, free their pool slots.

Every run records the process that executes it in its tags
(:func:`kgloom.core.processes.process_tags`: ``kgloom/pid``, ``kgloom/pid_started``,
``kgloom/host``): the CLI passes them for its in-process runs, and the ``index`` resource
adds them in any other run worker (runs launched by the UI, the sensor or the schedule). A
run still NOT_STARTED, STARTING, STARTED or CANCELING whose process no longer exists on
this host (or whose pid now belongs to a process started later: pid reuse) cannot finish:
``kill -9``, a crash or a reboot took it. :func:`recover_dead_runs` reports such runs
failed and frees the concurrency slots they claimed (pool ``llm``), so the next run is not
blocked forever. ``kgloom index`` / ``backfill`` / ``ui`` call it on start; under ``kgloom
ui`` the run monitoring daemon does the same through
:class:`kgloom.pipelines.launcher.PidCheckingRunLauncher`.

Runs of another host, and runs without the tags, are never touched (their process
cannot be checked from here).
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass

import dagster as dg

from kgloom.core.processes import COMMAND_TAG, HOST_TAG, PID_TAG, process_alive

# runs that are not finished; QUEUED ones wait for the daemon and have no process yet
UNFINISHED = [dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
              dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]
IN_FLIGHT = [dg.DagsterRunStatus.QUEUED, *UNFINISHED]


@dataclass
class RecoveredRun:
    """A run marked failed by :func:`recover_dead_runs`."""

    run_id: str
    status: str  # its status before
    pid: str
    command: str
    age_s: float  # seconds since it was created

    def describe(self) -> str:
        """One line for the CLI."""
        return (f"run {self.run_id[:8]} ({self.command or 'dagster run'}, pid {self.pid}, "
                f"{self.status}, started {format_age(self.age_s)} ago): its process is gone; "
                "marked failed and its pool slots freed")


def format_age(seconds: float) -> str:
    """``42 s``, ``7 min``, ``3.5 h`` or ``2.0 d``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h" if seconds < 172800 else f"{seconds / 86400:.1f} d"


def _age(record) -> float:
    return max(0.0, time.time() - record.create_timestamp.timestamp())


def recover_dead_runs(instance: dg.DagsterInstance) -> list[RecoveredRun]:
    """Mark failed every unfinished run whose process is gone (see the module doc),
    free the pool slots it held or waited for, and free the slots still held by runs
    that have ended or no longer exist. Returns the runs marked failed."""
    recovered = []
    for rec in instance.get_run_records(filters=dg.RunsFilter(statuses=UNFINISHED)):
        run = rec.dagster_run
        if process_alive(run.tags) is not False:
            continue
        reason = (f"kgloom: the process of this run (pid {run.tags.get(PID_TAG)} on "
                  f"{run.tags.get(HOST_TAG)}) is gone (killed or crashed); marked failed "
                  "and its concurrency slots freed")
        instance.report_run_failed(run, reason)
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        recovered.append(RecoveredRun(run.run_id, run.status.value, run.tags.get(PID_TAG, ""),
                                      run.tags.get(COMMAND_TAG, ""), _age(rec)))
    free_slots_of_ended_runs(instance)
    return recovered


def free_slots_of_ended_runs(instance: dg.DagsterInstance) -> list[str]:
    """Free the concurrency slots (and pending claims) of runs that ended or do not
    exist; return their run ids. (Run monitoring does this after
    ``free_slots_after_run_end_seconds`` under the daemon; a CLI has no daemon.)"""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return []
    held: set[str] = set()
    for key in storage.get_concurrency_keys():
        info = storage.get_concurrency_info(key)
        held |= {s.run_id for s in info.claimed_slots}
        held |= {p.run_id for p in info.pending_steps}
    freed = []
    for run_id in sorted(held):
        run = instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            storage.free_concurrency_slots_for_run(run_id)
            freed.append(run_id)
    return freed


def in_flight_runs(instance: dg.DagsterInstance, limit: int = 50) -> list[dict]:
    """The queued and unfinished runs, newest first: ``run_id``, ``status``, ``age_s``,
    ``created`` (UTC), ``job``, ``partition``, ``command``, ``pid``, ``host`` and
    ``process`` ("running", "gone" or "unknown")."""
    rows = []
    for rec in instance.get_run_records(filters=dg.RunsFilter(statuses=IN_FLIGHT), limit=limit):
        run = rec.dagster_run
        alive = process_alive(run.tags)
        rows.append({
            "run_id": run.run_id, "status": run.status.value, "age_s": round(_age(rec), 1),
            "created": rec.create_timestamp.astimezone(dt.UTC).strftime(
                "%Y-%m-%d %H:%M:%S"),
            "job": run.job_name, "partition": run.tags.get("dagster/partition"),
            "command": run.tags.get(COMMAND_TAG), "pid": run.tags.get(PID_TAG),
            "host": run.tags.get(HOST_TAG),
            "process": {True: "running", False: "gone", None: "unknown"}[alive]})
    return rows
