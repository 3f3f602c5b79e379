"""Candidate-level figures of name finding, no model (seconds); print and save JSON.

Usage: python bench/bench_candidates.py [--save bench/results/candidates.json]

- multilingual suite (bench/data/multilingual): per language and per candidate source,
  recall of the gold names among the candidates and precision of the candidates (see
  that folder's README for the matching rule);
- 2Wiki dev corpus (bench/data/2wiki-dev): share of passages whose title, without its
  parenthesis, is among the candidates of its own passage, on all 354 passages and on
  each half (even / odd line numbers: the rules were tuned looking at the even half);
- the bundled book: gold entity recall among the candidates of all its text units
  (any alias of a gold entity equals a candidate), candidates per unit.

A candidate-level figure bounds what extraction can reach: the model only types the
candidates (bench/bench_quality.py measures what it makes of them).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.stamp import save_result  # noqa: E402
from kgloom.names.candidates import find_candidates, word_counts  # noqa: E402
from kgloom.names.normalize import normalize_for_match  # noqa: E402

SUITE = ROOT / "bench" / "data" / "multilingual"
WIKI = ROOT / "bench" / "data" / "2wiki-dev" / "corpus.jsonl"
BOOK = ROOT / "data" / "input"
GOLD = ROOT / "bench" / "data" / "christmas-carol-gold.json"
SOURCES = ("auto", "proper_names", "segmenter", "ngram")


def wiki_title(title: str) -> str:
    """The title without a trailing parenthesis: "Theodred II (Bishop of Elmham)" ->
    "Theodred II"."""
    return re.sub(r"\s*\([^()]*\)\s*$", "", title).strip()


def suite_languages() -> list[str]:
    """Languages of the multilingual suite (file stems with a gold list)."""
    return sorted(p.name.split(".")[0] for p in SUITE.glob("*.gold.json"))


def score_names(found: list[str], gold: dict) -> dict:
    """Recall of gold names among ``found`` and precision of ``found`` (NFKC, case-folded).

    Returns: {"recall", "precision", "found", "gold", "candidates", "missed", "extra"}.
    """
    norm = {normalize_for_match(f) for f in found}
    forms = [{normalize_for_match(x) for x in [g["name"], *g["aliases"]]} for g in gold["names"]]
    hit = [bool(f & norm) for f in forms]
    all_forms = set().union(*forms)
    right = [f for f in found if normalize_for_match(f) in all_forms]
    return {"recall": round(sum(hit) / len(hit), 4),
            "precision": round(len(right) / len(found), 4) if found else 0.0,
            "found": sum(hit), "gold": len(hit), "candidates": len(found),
            "missed": [g["name"] for g, h in zip(gold["names"], hit) if not h],
            "extra": [f for f in found if normalize_for_match(f) not in all_forms]}


def multilingual() -> dict:
    out = {}
    for lang in suite_languages():
        text = (SUITE / f"{lang}.txt").read_text(encoding="utf-8")
        gold = json.loads((SUITE / f"{lang}.gold.json").read_text(encoding="utf-8"))
        stats = word_counts([text])
        out[lang] = {src: score_names([c.name for c in find_candidates(text, src, stats)], gold)
                     for src in SOURCES}
    return out


def two_wiki() -> dict:
    rows = [json.loads(line) for line in WIKI.read_text(encoding="utf-8").splitlines()]
    stats = word_counts([r["text"] for r in rows])
    hits, verbatim = [], []
    for r in rows:
        title = normalize_for_match(wiki_title(r["title"]))
        names = {normalize_for_match(c.name) for c in find_candidates(r["text"], "auto", stats)}
        hits.append(title in names)
        verbatim.append(title in normalize_for_match(r["text"]))
    share = lambda xs: round(sum(xs) / len(xs), 4)  # noqa: E731
    return {"passages": len(rows), "title_among_candidates": share(hits),
            "even_half_tuned": share(hits[0::2]), "odd_half_held_out": share(hits[1::2]),
            "title_verbatim_in_passage": share(verbatim),
            "missed_sample": [wiki_title(r["title"]) for r, h, v in zip(rows, hits, verbatim)
                              if v and not h][:40]}


def book() -> dict:
    from kgloom.embedding.tokenizer import default_tokenizer
    from kgloom.ingest.chunking import split_text_units
    from kgloom.ingest.documents import read_documents

    docs, _ = read_documents(BOOK)
    units = split_text_units(docs, default_tokenizer())
    texts = units["text"].to_list()
    stats = word_counts(texts)
    per_unit = [find_candidates(t, "auto", stats) for t in texts]
    names = {normalize_for_match(c.name) for cs in per_unit for c in cs}
    gold = json.loads(GOLD.read_text())
    found = [e["name"] for e in gold["entities"]
             if any(normalize_for_match(a) in names for a in e["aliases"])]
    counts = [len(cs) for cs in per_unit]
    boiler = sorted({c.name for cs in per_unit for c in cs
                     if re.search(r"gutenberg|license|ebook", c.name, re.I)})
    return {"units": len(texts),
            "gold_recall_candidates": round(len(found) / len(gold["entities"]), 4),
            "missed": [e["name"] for e in gold["entities"] if e["name"] not in found],
            "candidates_per_unit_mean": round(sum(counts) / len(counts), 2),
            "candidates_per_unit_max": max(counts), "distinct_candidates": len(names),
            "boilerplate_candidates": boiler}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--save", default=str(ROOT / "bench" / "results" / "candidates.json"))
    args = ap.parse_args()
    t0 = time.perf_counter()
    result = {"multilingual": multilingual(), "two_wiki": two_wiki(), "book": book()}
    result["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(result, indent=1, ensure_ascii=False))
    save_result(args.save, result, args, indent=1)


if __name__ == "__main__":
    main()
