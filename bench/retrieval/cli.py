"""The fused-retrieve study's command line: ``doctor``, ``setup``, ``run``, ``results``.

Run from the repository root::

    python -m bench.retrieval doctor            # what is installed, cores, load, disk
    python -m bench.retrieval setup             # graph -> kgloom import-graph -> manifest
    python -m bench.retrieval run               # 6,000 cases x (fused, two_step) x handles
    python -m bench.retrieval run --kind sweep  # oversample x lambda, seeds only
    python -m bench.retrieval run --kind threads  # BFS parallelism 1 vs 2
    python -m bench.retrieval results           # JSON per cell + plots

Large files (the generated tables and the index) go to ``--work`` (default
``bench/retrieval/work/``, ignored by git); the manifest, the per-query CSVs (gzip) and
the results go to ``bench/results/retrieval/``.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import typer

from bench.retrieval.setup_graph import ROOT

app = typer.Typer(add_completion=False, help="kgloom's fused-retrieve study")
WORK = typer.Option(ROOT / "bench" / "retrieval" / "work", help="large files (ignored by git)")
RESULTS = typer.Option(ROOT / "bench" / "results" / "retrieval", help="committed results")


def _save_json(obj: dict, path: Path, settings: dict) -> None:
    """Write ``obj`` to ``path``, stamped with the command's ``settings`` (bench/stamp.py)."""
    from bench.stamp import save_result

    save_result(path, obj, settings, default=str)


@app.command()
def doctor(work: Path = WORK, results: Path = RESULTS) -> None:
    """Check what the study needs: packages, the worktree's kgloom, DuckDB's USING KEY,
    cores and load, free memory and disk, and whether setup has run."""
    from bench.retrieval.runner import machine_load

    ok = True

    def line(name: str, good: bool, detail: str) -> None:
        nonlocal ok
        ok &= good
        typer.echo(f"{'ok ' if good else 'BAD'}  {name:<22} {detail}")

    import kgloom.query.retriever as retriever

    here = Path(retriever.__file__).resolve()
    line("kgloom", here.is_relative_to(ROOT),
         f"{here} (must be this checkout: run with PYTHONPATH=$PWD)")
    for mod in ("numpy", "polars", "lancedb", "duckdb", "igraph", "matplotlib", "scipy"):
        try:
            m = __import__(mod)
            line(mod, True, getattr(m, "__version__", "?"))
        except ImportError as exc:
            line(mod, False, str(exc))
    from kgloom.query.graph_bfs import supports_using_key

    line("duckdb USING KEY", supports_using_key(), "recursive CTE of the files handle's BFS")
    load = machine_load()
    line("cores", True, f"{load['cores']} (load average {load['load_1m']:.2f} / "
         f"{load['load_5m']:.2f} / {load['load_15m']:.2f}; latencies under load are noisy)")
    line("memory", load["mem_available_gib"] >= 4,
         f"{load['mem_available_gib']:.1f} GiB available (the study needs ~3)")
    work.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(work).free / 2**30
    line("disk", free >= 2, f"{free:.1f} GiB free under {work} (setup writes ~0.7 GiB)")
    index = work / "index"
    line("index", (index / "graph-import.json").exists(),
         f"{index} ({'present' if (index / 'graph-import.json').exists() else 'run setup'})")
    line("manifest", (results / "manifest.csv").exists(), str(results / "manifest.csv"))
    raise typer.Exit(0 if ok else 1)


@app.command()
def setup(work: Path = WORK, results: Path = RESULTS,
          seed: int = typer.Option(0, help="graph generator seed"),
          nodes: Path = typer.Option(None, help="bring your own nodes table (id, vector, "
                                     "label, fine_label ...) instead of generating one"),
          edges: Path = typer.Option(None, help="... and its edges table (source, target)"),
          n_nodes: int = typer.Option(0, help="generate this many nodes (0: ogbn-arxiv's)"),
          n_edges: int = typer.Option(0, help="generate this many edges (0: ogbn-arxiv's)"),
          queries: int = typer.Option(500, help="seed queries in the manifest"),
          manifest_seed: int = typer.Option(16, help="manifest seed")) -> None:
    """Generate the graph (or take --nodes/--edges), import it with `kgloom
    import-graph` into WORK/index, describe it (degree distribution, clustering) and
    write the manifest."""
    settings = dict(locals())  # the options, for the results' stamp
    from bench.retrieval import setup_graph as sg

    if (nodes is None) != (edges is None):
        raise typer.BadParameter("give both --nodes and --edges, or neither")
    gen = {"source": "given tables", "nodes_table": str(nodes), "edges_table": str(edges)}
    if nodes is None:
        typer.echo("generating the graph ...", err=True)
        nodes, edges, gen = sg.write_generated_tables(work / "tables", seed, n_nodes or None,
                                                      n_edges or None)
        typer.echo(f"generated in {gen['seconds']} s", err=True)
    summary = sg.import_with_cli(nodes, edges, work / "index")
    typer.echo("describing the graph (igraph) ...", err=True)
    stats = sg.describe_graph(work / "index")
    results.mkdir(parents=True, exist_ok=True)
    sg.degree_plot(stats, results / "degree_distribution.png")
    manifest = sg.write_manifest(work / "index", results / "manifest.csv", queries, manifest_seed)
    _save_json({"graph": gen, "import": {k: v for k, v in summary.items() if k != "source"},
                "stats": stats, "manifest": manifest}, results / "graph.json", settings)
    typer.echo(json.dumps(stats, indent=2))


@app.command()
def run(work: Path = WORK, results: Path = RESULTS,
        kind: str = typer.Option("main", help="main | sweep | threads (see runner.py)"),
        handles: str = typer.Option("memory,files,files_reread",
                                    help="main: handles, comma-separated"),
        limit: int = typer.Option(0, help="only the first N seed queries (0: all)"),
        warmup: int = typer.Option(24, help="warm-up cases per handle, not recorded"),
        alternate: bool = typer.Option(True, help="main: half of each cell's queries "
                                       "run the baseline first"),
        lam: float = typer.Option(1.0, "--lambda", help="fused: overlap penalty"),
        oversample: int = typer.Option(5, help="fused: candidates per seed"),
        name: str = typer.Option("", help="file name under runs/ (default: the kind)")) -> None:
    """Time the fused retrieve and the two-step baseline (per-query rows to
    RESULTS/runs/NAME.csv.gz, parameters and machine load to RESULTS/runs/NAME.json)."""
    settings = dict(locals())  # the options, for the results' stamp
    import time

    from bench.retrieval import runner

    if kind not in ("main", "sweep", "threads"):
        raise typer.BadParameter(f"--kind must be main, sweep or threads, got {kind!r}")
    chosen = [h.strip() for h in handles.split(",") if h.strip()]
    unknown = [h for h in chosen if h not in runner.HANDLES]
    if unknown:
        raise typer.BadParameter(f"unknown handle(s) {unknown}; known: {list(runner.HANDLES)}")
    try:
        study = runner.Study.open(work / "index", results / "manifest.csv")
    except (FileNotFoundError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    before, start = runner.machine_load(), time.perf_counter()
    if kind == "main":
        rows = runner.run_main(study, chosen, limit or None, warmup, alternate, lam, oversample)
    elif kind == "sweep":
        rows = runner.run_sweep(study, limit or None)
    else:
        rows = runner.run_threads(study, limit or None, warmup, lam, oversample)
    name = name or kind
    path = runner.write_rows(rows, results / "runs" / f"{name}.csv.gz")
    typer.echo(f"wrote {path} ({len(rows)} rows)")
    _save_json({"kind": kind, "handles": chosen if kind == "main" else None,
                "limit": limit or None, "warmup": warmup, "alternate": alternate,
                "lam": lam, "oversample": oversample, "rows": runner.label_counts(rows),
                "manifest_sha256": study.manifest_sha256,
                "wall_seconds": round(time.perf_counter() - start, 1),
                "load_before": before, "load_after": runner.machine_load(),
                "env": {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS",
                                                       "POLARS_MAX_THREADS")}},
               results / "runs" / f"{name}.json", settings)


@app.command()
def results(results: Path = RESULTS) -> None:
    """Aggregate RESULTS/runs/ into RESULTS/results.json (per cell, sweeps, threads,
    targets), RESULTS/results.md (the tables) and the plots (latency_by_cell,
    overlap_scatter, lambda_frontier PNG)."""
    from bench.retrieval.results import build_results, markdown

    settings = {"results": results}
    out = build_results(results)
    _save_json(out, results / "results.json", settings)
    (results / "results.md").write_text(markdown(out), encoding="utf-8")
    typer.echo(f"wrote {results / 'results.md'}")
    typer.echo(json.dumps(out["targets"], indent=2))

