"""Peak memory of every step of a big index, without its hours of extraction: the index
is rebuilt from a finished one's input files and the extraction rows of its LLM cache, so
extraction replays from the cache while every later stage runs for real (the merge check
and the reports call the model again, since only extraction rows are kept), and the
process's resident memory is sampled every 0.2 s beside Dagster's step events.

Why: a whole-pool index takes more than two hours on 2 cores, most of it extraction; the
peak is in the later stages (the entity and vector stages hold the embedder, the merge
check and the reports the model), which this reaches in about 25 minutes. What it leaves
out: extraction's own peak (the model and one partition's rows, about 1 GB on the pool,
well under the later stages') and extraction's seconds.

Usage: python bench/bench_pool_memory.py --from OUTPUT_PARENT [--ref REF] [--work DIR]
           [--save bench/results/pool_memory.json]
       python bench/bench_pool_memory.py --analyze WORK [--save ...]

``--from``: the work folder of a finished pool bench (``python -m bench pool --work``):
its ``input/`` and ``output/llm_cache.sqlite``. ``--ref``: run a git ref's tree instead
of this one (exported into the work folder, bench/harness.py). ``--analyze``: only read a
finished run's ``replay.json`` and event logs. Figures: wall seconds, peak RSS (MiB), per
Dagster step its window (seconds from the start) and its peak RSS, the RSS timeline (1 s
samples), the index summary's stage costs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import sqlite3
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import build_index, export_ref  # noqa: E402
from bench.stamp import load_average, save_result  # noqa: E402


def prepare(source: Path, work: Path) -> None:
    """Fresh ``work/input`` (the source's input files) and ``work/output/llm_cache.sqlite``
    holding only the source cache's extraction rows.

    Raises:
        FileNotFoundError: the source has no ``input/`` or no ``output/llm_cache.sqlite``.
    """
    cache = source / "output" / "llm_cache.sqlite"
    if not (source / "input").is_dir() or not cache.is_file():
        raise FileNotFoundError(f"{source} needs input/ and output/llm_cache.sqlite "
                                f"(the --work folder of a finished pool bench)")
    for sub in ("input", "output", "dagster_home"):
        shutil.rmtree(work / sub, ignore_errors=True)
    shutil.copytree(source / "input", work / "input")
    (work / "output").mkdir(parents=True)
    kept = work / "output" / "llm_cache.sqlite"
    shutil.copy(cache, kept)
    with sqlite3.connect(kept) as con:
        con.execute("DELETE FROM llm_calls WHERE stage != 'extraction'")
    with sqlite3.connect(kept) as con:
        con.execute("VACUUM")


def step_windows(work: Path, t0_epoch: float) -> list[tuple[float, float, str]]:
    """(start, end, step key) of every finished Dagster step of the run's event logs
    under ``work/dagster_home``, in seconds since ``t0_epoch``, in start order."""
    steps = []
    for db in sorted((work / "dagster_home" / "history" / "runs").glob("*.db")):
        if db.name == "index.db":
            continue
        with sqlite3.connect(db) as con:
            rows = con.execute(
                "SELECT dagster_event_type, step_key, timestamp FROM event_logs WHERE "
                "dagster_event_type IN ('STEP_START', 'STEP_SUCCESS', 'STEP_FAILURE')"
            ).fetchall()
        started: dict[str, float] = {}
        for kind, key, stamp in rows:
            t = dt.datetime.fromisoformat(str(stamp)).replace(
                tzinfo=dt.UTC).timestamp() - t0_epoch
            if kind == "STEP_START":
                started[key] = t
            elif key in started:
                steps.append((started.pop(key), t, key))
    return sorted(steps)


def analyze(work: Path) -> dict:
    """The figures of a finished run in ``work`` (its ``replay.json`` and event logs)."""
    run = json.loads((work / "replay.json").read_text())
    timeline = run["timeline"]
    steps = []
    for start, end, key in step_windows(work, run["t0_epoch"]):
        inside = [mb for t, mb in timeline if start <= t <= end]
        steps.append({"step": key, "start_s": round(start, 1), "seconds": round(end - start, 1),
                      "peak_rss_mb": max(inside) if inside else None})
    summary = json.loads((work / "output" / "index-summary.json").read_text())
    return {"wall_seconds": run["wall_seconds"], "peak_rss_mb": run["peak_rss_mb"],
            "returncode": run["returncode"], "tree": run.get("tree"),
            "cached_stages": run.get("cached_stages"), "steps": steps,
            "stage_costs": summary.get("cost", {}).get("stages", {}),
            "llm_cache_hits": summary.get("llm_cache_hits"), "timeline_1s": timeline}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from", dest="source", type=Path)
    ap.add_argument("--ref", default="", help="a git ref's tree instead of this one")
    ap.add_argument("--work", type=Path, default=Path("/tmp/kgloom-pool-memory"))
    ap.add_argument("--analyze", type=Path, help="only read a finished run's folder")
    ap.add_argument("--save", default=str(ROOT / "bench" / "results" / "pool_memory.json"))
    args = ap.parse_args()
    if args.analyze:
        result = analyze(args.analyze)
    else:
        if args.source is None:
            ap.error("--from (or --analyze) is required")
        work = args.work
        work.mkdir(parents=True, exist_ok=True)
        src, tree = ROOT, "this tree"
        if args.ref:
            src = work / "tree"
            shutil.rmtree(src, ignore_errors=True)
            tree = export_ref(args.ref, src)
        prepare(args.source, work)
        before = load_average()
        run = build_index(work / "input", work / "output", src=src, sample_rss=True,
                          check=False)
        assert run.rss is not None
        (work / "replay.json").write_text(json.dumps({
            "wall_seconds": run.wall_seconds, "peak_rss_mb": run.peak_rss_mb,
            "returncode": run.returncode, "t0_epoch": run.rss.t0_epoch, "tree": tree,
            "cached_stages": ["extraction"],
            "load_before": before, "load_after": run.load_after,
            "timeline": [(t, round(b / 2**20)) for t, b in run.rss.timeline[::5]]}))
        result = analyze(work)
    for s in result["steps"]:
        print(f"{s['step']:28s} {s['seconds']:7.0f} s  peak {s['peak_rss_mb']} MiB")
    print(f"peak {result['peak_rss_mb']} MiB, wall {result['wall_seconds']} s")
    save_result(Path(args.save), {"benchmark": "pool index memory per step, extraction "
                                  "replayed from the LLM cache", **result}, args)


if __name__ == "__main__":
    main()
