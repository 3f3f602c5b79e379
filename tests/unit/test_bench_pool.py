"""The pool bench's own logic (bench/eval_pool.py, bench/eval_qa.py's scoring, bench/floor.py)
on tiny hand-made inputs: the split of a pool into input files, the nested subsets of
``--passages``, the scaling table's arithmetic, R@k / AR@5 / per-type figures on a
hand-made ranking, the BM25 baseline on three documents, and the floor with a fake model.
The bench end to end (two sizes, fake LLM): tests/integration/test_bench_pool_sizes.py."""

from __future__ import annotations

import itertools
import json
import math

import pytest

from bench.eval_pool import (
    BM25Baseline,
    evaluate_bm25,
    growth_exponent,
    parse_sizes,
    scaling_table,
    select_passages,
    split_corpus,
)
from bench.eval_qa import all_recall, score_rankings
from bench.floor import floor_settings, pack, prompt_floor


def tiny_pool(n: int = 12) -> list[str]:
    """``n`` JSONL passages titled P0 .. P<n-1>."""
    return [json.dumps({"title": f"P{i}", "text": f"Passage number {i} is here."})
            for i in range(n)]


QUESTIONS = [{"type": "comparison", "supporting_titles": ["P9", "P4"]},
             {"type": "compositional", "supporting_titles": ["P11", "P9", "Not in pool"]}]


def titles(lines: list[str]) -> list[str]:
    return [json.loads(line)["title"] for line in lines]


def test_subsets_hold_the_supporting_passages_first_are_nested_and_deterministic():
    pool = tiny_pool()
    support = {"P9", "P4", "P11"}
    subsets = {n: select_passages(pool, QUESTIONS, n) for n in (2, 3, 5, 8, 12, 40)}
    for n, (lines, info) in subsets.items():
        assert info["passages"] == len(lines) == min(n, 12)
        assert info["supporting_passages"] == 3 and info["supporting_titles_not_in_pool"] == 1
        assert info["supporting_included"] == min(n, 3)
        # written in pool file order, so the whole pool's subset is the pool itself
        assert titles(lines) == sorted(titles(lines), key=lambda t: int(t[1:]))
        if n >= 3:
            assert support <= set(titles(lines))
    # beyond the supporting passages, the pool in file order
    assert set(titles(subsets[5][0])) == support | {"P0", "P1"}
    # the first supporting titles in question order when N is smaller than them all
    assert set(titles(subsets[2][0])) == {"P9", "P4"}
    sizes = sorted(subsets)
    for a, b in itertools.pairwise(sizes):  # nested
        assert set(subsets[a][0]) <= set(subsets[b][0])
    assert subsets[12][0] == subsets[40][0] == pool  # N beyond the pool: the whole pool
    assert select_passages(pool, QUESTIONS, 5) == subsets[5]  # deterministic
    assert parse_sizes("2000, 600,6119,600") == [600, 2000, 6119]
    for bad in ("600,x", "0", ""):
        with pytest.raises(SystemExit):
            parse_sizes(bad)


def size_entry(n: int, wall: float, stages: dict[str, float], counts: dict[str, int]) -> dict:
    """A result ``sizes`` entry with the figures scaling_table reads."""
    return {"passages": n, "index": {
        "passages": n, "seconds_per_passage": wall / n,
        "stage_seconds_per_passage": sum(stages.values()) / n,
        "stages": {k: {"wall_seconds": v} for k, v in stages.items()}, "counts": counts}}


def test_scaling_table_on_hand_made_figures():
    sizes = [
        size_entry(400, 100.0, {"extraction": 40.0, "reports": 16.0, "vectors": 0.0,
                                "files": 0.8}, {"entities": 200, "communities": 160}),
        size_entry(100, 20.0, {"extraction": 10.0, "reports": 1.0, "vectors": 2.0, "files": 0.1},
                   {"entities": 50, "communities": 10}),  # given out of order
        {"passages": 50, "floor": {}},  # not built (--floor-only): skipped
    ]
    t = scaling_table(sizes)
    assert [r["passages"] for r in t["sizes"]] == [100, 400]
    assert t["sizes"][0]["relative_to_smallest"] == 1.0
    assert t["sizes"][1]["relative_to_smallest"] == pytest.approx((100 / 400) / (20 / 100))
    assert t["seconds_per_passage_spread"] == pytest.approx(0.25)
    [pair] = t["pairs"]  # two sizes: one pair
    assert (pair["from"], pair["to"]) == (100, 400)
    assert pair["stages"]["extraction"] == {"seconds": [10.0, 40.0], "exponent": 1.0,
                                            "faster_than_passages": False}
    assert pair["stages"]["reports"]["exponent"] == 2.0  # 16x for 4x the passages
    assert pair["stages"]["reports"]["faster_than_passages"]
    assert pair["stages"]["vectors"]["exponent"] is None  # 0 s: no exponent, no flag
    assert pair["stages"]["files"]["exponent"] == 1.5  # under a second: timer noise,
    assert not pair["stages"]["files"]["faster_than_passages"]  # not flagged
    assert pair["counts"]["entities"]["exponent"] == 1.0
    assert pair["counts"]["communities"]["exponent"] == pytest.approx(
        math.log(16) / math.log(4), abs=1e-3)
    assert pair["counts"]["vectors"] == {"values": [0, 0], "exponent": None}
    assert t["faster_than_passages"] == [{"stage": "reports", "from": 100, "to": 400,
                                          "exponent": 2.0}]
    three = scaling_table([*sizes, size_entry(1600, 400.0, {"extraction": 160.0},
                                              {"entities": 800})])
    assert [(p["from"], p["to"]) for p in three["pairs"]] == [(100, 400), (400, 1600),
                                                              (100, 1600)]
    assert scaling_table([{"passages": 5}]) == {}
    assert growth_exponent(1.0, 1.05, 100, 200) == pytest.approx(0.07, abs=1e-3)
    assert growth_exponent(1.0, 2.0, 100, 100) is None


class FakeLlama:
    """The three ``llama_cpp.Llama`` methods the floor calls: one token per word, and
    a record of every evaluation with the cache length it started from."""

    def __init__(self) -> None:
        self.n_tokens = 0
        self.evals: list[tuple[int, list[int]]] = []

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        assert not add_bos
        return [len(w) for w in text.decode("utf-8").split()]

    def reset(self) -> None:
        self.n_tokens = 0

    def eval(self, tokens: list[int]) -> None:
        self.evals.append((self.n_tokens, list(tokens)))
        self.n_tokens += len(tokens)


def test_the_floor_evaluates_every_token_once_in_context_sized_chunks_from_empty():
    texts = ["a bb ccc", "dddd", "e f g h i j k", "l"]  # 3 + 1 + 7 + 1 tokens
    llm = FakeLlama()
    out = prompt_floor(texts, llm, n_ctx=4)
    assert [tokens for _, tokens in llm.evals] == [[1, 2, 3, 4], [1, 1, 1, 1], [1, 1, 1, 1]]
    assert all(start == 0 for start, _ in llm.evals)  # every chunk from an empty cache
    assert out["tokens"] == 12 and out["chunks"] == 3 and out["texts"] == 4
    assert out["floor_seconds"] >= 0 and len(out["load_before"]) == 3
    assert pack([[1, 2], [3, 4], [5]], 4) == [[1, 2, 3, 4], [5]]
    assert pack([[1, 2, 3], [4, 5]], 4) == [[1, 2, 3], [4, 5]]  # a text is never split...
    assert pack([[1] * 9], 4) == [[1] * 4, [1] * 4, [1]]  # ...unless longer than n_ctx
    with pytest.raises(ValueError):
        pack([[1]], 0)


def test_a_floor_budget_samples_chunks_across_the_corpus_and_extrapolates(monkeypatch):
    import bench.floor as bf

    clock = iter(range(1000))  # every perf_counter() call is one second later
    monkeypatch.setattr(bf.time, "perf_counter", lambda: float(next(clock)))
    texts = [" ".join(["w"] * 4)] * 10  # 40 tokens: 10 full chunks of 4
    llm = FakeLlama()
    out = prompt_floor(texts, llm, n_ctx=8, chunk_tokens=4, budget_s=2.5)
    assert out["chunks"] == 10 and out["chunk_tokens"] == 4 and out["extrapolated"]
    assert out["evaluated_chunks"] == len(llm.evals) == 3  # stopped once past the budget
    assert out["evaluated_tokens"] == 12 and out["tokens_per_s"] == 4.0
    assert out["floor_seconds"] == 10.0  # 40 tokens at 4 tokens/s
    whole = prompt_floor(texts, FakeLlama(), n_ctx=8, chunk_tokens=4)
    assert not whole["extrapolated"] and whole["evaluated_tokens"] == whole["tokens"] == 40
    with pytest.raises(ValueError):
        prompt_floor(texts, FakeLlama(), n_ctx=4, chunk_tokens=8)


def test_the_floor_runs_with_the_threads_most_of_the_index_calls_used():
    summary = {"llm_backend": {"n_ctx": 2048, "n_batch": 256, "n_ubatch": 128,
                               "flash_attn": False, "n_threads": "auto (by load)",
                               "weights": "f16"},
               "stages": {"extraction": {"llm": {"threads": {"1": 30, "2": 50}}},
                          "community_reports": {"llm": {"threads": {"1": 40}}},
                          "corpus": {"llm": {}}}}
    s = floor_settings(summary)
    assert (s["n_ctx"], s["n_batch"], s["n_ubatch"], s["n_threads"]) == (2048, 256, 128, 1)
    assert s["weights"] == "f16"  # the floor loads the weights the index loaded
    assert floor_settings(summary, threads=3)["n_threads"] == 3
    fixed = floor_settings({"llm_backend": {"n_threads": 2}})
    assert fixed["n_threads"] == 2 and fixed["n_ctx"] == 4096  # the defaults fill the rest
    assert fixed["weights"] == "auto"
    assert floor_settings(None)["n_threads"] >= 1


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
