"""Run the asset graph in this process against a Dagster instance (what ``kgloom index``
and ``kgloom backfill`` do; tests use it too). Runs are recorded in the instance, so
they show in the UI when it is persistent (``$DAGSTER_HOME``).

Every run is tagged with this process (:func:`kgloom.core.processes.process_tags`),
so a run left behind by a killed process is found and failed by crash recovery. The
graph refresh runs only the graph-wide assets that are not up to date
(:mod:`kgloom.pipelines.freshness`): none when nothing changed, the failed stages and
what follows them after a failure.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import dagster as dg
from sqlalchemy.exc import IntegrityError
from tqdm import tqdm

from kgloom.assets import ALL_ASSETS
from kgloom.cli.logs import run_config_for_logs
from kgloom.core.builds import publish_build, read_marker
from kgloom.core.inputs import scan_inputs
from kgloom.core.layout import SUMMARY_FILE
from kgloom.core.processes import process_tags
from kgloom.corpus.partitions import (
    InputDiff,
    diff_inputs,
    manifest_hashes,
    remove_refused_partitions,
    settings_fingerprint,
)
from kgloom.pipelines.freshness import (
    GRAPH_KEYS,
    current_graph_inputs,
    rerun_selection,
    stale_graph_assets,
)
from kgloom.pipelines.input_files import INPUT_FILES, live_partition_keys
from kgloom.pipelines.jobs import graph_job, ingest_job

REPORTS_KEY = dg.AssetKey("community_reports")


def sync_partitions(instance: dg.DagsterInstance, input_dir: str, output_dir: str,
                    settings: str | None = None) -> InputDiff:
    """Make the instance's ``input_files`` partitions equal the input folder's files.

    Returns the :class:`kgloom.corpus.partitions.InputDiff` of the folder against what each
    partition of the index at ``output_dir`` was last built from (its manifest, stored in
    the output folder, so a second output folder built from the same inputs finds every
    file new whatever the instance holds): ``added``/``changed`` need an ingest run,
    ``deleted`` name stored partitions whose file is gone (their partitions are removed
    from the instance, their stored tables go at the next graph refresh). A partition whose
    last build did not finish, or ran under another
    ``settings`` fingerprint (:func:`kgloom.corpus.partitions.settings_fingerprint`; None
    ignores settings), counts as changed. A registered key that names no file of the
    folder (a deleted file, or a crafted key such as ``../secret.txt``) is deleted from
    the instance; symlinks leading outside the folder are left out and listed in the
    diff's ``skipped``. Safe when another process registers the same
    partitions at the same moment (:func:`register_partitions`).

    Raises:
        FileNotFoundError: when ``input_dir`` does not exist.
    """
    current, skipped = scan_inputs(input_dir)
    live = set(live_partition_keys(instance))
    # the index's own manifests are the previous state, whatever the instance holds: a key
    # registered but never built in this output folder is new to it
    diff = diff_inputs(manifest_hashes(output_dir, settings), current)
    diff.skipped = skipped
    register_partitions(instance, sorted(set(current) - live))
    for key in sorted(live - set(current)):
        instance.delete_dynamic_partition(INPUT_FILES, key)
    return diff


def register_partitions(instance: dg.DagsterInstance, keys: list[str],
                        attempts: int = 5) -> list[str]:
    """Add ``keys`` to the ``input_files`` partitions, idempotently.

    Keys already registered are skipped. Dagster's storage reads the existing keys, then
    inserts the new ones; a process registering the same key between the two makes the
    insert fail ("UNIQUE constraint failed"). Then the keys are read again and the rest
    retried, up to ``attempts`` times. Returns the keys this call added.

    Raises:
        sqlalchemy.exc.IntegrityError: when the race repeats ``attempts`` times.
    """
    added: list[str] = []
    for attempt in range(attempts):
        todo = [k for k in keys if not instance.has_dynamic_partition(INPUT_FILES, k)]
        if not todo:
            break
        try:
            instance.add_dynamic_partitions(INPUT_FILES, todo)
        except IntegrityError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.05 * (attempt + 1))
            continue
        added += todo
        break
    return added
LLM_POOL = "llm"  # the Dagster pool of the LLM-bound assets


def set_llm_pool_limit(instance: dg.DagsterInstance, limit: int) -> None:
    """Set the instance's limit of the pool ``llm`` (LLM-bound steps running at once
    across runs) to ``limit``, when it differs (``LLMResource.pool_limit``: the model
    slots divided by the calls each step keeps in flight).

    Raises:
        ValueError: when ``limit`` < 1.
    """
    if limit < 1:
        raise ValueError(f"the llm pool limit must be >= 1, got {limit}")
    storage = instance.event_log_storage
    if storage.get_concurrency_info(LLM_POOL).slot_count != limit:
        storage.set_concurrency_slots(LLM_POOL, limit)


@dataclass
class RunReport:
    """What one ``kgloom`` command ran: run ids, failed partitions, graph success."""

    partition_runs: dict[str, str] = field(default_factory=dict)  # key -> run id
    failed_partitions: list[str] = field(default_factory=list)
    graph_run: str | None = None
    graph_ok: bool | None = None
    graph_assets: list[str] = field(default_factory=list)  # what the graph refresh ran
    graph_up_to_date: bool = False  # the refresh found nothing stale and ran nothing
    interrupted: bool = False  # a run was stopped by SIGINT/SIGTERM; nothing ran after it
    warnings: list[str] = field(default_factory=list)  # failed WARN asset checks
    errors: list[str] = field(default_factory=list)  # "<step>: <why>" of each failed step

    @property
    def success(self) -> bool:
        """True when every partition run and the graph refresh (if run) succeeded."""
        return not self.failed_partitions and self.graph_ok is not False and not self.interrupted


_INTERRUPTS = {"DagsterExecutionInterruptedError", "KeyboardInterrupt"}


def _interrupted(result: dg.ExecuteInProcessResult) -> bool:
    """True when the run, or a step of it, failed because the process was interrupted
    (SIGINT/SIGTERM), also while it waited for a pool slot, before any step ran."""
    for event in result.all_events:
        if event.is_step_failure:
            error = event.step_failure_data.error
        elif event.event_type == dg.DagsterEventType.RUN_FAILURE:
            error = getattr(event.event_specific_data, "error", None)
        else:
            continue
        while error is not None:
            if error.cls_name in _INTERRUPTS:
                return True
            error = error.cause
    return False


def _errors(result: dg.ExecuteInProcessResult) -> list[str]:
    """``<step>: <message>`` of each failed step, the message of the error that caused
    Dagster's wrapper (e.g. kgloom's disk-full message naming the folder)."""
    lines = []
    for event in result.all_events:
        if not event.is_step_failure:
            continue
        error = event.step_failure_data.error
        while error is not None and error.cause is not None and \
                error.cls_name == "DagsterExecutionStepExecutionError":
            error = error.cause
        if error is not None:
            lines.append(f"{event.step_key}: {error.message.strip()}")
    return lines


def _warnings(result: dg.ExecuteInProcessResult) -> list[str]:
    """One line per asset check of the run that failed with severity WARN."""
    lines = []
    for ev in result.get_asset_check_evaluations():
        if ev.passed or ev.severity != dg.AssetCheckSeverity.WARN:
            continue
        where = ev.asset_key.to_user_string() + (f" [{ev.partition}]" if ev.partition else "")
        lines.append(f"{where} {ev.check_name}: {ev.description or 'failed'}")
    return lines


_JOBS: dict[tuple, tuple[dict, dict[str, dg.JobDefinition]]] = {}


def named_job(name: str, resources: dict) -> dg.JobDefinition:
    """The job ``name`` (``ingest_job`` or ``graph_job``) bound to ``resources`` and the
    loggers of :mod:`kgloom.cli.logs`, so a run the CLI launches carries the job's
    name in the instance and the UI (not ``__ephemeral_asset_job__``)."""
    from kgloom.cli.logs import LOGGERS

    key = tuple(sorted((k, id(v)) for k, v in resources.items()))
    if key not in _JOBS:  # the resources are kept with their jobs, so ids stay theirs
        if len(_JOBS) >= 8:
            _JOBS.clear()
        defs = dg.Definitions(assets=ALL_ASSETS, jobs=[ingest_job, graph_job],
                              resources=resources, loggers=LOGGERS)
        _JOBS[key] = (resources, {j.name: defs.resolve_job_def(j.name)
                                  for j in (ingest_job, graph_job)})
    return _JOBS[key][1][name]


def run_tags(tags: dict[str, str] | None = None) -> dict[str, str]:
    """``tags`` plus this process's pid, start time and host (for crash recovery)."""
    return {**(tags or {}), **process_tags()}


def materialize_partitions(keys: Iterable[str], resources: dict, instance: dg.DagsterInstance,
                           tags: dict[str, str] | None = None,
                           report: RunReport | None = None, verbose: bool = False) -> RunReport:
    """Run documents -> text_units -> extracted_graph for each partition key (one Dagster
    run each, a progress bar over partitions). A failed partition is recorded and the
    others go on; an interrupted run (Ctrl-C, SIGTERM) stops the loop and sets
    ``report.interrupted``. Failed WARN asset checks go to ``report.warnings``. The runs
    are ``ingest_job`` runs; Dagster's event log goes to the instance and the log file,
    and to the terminal only when ``verbose`` (:mod:`kgloom.cli.logs`)."""
    report = report or RunReport()
    keys = list(keys)
    for key in tqdm(keys, desc="partitions", unit="file", disable=not keys):
        result = named_job(ingest_job.name, resources).execute_in_process(
            partition_key=key, instance=instance, tags=run_tags(tags), raise_on_error=False,
            run_config=run_config_for_logs(verbose))
        report.partition_runs[key] = result.run_id
        report.warnings += _warnings(result)
        report.errors += _errors(result)
        if not result.success:
            report.failed_partitions.append(key)
            if _interrupted(result):
                report.interrupted = True
                break
    return report


def refresh_graph(resources: dict, instance: dg.DagsterInstance,
                  tags: dict[str, str] | None = None,
                  report: RunReport | None = None, force: bool = False,
                  reports: bool = True, verbose: bool = False) -> RunReport:
    """Bring the graph-wide assets (entities onward) up to date with every live partition.

    Runs nothing when ``report`` says an earlier run was interrupted, or when every
    graph-wide asset was last built from the current inputs (see
    :mod:`kgloom.pipelines.freshness`); otherwise one run of the stale assets and
    everything downstream of them (all graph-wide assets with ``force``).
    ``reports=False`` leaves out ``community_reports`` (its LLM calls): what retrieval
    needs (entities, relationships, communities, graph files, vectors) is still built,
    the LanceDB ``community_reports`` table holds the reports of the last run that wrote
    them, and stale reports alone do not make the graph stale.
    ``report.graph_assets`` lists what ran. The run is a ``graph_job`` run (its asset
    selection: the stale assets); ``verbose`` as in :func:`materialize_partitions`.

    Raises:
        kgloom.llm.ModelFileError: when the model file is missing.
    """
    report = report or RunReport()
    if report.interrupted:
        return report
    stale = list(GRAPH_KEYS) if force else stale_graph_assets(
        instance, current_graph_inputs(resources, instance), resources["index"].out)
    if not reports:
        stale = [k for k in stale if k != REPORTS_KEY]
    if not stale:
        report.graph_up_to_date = True
        out = resources["index"].out
        if read_marker(out) is None and (out / SUMMARY_FILE).exists():
            publish_build(out)  # an index published before build markers: mark it now
        return report
    selection = rerun_selection(stale)
    if not reports:
        selection = selection - dg.AssetSelection.assets(REPORTS_KEY)
    job = named_job(graph_job.name, resources)
    keys = list(selection.resolve(job.asset_layer.asset_graph))
    result = job.execute_in_process(asset_selection=keys, instance=instance,
                                    tags=run_tags(tags), raise_on_error=False,
                                    run_config=run_config_for_logs(verbose))
    report.graph_run, report.graph_ok = result.run_id, result.success
    started = {e.step_key for e in result.all_events
               if e.event_type == dg.DagsterEventType.STEP_START}
    report.graph_assets = sorted(k.to_user_string() for a in ALL_ASSETS if a.op.name in started
                                 for k in a.keys)
    report.interrupted = _interrupted(result)
    report.warnings += _warnings(result)
    report.errors += _errors(result)
    return report


def index_folder(resources: dict, instance: dg.DagsterInstance, force: bool = False,
                 tags: dict[str, str] | None = None, reports: bool = True,
                 verbose: bool = False) -> tuple[InputDiff, RunReport]:
    """Sync partitions with the input folder, ingest the new and changed files (all of
    them with ``force``), then refresh what is stale in the graph (all of it with
    ``force``; without community reports when ``reports`` is False). Returns (the diff,
    the run report). Stored partition folders whose key is refused (one leading outside
    the input folder) are deleted first, even when the graph is up to date."""
    index = resources["index"]
    fingerprint = settings_fingerprint(
        index.settings(), resources["llm"].index_model_id(index.settings().method))
    diff = sync_partitions(instance, index.input_dir, index.output_dir, fingerprint)
    remove_refused_partitions(index.output_dir, index.input_dir)
    keys = sorted(set(diff.to_materialize) | (set(diff.unchanged) if force else set()))
    report = materialize_partitions(keys, resources, instance, tags, verbose=verbose)
    return diff, refresh_graph(resources, instance, tags, report, force=force, reports=reports,
                               verbose=verbose)
