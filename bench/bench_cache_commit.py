"""What one LLM-cache write costs: :meth:`kgloom.llm.cache.LLMCache.put` (one committed row
a model call) with the caches' SQLite settings (:func:`kgloom.core.cache_db.open_cache_db`:
WAL, ``synchronous=NORMAL``) against SQLite's WAL default (``synchronous=FULL``, a sync of
the log at every commit, kgloom's setting before 2026-12-04), in one run, blocks
alternating; prints and saves JSON.

Usage: python bench/bench_cache_commit.py [--rows 400] [--block 50] [--folder DIR]
       [--save bench/results/cache_commit.json]

Each row is an extraction-sized reply (3,000 characters). ``--folder`` is where the cache
files go: the disk an index's output folder is on (default: a temporary folder).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.stamp import load_average, save_result  # noqa: E402
from kgloom.llm.backend import Completion  # noqa: E402
from kgloom.llm.cache import LLMCache  # noqa: E402

MODES = ("FULL", "NORMAL")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=400, help="rows written per mode")
    ap.add_argument("--block", type=int, default=50, help="rows per block")
    ap.add_argument("--folder", type=Path, default=None)
    ap.add_argument("--save", default=str(ROOT / "bench" / "results" / "cache_commit.json"))
    args = ap.parse_args()

    folder = Path(args.folder or tempfile.mkdtemp(prefix="kgloom-cache-commit-"))
    caches = {}
    for mode in MODES:
        cache = LLMCache(folder / f"cache-{mode}.sqlite")
        cache._db.execute(f"PRAGMA synchronous={mode}")  # FULL: the WAL default
        caches[mode] = cache
    reply = Completion(text="x" * 3000, prompt_tokens=300, completion_tokens=100, seconds=0.5)
    seconds: dict[str, list[float]] = {m: [] for m in MODES}
    load_before = load_average()
    written = 0
    while written < args.rows:
        for mode in (MODES if (written // args.block) % 2 == 0 else MODES[::-1]):
            cache = caches[mode]
            for i in range(written, min(written + args.block, args.rows)):
                start = time.perf_counter()
                cache.put(f"k{i}", "extraction", "m", "t", f"i{i}", {"seed": 1}, reply)
                seconds[mode].append(time.perf_counter() - start)
        written += args.block
    result = {
        "rows_per_mode": args.rows, "block": args.block, "folder": str(folder),
        "load_before": load_before, "load_after": load_average(),
        "modes": {m: {"ms_per_put_mean": round(1000 * statistics.fmean(s), 3),
                      "ms_per_put_p50": round(1000 * statistics.median(s), 3)}
                  for m, s in seconds.items()},
    }
    result["full_over_normal"] = round(result["modes"]["FULL"]["ms_per_put_mean"]
                                       / max(result["modes"]["NORMAL"]["ms_per_put_mean"], 1e-9), 1)
    print(result)
    save_result(Path(args.save), result, args)


if __name__ == "__main__":
    main()
