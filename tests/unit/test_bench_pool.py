"""The pool bench's own logic (bench/eval_pool.py, bench/eval_qa.py's scoring) on tiny
hand-made inputs: the split of a pool into input files, R@k / AR@5 / per-type figures
on a hand-made ranking, and the BM25 baseline on three documents."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from eval_pool import BM25Baseline, evaluate_bm25, split_corpus
from eval_qa import all_recall, score_rankings


def test_split_corpus_keeps_every_passage_once_in_order_and_rewrites_nothing(tmp_path):
    pool = tmp_path / "pool.jsonl"
    rows = [{"title": f"T{i}", "text": f"passage {i}"} for i in range(11)]
    pool.write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n")  # a blank line
    files = split_corpus(pool, 4, tmp_path / "input")
    assert [f.name for f in files] == [f"part-0{i}.jsonl" for i in range(4)]
    sizes = [len(f.read_text().splitlines()) for f in files]
    assert sizes == [3, 3, 3, 2] and sum(sizes) == 11
    back = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    assert back == rows
    mtimes = [f.stat().st_mtime_ns for f in files]
    split_corpus(pool, 4, tmp_path / "input")  # a rerun leaves the files (partitions) alone
    assert [f.stat().st_mtime_ns for f in files] == mtimes
    assert len(split_corpus(pool, 50, tmp_path / "many")) == 11  # never an empty file
    with pytest.raises(ValueError):
        split_corpus(pool, 0, tmp_path / "none")


def test_scores_of_a_hand_made_ranking():
    questions = [
        {"type": "comparison", "supporting_titles": ["A", "B"]},
        {"type": "comparison", "supporting_titles": ["C", "D"]},
        {"type": "compositional", "supporting_titles": ["E", "F", "G", "H"]},
        {"type": "inference", "supporting_titles": ["I", "I"]},  # a repeated gold title
    ]
    rankings = [["A", "X", "B", "Y", "Z"],      # R@2 1/2, R@5 1, all in top 5
                ["X", "Y", "Z", "W", "C"],      # R@2 0, R@5 1/2, not all
                ["E", "F", "G", "X", "Y", "H"],  # R@2 2/4, R@5 3/4, H is 6th: not all
                ["I", "X"]]                     # R@2 1, R@5 1, all
    out = score_rankings(questions, rankings, [0.1, 0.2, 0.3, 0.4])
    assert out["questions"] == 4
    assert out["recall@2"] == pytest.approx(round(100 * (0.5 + 0 + 0.5 + 1) / 4, 1))
    assert out["recall@5"] == pytest.approx(round(100 * (1 + 0.5 + 0.75 + 1) / 4, 1))
    assert out["all_recall@5"] == 50.0
    assert out["by_type"]["comparison"] == {"questions": 2, "recall@2": 25.0,
                                            "recall@5": 75.0, "all_recall@5": 50.0}
    assert out["by_type"]["compositional"]["all_recall@5"] == 0.0
    assert out["by_type"]["inference"]["all_recall@5"] == 100.0
    assert out["latency_p50_s"] == 0.2 and out["latency_p95_s"] == 0.4
    assert all_recall(["A", "B"], ["B", "A"], 2) == 1.0
    assert all_recall(["A", "B"], ["B", "A"], 1) == 0.0


def test_bm25_on_three_documents_ranks_the_passage_sharing_the_rare_terms_first():
    texts = ["The cathedral of Elmham was built by Bishop Theodred.",
             "Lothair II married Teutberga, a queen of Lotharingia.",
             "Nicki Minaj was born in Port of Spain, Trinidad."]
    titles = ["Theodred II", "Teutberga", "Nicki Minaj"]
    bm25 = BM25Baseline(texts, titles)
    assert bm25.search("Who married Teutberga?", k=1) == ["Teutberga"]
    assert bm25.search("Where was Nicki Minaj born?", k=5)[0] == "Nicki Minaj"
    assert len(bm25.search("Where was Nicki Minaj born?", k=5)) == 3  # k capped by the pool
    questions = [{"type": "inference", "question": "the queen of Lotharingia",
                  "supporting_titles": ["Teutberga"]},
                 {"type": "comparison", "question": "bishop of Elmham and Port of Spain",
                  "supporting_titles": ["Theodred II", "Nicki Minaj"]}]
    row = evaluate_bm25(bm25, questions, top_k=5)
    assert row["mode"] == "bm25"
    assert row["recall@5"] == 100.0 and row["all_recall@5"] == 100.0
    assert row["by_type"]["inference"]["recall@2"] == 100.0
