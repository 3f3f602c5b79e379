"""Jobs, the nightly schedule and the input-folder sensor."""

from __future__ import annotations

import hashlib
import os

import dagster as dg

from kgloom.documents import list_input_files

index_job = dg.define_asset_job("index_job", selection=dg.AssetSelection.all(),
                                description="Build the whole index from the input folder.")
reports_job = dg.define_asset_job(
    "reports_job", selection=dg.AssetSelection.assets("community_reports").downstream(),
    description="Rewrite community reports (and what is emitted from them) only.")
embed_job = dg.define_asset_job(
    "embed_job", selection=dg.AssetSelection.assets("vector_index", "index_summary"),
    description="Re-embed into LanceDB only.")

nightly_index_schedule = dg.ScheduleDefinition(
    job=index_job, cron_schedule="0 2 * * *", execution_timezone="UTC",
    name="nightly_index_schedule")


def input_fingerprint(input_dir: str) -> str:
    """SHA-256 over (relative path, size, mtime in ns) of every supported input file."""
    h = hashlib.sha256()
    for p in list_input_files(input_dir):
        st = p.stat()
        h.update(f"{p.relative_to(input_dir)}\x1f{st.st_size}\x1f{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


@dg.sensor(job=index_job, minimum_interval_seconds=60,
           default_status=dg.DefaultSensorStatus.STOPPED)
def input_folder_sensor(context: dg.SensorEvaluationContext):
    """Request an index run when a file under the input folder (env KGLOOM_INPUT_DIR,
    default data/input) is added, changed or deleted; the cursor is the folder's
    fingerprint. Unchanged text units cost no LLM call thanks to the cache."""
    input_dir = os.environ.get("KGLOOM_INPUT_DIR", "data/input")
    try:
        fp = input_fingerprint(input_dir)
    except FileNotFoundError:
        return dg.SkipReason(f"input folder {input_dir} does not exist")
    if fp == context.cursor:
        return dg.SkipReason("no input file changed")
    context.update_cursor(fp)
    return dg.RunRequest(run_key=fp)
