"""Jobs, the nightly schedule and the input-folder sensor.

- ``ingest_job`` (partitioned by input file): documents -> text_units -> extracted_graph
  for one file. The sensor launches one run per new or changed file.
- ``graph_job`` (unpartitioned): the graph-wide refresh, entities onward; it reads every
  live partition from storage and drops deleted ones. Run nightly by the schedule and by
  the sensor once the ingest runs it launched are done or files were deleted.
- ``index_job``: every asset; a run for one partition ingests that file and refreshes the
  graph. For many files, "Materialize all" in the UI (an asset backfill runs each
  partition, then the graph-wide assets once) or ``kgloom index`` / ``kgloom backfill``.
- ``reports_job`` / ``embed_job``: rewrite community reports / re-embed only.

Every selection names its assets from the stage registry (:data:`kgloom.core.layout.STAGES`:
the partitioned assets, the graph-wide ones, a stage's asset keys); ``JOBS`` is the list
the code location loads.
"""

from __future__ import annotations

import json

import dagster as dg

from kgloom.core.inputs import scan_inputs
from kgloom.core.layout import ASSET_KEYS, COMMUNITY_REPORTS, INDEX_SUMMARY, STAGES, VECTOR_INDEX
from kgloom.corpus.partitions import diff_inputs, manifest_hashes
from kgloom.pipelines.freshness import (
    GRAPH_ASSETS,
    INGEST_ASSETS,
    current_graph_inputs,
    stale_graph_assets,
)
from kgloom.pipelines.input_files import INPUT_FILES, live_partition_keys
from kgloom.resources import EmbedderResource, IndexConfigResource, LLMResource

ingest_job = dg.define_asset_job(
    "ingest_job", selection=INGEST_ASSETS,
    description="Read, chunk and extract one input file (a partition of input_files).")
graph_job = dg.define_asset_job(
    "graph_job", selection=GRAPH_ASSETS,
    description="Graph-wide refresh from every live partition: entities, relationships, "
                "communities, reports, emitted files and vectors.")
index_job = dg.define_asset_job(
    "index_job", selection=dg.AssetSelection.all(),
    description="Index one input file (the run's partition) and refresh the whole graph.")
reports_job = dg.define_asset_job(
    "reports_job",
    selection=dg.AssetSelection.assets(*ASSET_KEYS[STAGES[COMMUNITY_REPORTS].asset]).downstream(),
    description="Rewrite community reports (and what is emitted from them) only.")
embed_job = dg.define_asset_job(
    "embed_job", selection=dg.AssetSelection.assets(*ASSET_KEYS[STAGES[VECTOR_INDEX].asset],
                                                    *ASSET_KEYS[STAGES[INDEX_SUMMARY].asset]),
    description="Re-embed into LanceDB only.")
JOBS = (index_job, ingest_job, graph_job, reports_job, embed_job)

@dg.schedule(job=graph_job, cron_schedule="0 2 * * *", execution_timezone="UTC",
             name="nightly_index_schedule", default_status=dg.DefaultScheduleStatus.RUNNING,
             description="Nightly graph-wide refresh (UTC), skipped when the graph is up to "
                         "date; unchanged work is served by the caches.")
def nightly_index_schedule(context: dg.ScheduleEvaluationContext, index: IndexConfigResource,
                           llm: LLMResource, embedder: EmbedderResource):
    """Request one ``graph_job`` run, unless every graph-wide asset was last built from
    the current inputs (:mod:`kgloom.pipelines.freshness`; with the code location's
    resources, as the run would use)."""
    resources = {"index": index, "llm": llm, "embedder": embedder}
    try:
        fingerprint = current_graph_inputs(resources, context.instance)
    except FileNotFoundError as exc:  # no model file: let the run fail and say why
        context.log.warning(f"cannot tell whether the graph is up to date: {exc}")
        return dg.RunRequest()
    if not stale_graph_assets(context.instance, fingerprint, resources["index"].output_dir):
        return dg.SkipReason("the graph is up to date: no partition, setting, model or code "
                             "changed since it was built")
    return dg.RunRequest()

_IN_FLIGHT = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED,
              dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED]


def _ingest_runs_in_flight(instance: dg.DagsterInstance) -> bool:
    return bool(instance.get_runs(
        filters=dg.RunsFilter(job_name=ingest_job.name, statuses=_IN_FLIGHT), limit=1))


@dg.sensor(jobs=[ingest_job, graph_job], minimum_interval_seconds=60,
           default_status=dg.DefaultSensorStatus.STOPPED)
def input_folder_sensor(context: dg.SensorEvaluationContext, index: IndexConfigResource):
    """Watch the input folder (``index.input_dir``).

    - A new file: add its ``input_files`` partition and run ``ingest_job`` for it.
    - A changed file (SHA-256 differs): run ``ingest_job`` for its partition again.
    - A deleted file: delete its partition.
    - Then, on a tick when no ingest run is queued or running, one ``graph_job`` run
      rebuilds entities onward from the live partitions, which removes a deleted file's
      contribution and adds the new ones.

    Cursor: JSON ``{"files": {key: sha256}, "graph_pending": bool, "tick": int}``. With
    no cursor, the hashes recorded by the last materialization of each partition (in
    ``index.output_dir``) are the previous state, so turning the
    sensor on after ``kgloom index`` re-runs nothing.
    """
    input_dir, output_dir = index.input_dir, index.output_dir
    state = json.loads(context.cursor) if context.cursor else {
        "files": manifest_hashes(output_dir), "graph_pending": False, "tick": 0}
    try:
        current, skipped = scan_inputs(input_dir)
    except FileNotFoundError:
        return dg.SkipReason(f"input folder {input_dir} does not exist")
    for row in skipped:  # symlinks leading outside the input folder
        context.log.warning(f"{row['item_id']}: {row['reason']} ({row['detail']})")
    live = set(live_partition_keys(context.instance))
    diff = diff_inputs(state["files"], current)
    to_run = sorted(set(diff.to_materialize) | (set(current) - live))
    deleted = sorted((live | set(diff.deleted)) - set(current))
    pending = state["graph_pending"] or bool(to_run) or bool(deleted)
    if not (to_run or deleted or pending):
        return dg.SkipReason("no input file changed")
    tick = state["tick"] + 1
    runs = [dg.RunRequest(job_name=ingest_job.name, partition_key=k,
                          run_key=f"{k}@{current[k][:16]}#{tick}") for k in to_run]
    in_flight = not runs and _ingest_runs_in_flight(context.instance)
    if in_flight and not deleted:
        return dg.SkipReason("graph refresh waits for the ingest runs in flight")
    if pending and not runs and not in_flight:
        runs.append(dg.RunRequest(job_name=graph_job.name, run_key=f"graph#{tick}"))
        pending = False
    requests = []
    if set(current) - live:
        requests.append(dg.AddDynamicPartitionsRequest(INPUT_FILES, sorted(set(current) - live)))
    if live & set(deleted):
        requests.append(dg.DeleteDynamicPartitionsRequest(INPUT_FILES, sorted(live & set(deleted))))
    context.log.info(f"input changes: {diff.as_dict() | {'deleted': deleted}}")
    return dg.SensorResult(run_requests=runs, dynamic_partitions_requests=requests,
                           cursor=json.dumps({"files": current, "graph_pending": pending,
                                              "tick": tick}))
