"""The building commands: ``kgloom index``, ``backfill``, ``partitions``, ``cache`` and
``status``, and how an index or backfill command ends (its JSON summary, cost and summary
tables, and exit status).

``kgloom index`` materializes every asset in this process against the index's persistent
Dagster instance (:func:`kgloom.pipelines.instance.instance_home`: ``$DAGSTER_HOME`` when
exported, else ``<output folder>/.dagster_home``), so its runs show in ``kgloom ui``.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import typer

from kgloom.cli.cli_common import (
    FAKE,
    INPUT,
    LLM_CONCURRENCY,
    LLM_URL,
    MODEL,
    OUTPUT,
    SET,
    SETTINGS_FILE,
    VERBOSE,
    _echo_inputs,
    _folder_flags,
    _instance,
    _load,
    _model_flags,
    _resources,
    _warn_skipped,
    app,
)


@contextlib.contextmanager
def _writer(output_dir: str, command: str):
    """Hold the output folder's writer lock (waiting, with the holder named, while another
    writer has it); Ctrl-C / SIGTERM while waiting or running exits 130."""
    from kgloom.core.lock import writer_lock

    try:
        with writer_lock(output_dir, command,
                         on_wait=lambda msg: typer.echo(f"{msg}; waiting (Ctrl-C to stop)",
                                                        err=True)):
            yield
    except KeyboardInterrupt:
        typer.echo("interrupted: what finished is kept; run the command again to go on",
                   err=True)
        raise typer.Exit(130) from None


def _loud(lines: list[str]) -> None:
    """Print warnings where they cannot be missed: a framed block on stderr."""
    if lines:
        bar = "!" * 78
        typer.echo("\n".join([bar, *(f"WARNING: {line}" for line in lines), bar]), err=True)


def _stages_since(output_dir: str, started: float | None) -> dict:
    """The stage stats of the stages that finished during this command (``started``:
    its start, ``time.time()``; a partition stage: its latest file); {} when None."""
    from kgloom.core.stats import read_stage_stats

    if started is None:
        return {}
    return {k: v for k, v in read_stage_stats(Path(output_dir)).items()
            if v.get("finished_at", 0) >= started}


def _command_summary(output_dir: str, before: dict[str, int], report,
                     started: float | None) -> dict:
    """What this command did, as printed on stdout (JSON): LLM calls per stage (new
    cache rows), the index's row counts, runs, and the cost of the stages it ran (wall
    and model seconds, model shares)."""
    import time

    from kgloom.core.layout import SUMMARY_FILE
    from kgloom.core.stats import cost_table
    from kgloom.llm import cache_rows, new_rows

    summary_path = Path(output_dir) / SUMMARY_FILE
    rows = json.loads(summary_path.read_text())["rows"] if summary_path.exists() else {}
    out = {"llm_calls_this_run": new_rows(before, cache_rows(output_dir)), "rows": rows,
           "partition_runs": len(report.partition_runs),
           "failed_partitions": report.failed_partitions, "graph_run": report.graph_run,
           "interrupted": report.interrupted}
    ran = _stages_since(output_dir, started)
    if started is not None:
        cost = cost_table(ran)
        wall = time.time() - started
        out["cost"] = {"command_wall_seconds": round(wall, 1),
                       "stages_wall_seconds": cost["total"]["wall_seconds"],
                       "model_seconds": cost["total"]["model_seconds"],
                       "model_share_of_stages": cost["total"]["model_share"],
                       "model_share_of_command": round(cost["total"]["model_seconds"] / wall, 4)
                       if wall else 0.0,
                       "stages": cost}
        out["llm_cache_hits"] = sum(int((v.get("llm") or {}).get("cache_hits", 0))
                                    for v in ran.values())
    return out


def _summary_table(out: dict) -> str:
    """The human summary of :func:`_command_summary`: the index's rows and this
    command's LLM calls, cache hits and wall time (a two-column table)."""
    from tabulate import tabulate

    rows = out["rows"]
    items = [(label, rows.get(key, 0)) for label, key in (
        ("documents", "documents"), ("text units", "text_units"), ("entities", "entities"),
        ("relationships", "relationships"), ("communities", "communities"),
        ("community reports", "community_reports"), ("failures", "failures"))]
    items.append(("LLM calls (this run)", sum(out["llm_calls_this_run"].values())))
    if "llm_cache_hits" in out:
        items.append(("LLM cache hits (this run)", out["llm_cache_hits"]))
    if "cost" in out:
        items.append(("wall time (s)", out["cost"]["command_wall_seconds"]))
    return tabulate(items, headers=["index", ""], tablefmt="simple")


def _exit_status(output_dir: str, rows: dict, report, input_dir: str) -> None:
    """Say how the command ended and exit accordingly: 130 when interrupted, 1 when a
    run failed or no document could be loaded from ``input_dir``; loud warnings (failed
    WARN asset checks, an empty graph) first."""
    import polars as pl

    if report.interrupted:
        typer.echo("interrupted: what finished is kept; run the command again to go on "
                   "(finished LLM calls are cached)", err=True)
        raise typer.Exit(130)
    if report.graph_up_to_date:
        typer.echo("graph up to date: nothing changed since it was built, no stage re-ran")
    warnings = list(report.warnings)
    if rows.get("documents") and not rows.get("entities"):
        warnings.append(f"the graph is empty: 0 entities from {rows['documents']} document(s) "
                        f"and {rows.get('text_units', 0)} text unit(s); see the "
                        "extracted_graph asset checks (e.g. no proper name found in a "
                        "script without capital letters)")
    _loud(warnings)
    if not report.success:
        for line in getattr(report, "errors", []):
            typer.echo(f"error: {line}", err=True)
        typer.echo("error: a run failed; see the log above and `kgloom status`", err=True)
        raise typer.Exit(1)
    if not rows.get("documents"):
        from kgloom.core import schemas
        from kgloom.core.storage import read_parquet, table_path

        failures_path = table_path(output_dir, schemas.FAILURES)

        failed = (read_parquet(failures_path).filter(pl.col("stage") == "documents")
                  if failures_path.exists() else None)
        reasons = [f"  {r['item_id']}: {r['reason']}"
                   for r in (failed.head(10).iter_rows(named=True) if failed is not None else [])]
        typer.echo("\n".join([f"error: no document could be loaded from {input_dir}; the "
                              "index is empty", *reasons]), err=True)
        raise typer.Exit(1)
    typer.echo(f"index written to {output_dir}")


def _finish(output_dir: str, before: dict[str, int], report, input_dir: str,
            started: float | None = None) -> None:
    """End an index or backfill command: the JSON summary on stdout
    (:func:`_command_summary`), the cost table of the stages that ran and the summary
    table on stderr, then :func:`_exit_status`."""
    from kgloom.core.stats import cost_markdown

    out = _command_summary(output_dir, before, report, started)
    cost = out.get("cost", {}).pop("stages", None)
    if cost and cost["stages"]:
        typer.echo(cost_markdown(cost), err=True)
    typer.echo(_summary_table(out), err=True)
    typer.echo(json.dumps(out, indent=2))
    _exit_status(output_dir, out["rows"], report, input_dir)

@app.command()
def index(input_dir: str | None = INPUT, output_dir: str | None = OUTPUT,
          model_path: str = MODEL,
          fake_llm: bool = FAKE, llm_url: list[str] = LLM_URL,
          llm_concurrency: int | None = LLM_CONCURRENCY,
          force: bool = typer.Option(False, help="re-run every partition, changed or not"),
          max_gleanings: int | None = typer.Option(
              None, help="extra extraction rounds per text unit (default 0)"),
          extract_claims: bool | None = typer.Option(
              None, "--extract-claims/--no-extract-claims",
              help="also extract claims (GraphRAG covariates), one more call per unit"),
          candidate_source: str | None = typer.Option(
              None, help="where candidate names come from: auto (default) | proper_names | "
                         "segmenter | ngram | open (the model proposes; for large models)"),
          cut_boilerplate: bool | None = typer.Option(
              None, "--cut-boilerplate/--no-cut-boilerplate",
              help="cut Project Gutenberg licence headers and footers (default on)"),
          embedder_path: str = typer.Option(
              "", help="sentence-transformers model folder for this corpus (default: the "
                       "bundled English all-MiniLM-L6-v2)"),
          reports: bool = typer.Option(
              True, help="write community reports (--no-reports: a retrieval-only index, "
                         "no report LLM calls)"),
          set_: list[str] = SET, settings_file: str = SETTINGS_FILE,
          verbose: bool = VERBOSE,
          ) -> None:
    """Index INPUT_DIR into OUTPUT_DIR incrementally, with progress bars.

    One partition per input file: new and changed files are read, chunked and extracted
    (one run each), deleted files' partitions are removed, then the graph-wide assets
    are refreshed once. Runs are recorded in the index's Dagster instance ($DAGSTER_HOME
    when exported, else OUTPUT_DIR/.dagster_home), so they show in `kgloom ui`.
    """
    import time

    started = time.time()  # the command's wall time includes loading the pipeline
    from kgloom.cli.runner import index_folder
    from kgloom.llm import cache_rows

    _check_candidate_source(candidate_source)
    settings = _load(settings_file, set_, **_folder_flags(input_dir, output_dir),
                     **_model_flags(model_path, fake_llm, llm_url, embedder_path),
                     **{"llm.llm_concurrency": llm_concurrency,
                        "index.max_gleanings": max_gleanings,
                        "index.extract_claims": extract_claims,
                        "index.candidate_source": candidate_source,
                        "index.cut_boilerplate": cut_boilerplate})
    input_dir, output_dir = settings.paths.input_dir, settings.paths.output_dir
    resources = _resources(settings)
    with _writer(output_dir, "kgloom index"):
        instance = _instance(output_dir, resources, recover=True)
        before = cache_rows(output_dir)
        diff, report = index_folder(resources, instance, force=force,
                                    tags={"kgloom/command": "kgloom index"}, reports=reports,
                                    verbose=verbose)
    _echo_inputs(diff)
    _warn_no_input(diff, input_dir)
    _finish(output_dir, before, report, input_dir, started)


def _check_candidate_source(candidate_source: str | None) -> None:
    """Check ``kgloom index --candidate-source`` before anything is loaded.

    Raises:
        typer.Exit: 2, naming the sources, when it is not one of them.
    """
    from kgloom.names.candidates import SOURCES

    if candidate_source is not None and candidate_source not in SOURCES:
        typer.echo(f"error: --candidate-source must be one of {', '.join(SOURCES)}", err=True)
        raise typer.Exit(2)


def _warn_no_input(diff, input_dir: str) -> None:
    """Warn (stderr) when the input folder holds no supported file: the index is empty."""
    if not (diff.added or diff.changed or diff.unchanged):
        from kgloom.core.inputs import SUPPORTED_SUFFIXES

        typer.echo(f"warning: {input_dir} has no supported input file "
                   f"({', '.join(SUPPORTED_SUFFIXES)}): the index is empty", err=True)


@app.command()
def backfill(partition: list[str] = typer.Option(
                 [], "--partition", "-p", help="an input file's partition key (repeatable)"),
             all_partitions: bool = typer.Option(False, "--all", help="every input file"),
             graph: bool = typer.Option(True, help="refresh the graph-wide assets afterwards"),
             input_dir: str | None = INPUT, output_dir: str | None = OUTPUT,
             model_path: str = MODEL, fake_llm: bool = FAKE, llm_url: list[str] = LLM_URL,
             llm_concurrency: int | None = LLM_CONCURRENCY, set_: list[str] = SET,
             settings_file: str = SETTINGS_FILE, verbose: bool = VERBOSE) -> None:
    """Re-run documents, text_units and extracted_graph for chosen partitions (keys are
    paths relative to INPUT_DIR, see `kgloom partitions`), then the graph refresh.
    Unchanged text units are served by the LLM cache."""
    import time
    import uuid

    started = time.time()
    from kgloom.cli.runner import materialize_partitions, refresh_graph, sync_partitions
    from kgloom.llm import cache_rows

    settings = _load(settings_file, set_, **_folder_flags(input_dir, output_dir),
                     **_model_flags(model_path, fake_llm, llm_url),
                     **{"llm.llm_concurrency": llm_concurrency})
    input_dir, output_dir = settings.paths.input_dir, settings.paths.output_dir
    resources = _resources(settings)
    with _writer(output_dir, "kgloom backfill"):
        instance = _instance(output_dir, resources, recover=True)
        diff = sync_partitions(instance, input_dir, output_dir)
        known = set(diff.added + diff.changed + diff.unchanged)
        keys = sorted(known) if all_partitions else list(dict.fromkeys(partition))
        unknown = [k for k in keys if k not in known]
        if unknown or not keys:
            typer.echo(f"error: unknown partition(s) {unknown}; known: {sorted(known)}"
                       if keys else "error: give --partition KEY (repeatable) or --all",
                       err=True)
            raise typer.Exit(2)
        before = cache_rows(output_dir)
        tags = {"kgloom/command": "kgloom backfill", "kgloom/backfill_id": uuid.uuid4().hex[:8]}
        report = materialize_partitions(keys, resources, instance, tags, verbose=verbose)
        if graph:
            refresh_graph(resources, instance, tags, report, verbose=verbose)
    _finish(output_dir, before, report, input_dir, started)


@app.command()
def partitions(input_dir: str | None = INPUT, output_dir: str | None = OUTPUT) -> None:
    """Register one partition per input file in the Dagster instance (deleting those of
    removed files) and list them with their state against the stored index."""
    from kgloom.cli.runner import sync_partitions

    paths = _load(None, **_folder_flags(input_dir, output_dir)).paths
    input_dir, output_dir = paths.input_dir, paths.output_dir

    diff = sync_partitions(_instance(output_dir), input_dir, output_dir)
    for state, keys in diff.as_dict().items():
        for k in keys:
            typer.echo(f"{state:<10} {k}")
    _warn_skipped(diff.skipped)


@app.command()
def cache(output_dir: str | None = OUTPUT) -> None:
    """Show the LLM cache: rows, tokens and model seconds per stage, and last run's hit rate."""
    from kgloom.core.stats import read_stage_stats
    from kgloom.llm import CACHE_FILE, LLMCache

    output_dir = _load(None, **_folder_flags(output_dir=output_dir)).paths.output_dir

    path = Path(output_dir) / CACHE_FILE
    if not path.exists():
        typer.echo(f"no cache at {path}: run `kgloom index` first", err=True)
        raise typer.Exit(1)
    typer.echo(f"{'stage':<20}{'rows':>8}{'prompt_tok':>12}{'compl_tok':>12}{'seconds':>10}"
               f"{'last run: calls':>17}{'hits':>7}{'hit rate':>10}")
    last = {k: v.get("llm", {}) for k, v in read_stage_stats(Path(output_dir)).items()}
    for row in LLMCache(path).summary():
        lr = last.get(row["stage"], {})
        typer.echo(f"{row['stage']:<20}{row['rows']:>8}{row['prompt_tokens']:>12}"
                   f"{row['completion_tokens']:>12}{row['seconds']:>10}"
                   f"{lr.get('calls', 0):>17}{lr.get('cache_hits', 0):>7}"
                   f"{lr.get('cache_hit_rate', 0.0):>10.2%}")


@app.command()
def status(input_dir: str | None = INPUT, output_dir: str | None = OUTPUT) -> None:
    """What is materialized, stale or failed: input files against their partitions (and a
    warning per entry skipped for safety, as `kgloom index` gives), each asset's last
    materialization in the Dagster instance, the runs queued or in flight (with their
    age, and whether their process still lives), and recent failed runs."""
    from kgloom.cli.status import index_status
    from kgloom.pipelines.recovery import format_age

    paths = _load(None, **_folder_flags(input_dir, output_dir)).paths
    input_dir, output_dir = paths.input_dir, paths.output_dir

    st = index_status(_instance(output_dir), input_dir, output_dir)
    _warn_skipped(st["skipped"])  # as `kgloom index` warns
    typer.echo("input files:")
    for state, keys in st["inputs"].items():
        for k in keys:
            typer.echo(f"  {state:<10} {k}")
    typer.echo(f"\n{'asset':<20}{'state':<12}{'last materialized (UTC)':<26}detail")
    for a in st["assets"]:
        typer.echo(f"{a['asset']:<20}{a['state']:<12}{a['last'] or '-':<26}{a['detail']}")
    typer.echo("\nruns queued or in flight:" if st["in_flight_runs"] else
               "\nno run is queued or in flight")
    for r in st["in_flight_runs"]:
        what = r["partition"] or r["job"]
        who = f"pid {r['pid']} on {r['host']}, process {r['process']}" if r["pid"] else \
            "no process recorded yet"
        typer.echo(f"  {r['run_id'][:8]}  {r['status']:<11} for {format_age(r['age_s']):<8} "
                   f"{what}  ({r['command'] or 'dagster'}; {who})")
    if st["failed_runs"]:
        typer.echo("\nrecent failed runs:")
        for r in st["failed_runs"]:
            what = (r["partition"] or ", ".join(r["assets"][:3])
                    + (" ..." if len(r["assets"]) > 3 else "") or "all assets")
            typer.echo(f"  {r['run_id'][:8]}  ended {r['ended'] or '?'}  {what}")
