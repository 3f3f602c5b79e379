"""What the ``kgloom`` commands share: the Typer ``app`` every command module registers on
(:mod:`kgloom.cli.main` imports them all), the options several commands take, and the
helpers that load a command's settings, check its model and open the index's Dagster
instance."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import typer

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
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")  # no API key needed to listen there
