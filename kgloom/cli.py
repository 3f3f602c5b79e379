"""``kgloom`` command line: index, cache, status, ui.

``kgloom index`` materializes every asset in this process against a persistent Dagster
instance (``$DAGSTER_HOME``, default ``.dagster_home/``), so its runs show in the UI.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import typer

app = typer.Typer(add_completion=False, help="kgloom: a GraphRAG index built by a local LLM.")

REPO_ROOT = Path(__file__).resolve().parent.parent


def _dagster_home() -> Path:
    home = Path(os.environ.get("DAGSTER_HOME") or Path.cwd() / ".dagster_home").resolve()
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists() and (REPO_ROOT / "dagster.yaml").exists():
        shutil.copy(REPO_ROOT / "dagster.yaml", home / "dagster.yaml")
    os.environ["DAGSTER_HOME"] = str(home)
    return home


@app.command()
def index(input_dir: str = typer.Option("data/input", help="folder of documents"),
          output_dir: str = typer.Option("data/output", help="where the index is written"),
          model_path: str = typer.Option("", help="a GGUF file (default: bundled SmolLM2-135M)"),
          fake_llm: bool = typer.Option(False, help="deterministic fake LLM (no model)"),
          select: str = typer.Option("*", help="asset selection, e.g. 'community_reports*'"),
          max_gleanings: int = typer.Option(0, help="extra extraction rounds per text unit"),
          ) -> None:
    """Build (or refresh) the index of INPUT_DIR into OUTPUT_DIR; shows progress bars."""
    import dagster as dg

    from kgloom.assets import ALL_ASSETS
    from kgloom.definitions import build_resources
    from kgloom.llm import ModelFileError

    resources = build_resources(input_dir, output_dir, model_path, fake_llm,
                                max_gleanings=max_gleanings)
    try:
        resources["llm"].verify()  # a missing model stops the run before any work
    except ModelFileError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    if not Path(input_dir).is_dir():
        typer.echo(f"error: input folder {input_dir} does not exist", err=True)
        raise typer.Exit(2)
    instance = dg.DagsterInstance.get() if _dagster_home() else None
    result = dg.materialize(ALL_ASSETS, resources=resources, instance=instance,
                            selection=select, raise_on_error=False)
    summary_path = Path(output_dir) / "index-summary.json"
    if summary_path.exists():
        s = json.loads(summary_path.read_text())
        typer.echo(json.dumps({k: s[k] for k in ("rows", "llm_calls", "llm_cache_hits",
                                                 "prompt_tokens", "completion_tokens",
                                                 "seconds_per_stage")}, indent=2))
    if not result.success:
        typer.echo("error: the run failed; see the log above", err=True)
        raise typer.Exit(1)
    typer.echo(f"index written to {output_dir} (run {result.run_id})")


@app.command()
def cache(output_dir: str = typer.Option("data/output")) -> None:
    """Show the LLM cache: rows, tokens and model seconds per stage, and last run's hit rate."""
    from kgloom.stats import read_stage_stats
    from kgloom.llm import LLMCache
    from kgloom.resources.llm import CACHE_FILE

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
def status(output_dir: str = typer.Option("data/output")) -> None:
    """Show what each stage last produced (rows, seconds, LLM calls)."""
    from kgloom.stats import read_stage_stats

    for stage, st in read_stage_stats(Path(output_dir)).items():
        llm = st.get("llm") or {}
        typer.echo(f"{stage:<20} {st['seconds']:>8.1f}s  llm calls {llm.get('calls', 0):>4}  "
                   f"hits {llm.get('cache_hits', 0):>4}")


@app.command()
def ui(port: int = typer.Option(3000)) -> None:
    """Start the Dagster UI (webserver + daemon) on 127.0.0.1."""
    _dagster_home()
    sys.exit(subprocess.call([sys.executable, "-m", "dagster", "dev", "-m", "kgloom.definitions",
                              "-h", "127.0.0.1", "-p", str(port)]))


if __name__ == "__main__":
    app()
