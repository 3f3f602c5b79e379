"""The low-relevance judgement (``RetrievalSettings.low_relevance_similarity``): how close
each corpus's own questions and the other corpora's questions come to the nearest text
unit, and the threshold that tells them apart.

Data, development sets only (bench/data; sources and licences in their READMEs):

- indexes: the bundled book (``data/input/a-christmas-carol.txt``), the 2WikiMultihopQA
  slice (``2wiki-dev/corpus.jsonl``, 354 passages) and the HotpotQA sample
  (``hotpotqa-sample/corpus.jsonl``, 994 passages), each indexed with the fake LLM and
  no reports: the text units and their vectors (the bundled embedder, all-MiniLM-L6-v2)
  do not depend on the model;
- questions: the book's (``search/routing.jsonl`` corpus ``book``, ``search/book-thematic.jsonl``
  and the book questions of ``bench_serve.py``, ``bench_lazy_reports.py`` and
  ``bench_cli_cold_start.py``), 2Wiki's (``2wiki-dev/questions.jsonl``,
  ``search/2wiki-thematic.jsonl``, ``search/routing.jsonl`` corpus ``2wiki``) and HotpotQA's
  (``hotpotqa-sample/questions.jsonl``); each split into ``specific`` and ``thematic``
  (a corpus-wide cue, :func:`kgloom.query.question_cues.thematic_cue`: not judged).

Every question is asked of every index (``vector`` retrieval, top 1; every mode and search
judges by the same nearest-unit cosine, ``info["best_similarity"]``). A question asked of
its own corpus is answerable and must not be flagged; a specific question asked of
another corpus should be. The threshold is the lowest own-corpus score of a judged
question, rounded down to 0.01, less a margin of 0.02 (for questions shorter or vaguer
than these and for IVF_PQ's estimated cosines on big indexes). A split-half check
chooses it the same way on the even-numbered questions and counts the odd-numbered
own-corpus questions it would flag.

Usage:
    python bench/eval_relevance.py [--work /tmp/kgloom-relevance]
                                   [--save bench/results/relevance.json]

The first run indexes the three corpora (about 4 minutes on 2 cores); later runs reuse
them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
DATA = ROOT / "bench" / "data"
MARGIN = 0.02  # below the lowest own-corpus score (see the module doc)
GRID = 0.01
SWEEP = [round(0.20 + 0.01 * i, 2) for i in range(26)]  # 0.20 .. 0.45


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def questions() -> dict[str, list[str]]:
    """Corpus -> its development questions, each once, in file order."""
    from bench import bench_cli_cold_start, bench_lazy_reports, bench_serve

    routing = _jsonl(DATA / "search" / "routing.jsonl")
    by_corpus = {
        "book": [r["question"] for r in routing if r["corpus"] == "book"]
        + [r["question"] for r in _jsonl(DATA / "search" / "book-thematic.jsonl")]
        + list(bench_serve.QUESTIONS) + list(bench_lazy_reports.QUESTIONS)
        + [bench_cli_cold_start.QUESTION],
        "2wiki": [r["question"] for r in _jsonl(DATA / "2wiki-dev" / "questions.jsonl")]
        + [r["question"] for r in _jsonl(DATA / "search" / "2wiki-thematic.jsonl")]
        + [r["question"] for r in routing if r["corpus"] == "2wiki"],
        "hotpot": [r["question"] for r in _jsonl(DATA / "hotpotqa-sample" / "questions.jsonl")],
    }
    return {c: list(dict.fromkeys(q.strip() for q in qs)) for c, qs in by_corpus.items()}


def build_indexes(work: Path) -> dict[str, Path]:
    """Corpus -> its fake-LLM index under ``work`` (built once, reused)."""
    from bench.harness import build_index

    inputs = {"book": ROOT / "data" / "input" / "a-christmas-carol.txt",
              "2wiki": DATA / "2wiki-dev" / "corpus.jsonl",
              "hotpot": DATA / "hotpotqa-sample" / "corpus.jsonl"}
    out = {}
    for corpus, source in inputs.items():
        folder = work / corpus / "output"
        if not (folder / "build.json").exists():
            inp = work / corpus / "input"
            inp.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, inp / source.name)
            print(f"indexing {corpus} ...", flush=True)
            build_index(inp, folder, fake_llm=True, reports=False)
        out[corpus] = folder
    return out


def scores(indexes: dict[str, Path], qs: dict[str, list[str]]) -> dict[str, dict[str, list]]:
    """``"index|questions"`` -> {"question", "best", "thematic"} lists: each question's
    ``info["best_similarity"]`` on that index (vector retrieval, top 1)."""
    from kgloom.query.question_cues import thematic_cue
    from kgloom.query.retriever import Retriever
    from kgloom.settings import load_settings

    out = {}
    for corpus, folder in indexes.items():
        retriever = Retriever.from_settings(folder, load_settings())
        for asked, items in qs.items():
            best = [retriever.retrieve(q, mode="vector", top_k=1).info["best_similarity"]
                    for q in items]
            out[f"{corpus}|{asked}"] = {"question": items, "best": best,
                                        "thematic": [thematic_cue(q) is not None
                                                     for q in items]}
    return out


def judged(rows: dict[str, list], pick=lambda i: True) -> list[float]:
    """The scores of the questions that are judged (no thematic cue), chosen by ``pick``
    (question position)."""
    return [b for i, (b, t) in enumerate(zip(rows["best"], rows["thematic"]))
            if not t and pick(i)]


def choose(table: dict[str, dict[str, list]], pick=lambda i: True) -> tuple[float, float]:
    """(threshold, lowest own-corpus score) by the rule of the module doc, over the
    questions ``pick`` keeps."""
    lowest = min(min(judged(rows, pick)) for key, rows in table.items()
                 if key.split("|")[0] == key.split("|")[1])
    return round(math.floor(lowest / GRID) * GRID - MARGIN, 2), lowest


def summary(values: list[float]) -> dict[str, float | int]:
    a = np.asarray(values, dtype=float)
    if not len(a):
        return {"n": 0}
    return {"n": len(a), "min": round(float(a.min()), 3),
            **{f"p{p}": round(float(np.percentile(a, p)), 3) for p in (5, 25, 50, 75, 95)},
            "max": round(float(a.max()), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/kgloom-relevance"))
    ap.add_argument("--save", type=Path, default=None)
    args = ap.parse_args()
    qs = questions()
    table = scores(build_indexes(args.work), qs)
    threshold, lowest = choose(table)
    even, even_lowest = choose(table, lambda i: i % 2 == 0)
    pairs = {}
    print(f"{'index':7s} {'asked':7s} {'kind':9s} {'n':>4s} {'min':>6s} {'p25':>6s} "
          f"{'med':>6s} {'p75':>6s} {'max':>6s}  flagged at {threshold}")
    for key, rows in table.items():
        index, asked = key.split("|")
        specific = judged(rows)
        thematic = [b for b, t in zip(rows["best"], rows["thematic"]) if t]
        flagged = sum(b < threshold for b in specific)
        held_out = [b for i, b in enumerate(rows["best"])
                    if i % 2 == 1 and not rows["thematic"][i]]
        pairs[key] = {"own_corpus": index == asked, "specific": summary(specific),
                      "thematic": summary(thematic),
                      "flagged": flagged, "flagged_share": round(flagged / len(specific), 3),
                      "split_half_flagged_odd": sum(b < even for b in held_out),
                      "split_half_odd": len(held_out),
                      "lowest_questions": sorted(
                          zip(rows["best"], rows["question"]))[:3]}
        for kind, s in (("specific", pairs[key]["specific"]),
                        ("thematic", pairs[key]["thematic"])):
            if s["n"]:
                print(f"{index:7s} {asked:7s} {kind:9s} {s['n']:4d} {s['min']:6.3f} "
                      f"{s['p25']:6.3f} {s['p50']:6.3f} {s['p75']:6.3f} {s['max']:6.3f}"
                      + (f"  {flagged}/{s['n']}" if kind == "specific" else ""))
    print(f"threshold {threshold} (lowest own-corpus score {lowest:.3f}, rounded down to "
          f"{GRID}, less {MARGIN}); split half: {even} from the even questions (lowest "
          f"{even_lowest:.3f})")
    if args.save:
        from bench.stamp import save_result

        save_result(args.save, {"bench": "low-relevance threshold (eval_relevance.py)",
                                "threshold": threshold, "lowest_own_corpus": lowest,
                                "margin": MARGIN, "split_half_threshold": even,
                                "sweep": {str(t): {k: sum(b < t for b in judged(r))
                                                   for k, r in table.items()}
                                          for t in SWEEP},
                                "pairs": pairs, "scores": table}, args)


if __name__ == "__main__":
    main()
