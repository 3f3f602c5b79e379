"""``kgloom query``: retrieval (ranked text units, no model) or search (an answer from the
model, cited) over an index, read-only. The mode and its options are checked before
anything heavy is loaded (:mod:`kgloom.query.modes`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from kgloom.cli.cli_common import (
    FAKE,
    INDEX_EMBEDDER,
    MODEL,
    OUTPUT,
    SET,
    SETTINGS_FILE,
    _folder_flags,
    _load,
    _model_flags,
    app,
)
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

QUESTION = typer.Argument(..., help="the question, in quotes")
MODE = typer.Option(DEFAULT_MODE, help="retrieval (ranked text units, no "
                    "model): " + " | ".join(RETRIEVAL_MODES) + "; search "
                    "(answers from the model): " + " | ".join(SEARCH_MODES))
TOP_K = typer.Option(None, "--top-k", help="text units to return "
                     "(default retrieval.top_k, 5; search: to "
                     "retrieve, search.top_k, 10)")
DEPTH = typer.Option(None, help="BFS hops (multihop, fused, two_step; "
                     "default retrieval.depth, 1)")
LAMBDA = typer.Option(None, "--lambda", help="fused: neighbourhood-"
                      "overlap penalty (default retrieval.lam, 1.0)")
OVERSAMPLE = typer.Option(None, help="fused: entity candidates per "
                          "seed (default retrieval.oversample, 5)")
DAMPING = typer.Option(None, help="ppr / hybrid: probability of "
                       "following an edge (default "
                       "retrieval.damping, 0.5)")
GRAPH_BACKEND = typer.Option(None, help="retrieval: " + " | ".join(
    GRAPH_BACKENDS) + " (duckdb: over graph-edges.parquet; default "
    "retrieval.graph_backend, duckdb)")
AS_JSON = typer.Option(False, "--json", help="print the whole result as JSON")
DYNAMIC = typer.Option(False, "--dynamic/--static", help="global search: "
                       "dynamic community selection (rate root reports, "
                       "descend into relevant ones) or every report of --level")
KEEP_PARENT = typer.Option(False, "--keep-parent", help="--dynamic: keep "
                           "a relevant report beside its relevant children "
                           "(GraphRAG's keep_parent)")
LEVEL = typer.Option(None, help="global search: static level to map "
                     "(default 1), or the deepest level --dynamic "
                     "descends to")
ANSWER = typer.Option(True, "--answer/--context-only", help="search: ask the "
                      "model, or print the context it would read (no call)")
BUDGET = typer.Option(None, help="search: context tokens of local / "
                      "direct search (default 2000, model tokens)")
CACHE_PATH = typer.Option("", help="search: the query LLM cache (default "
                          "OUTPUT_DIR/query_cache.sqlite; give another path for "
                          "a read-only index)")


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
def query(ctx: typer.Context, question: str = QUESTION, output_dir: str | None = OUTPUT,
          mode: str = MODE, top_k: int | None = TOP_K, depth: int | None = DEPTH,
          lam: float | None = LAMBDA, oversample: int | None = OVERSAMPLE,
          damping: float | None = DAMPING, graph_backend: str | None = GRAPH_BACKEND,
          embedder_path: str = INDEX_EMBEDDER, as_json: bool = AS_JSON,
          dynamic: bool = DYNAMIC, keep_parent: bool = KEEP_PARENT, level: int | None = LEVEL,
          answer: bool = ANSWER, budget: int | None = BUDGET,
          model_path: str = MODEL, fake_llm: bool = FAKE, cache_path: str = CACHE_PATH,
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
    _check_query(ctx, question, mode, {
        "top_k": top_k, "depth": depth, "lam": lam, "oversample": oversample,
        "damping": damping, "graph_backend": graph_backend, "level": level,
        "budget": budget})
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
    if mode in SEARCH_MODES:
        _search(question, settings, mode, dynamic, level, answer, budget, as_json,
                top_k, cache_path, _index_errors(), keep_parent)
        return
    _retrieve(question, settings, mode, as_json)


def _check_query(ctx: typer.Context, question: str, mode: str, options: dict) -> None:
    """Check the question, the mode and the options' values before anything is loaded,
    and warn (stderr) of each option given that the mode does not read.

    Raises:
        typer.Exit: 2, with the reason, for an empty or overlong question, an unknown
            mode or a value out of range.
    """
    try:
        check_question(question)
        check_options(mode, options)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    for name in ignored_options(mode, _given(ctx)):
        typer.echo(f"warning: {_flag(ctx, name)} is ignored by --mode {mode} (it applies to: "
                   f"{', '.join(OPTION_MODES[name])})", err=True)


def _index_errors() -> tuple[type[Exception], ...]:
    """The errors a query reports as ``error: ...`` with exit status 2: a bad value, and
    an index missing files, inconsistent, built by another embedder or unreadable."""
    from kgloom.core.storage import UnreadableTableError
    from kgloom.query.retriever import (
        EmbedderMismatchError,
        IndexFilesMissingError,
        IndexInconsistentError,
    )

    return (ValueError, IndexFilesMissingError, IndexInconsistentError, EmbedderMismatchError,
            UnreadableTableError)


def _retrieve(question: str, settings: Settings, mode: str, as_json: bool) -> None:
    """`kgloom query` in a retrieval mode: the ranked text units, rendered or as JSON."""
    errors = _index_errors()
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


class _SearchProgress:
    """Global search's progress bars on stderr: the reports rated (dynamic community
    selection), then the map batches; a search's ``progress`` callback."""

    def __init__(self) -> None:
        self.bars: list = []

    def __call__(self, event: dict) -> None:
        from tqdm import tqdm

        bar = self.bars
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

    def close(self) -> None:
        for b in self.bars:
            b.close()


def _search(question: str, settings: Settings, mode: str, dynamic: bool,
            level: int | None, answer: bool, budget: int | None, as_json: bool,
            top_k: int | None, cache_path: str, errors: tuple,
            keep_parent: bool = False) -> None:
    """`kgloom query --mode local|global|auto|direct`: a Searcher over the model the
    settings name (file, servers or fake; cache ``cache_path`` or
    ``OUTPUT_DIR/query_cache.sqlite``) with the settings' search and retrieval knobs, a
    progress bar for global search, then the rendered (or JSON) result."""

    import sqlite3

    from kgloom.llm import ModelFileError
    from kgloom.llm.http import LLMServerError
    from kgloom.query.context_builder.lazy_reports import LAZY_REPORTS_FILE
    from kgloom.query.render import render_search
    from kgloom.query.searcher import QUERY_CACHE_FILE, Searcher

    progress = _SearchProgress()
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
        progress.close()
    if as_json:
        _json_notice(result.info)
        typer.echo(json.dumps(result.to_dict(), indent=2, ensure_ascii=False, default=str))
    else:
        typer.echo(render_search(result, context_only=not answer))
