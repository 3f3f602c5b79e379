"""Multi-hop QA retrieval benchmark: every retrieval mode beside plain vector search.

Data: bench/data/2wiki-dev/ (40 2WikiMultihopQA development questions, their 354
passages; source and licence in its README). The passages are indexed as one JSONL input
file (one document per passage) with the default model, without community reports
(retrieval does not read them); then, for every question and every mode, the figures of
the HippoRAG paper (arXiv 2405.14831, Table 2): supporting-passage recall@2 and @5 (the
share of a question's supporting titles among the titles of the top-k retrieved text
units, averaged over questions), plus latency p50/p95 (seconds per query, warm handle,
embedding included), the share of questions with at least one linked entity, and the
share that fell back to vector search. All modes run in the same process on the same
index, so the comparison with ``vector`` is like for like.

Also measured:
- the fused retrieve's rerank: mean pairwise Jaccard overlap of the chosen seeds'
  neighbourhoods with and without the rerank, and the loss of summed ANN similarity;
- ``--sweep``: a small grid over the scoring knobs of kgloom.query.RetrievalSettings, each
  choice scored on the even-numbered questions and reported on the odd ones (held out),
  which is how the defaults were chosen;
- ``--embedder PATH``: the same index re-embedded with another sentence-transformers model
  folder, vector and best graph mode compared with the default embedder.

Usage:
    python bench/eval_qa.py [--work /tmp/kgloom-qa] [--fake-llm] [--sweep]
                            [--embedder PATH] [--save bench/results/eval_qa.json]

The first run indexes the corpus (about 30-60 minutes of extraction on 2 cores with the
bundled 135M model); later runs reuse the index (and its LLM cache).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATA = ROOT / "bench" / "data" / "2wiki-dev"
os.environ.setdefault("HF_HUB_OFFLINE", "1")

MODES = [("vector", {}), ("one_hop", {}), ("multihop", {"depth": 1}),
         ("multihop", {"depth": 2}), ("fused", {"depth": 1}), ("two_step", {"depth": 1}),
         ("ppr", {}), ("hybrid", {}), ("bridge", {})]


def load_questions(path: Path = DATA / "questions.jsonl") -> list[dict]:
    """The QA questions (id, type, question, answer, supporting_titles, ...)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def build_index(work: Path, fake_llm: bool) -> Path:
    """Index the corpus into ``work/output`` without community reports (retrieval does
    not read them) through :func:`bench.harness.build_index`; incremental: a finished
    index is kept."""
    from bench.harness import build_index as kgloom_index

    inp = work / "input"
    inp.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(DATA / "corpus.jsonl", inp / "corpus.jsonl")
    run = kgloom_index(inp, work / "output", dagster_home=work / "dagster_home",
                       fake_llm=fake_llm, reports=False)
    print(f"index ready in {run.wall_seconds:.0f} s: {work / 'output'}")
    return work / "output"


def recall(titles: list[str], gold: list[str], k: int) -> float:
    """Share of the distinct gold titles among the first ``k`` retrieved titles."""
    gold_set = set(gold)
    return len(gold_set & set(titles[:k])) / len(gold_set)


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of ``values`` by nearest rank; 0.0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


def all_recall(titles: list[str], gold: list[str], k: int) -> float:
    """1.0 when every distinct gold title is among the first ``k`` retrieved titles, else
    0.0 (averaged: HippoRAG's all-recall AR@k, arXiv 2405.14831, Table 6)."""
    return float(set(gold) <= set(titles[:k]))


def score_rankings(questions: list[dict], rankings: list[list[str]],
                   seconds: list[float]) -> dict:
    """The figures of one retriever from its ranked titles per question: R@2, R@5 and
    AR@5 in percent, latency p50/p95 (seconds), and the same recalls per question
    ``type`` (compositional, comparison, bridge_comparison, inference).

    Args:
        questions: the questions (``supporting_titles``; ``type`` optional).
        rankings: per question, the titles of the retrieved passages, best first.
        seconds: per question, the retrieval's wall time.
    """
    def figures(idx: list[int]) -> dict:
        n = len(idx) or 1

        def mean_pct(score: Callable[[list[str], list[str], int], float], k: int) -> float:
            return round(100 * sum(score(rankings[i], questions[i]["supporting_titles"], k)
                                   for i in idx) / n, 1)

        return {"questions": len(idx), "recall@2": mean_pct(recall, 2),
                "recall@5": mean_pct(recall, 5), "all_recall@5": mean_pct(all_recall, 5)}

    types: dict[str, list[int]] = {}
    for i, q in enumerate(questions):
        types.setdefault(q.get("type", ""), []).append(i)
    return {**figures(list(range(len(questions)))),
            "latency_p50_s": round(pct(seconds, 0.5), 4),
            "latency_p95_s": round(pct(seconds, 0.95), 4),
            "by_type": {t: figures(idx) for t, idx in sorted(types.items())}}


def evaluate(retriever, questions: list[dict], mode: str, params: dict,
             top_k: int = 5) -> dict:
    """Run one mode over the questions; return its figures (:func:`score_rankings`) and
    per-question titles."""
    retriever.retrieve(questions[0]["question"], mode=mode, top_k=top_k, **params)  # warm-up
    r5, secs, linked, fallbacks, per_q, rankings = [], [], 0, 0, [], []
    fused = {"seed_overlap": [], "baseline_seed_overlap": [], "ann_sum": [],
             "baseline_ann_sum": []}
    for q in questions:
        start = time.perf_counter()
        res = retriever.retrieve(q["question"], mode=mode, top_k=top_k, **params)
        secs.append(time.perf_counter() - start)
        titles = res.text_units["document_title"].to_list()
        rankings.append(titles)
        r5.append(recall(titles, q["supporting_titles"], 5))
        linked += res.linked.filter(pl.col("method") != "vector_hit").height > 0
        fallbacks += res.info.get("fallback") is not None
        for key in fused:
            if key in res.info:
                fused[key].append(res.info[key])
        per_q.append({"id": q["id"], "r5": r5[-1], "titles": titles,
                      "linked": res.linked["title"].to_list()})
    n = len(questions)
    out = {"mode": mode, "params": params, **score_rankings(questions, rankings, secs),
           "linked_share": round(linked / n, 3), "fallback_share": round(fallbacks / n, 3),
           "per_question": per_q}
    if fused["seed_overlap"] and fused["baseline_seed_overlap"]:
        out["rerank"] = {
            "mean_seed_overlap": round(statistics.mean(fused["seed_overlap"]), 5),
            "mean_seed_overlap_without_rerank": round(
                statistics.mean(fused["baseline_seed_overlap"]), 5),
            "ann_similarity_loss": round(1 - sum(fused["ann_sum"])
                                         / sum(fused["baseline_ann_sum"]), 5)}
    return out


def label(mode: str, params: dict) -> str:
    return mode + "".join(f" {k}={v}" for k, v in params.items())


SWEEP = {  # mode -> {config field: candidate values}
    "multihop": {"similarity_weight": [0.5, 1.0, 2.0, 4.0], "hop_decay": [0.25, 0.5, 1.0],
                 "entity_affinity": [False, True], "hit_seeds": [0, 3]},
    "one_hop": {"one_hop_weight": [0.05, 0.1, 0.2, 0.5], "neighbor_decay": [0.0, 0.5]},
    "hybrid": {"hybrid_weights": [(1.0, 0.5), (1.0, 1.0), (1.0, 2.0)], "rrf_k": [10.0, 60.0],
               "entity_affinity": [False, True], "hit_seeds": [0, 3]},
    "bridge": {"bridge_hits": [2, 5], "bridge_keep": [1, 2],
               "bridge_relevance_power": [0.0, 1.0, 2.0],
               "bridge_link_weight": [0.0, 0.5, 1.0, 2.0],
               "bridge_specificity_power": [0.0, 0.25, 0.5, 1.0]},
    "ppr": {"ann_link_min_similarity": [0.6, 0.75, 0.9], "entity_affinity": [False, True],
            "hit_seeds": [0, 3]},
}


def sweep(retriever, questions: list[dict], top_k: int = 5) -> dict:
    """Grid over SWEEP per mode: choose on even-numbered questions (by R@5, then R@2),
    report the choice on the odd-numbered ones (held out)."""
    tune, held = questions[0::2], questions[1::2]
    base = retriever.settings  # its graph backend kept by every copy below
    out = {}
    for mode, grid in SWEEP.items():
        rows = []
        for values in itertools.product(*grid.values()):
            retriever.settings = base.model_copy(update=dict(zip(grid, values)))
            params = {"depth": 1} if mode == "multihop" else {}
            a = evaluate(retriever, tune, mode, params, top_k)
            rows.append({"config": dict(zip(grid, values)), "tune_recall@5": a["recall@5"],
                         "tune_recall@2": a["recall@2"]})
        best = max(rows, key=lambda r: (r["tune_recall@5"], r["tune_recall@2"]))
        retriever.settings = base.model_copy(update=best["config"])
        h = evaluate(retriever, held, mode, {"depth": 1} if mode == "multihop" else {}, top_k)
        retriever.settings = base
        d = evaluate(retriever, held, mode, {"depth": 1} if mode == "multihop" else {}, top_k)
        out[mode] = {"grid": rows, "chosen": best["config"],
                     "held_out_recall@5_chosen": h["recall@5"],
                     "held_out_recall@5_default": d["recall@5"]}
        print(f"sweep {mode}: chosen {best['config']} (tune R@5 {best['tune_recall@5']}); "
              f"held-out R@5 {h['recall@5']} vs default {d['recall@5']}")
    retriever.settings = base
    return out


def reembed(index: Path, embedder_path: str, work: Path) -> Path:
    """Copy ``index``'s parquet tables to ``work/output-<model>`` and rebuild its LanceDB
    text_units and entities tables with another embedder."""
    from kgloom.core.layout import LANCEDB_DIR
    from kgloom.core.storage import read_table
    from kgloom.embedding.sentence_embedder import Embedder
    from kgloom.embedding.store import VECTOR_TABLES, write_embedder_manifest
    from kgloom.publish.vectors import sync_lancedb

    emb = Embedder(embedder_path)
    dst = work / f"output-{Path(embedder_path).name}"
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(index, dst, ignore=shutil.ignore_patterns(LANCEDB_DIR, "stages",
                                                              "llm_cache.sqlite"))
    for table in ("text_units", "entities"):
        parquet, expr = VECTOR_TABLES[table]
        sync_lancedb(dst / LANCEDB_DIR, table, read_table(dst, parquet), expr, emb)
    write_embedder_manifest(dst / LANCEDB_DIR, emb)
    return dst


def print_table(rows: list[dict]) -> None:
    from tabulate import tabulate

    base = next(r for r in rows if r["mode"] == "vector")
    print(tabulate([[label(r["mode"], r["params"]), r["recall@2"], r["recall@5"],
                     f"{r['recall@5'] - base['recall@5']:+.1f}", r["latency_p50_s"],
                     r["latency_p95_s"], r["linked_share"], r["fallback_share"]]
                    for r in rows],
                   headers=["mode", "R@2", "R@5", "R@5 vs vector", "p50 s", "p95 s",
                            "linked", "fallback"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/kgloom-qa"),
                    help="where the input copy, the index and its Dagster instance live")
    ap.add_argument("--fake-llm", action="store_true", help="index with the fake LLM (a smoke "
                    "test of the harness; its graph is meaningless)")
    ap.add_argument("--top-k", type=int, default=5)
    ap.add_argument("--sweep", action="store_true", help="grid over the scoring knobs")
    ap.add_argument("--embedder", default="", help="also compare this embedder folder")
    ap.add_argument("--graph-backend", default="duckdb", choices=["duckdb", "memory"])
    ap.add_argument("--save", type=Path, default=ROOT / "bench" / "results" / "eval_qa.json")
    args = ap.parse_args()

    from kgloom.query.retriever import RetrievalSettings, Retriever

    questions = load_questions()
    index = build_index(args.work, args.fake_llm)
    retriever = Retriever(index, graph_backend=args.graph_backend)
    rows = []
    for mode, params in MODES:
        rows.append(evaluate(retriever, questions, mode, params, args.top_k))
        print(f"{label(mode, params)}: R@2 {rows[-1]['recall@2']} R@5 {rows[-1]['recall@5']}",
              flush=True)
    print_table(rows)
    graph_rows = [r for r in rows if r["mode"] not in ("vector", "two_step")]
    best = max(graph_rows, key=lambda r: (r["recall@5"], r["recall@2"]))
    vec = next(r for r in rows if r["mode"] == "vector")
    result = {
        "benchmark": "2WikiMultihopQA dev slice: 40 questions, 354 passages",
        "metric": "supporting-passage recall@k (HippoRAG, arXiv 2405.14831, Table 2)",
        "fake_llm": args.fake_llm, "top_k": args.top_k, "graph_backend": args.graph_backend,
        "config": RetrievalSettings().model_dump(),
        "index": json.loads((index / "index-summary.json").read_text())["rows"]
        if (index / "index-summary.json").exists() else {},
        "modes": rows,
        "best_graph_mode": {"mode": label(best["mode"], best["params"]),
                            "recall@5": best["recall@5"], "recall@2": best["recall@2"],
                            "recall@5_gain_over_vector": round(best["recall@5"]
                                                               - vec["recall@5"], 1)},
    }
    if args.sweep:
        result["sweep"] = sweep(retriever, questions, args.top_k)
    if args.embedder:
        other = Retriever(reembed(index, args.embedder, args.work), args.embedder,
                          graph_backend=args.graph_backend)
        result["embedder_comparison"] = {
            "default": retriever.embedder.name, "other": other.embedder.name,
            "rows": [{k: v for k, v in evaluate(r, questions, m, p, args.top_k).items()
                      if k != "per_question"} | {"embedder": r.embedder.name}
                     for r in (retriever, other) for m, p in
                     [("vector", {}), (best["mode"], best["params"])]]}
        for row in result["embedder_comparison"]["rows"]:
            print(f"{row['embedder']}: {label(row['mode'], row['params'])} "
                  f"R@2 {row['recall@2']} R@5 {row['recall@5']}")
    from bench.stamp import save_result

    save_result(args.save, result, args)


if __name__ == "__main__":
    main()
