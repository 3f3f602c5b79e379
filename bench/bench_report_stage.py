"""The community reports stage's own work on a built index, against a baseline commit in
the same run.

Runs :func:`kgloom.reports.community_reports.build_community_reports` over an index's
tables as the ``community_reports`` asset does (``llm_reports: eager``, the bundled
model behind a copy of the index's LLM cache, so the replies the build got come from the
cache and no model time is counted), once for this checkout and once for ``--baseline``
(a git worktree of that commit, imported by this file in a subprocess). Records each
one's wall seconds, its report counts by ``generated_by`` and whether both wrote the same
reports and failures (frames compared), and the ratio new / baseline.

    python bench/bench_report_stage.py --index /tmp/pool/output --baseline c5cb080 \\
        [--save bench/results/report_stage.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_stage(index: Path, cache: Path, out: Path) -> dict:
    """Build the reports of ``index`` with the code importable here; write the reports and
    failures to ``out``.reports/failures.parquet; return seconds and counts."""
    import polars as pl

    from kgloom.embedding.tokenizer import default_tokenizer
    from kgloom.llm.client import open_llm
    from kgloom.reports.community_reports import build_community_reports, unit_places
    from kgloom.settings import IndexSettings

    read = lambda name, **kw: pl.read_parquet(index / f"{name}.parquet", **kw)  # noqa: E731
    units = read("text_units", columns=["id", "n_tokens", "document_id", "chunk_index",
                                        "start_char", "end_char"])
    docs = read("documents", columns=["id", "title", "text"])  # as the asset reads them
    tables = {n: read(n) for n in ("communities", "entities", "relationships", "covariates")}
    llm = open_llm(cache)
    t0 = time.perf_counter()
    reports, failures, methods = build_community_reports(
        tables["communities"], tables["entities"], tables["relationships"], llm,
        IndexSettings(llm_reports="eager"), default_tokenizer(), None, previous=None,
        claims=tables["covariates"],
        unit_tokens=dict(zip(units["id"].to_list(), units["n_tokens"].to_list())),
        unit_places=unit_places(units, docs))
    seconds = time.perf_counter() - t0
    reports.write_parquet(f"{out}.reports.parquet")
    failures.write_parquet(f"{out}.failures.parquet")
    return {"seconds": round(seconds, 1), "reports": reports.height,
            "by": dict(reports.group_by("generated_by").len().iter_rows()),
            "failures": failures.height, "context_methods": methods,
            "llm_calls": llm.stats["community_reports"].calls
            if "community_reports" in llm.stats else 0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--baseline", required=True, help="a commit to compare with")
    ap.add_argument("--save", type=Path, default=ROOT / "bench" / "results" / "report_stage.json")
    ap.add_argument("--child", nargs=3, metavar=("INDEX", "CACHE", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:  # one run, in the checkout this file was started from
        print(json.dumps(run_stage(Path(args.child[0]), Path(args.child[1]),
                                   Path(args.child[2]))))
        return
    sys.path.insert(0, str(ROOT))
    import polars as pl

    from bench.stamp import save_result

    work = Path(tempfile.mkdtemp(prefix="report_stage-"))
    base = work / "baseline"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(base),
                    args.baseline], check=True)
    result: dict = {"index": str(args.index), "baseline": args.baseline}
    try:
        for label, root in (("baseline", base), ("new", ROOT)):
            cache = work / f"{label}.sqlite"
            shutil.copy(args.index / "llm_cache.sqlite", cache)
            out = subprocess.run(
                [sys.executable, str(Path(__file__).resolve()), "--index", ".",
                 "--baseline", ".", "--child", str(args.index), str(cache), str(work / label)],
                cwd=root, env={"PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1",
                               "PATH": "/usr/bin:/bin"},
                check=True, capture_output=True, text=True)
            result[label] = json.loads(out.stdout.strip().splitlines()[-1])
            print(label, result[label], flush=True)
        same = {}
        for kind in ("reports", "failures"):
            a = pl.read_parquet(work / f"baseline.{kind}.parquet")
            b = pl.read_parquet(work / f"new.{kind}.parquet")
            same[kind] = a.equals(b)
        result["same_output"] = same
        result["ratio"] = round(result["new"]["seconds"] / max(result["baseline"]["seconds"],
                                                              1e-9), 3)
        save_result(args.save, result, args)
        print("ratio", result["ratio"], "same", same)
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)],
                       check=False)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
