"""Cold start of ``kgloom query``: wall seconds of whole CLI processes, median of N.

Each run is a fresh ``python -m kgloom.cli query QUESTION --output-dir INDEX --mode MODE``
(stdout and stderr discarded), so it pays every import, the index load, the question's
embedding and the retrieval, as a user's command does. Runs of the configurations
alternate (run 1 of each, then run 2 of each, ...) so a change of the machine's load
falls on all of them alike; the 1-minute load average (``os.getloadavg``) is recorded
before every run, and the results are stamped with the commit, the date and the CPU
count. The machine is shared: read every figure with its load.

Configurations (``--config``, repeatable, default ``fast``):

- ``fast``: today's query path (numpy embedder, flat-table snapshots, no lancedb/torch
  import) on ``--output-dir``.
- ``torch``: the same index with ``KGLOOM_TORCH_EMBEDDER=1`` (sentence-transformers).
- ``lancedb``: ``--lancedb-dir`` (the same index without ``lancedb/*.flat.parquet``),
  torch embedder: the path before this change.

Usage::

    python bench/bench_cli_cold_start.py --output-dir /tmp/book_index \\
        --lancedb-dir /tmp/book_index_no_snapshots --config fast --config lancedb \\
        --runs 5 --out bench/results/cli_cold_start.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import datetime, UTC
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUESTION = "How is Scrooge related to Fezziwig?"


def load() -> list[float]:
    """The 1, 5 and 15-minute load averages, rounded."""
    return [round(x, 2) for x in os.getloadavg()]


def one_run(index: str, mode: str, question: str, env: dict) -> float:
    """Wall seconds of one ``kgloom query`` process; raises when it fails."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "kgloom.cli", "query", question,
                           "--output-dir", index, "--mode", mode],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"kgloom query failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--output-dir", required=True, help="a book index (kgloom index)")
    ap.add_argument("--lancedb-dir", default="", help="the same index without flat "
                    "snapshots (config lancedb)")
    ap.add_argument("--config", action="append", choices=["fast", "torch", "lancedb"])
    ap.add_argument("--mode", default="bridge", help="a retrieval mode")
    ap.add_argument("--question", default=QUESTION)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "cli_cold_start.json"))
    args = ap.parse_args()
    configs = args.config or ["fast"]
    base = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    setups = {"fast": (args.output_dir, {}),
              "torch": (args.output_dir, {"KGLOOM_TORCH_EMBEDDER": "1"}),
              "lancedb": (args.lancedb_dir, {"KGLOOM_TORCH_EMBEDDER": "1"})}
    runs: dict[str, list[dict]] = {c: [] for c in configs}
    one_run(args.output_dir, args.mode, args.question, base)  # warm the page cache once
    for i in range(args.runs):
        for c in configs:
            index, extra = setups[c]
            before = load()
            seconds = one_run(index, args.mode, args.question, {**base, **extra})
            runs[c].append({"run": i + 1, "seconds": round(seconds, 3),
                            "load_before": before})
            print(f"{c} run {i + 1}: {seconds:.2f} s (load {before[0]})", flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    result = {
        "bench": "kgloom query cold start (whole process)",
        "commit": commit, "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "shared": "yes: other jobs ran; see each run's load"},
        "index": args.output_dir, "mode": args.mode, "question": args.question,
        "runs_per_config": args.runs,
        "configs": {c: {"median_seconds": round(statistics.median(r["seconds"] for r in rs), 3),
                        "min_seconds": min(r["seconds"] for r in rs),
                        "max_seconds": max(r["seconds"] for r in rs),
                        "median_load_1min": statistics.median(r["load_before"][0] for r in rs),
                        "runs": rs} for c, rs in runs.items()},
        "load_after": load(),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({c: v["median_seconds"] for c, v in result["configs"].items()}))


if __name__ == "__main__":
    main()
