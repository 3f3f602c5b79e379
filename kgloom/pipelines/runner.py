"""Run the asset graph in this process against a Dagster instance (what ``kgloom index``
and ``kgloom backfill`` do; tests use it too). Runs are recorded in the instance, so
they show in the UI when it is persistent (``$DAGSTER_HOME``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import dagster as dg
from tqdm import tqdm

from kgloom.assets import ALL_ASSETS
from kgloom.partitions import (InputDiff, diff_inputs, input_hashes, manifest_hashes,
                               settings_fingerprint)
from kgloom.pipelines.jobs import GRAPH_ASSETS, INGEST_ASSETS
from kgloom.pipelines.partitions import INPUT_FILES, live_partition_keys


def sync_partitions(instance: dg.DagsterInstance, input_dir: str, output_dir: str,
                    settings: str | None = None) -> InputDiff:
    """Make the instance's ``input_files`` partitions equal the input folder's files.

    Returns the :class:`kgloom.partitions.InputDiff` of the folder against what each
    partition was last built from (its manifest): ``added``/``changed`` need an ingest
    run, ``deleted`` were removed from the instance (their stored tables go at the next
    graph refresh). A partition whose last build did not finish, or ran under another
    ``settings`` fingerprint (:func:`kgloom.partitions.settings_fingerprint`; None
    ignores settings), counts as changed.

    Raises:
        FileNotFoundError: when ``input_dir`` does not exist.
    """
    current = input_hashes(input_dir)
    live = set(live_partition_keys(instance))
    previous = manifest_hashes(output_dir, settings)
    previous.update({k: None for k in live if k not in previous})  # registered, never built
    diff = diff_inputs(previous, current)
    new = sorted(set(current) - live)
    if new:
        instance.add_dynamic_partitions(INPUT_FILES, new)
    for key in sorted(live - set(current)):
        instance.delete_dynamic_partition(INPUT_FILES, key)
    return diff


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
    interrupted: bool = False  # a run was stopped by SIGINT/SIGTERM; nothing ran after it

    @property
    def success(self) -> bool:
        """True when every partition run and the graph refresh (if run) succeeded."""
        return not self.failed_partitions and self.graph_ok is not False and not self.interrupted


def _interrupted(result: dg.ExecuteInProcessResult) -> bool:
    """True when a step of the run failed because the process was interrupted."""
    return any(e.is_step_failure and e.step_failure_data.error is not None
               and e.step_failure_data.error.cls_name == "DagsterExecutionInterruptedError"
               for e in result.all_events)


def materialize_partitions(keys: Iterable[str], resources: dict, instance: dg.DagsterInstance,
                           tags: dict[str, str] | None = None,
                           report: RunReport | None = None) -> RunReport:
    """Run documents -> text_units -> extracted_graph for each partition key (one Dagster
    run each, a progress bar over partitions). A failed partition is recorded and the
    others go on; an interrupted run (Ctrl-C, SIGTERM) stops the loop and sets
    ``report.interrupted``."""
    report = report or RunReport()
    keys = list(keys)
    for key in tqdm(keys, desc="partitions", unit="file", disable=not keys):
        result = dg.materialize(ALL_ASSETS, selection=INGEST_ASSETS, partition_key=key,
                                resources=resources, instance=instance, tags=tags,
                                raise_on_error=False)
        report.partition_runs[key] = result.run_id
        if not result.success:
            report.failed_partitions.append(key)
            if _interrupted(result):
                report.interrupted = True
                break
    return report


def refresh_graph(resources: dict, instance: dg.DagsterInstance,
                  tags: dict[str, str] | None = None,
                  report: RunReport | None = None, reports: bool = True) -> RunReport:
    """Run the graph-wide assets (entities onward) once, over every live partition;
    nothing when ``report`` says an earlier run was interrupted. ``reports=False``
    leaves out ``community_reports`` (its LLM calls): what retrieval needs (entities,
    relationships, communities, graph files, vectors) is still built, and the LanceDB
    ``community_reports`` table holds the reports of the last run that wrote them."""
    report = report or RunReport()
    if report.interrupted:
        return report
    selection = GRAPH_ASSETS if reports else GRAPH_ASSETS - dg.AssetSelection.assets(
        "community_reports")
    result = dg.materialize(ALL_ASSETS, selection=selection, resources=resources,
                            instance=instance, tags=tags, raise_on_error=False)
    report.graph_run, report.graph_ok = result.run_id, result.success
    report.interrupted = _interrupted(result)
    return report


def index_folder(resources: dict, instance: dg.DagsterInstance, force: bool = False,
                 tags: dict[str, str] | None = None,
                 reports: bool = True) -> tuple[InputDiff, RunReport]:
    """Sync partitions with the input folder, ingest the new and changed files (all of
    them with ``force``), then refresh the graph (without community reports when
    ``reports`` is False). Returns (the diff, the run report)."""
    index = resources["index"]
    fingerprint = settings_fingerprint(index.settings(), resources["llm"].verify())
    diff = sync_partitions(instance, index.input_dir, index.output_dir, fingerprint)
    keys = sorted(set(diff.to_materialize) | (set(diff.unchanged) if force else set()))
    report = materialize_partitions(keys, resources, instance, tags)
    return diff, refresh_graph(resources, instance, tags, report, reports)
