"""Named entities found: does a question's named entity reach the top k of a retrieval mode?

Three figures for one mode (default ``bridge``, the default of local search), top k 5:

- ``entities``: for every entity of an index with degree >= ``--min-degree``, the
  question "What do we know about <title>?": the share whose result holds at least one of
  the entity's own text units (entities.parquet ``text_unit_ids``), and the misses;
- ``book_questions`` (with ``--questions``, default bench/data/search/routing.jsonl, the
  ``book`` questions that name entities): for each named entity the index links by name
  or alias (:class:`kgloom.query.linking.NameLinker` on the gold name), whether one of its
  units is in the top k; plus two questions of issue 28 ("How is Scrooge related to
  Fezziwig?", the Christmas Eve ball);
- ``wiki`` (with ``--wiki-work``, a folder of bench/eval_qa.py's index, built with the
  fake LLM when missing): the 2WikiMultihopQA slice's supporting-passage recall@2/@5 of
  the mode (bench/eval_qa.py's ``evaluate``).

The code measured is whatever ``kgloom`` the interpreter imports (PYTHONPATH), so one
run per commit compares before and after. Saves JSON stamped with commit, date and
load average.

Usage:
    python bench/eval_named.py --index data/output [--wiki-work /tmp/kgloom-qa]
        [--mode bridge] [--top-k 5] [--save bench/results/eval_named.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))
from bench.stamp import save_result, when  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ISSUE_QUESTIONS = [("How is Scrooge related to Fezziwig?", "Fezziwig"),
                   ("Who gave the Christmas Eve ball for his apprentices when Scrooge was "
                    "young?", "Fezziwig")]




def unit_hits(retriever, question: str, units: set[str], mode: str, top_k: int) -> bool:
    res = retriever.retrieve(question, mode=mode, top_k=top_k)
    return bool(units & set(res.text_units["id"].to_list()))


def entity_figures(retriever, index: Path, mode: str, top_k: int, min_degree: int) -> dict:
    ents = pl.read_parquet(index / "entities.parquet",
                           columns=["id", "title", "degree", "text_unit_ids"])
    chosen = ents.filter(pl.col("degree") >= min_degree).sort(["degree", "title"],
                                                             descending=[True, False])
    misses = []
    for r in chosen.iter_rows(named=True):
        if not unit_hits(retriever, f"What do we know about {r['title']}?",
                         set(r["text_unit_ids"] or []), mode, top_k):
            misses.append(r["title"])
    n = chosen.height
    return {"min_degree": min_degree, "entities": n, "found": n - len(misses),
            "share": round((n - len(misses)) / n, 3) if n else None, "misses": misses}


def question_figures(retriever, index: Path, questions: Path, mode: str, top_k: int) -> dict:
    from kgloom.query.linking import NameLinker

    ents = pl.read_parquet(index / "entities.parquet", columns=["id", "title", "text_unit_ids"])
    alias_path = index / "entity_aliases.parquet"
    aliases = pl.read_parquet(alias_path, columns=["alias", "entity_id"]) \
        if alias_path.exists() else None
    linker = NameLinker(ents.select("id", "title"), aliases)
    units = dict(zip(ents["id"].to_list(), ents["text_unit_ids"].to_list()))
    rows = [json.loads(line) for line in questions.read_text(encoding="utf-8").splitlines()
            if line.strip()]
    asked = [(r["question"], r.get("entities") or []) for r in rows if r.get("corpus") == "book"]
    asked += [(q, [name]) for q, name in ISSUE_QUESTIONS]
    pairs, found, detail = 0, 0, []
    for question, names in asked:
        res = retriever.retrieve(question, mode=mode, top_k=top_k)
        got = set(res.text_units["id"].to_list())
        for name in names:
            links, _ = linker.link(name)
            ids = [x.entity_id for x in links if x.method in ("name", "alias")]
            if not ids:
                continue  # not an entity of this index
            pairs += 1
            hit = any(got & set(units.get(e) or []) for e in ids)
            found += hit
            detail.append({"question": question, "entity": name, "found": bool(hit)})
    return {"questions": len(asked), "named_entity_pairs": pairs, "found": found,
            "share": round(found / pairs, 3) if pairs else None, "per_pair": detail}


def wiki_figures(work: Path, mode: str, top_k: int) -> dict:
    from bench import eval_qa
    from kgloom.query.retriever import Retriever

    index = work / "output"
    fake = not (index / "index-summary.json").exists() or \
        json.loads((index / "index-summary.json").read_text()).get(
            "llm_backend", {}).get("model_id") == "fake-llm"
    if not (index / "index-summary.json").exists():
        eval_qa.build_index(work, fake_llm=True)
    retriever = Retriever(index, graph_backend="memory")
    row = eval_qa.evaluate(retriever, eval_qa.load_questions(), mode, {}, top_k)
    return {"index": str(index), "fake_llm_index": fake, "questions": row["questions"],
            "recall@2": row["recall@2"], "recall@5": row["recall@5"],
            "linked_share": row["linked_share"]}


def _kgloom_from() -> Path:
    """The checkout of the imported kgloom (it may be another tree's)."""
    import kgloom

    return Path(kgloom.__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", type=Path, required=True, help="a book index folder")
    ap.add_argument("--questions", type=Path,
                    default=ROOT / "data" / "search" / "routing.jsonl")
    ap.add_argument("--wiki-work", type=Path, default=None,
                    help="bench/eval_qa.py's work folder (its index in output/)")
    ap.add_argument("--mode", default="bridge")
    ap.add_argument("--top-k", type=int, default=5)
    ap.add_argument("--min-degree", type=int, default=3)
    ap.add_argument("--label", default="", help="e.g. before / after")
    ap.add_argument("--commit", default="", help="the measured code's commit, when the "
                    "imported kgloom is not a git checkout (e.g. a `git archive` of it)")
    ap.add_argument("--save", type=Path, default=None)
    args = ap.parse_args()

    from kgloom.query.retriever import Retriever

    retriever = Retriever(args.index, graph_backend="memory")
    out = {"benchmark": "named entities in the top k", "label": args.label,
           "kgloom_from": str(_kgloom_from()), **when(_kgloom_from()),
           **({"commit": args.commit} if args.commit else {}),
           "index": str(args.index), "mode": args.mode, "top_k": args.top_k,
           "index_model": json.loads((args.index / "index-summary.json").read_text()).get(
               "llm_backend", {}).get("model_id")
           if (args.index / "index-summary.json").exists() else None}
    out["entities"] = entity_figures(retriever, args.index, args.mode, args.top_k,
                                     args.min_degree)
    print(f"entities: {out['entities']['found']}/{out['entities']['entities']} found; "
          f"misses {out['entities']['misses']}", flush=True)
    out["book_questions"] = question_figures(retriever, args.index, args.questions, args.mode,
                                             args.top_k)
    q = out["book_questions"]
    print(f"book questions: {q['found']}/{q['named_entity_pairs']} named entities found",
          flush=True)
    if args.wiki_work:
        out["wiki"] = wiki_figures(args.wiki_work, args.mode, args.top_k)
        print(f"2wiki: R@2 {out['wiki']['recall@2']} R@5 {out['wiki']['recall@5']}")
    if args.save:
        save_result(args.save, out, args, where=_kgloom_from())


if __name__ == "__main__":
    main()
