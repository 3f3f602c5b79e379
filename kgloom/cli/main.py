"""``kgloom`` command line: index, backfill, partitions, status, cache, query, import-graph,
graphrag-settings, serve-embeddings, serve, ui (and mcp, in
:mod:`kgloom.cli.mcp_command`).

``kgloom index`` materializes every asset in this process against the index's persistent
Dagster instance (:func:`kgloom.pipelines.instance.instance_home`: ``$DAGSTER_HOME`` when
exported, else ``<output folder>/.dagster_home``), so its runs show in ``kgloom ui``.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from kgloom.query.modes import (
    DEFAULT_MODE,
    GRAPH_BACKENDS,
    OPTION_MODES,
    RETRIEVAL_MODES,
    SEARCH_MODES,
    check_options,
    check_question,
    ignored_options,
)

if TYPE_CHECKING:
    from kgloom.settings import Settings

app = typer.Typer(add_completion=False, help="kgloom: a GraphRAG index built by a local LLM.")



def _dagster_home(output_dir: str) -> Path:
    """Choose the instance folder of the index at ``output_dir``
    (:func:`kgloom.pipelines.instance.instance_home`) and export it as ``DAGSTER_HOME``
    for this process and the ones it starts.

    Raises:
        typer.Exit: 2, with the reason, when the folder cannot be made (``output_dir``
            is a file, or not writable).
    """
    from kgloom.pipelines.instance import instance_home

    try:
        home = instance_home(output_dir)
    except OSError as exc:  # the output folder is a file, unwritable, ...
        typer.echo(f"error: no Dagster instance for the index at {output_dir}: {exc}",
                   err=True)
        raise typer.Exit(2) from exc
    os.environ["DAGSTER_HOME"] = str(home)
    return home


def _load(settings_file: str | None, set_: list[str] | None = None, **flags) -> Settings:
    """The command's settings (:func:`kgloom.settings.load_settings`): the file
    (``--config``, else env ``KGLOOM_CONFIG`` / ``KGLOOM_SETTINGS``, else ./kgloom.yaml), the
    ``KGLOOM_*`` variables, the ``--set`` pairs, then the command's own flags that were
    given (``flags``: ``section.key`` -> value, None: not given).

    Raises:
        typer.Exit: 2, with the reason naming the key, for a bad file, variable or value.
    """
    from kgloom.settings import SettingsError, load_settings, parse_set

    try:
        overrides = {**parse_set(set_ or []),
                     **{k: v for k, v in flags.items() if v is not None}}
        return load_settings(settings_file or None, overrides)
    except (SettingsError, FileNotFoundError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc


def _folder_flags(input_dir: str | None = None, output_dir: str | None = None) -> dict:
    """The folder options as overrides (None or "": not given: the settings decide)."""
    return {"paths.input_dir": input_dir or None, "paths.output_dir": output_dir or None}


def _model_flags(model_path: str = "", fake_llm: bool = False,
                 llm_urls: list[str] | None = None, embedder_path: str = "") -> dict:
    """The model options as overrides (empty or False: not given)."""
    return {"llm.model_path": model_path or None, "llm.fake": fake_llm or None,
            "llm.urls": llm_urls or None, "embedder.model_path": embedder_path or None}


def _resources(settings: Settings) -> dict:
    """Resources for a command, with the model (file or servers) checked and the input
    folder present."""
    from kgloom.llm import ModelFileError
    from kgloom.llm.http import LLMServerError
    from kgloom.resources import resources_from_settings

    try:
        resources = resources_from_settings(settings)
        # a missing model or server stops the run before any work (fast needs none)
        resources["llm"].index_model_id(settings.index.method)
    except (ModelFileError, LLMServerError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    if not Path(settings.paths.input_dir).is_dir():
        typer.echo(f"error: input folder {settings.paths.input_dir} does not exist", err=True)
        raise typer.Exit(2)
    return resources


def _instance(output_dir: str, resources: dict | None = None, recover: bool = False):
    """The persistent Dagster instance of the index at ``output_dir`` (:func:`_dagster_home`).
    With ``recover``, runs whose
    process is gone are failed and their pool slots freed first (and the CLI says so);
    with ``resources``, its pool ``llm`` limit is set to what the LLM's model slots allow
    (``LLMResource.pool_limit``)."""
    import dagster as dg

    from kgloom.core.lock import instance_setup_lock

    home = _dagster_home(output_dir)
    with instance_setup_lock(home):  # two processes creating one fresh instance race
        instance = dg.DagsterInstance.get()
    if recover:
        from kgloom.pipelines.recovery import recover_dead_runs

        for run in recover_dead_runs(instance):
            typer.echo(f"recovered {run.describe()}", err=True)
    if resources is not None:
        from kgloom.cli.runner import set_llm_pool_limit

        set_llm_pool_limit(instance, resources["llm"].pool_limit())
    return instance


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


def _warn_skipped(rows: list[dict]) -> None:
    """Print one warning line (stderr) per input entry left out for safety (a symlink
    leading outside the input folder; the failures rows of ``InputDiff.skipped``)."""
    for row in rows:
        typer.echo(f"warning: {row['item_id']}: {row['reason']} ({row['detail']})", err=True)


def _echo_inputs(diff) -> None:
    """Print an :class:`kgloom.corpus.partitions.InputDiff`'s counts ("input files: N new,
    ...") and warn of each entry skipped for safety."""
    typer.echo(f"input files: {len(diff.added)} new, {len(diff.changed)} changed, "
               f"{len(diff.deleted)} deleted, {len(diff.unchanged)} unchanged")
    _warn_skipped(diff.skipped)


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

    from kgloom.core.stats import cost_table
    from kgloom.llm import cache_rows, new_rows

    summary_path = Path(output_dir) / "index-summary.json"
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
        failures_path = Path(output_dir) / "failures.parquet"
        from kgloom.core.storage import read_parquet

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


INPUT = typer.Option(None, help="folder of documents (default: env KGLOOM_INPUT_DIR, the "
                     "settings' paths.input_dir, or data/input)")
OUTPUT = typer.Option(None, help="the index folder (default: env KGLOOM_OUTPUT_DIR, the "
                      "settings' paths.output_dir, or data/output)")
MODEL = typer.Option("", help="a GGUF file (default: the settings' llm.model_path, env "
                     "KGLOOM_MODEL_PATH, or the bundled SmolLM2-135M)")
FAKE = typer.Option(False, help="deterministic fake LLM (no model; default: llm.fake, env "
                    "KGLOOM_FAKE_LLM=1)")
LLM_URL = typer.Option([], "--llm-url", help="an OpenAI-compatible model server, e.g. "
                       "http://gpu1:8000 (repeatable; default: env KGLOOM_LLM_URL)")
INDEX_EMBEDDER = typer.Option("", help="the embedder that built the index (default: "
                              "KGLOOM_EMBEDDER_PATH or the bundled one)")
LLM_CONCURRENCY = typer.Option(None, "--llm-concurrency", help="LLM calls in flight per "
                               "stage, spread over the servers (default: env "
                               "KGLOOM_LLM_CONCURRENCY or 1)")


def _http_url(host: str, port: int) -> str:
    """``http://host:port``, an IPv6 address in brackets (``http://[::1]:8000``)."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def PORT(default: int):
    """A server's ``--port`` option: a TCP port, 1-65535 (uvicorn hangs on one past it)."""
    return typer.Option(default, min=1, max=65535, help="TCP port to listen on")


SET = typer.Option([], "--set", help="a setting, section.key=value (repeatable; a bare key "
                   "is an index setting: --set chunk_size=400 --set "
                   "retrieval.hop_decay=0.3 --set llm.n_gpu_layers=-1); wins over the "
                   "settings file and the KGLOOM_* variables (docs/configuration.md)")
SETTINGS_FILE = typer.Option("", "--config", "--settings", help="the settings file (YAML, "
                             "sections paths/index/llm/embedder/retrieval/search; default: "
                             "env KGLOOM_CONFIG or KGLOOM_SETTINGS, else ./kgloom.yaml)")
VERBOSE = typer.Option(False, "--verbose", "-v", help="also print Dagster's event log "
                       "(always kept in the instance and its logs/kgloom.log)")
CACHE_DIR = typer.Option("", help="folder of the answers' LLM cache (default "
                         "$XDG_CACHE_HOME/kgloom/serve; never the index folder)")
MAX_QUESTION_CHARS = typer.Option(2000, help="longest question (characters)")
MAX_TOP_K = typer.Option(50, help="largest top_k a request or tool call may ask")
MAX_DEPTH = typer.Option(3, help="deepest BFS / neighbourhood a request or tool call may ask")
HOST = typer.Option("127.0.0.1", help="the address to bind (kgloom mcp: with --transport "
                    "http); any other than 127.0.0.1 / localhost / ::1 requires an API key")
API_KEY_ENV = typer.Option("KGLOOM_API_KEY", help="the environment variable holding the API "
                           "key (when set, every request must send it: 'Authorization: "
                           "Bearer KEY' or 'X-API-Key: KEY')")


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
    from kgloom.names.candidates import SOURCES

    if candidate_source is not None and candidate_source not in SOURCES:
        typer.echo(f"error: --candidate-source must be one of {', '.join(SOURCES)}", err=True)
        raise typer.Exit(2)
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
    if not (diff.added or diff.changed or diff.unchanged):
        from kgloom.core.inputs import SUPPORTED_SUFFIXES

        typer.echo(f"warning: {input_dir} has no supported input file "
                   f"({', '.join(SUPPORTED_SUFFIXES)}): the index is empty", err=True)
    _finish(output_dir, before, report, input_dir, started)


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


def _given(ctx: typer.Context) -> list[str]:
    """The parameters of this command the user set (command line or environment), by
    their Python names, in the command's order."""
    # by name: typer may bring its own copy of click, whose enum is another class
    return [p.name for p in ctx.command.params
            if getattr(ctx.get_parameter_source(p.name), "name", None) in ("COMMANDLINE",
                                                                           "ENVIRONMENT")]


def _flag(ctx: typer.Context, name: str) -> str:
    """The command-line spelling of parameter ``name`` (``--dynamic/--static``)."""
    param = next(p for p in ctx.command.params if p.name == name)
    return "/".join([*param.opts, *getattr(param, "secondary_opts", [])])


@app.command()
def query(ctx: typer.Context,
          question: str = typer.Argument(..., help="the question, in quotes"),
          output_dir: str | None = OUTPUT,
          mode: str = typer.Option(DEFAULT_MODE, help="retrieval (ranked text units, no "
                                   "model): " + " | ".join(RETRIEVAL_MODES) + "; search "
                                   "(answers from the model): " + " | ".join(SEARCH_MODES)),
          top_k: int | None = typer.Option(None, "--top-k", help="text units to return "
                                           "(default retrieval.top_k, 5; search: to "
                                           "retrieve, search.top_k, 10)"),
          depth: int | None = typer.Option(None, help="BFS hops (multihop, fused, two_step; "
                                           "default retrieval.depth, 1)"),
          lam: float | None = typer.Option(None, "--lambda", help="fused: neighbourhood-"
                                           "overlap penalty (default retrieval.lam, 1.0)"),
          oversample: int | None = typer.Option(None, help="fused: entity candidates per "
                                                "seed (default retrieval.oversample, 5)"),
          damping: float | None = typer.Option(None, help="ppr / hybrid: probability of "
                                               "following an edge (default "
                                               "retrieval.damping, 0.5)"),
          graph_backend: str | None = typer.Option(None, help="retrieval: " + " | ".join(
              GRAPH_BACKENDS) + " (duckdb: over graph-edges.parquet; default "
              "retrieval.graph_backend, duckdb)"),
          embedder_path: str = INDEX_EMBEDDER,
          as_json: bool = typer.Option(False, "--json", help="print the whole result as JSON"),
          dynamic: bool = typer.Option(False, "--dynamic/--static", help="global search: "
                                       "dynamic community selection (rate root reports, "
                                       "descend into relevant ones) or every report of --level"),
          keep_parent: bool = typer.Option(False, "--keep-parent", help="--dynamic: keep "
                                           "a relevant report beside its relevant children "
                                           "(GraphRAG's keep_parent)"),
          level: int | None = typer.Option(None, help="global search: static level to map "
                                           "(default 1), or the deepest level --dynamic "
                                           "descends to"),
          answer: bool = typer.Option(True, "--answer/--context-only", help="search: ask the "
                                      "model, or print the context it would read (no call)"),
          budget: int | None = typer.Option(None, help="search: context tokens of local / "
                                            "direct search (default 2000, model tokens)"),
          model_path: str = MODEL, fake_llm: bool = FAKE,
          cache_path: str = typer.Option("", help="search: the query LLM cache (default "
                                         "OUTPUT_DIR/query_cache.sqlite; give another path for "
                                         "a read-only index)"),
          set_: list[str] = SET, settings_file: str = SETTINGS_FILE,
          ) -> None:
    """Retrieve the text units that answer QUESTION, or (search modes) answer it with the
    local model from a cited context. Reads the index, never writes it; search writes
    only its query cache.

    Retrieval prints rank, score, the text unit's id, document, the unit's first words
    and the entities and edges that brought it in. Search prints the route and why, the
    answer and what each citation points to. --json prints everything for scripts.

    The mode and the options are checked before anything is loaded; an option the mode
    does not read is named in a warning. Search opens the model the settings name (llm
    section: a GGUF file, model servers or the fake model), as `kgloom index` does; every
    retrieval and search knob comes from the settings (--config, KGLOOM_*, --set).
    """
    # checks first: nothing below this block may load numpy, polars, LanceDB or a model
    try:
        check_question(question)
        check_options(mode, {"top_k": top_k, "depth": depth, "lam": lam,
                             "oversample": oversample, "damping": damping,
                             "graph_backend": graph_backend, "level": level, "budget": budget})
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    for name in ignored_options(mode, _given(ctx)):
        typer.echo(f"warning: {_flag(ctx, name)} is ignored by --mode {mode} (it applies to: "
                   f"{', '.join(OPTION_MODES[name])})", err=True)
    # a retrieval mode's flags override the settings' retrieval section (search ignores them)
    flags = {} if mode in SEARCH_MODES else {
        "retrieval.top_k": top_k, "retrieval.depth": depth, "retrieval.lam": lam,
        "retrieval.oversample": oversample, "retrieval.damping": damping,
        "retrieval.graph_backend": graph_backend}
    settings = _load(settings_file, set_, **_folder_flags(output_dir=output_dir),
                     **_model_flags(model_path, fake_llm, embedder_path=embedder_path),
                     **flags)
    try:  # the settings' values, checked as the flags were
        check_options(mode, settings.retrieval.options())
    except ValueError as exc:
        typer.echo(f"error: {exc} (settings: retrieval section)", err=True)
        raise typer.Exit(2) from exc

    from kgloom.core.storage import UnreadableTableError
    from kgloom.query.retriever import (
        EmbedderMismatchError,
        IndexFilesMissingError,
        IndexInconsistentError,
    )

    errors = (ValueError, IndexFilesMissingError, IndexInconsistentError, EmbedderMismatchError,
              UnreadableTableError)
    if mode in SEARCH_MODES:
        _search(question, settings, mode, dynamic, level, answer, budget, as_json,
                top_k, cache_path, errors, keep_parent)
        return
    from kgloom.query.render import render_result
    from kgloom.query.retriever import Retriever

    try:  # the options the flags did not give: the settings' (retrieval section)
        result = Retriever.from_settings(None, settings).retrieve(question, mode=mode)
    except errors as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    if as_json:
        _json_notice(result.info)
        typer.echo(json.dumps(result.to_dict(), indent=2, ensure_ascii=False, default=str))
    else:
        typer.echo(render_result(result))


def _json_notice(info: dict) -> None:
    """With --json, the relevance notice (``info["notice"]``) also goes to stderr, for the
    person at the terminal; stdout stays one JSON document."""
    if info.get("notice"):
        typer.echo(f"notice: {info['notice']}", err=True)


def _search(question: str, settings: Settings, mode: str, dynamic: bool,
            level: int | None, answer: bool, budget: int | None, as_json: bool,
            top_k: int | None, cache_path: str, errors: tuple,
            keep_parent: bool = False) -> None:
    """`kgloom query --mode local|global|auto|direct`: a Searcher over the model the
    settings name (file, servers or fake; cache ``cache_path`` or
    ``OUTPUT_DIR/query_cache.sqlite``) with the settings' search and retrieval knobs, a
    progress bar for global search, then the rendered (or JSON) result."""

    import sqlite3

    from tqdm import tqdm

    from kgloom.llm import ModelFileError
    from kgloom.llm.http import LLMServerError
    from kgloom.query.context_builder.lazy_reports import LAZY_REPORTS_FILE
    from kgloom.query.render import render_search
    from kgloom.query.searcher import QUERY_CACHE_FILE, Searcher

    bar: list[tqdm] = []

    def progress(event: dict) -> None:
        if event["phase"] == "rate":
            if not bar:
                bar.append(tqdm(desc="rating reports", unit="report", file=sys.stderr))
            bar[0].total = event["rated"] + event["queued"]
            bar[0].n = event["rated"]
            bar[0].set_postfix(calls=event["rating_calls"], relevant=event["relevant"],
                               pruned=event["pruned_reports"], level=event["level"])
        elif event["phase"] == "map":
            if len(bar) < 2:
                bar.append(tqdm(desc="map", unit="batch", total=event["total"],
                                file=sys.stderr))
            bar[-1].total = event["total"]  # grows when the map falls back to parents
            bar[-1].n = event["done"]
            bar[-1].set_postfix(points=event["points"])
            bar[-1].refresh()

    output_dir = settings.paths.output_dir
    given = {"keep_parent": keep_parent or None, "top_k": top_k}
    search = settings.search.model_copy(update={k: v for k, v in given.items() if v is not None})
    settings = settings.model_copy(update={"search": search})
    cache = Path(cache_path or Path(output_dir) / QUERY_CACHE_FILE)
    try:
        searcher = Searcher.from_settings(output_dir, settings, cache_path=cache)
        result = searcher.search(question, mode=mode, dynamic=dynamic, level=level,
                                 answer=answer, budget=budget, progress=progress)
    except (*errors, ModelFileError, LLMServerError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    except sqlite3.Error as exc:  # the query cache, or the lazy reports beside it
        typer.echo(f"error: the query cache {cache} (or {LAZY_REPORTS_FILE} beside it) "
                   f"cannot be used: {exc}; give --cache-path a file in a folder you can "
                   "write", err=True)
        raise typer.Exit(2) from exc
    finally:
        for b in bar:
            b.close()
    if as_json:
        _json_notice(result.info)
        typer.echo(json.dumps(result.to_dict(), indent=2, ensure_ascii=False, default=str))
    else:
        typer.echo(render_search(result, context_only=not answer))


@app.command("import-graph")
def import_graph(
        nodes: str = typer.Option(..., help="nodes table (.parquet/.csv/.jsonl): id, vector "
                                  "[, title, type, description, any other columns]"),
        edges: str = typer.Option(..., help="edges table: source, target [, weight, "
                                  "description]"),
        output_dir: str = typer.Option(..., help="a new or empty folder (or an earlier "
                                       "import, replaced)"),
) -> None:
    """Import a graph kgloom did not extract (nodes with vectors, edges) as an index.

    Writes the files `kgloom index` writes for the graph (entities, relationships,
    graph-nodes/graph-edges parquet, LanceDB entities table) with no text units; query
    it by vector (Retriever.fused_by_vector / two_step_by_vector). See
    kgloom/apps/graph_import.py for the table formats.
    """
    import time

    from kgloom.apps.graph_import import GraphImportError, read_graph_tables
    from kgloom.apps.graph_import import import_graph as run_import

    start = time.perf_counter()

    def say(line: str) -> None:
        typer.echo(f"[{time.perf_counter() - start:6.1f} s] {line}", err=True)

    try:
        say(f"reading {nodes} and {edges}")
        node_table, edge_table = read_graph_tables(nodes, edges)
        summary = run_import(node_table, edge_table, output_dir,
                             source={"nodes": nodes, "edges": edges}, progress=say)
    except GraphImportError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    typer.echo(json.dumps(summary, indent=2))


from kgloom.apps import graphrag_settings as _grs  # noqa: E402 (stdlib-only: keeps start-up fast)


@app.command("graphrag-settings")
def graphrag_settings(
        output_dir: str | None = OUTPUT,
        root: str = typer.Option("", help="GraphRAG's root folder for settings.yaml "
                                 "(default OUTPUT_DIR/graphrag); `graphrag query --root` it"),
        chat_url: str = typer.Option("http://127.0.0.1:8000/v1", help="OpenAI-compatible "
                                     "chat endpoint (llama-cpp-python's server; for DRIFT, "
                                     "serve-embeddings --chat-upstream)"),
        chat_model: str = typer.Option(_grs.CHAT_MODEL, help="the chat server's "
                                       "model id (its --model_alias)"),
        embeddings_url: str = typer.Option("http://127.0.0.1:8001/v1", help="`kgloom "
                                           "serve-embeddings`'s endpoint"),
        context_window: int = typer.Option(_grs.DEFAULT_CONTEXT_WINDOW,
                                           help="the chat model's context window "
                                           "(model tokens; the server's --n_ctx)"),
        reply_tokens: int = typer.Option(_grs.DEFAULT_REPLY_TOKENS,
                                         help="max_tokens of each chat call"),
        tokens_ratio: float = typer.Option(_grs.MODEL_TOKENS_PER_GRAPHRAG_TOKEN,
                                           help="the chat model's tokens per cl100k token "
                                           "(GraphRAG counts in cl100k; the default fits "
                                           "SmolLM2 on English)"),
        input_dir: str = typer.Option("", help="the documents folder (GraphRAG's "
                                      "input_storage; default: input next to the index)"),
) -> None:
    """Write a complete Microsoft GraphRAG (3.3) settings.yaml for an index: chat and
    embedding models, context budgets fitted to the chat model's window, the vector-store
    mapping to the index's LanceDB tables and the paths (docs/graphrag.md)."""
    output_dir = _load(None, **_folder_flags(output_dir=output_dir)).paths.output_dir
    try:
        budgets = _grs.fit_budgets(context_window, reply_tokens, tokens_ratio)
        path = _grs.write_settings(output_dir, root or None, chat_url=chat_url,
                              embeddings_url=embeddings_url, chat_model=chat_model,
                              budgets=budgets, input_dir=input_dir or None)
    except _grs.GraphRAGSettingsError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    typer.echo(f"wrote {path} ({budgets.context_tokens}-token contexts for a "
               f"{context_window}-token window); run: graphrag query --root {path.parent} "
               "--method local \"...\"")


@app.command("serve-embeddings")
def serve_embeddings(
        output_dir: str | None = OUTPUT,
        host: str = typer.Option("127.0.0.1", help="address to bind (0.0.0.0 exposes it)"),
        port: int = PORT(8001),
        embedder_path: str = INDEX_EMBEDDER,
        chat_upstream: str = typer.Option("", help="also pass /v1/chat/completions through "
                                          "to this chat server, json_schema replies "
                                          "rewritten for llama-cpp-python (GraphRAG DRIFT)"),
) -> None:
    """Serve the index's embedder as an OpenAI-compatible endpoint (/v1/embeddings,
    /v1/models) for GraphRAG's queries: the same model and normalisation as the index,
    checked against its lancedb/embedder.json. Read-only."""
    import uvicorn

    from kgloom.apps.embeddings_server import create_app
    from kgloom.embedding.store import ExternalVectors
    from kgloom.query.retriever import (
        EmbedderMismatchError,
        IndexFilesMissingError,
        IndexInconsistentError,
        Retriever,
    )

    try:
        settings = _load(None, **_folder_flags(output_dir=output_dir),
                         **_model_flags(embedder_path=embedder_path))
        output_dir = settings.paths.output_dir
        embedder = Retriever(output_dir, settings.embedder.model_path or None).embedder
    except (IndexFilesMissingError, IndexInconsistentError, EmbedderMismatchError,
            ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    if isinstance(embedder, ExternalVectors):
        typer.echo("error: this index's vectors were imported (kgloom import-graph); no "
                   "embedder can embed queries for them", err=True)
        raise typer.Exit(2)
    model_id = _grs.EMBEDDING_MODEL
    typer.echo(f"serving {embedder.name} ({embedder.dim} dims) as {model_id} on "
               f"{_http_url(host, port)}/v1" + (f", chat passed through to {chat_upstream}"
                                             if chat_upstream else ""), err=True)
    uvicorn.run(create_app(embedder, model_id, chat_upstream or None), host=host,
                port=port, log_level="warning")


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def _serve_cache_dir(cache_dir: str, output_dir: str) -> Path:
    """The folder of `kgloom serve`'s LLM cache: ``cache_dir``, or
    ``$XDG_CACHE_HOME/kgloom/serve`` (``~/.cache/kgloom/serve``); never inside the index.

    Raises:
        typer.Exit: 2 when it lies inside ``output_dir`` (the server writes nothing there).
    """
    folder = Path(cache_dir or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                  / "kgloom" / "serve").resolve()
    if folder.is_relative_to(Path(output_dir).resolve()):
        typer.echo(f"error: the answer cache {folder} lies inside the index folder "
                   f"{output_dir}, which kgloom serve never writes; give --cache-dir "
                   "elsewhere", err=True)
        raise typer.Exit(2)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _open_for_serving(settings: Settings, cache_dir: str):
    """(the answering model, the :class:`kgloom.serve.live_index.LiveIndex` of the
    settings' output folder) for ``kgloom serve`` and ``kgloom mcp``: the model the
    settings name, its answers cached in ``cache_dir`` (:func:`_serve_cache_dir`), and
    the index's current build opened with the settings' search and retrieval knobs.

    Raises:
        typer.Exit: 2, with the reason, when the model, the cache folder or the index
            cannot be opened.
    """
    from kgloom.llm import CACHE_FILE, ModelFileError
    from kgloom.llm.http import LLMServerError
    from kgloom.query.retriever import (
        EmbedderMismatchError,
        IndexFilesMissingError,
        IndexInconsistentError,
    )
    from kgloom.serve.app import open_live_index

    cache = _serve_cache_dir(cache_dir, settings.paths.output_dir)
    try:
        llm = settings.llm.open_cached(settings.llm.cache_path or cache / CACHE_FILE)
        live = open_live_index(settings.paths.output_dir, llm,
                               settings.embedder.model_path or None, settings)
    except (ModelFileError, LLMServerError, IndexFilesMissingError, IndexInconsistentError,
            EmbedderMismatchError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    return llm, live


@app.command()
def serve(output_dir: str | None = typer.Option(None, help="the index to serve (read only; "
                                                "default: env KGLOOM_OUTPUT_DIR, the "
                                                "settings' paths.output_dir, or data/output)"),
          host: str = HOST, port: int = PORT(8000), api_key_env: str = API_KEY_ENV,
          cors_origin: list[str] = typer.Option([], "--cors-origin", help="an origin "
                                                "allowed to call the API from a browser "
                                                "(repeatable; default none: CORS off)"),
          model_path: str = MODEL, fake_llm: bool = FAKE, llm_url: list[str] = LLM_URL,
          embedder_path: str = INDEX_EMBEDDER,
          cache_dir: str = CACHE_DIR, max_question_chars: int = MAX_QUESTION_CHARS,
          max_top_k: int = MAX_TOP_K, max_depth: int = MAX_DEPTH,
          max_body_bytes: int = typer.Option(65536, help="largest request body (bytes)"),
          set_: list[str] = SET, settings_file: str = SETTINGS_FILE,
          ) -> None:
    """Serve the index over HTTP: a JSON API for every query mode, OpenAI-compatible
    chat (/v1/chat/completions, /v1/models) and Ollama-compatible chat (/api/chat,
    /api/generate, /api/tags), graph endpoints and the explorer page at /. With --llm-url
    the answers stream from that model server. Read-only; a build published while it runs
    is picked up between requests (docs/serve.md)."""
    api_key = os.environ.get(api_key_env, "") or None
    if host not in LOOPBACK_HOSTS and api_key is None:
        typer.echo(f"error: refusing to listen on {host} without an API key: anyone who can "
                   f"reach it could query the index. Set ${api_key_env} to a secret (clients "
                   "send 'Authorization: Bearer KEY' or 'X-API-Key: KEY'), or bind "
                   "127.0.0.1", err=True)
        raise typer.Exit(2)
    import uvicorn

    from kgloom.serve.app import Limits, create_app

    settings = _load(settings_file, set_, **_folder_flags(output_dir=output_dir),
                     **_model_flags(model_path, fake_llm, llm_url, embedder_path))
    output_dir = settings.paths.output_dir
    llm, live = _open_for_serving(settings, cache_dir)
    web = create_app(live, llm.model_id, api_key, tuple(cors_origin),
                     Limits(max_question_chars=max_question_chars, max_top_k=max_top_k,
                            max_depth=max_depth, max_body_bytes=max_body_bytes))
    build = live.handle.build_id
    typer.echo(f"serving {output_dir} (build {build}) on {_http_url(host, port)}/ "
               f"(explorer at /, API at /api, OpenAI-compatible at /v1, Ollama-compatible "
               f"at /api/chat); answers {_answer_source(web)}; API key "
               f"{'required' if api_key else 'not required (loopback only)'}; CORS "
               f"{', '.join(cors_origin) if cors_origin else 'off'}", err=True)
    uvicorn.run(web, host=host, port=port, log_level="warning")


def _answer_source(web) -> str:
    """How `kgloom serve`'s chat answers are written: streamed from the model server, or
    whole by the in-process model (docs/serve.md, "Chat")."""
    backend = web.state.live.handle.searcher.llm.backend
    urls = getattr(backend, "urls", None)
    return (f"streamed from {', '.join(urls)}" if urls else
            "by the in-process model, sent in pieces once checked")


@app.command()
def ui(port: int = typer.Option(3000, help="the UI's port"),
       host: str = typer.Option("127.0.0.1", help="the address the UI listens on (0.0.0.0: "
                                "every interface; the UI has no login)"),
       input_dir: str = typer.Option("", help="the input folder the UI's runs, sensor and "
                                     "schedule read (default: env KGLOOM_INPUT_DIR or "
                                     "data/input)"),
       output_dir: str = typer.Option("", help="the index the UI's runs write (default: env "
                                      "KGLOOM_OUTPUT_DIR or data/output)"),
       settings_file: str = typer.Option("", "--config", help="the settings file the code "
                                         "location reads (passed as KGLOOM_CONFIG; default: "
                                         "env KGLOOM_CONFIG, else ./kgloom.yaml)")) -> None:
    """Start the Dagster UI (webserver + daemon, Dagster's ``dg dev``) on HOST:PORT over the
    index's own instance: the one `kgloom index`, `backfill` and `status` use for the same
    output folder ($DAGSTER_HOME when exported, else OUTPUT_DIR/.dagster_home), whatever
    the working folder. Before it starts, runs whose process is gone are failed (their pool
    slots freed) and one partition per input file is registered, so "Materialize all" can
    pick them. --input-dir / --output-dir / --config reach the code location as
    KGLOOM_INPUT_DIR / KGLOOM_OUTPUT_DIR / KGLOOM_CONFIG (absolute paths)."""
    from kgloom.cli.runner import sync_partitions

    settings = _load(settings_file or None, **_folder_flags(input_dir, output_dir))
    paths = settings.paths
    if host not in LOOPBACK_HOSTS:
        typer.echo(f"warning: the UI listens on {host} with no login: anyone who can reach "
                   "this port can launch runs", err=True)
    dg_cli = Path(sys.executable).with_name("dg")
    if not dg_cli.exists():
        typer.echo(f"error: Dagster's dg command is missing next to {sys.executable} "
                   "(pip install dagster-dg-cli)", err=True)
        raise typer.Exit(2)
    instance = _instance(paths.output_dir, recover=True)  # exports DAGSTER_HOME
    if Path(paths.input_dir).is_dir():
        _echo_inputs(sync_partitions(instance, paths.input_dir, paths.output_dir))
    else:
        typer.echo(f"warning: input folder {paths.input_dir} does not exist: no partition "
                   "to materialize yet", err=True)
    env = dict(os.environ)  # after _instance: DAGSTER_HOME is the index's instance
    env.update({"KGLOOM_INPUT_DIR": str(Path(paths.input_dir).resolve()),
                "KGLOOM_OUTPUT_DIR": str(Path(paths.output_dir).resolve())})
    if settings_file:
        env["KGLOOM_CONFIG"] = str(Path(settings_file).resolve())
    typer.echo(f"Dagster instance: {env['DAGSTER_HOME']}")
    sys.exit(subprocess.call([str(dg_cli), "dev", "-m", "kgloom.definitions",
                              "-h", host, "-p", str(port)], env=env))


if __name__ == "__main__":
    app()
