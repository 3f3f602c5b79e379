"""Retrieval on every development set at once, over indexes already built: the book, the
2Wiki slice, the HotpotQA sample and the 2Wiki pool, each with its own questions, every
mode side by side, and a sweep of one retrieval setting.

Sets (each given by ``--<set> INDEX``; a set without an index is left out):

- ``book``: the bundled book (``make index``) and bench/data/book-questions.jsonl (30
  questions a reader wrote from the book alone, blind to kgloom; method in
  bench/data/README.md). A question is found at k when one of the top k text units holds
  one of its ``evidence`` spans (whitespace folded).
- ``book-later``: the same index and 20 more questions
  (bench/data/book-questions-later.jsonl), written by another reader from the book alone
  after ``bridge_match_power`` and ``adjacent_unit_weight`` were chosen: a check on
  questions no setting was tuned on (``--book-later INDEX``; by default ``--book``'s).
- ``book-fresh``: the same index and 25 more (bench/data/book-questions-fresh.jsonl),
  written by a third reader from the book alone when no retrieval setting had changed
  since ``book-later``; measured, never tuned on (``--book-fresh INDEX``; by default
  ``--book``'s).
- ``slice``: bench/data/2wiki-dev (354 passages, 40 questions; ``bench/eval_qa.py --work
  DIR`` builds ``DIR/output``).
- ``hotpot``: bench/data/hotpotqa-sample (994 passages, 100 questions; ``kgloom index`` of
  its corpus.jsonl).
- ``pool``: the 6,119-passage 2Wiki pool and the slice's 40 questions (``bench/eval_pool.py
  --no-retrieval --work DIR`` builds ``DIR/output``).

For the Wikipedia sets a question's recall at k is the share of its supporting titles
among the top k units' document titles (:func:`eval_qa.score_rankings`: R@2, R@5, AR@5,
and the same per question type in ``by_type``: HotpotQA's bridge and comparison, 2Wiki's
compositional, comparison, bridge_comparison and inference).

``--sweep KEY=V1,V2,...`` runs ``bridge`` once per value of the retrieval setting KEY
(``kgloom.settings.RetrievalSettings``) beside the modes at their defaults.

Usage:
    python bench/eval_sets.py --book data/output --slice /tmp/qa/output \\
        --hotpot /tmp/hotpot/output --pool /tmp/pool/output \\
        [--modes vector,bridge,hybrid,ppr,multihop] [--sweep bridge_vector_weight=0,0.3] \\
        [--save bench/results/eval_sets.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.eval_qa import score_rankings  # noqa: E402
from bench.stamp import save_result  # noqa: E402

DATA = ROOT / "bench" / "data"
QUESTIONS = {"book": DATA / "book-questions.jsonl",
             "book-later": DATA / "book-questions-later.jsonl",
             "book-fresh": DATA / "book-questions-fresh.jsonl",
             "slice": DATA / "2wiki-dev" / "questions.jsonl",
             "hotpot": DATA / "hotpotqa-sample" / "questions.jsonl",
             "pool": DATA / "2wiki-dev" / "questions.jsonl"}


def load_questions(path: Path) -> list[dict]:
    """The questions of a JSON Lines file (one object a line)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def fold(text: str) -> str:
    """``text`` with every run of whitespace one space (evidence spans and units compared
    this way: a unit's line breaks are not the file's)."""
    return " ".join(text.split())


def evidence_found(texts: list[str], evidence: list[str], k: int) -> float:
    """1.0 when one of the first ``k`` unit texts holds one of the ``evidence`` spans."""
    spans = [fold(e) for e in evidence]
    return float(any(s in fold(t) for t in texts[:k] for s in spans))


def run_mode(retriever, questions: list[dict], mode: str, by_evidence: bool,
             top_k: int = 5) -> dict:
    """One mode over a set's questions: R@2, R@5 (and AR@5 for titles), latency, and the
    per-question ranks found."""
    rankings, seconds, texts = [], [], []
    for q in questions:
        t0 = time.perf_counter()
        res = retriever.retrieve(q["question"], mode=mode, top_k=top_k)
        seconds.append(time.perf_counter() - t0)
        rankings.append(res.text_units["document_title"].to_list())
        texts.append(res.text_units["text"].to_list())
    if not by_evidence:
        return score_rankings(questions, rankings, seconds)  # with the split per type
    n = len(questions) or 1
    return {"questions": len(questions),
            "recall@2": round(100 * sum(evidence_found(t, q["evidence"], 2)
                                        for t, q in zip(texts, questions)) / n, 1),
            "recall@5": round(100 * sum(evidence_found(t, q["evidence"], 5)
                                        for t, q in zip(texts, questions)) / n, 1),
            "missed@5": [q["id"] for t, q in zip(texts, questions)
                         if not evidence_found(t, q["evidence"], 5)]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in QUESTIONS:
        ap.add_argument(f"--{name}", type=Path, default=None, help=f"the {name} index")
    ap.add_argument("--modes", default="vector,bridge,hybrid,ppr,multihop")
    ap.add_argument("--sweep", default="", help="KEY=V1,V2,...: bridge at each value")
    ap.add_argument("--save", type=Path, default=ROOT / "bench" / "results" / "eval_sets.json")
    args = ap.parse_args()

    from kgloom.query.retriever import Retriever
    from kgloom.settings import load_settings

    settings = load_settings()  # kgloom.yaml and KGLOOM_* as `kgloom query` reads them

    sweep_key, values = "", []
    if args.sweep:
        sweep_key, _, spec = args.sweep.partition("=")
        values = [float(v) for v in spec.split(",")]
    result: dict = {"sets": {}}
    for name, qpath in QUESTIONS.items():
        index = getattr(args, name.replace("-", "_"))
        if name in ("book-later", "book-fresh") and index is None:
            index = args.book  # the same book, its later questions
        if index is None:
            continue
        questions = load_questions(qpath)
        retriever = Retriever.from_settings(index, settings)
        base = retriever.settings
        rows = {}
        for mode in args.modes.split(","):
            retriever.settings = base
            rows[mode] = run_mode(retriever, questions, mode, name.startswith("book"))
            print(f"{name:7s} {mode:28s} R@2 {rows[mode]['recall@2']:5.1f} "
                  f"R@5 {rows[mode]['recall@5']:5.1f}", flush=True)
        for v in values:
            label = f"bridge {sweep_key}={v:g}"
            retriever.settings = base.model_copy(update={sweep_key: v})
            rows[label] = run_mode(retriever, questions, "bridge", name.startswith("book"))
            print(f"{name:7s} {label:28s} R@2 {rows[label]['recall@2']:5.1f} "
                  f"R@5 {rows[label]['recall@5']:5.1f}", flush=True)
        result["sets"][name] = {"index": str(index), "questions": str(qpath.relative_to(ROOT)),
                                "modes": rows}
        save_result(args.save, result, args)


if __name__ == "__main__":
    main()
