"""Retrieval on the standard 2WikiMultihopQA pool (6,119 passages): index it, then every
retrieval mode, ``vector`` and a BM25 baseline over the development questions.

Data: bench/data/2wiki-pool/corpus.jsonl (source, licence and the published figures in
its README) and the 40 development questions of bench/data/2wiki-dev/questions.jsonl
(every supporting passage is in the pool). The harness is bench/eval_qa.py's: the same
modes (:data:`eval_qa.MODES`), the same scoring (:func:`eval_qa.score_rankings`: R@2,
R@5, AR@5 = share of questions whose supporting passages are all in the top 5, HippoRAG
Table 6; latency p50/p95; the split per question type). This script adds the pool's
index build and the BM25 baseline.

Index: the pool is split into ``--parts`` JSONL files (default 8) under
``<work>/input``, because each input file is one partition (one Dagster run): a run
stopped by Ctrl-C, ``kill -9`` or a reboot keeps the partitions it finished and the
next run extracts only the others (with ``standard``, hours of model time); a split
file's bytes depend only on the pool, so a rerun changes nothing. The index is one
``kgloom index`` process (:func:`bench.harness.build_index`). Figures recorded: wall
seconds of the whole command and per stage (index-summary.json), its CPU seconds (user +
system: on a shared machine the load-independent figure), peak resident memory of the
indexing process (``ru_maxrss``), and the machine's load before and after (the machine is
shared: read the seconds with the load beside them). They are saved as soon as the index
is built, then after each mode.

BM25: ``bm25s`` (Lù 2024, a maintained BM25 library; Lucene's BM25 variant, k1 1.5,
b 0.75), English stop words and the Snowball stemmer (PyStemmer) when installed, over
the index's own text units, so it ranks the same passages as the graph modes.

Usage:
    python bench/eval_pool.py --set method=fast [--work /tmp/kgloom-pool] [--parts 8]
        [--index DIR] [--questions FILE] [--corpus FILE] [--modes vector,ppr]
        [--save bench/results/eval_pool_fast.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.eval_qa import MODES, evaluate, label, load_questions, score_rankings  # noqa: E402
from bench.harness import build_index  # noqa: E402
from bench.stamp import commit, load_average, save_result  # noqa: E402

POOL = ROOT / "bench" / "data" / "2wiki-pool" / "corpus.jsonl"
QUESTIONS = ROOT / "bench" / "data" / "2wiki-dev" / "questions.jsonl"


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, MiB (Linux ``ru_maxrss`` is KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def split_corpus(corpus: Path, parts: int, dest: Path) -> list[Path]:
    """Write ``corpus`` (JSONL, one passage a line) as ``parts`` files
    ``dest/part-00.jsonl`` ... of consecutive passages, sizes differing by at most one;
    a file whose bytes are already those is not rewritten (its partition stays built).

    Returns the files written or kept, in order.

    Raises:
        ValueError: when ``parts`` < 1.
    """
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    lines = [ln for ln in corpus.read_text(encoding="utf-8").splitlines() if ln.strip()]
    parts = min(parts, max(1, len(lines)))
    dest.mkdir(parents=True, exist_ok=True)
    size, extra = divmod(len(lines), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (i < extra)
        path = dest / f"part-{i:02d}.jsonl"
        body = "\n".join(lines[start:end]) + "\n"
        if not path.exists() or path.read_text(encoding="utf-8") != body:
            path.write_text(body, encoding="utf-8")
        out.append(path)
        start = end
    return out


def build_pool_index(corpus: Path, work: Path, settings: list[str], parts: int,
                     fake_llm: bool = False) -> tuple[Path, dict]:
    """Index ``corpus`` split into ``parts`` files under ``work`` (incremental: finished
    partitions are kept) with the ``key=value`` index ``settings``, through
    :func:`bench.harness.build_index`; return (the output folder, the build figures)."""
    files = split_corpus(corpus, parts, work / "input")
    out = work / "output"
    run = build_index(work / "input", out, dagster_home=work / "dagster_home",
                      fake_llm=fake_llm, settings=settings)
    summary = json.loads((out / "index-summary.json").read_text())
    figures = {"input_files": len(files), "partitions_run": run.summary["partition_runs"],
               "wall_seconds": run.wall_seconds, "cpu_seconds": run.cpu_seconds,
               "peak_rss_mb": run.peak_rss_mb,
               "load_before": run.load_before, "load_after": run.load_after,
               "method": summary.get("method"), "rows": summary["rows"],
               "seconds_per_stage": summary["seconds_per_stage"],
               "llm_calls": summary["llm_calls"],
               "embedder_seconds": {k: v["embedder_seconds"]
                                    for k, v in summary["cost"]["stages"].items()
                                    if v.get("embedder_seconds")},
               "extraction_counts": {k: v for k, v in summary["stages"].get(
                   "extraction", {}).items() if isinstance(v, (int, float))
                   and k not in ("seconds", "finished_at", "embedder_seconds")}}
    print(f"index built in {run.wall_seconds:.0f} s (peak RSS {run.peak_rss_mb} MiB, load "
          f"{run.load_before} -> {run.load_after}): {out}", flush=True)
    return out, figures


class BM25Baseline:
    """BM25 (``bm25s``) over passages; :meth:`search` returns their titles, best first.

    Args:
        texts: the passages.
        titles: each passage's title (several passages may share one).
    """

    def __init__(self, texts: list[str], titles: list[str]) -> None:
        import bm25s

        try:
            import Stemmer  # PyStemmer: Snowball stemmers

            self.stemmer = Stemmer.Stemmer("english")
        except ImportError:
            self.stemmer = None
        self.bm25s = bm25s
        self.titles = titles
        self.model = bm25s.BM25()
        self.model.index(bm25s.tokenize(texts, stopwords="en", stemmer=self.stemmer,
                                        show_progress=False), show_progress=False)

    def search(self, query: str, k: int = 5) -> list[str]:
        """The titles of the ``k`` best passages for ``query`` (fewer when the pool is
        smaller), best first."""
        tokens = self.bm25s.tokenize([query], stopwords="en", stemmer=self.stemmer,
                                     show_progress=False)
        k = min(k, len(self.titles))
        docs, _ = self.model.retrieve(tokens, k=k, show_progress=False)
        return [self.titles[int(i)] for i in docs[0]]


def index_passages(index: Path) -> tuple[list[str], list[str]]:
    """(texts, document titles) of the index's published text units."""
    units = pl.read_parquet(index / "text_units.parquet", columns=["text", "document_id"])
    docs = pl.read_parquet(index / "documents.parquet", columns=["id", "title"])
    joined = units.join(docs, left_on="document_id", right_on="id", how="left")
    return joined["text"].to_list(), joined["title"].to_list()


def evaluate_bm25(bm25: BM25Baseline, questions: list[dict], top_k: int = 5) -> dict:
    """BM25's figures (:func:`eval_qa.score_rankings`) over ``questions``."""
    rankings, secs = [], []
    for q in questions:
        start = time.perf_counter()
        rankings.append(bm25.search(q["question"], top_k))
        secs.append(time.perf_counter() - start)
    return {"mode": "bm25", "params": {"library": "bm25s"},
            **score_rankings(questions, rankings, secs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=POOL)
    ap.add_argument("--questions", type=Path, default=QUESTIONS)
    ap.add_argument("--work", type=Path, default=Path("/tmp/kgloom-pool"))
    ap.add_argument("--index", type=Path, default=None,
                    help="a finished index folder to reuse (no indexing)")
    ap.add_argument("--parts", type=int, default=8, help="input files the pool is split into")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="an index setting, e.g. method=fast (repeatable)")
    ap.add_argument("--fake-llm", action="store_true")
    ap.add_argument("--modes", default="", help="comma-separated mode labels to run "
                    "(default: all of eval_qa.MODES, then bm25)")
    ap.add_argument("--top-k", type=int, default=5)
    ap.add_argument("--save", type=Path, default=None,
                    help="default bench/results/eval_pool_<method>.json")
    args = ap.parse_args()

    from kgloom.config import parse_assignments

    settings = parse_assignments(args.set)
    method = settings.get("method", "standard")
    save = args.save or ROOT / "bench" / "results" / f"eval_pool_{method}.json"
    questions = load_questions(args.questions)
    result: dict = {"benchmark": f"2WikiMultihopQA pool: {args.corpus.name}, "
                                 f"{len(questions)} questions from {args.questions.name}",
                    "metric": "supporting-passage R@2, R@5, AR@5 (HippoRAG, arXiv "
                              "2405.14831, Tables 2 and 6); latency per query, warm",
                    "commit": commit(), "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                              time.gmtime()),
                    "cores": os.cpu_count(), "settings": settings, "top_k": args.top_k}

    def save_now() -> None:
        save_result(save, result, args)

    if args.index:
        index = args.index
        result["index"] = {"reused": str(index)}
    else:
        index, result["index"] = build_pool_index(args.corpus, args.work, args.set,
                                                  args.parts, args.fake_llm)
    save_now()
    from kgloom.query.retriever import Retriever

    wanted = {m.strip() for m in args.modes.split(",") if m.strip()}
    retriever = Retriever(index)
    result["modes"] = []
    for mode, params in MODES:
        if wanted and label(mode, params) not in wanted and mode not in wanted:
            continue
        row = evaluate(retriever, questions, mode, params, args.top_k)
        row.pop("per_question")
        row["load_after"] = load_average()
        result["modes"].append(row)
        print(f"{label(mode, params)}: R@2 {row['recall@2']} R@5 {row['recall@5']} "
              f"AR@5 {row['all_recall@5']} p50 {row['latency_p50_s']} s", flush=True)
        save_now()
    if not wanted or "bm25" in wanted:
        texts, titles = index_passages(index)
        start = time.perf_counter()
        bm25 = BM25Baseline(texts, titles)
        row = evaluate_bm25(bm25, questions, args.top_k)
        row["index_seconds"] = round(time.perf_counter() - start, 2)
        result["modes"].append(row)
        print(f"bm25: R@2 {row['recall@2']} R@5 {row['recall@5']} AR@5 {row['all_recall@5']}")
    vec = next((r for r in result["modes"] if r["mode"] == "vector"), None)
    graph = [r for r in result["modes"] if r["mode"] not in ("vector", "bm25", "two_step")]
    if vec and graph:
        best = max(graph, key=lambda r: (r["recall@5"], r["recall@2"]))
        result["best_graph_mode"] = {"mode": label(best["mode"], best["params"]),
                                     "recall@5": best["recall@5"],
                                     "recall@5_gain_over_vector":
                                         round(best["recall@5"] - vec["recall@5"], 1)}
    result["peak_rss_mb_end"] = peak_rss_mb()
    result["load_end"] = load_average()
    save_now()


if __name__ == "__main__":
    main()
