"""``kgloom serve`` (the index over HTTP: JSON API, OpenAI- and Ollama-compatible chat,
the explorer) with the model, cache and index opening it shares with ``kgloom mcp``, and
``kgloom ui`` (the Dagster UI over the index's own instance)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from kgloom.cli.cli_common import (
    API_KEY_ENV,
    CACHE_DIR,
    FAKE,
    HOST,
    INDEX_EMBEDDER,
    LLM_URL,
    LOOPBACK_HOSTS,
    MAX_DEPTH,
    MAX_QUESTION_CHARS,
    MAX_TOP_K,
    MODEL,
    PORT,
    SET,
    SETTINGS_FILE,
    _echo_inputs,
    _folder_flags,
    _http_url,
    _instance,
    _load,
    _model_flags,
    app,
)

if TYPE_CHECKING:
    from kgloom.settings import Settings


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
