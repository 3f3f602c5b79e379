"""Extraction quality with the real model: the book's gold set, the 2Wiki titles, the
multilingual suite. Prints the figures and saves them as JSON under bench/results/.

Usage:
    python bench/bench_quality.py book  --output-dir /tmp/q-book  [--save ...]
    python bench/bench_quality.py 2wiki --output-dir /tmp/q-2wiki [--half odd|even|all]
    python bench/bench_quality.py multilingual --output-dir /tmp/q-ml [--sources auto,open]
    (all take --candidate-source, --no-titles, --model-path, --fake-llm)

Each runs the pipeline's own domain functions from documents to resolved entities
(``read_documents`` -> ``split_text_units`` -> ``extract_graph`` -> ``resolve_entities``
with the embedder and the LLM merge check), in one process and without the Dagster
instance, description summaries, communities or reports, which do not change entity
titles, aliases or types. The LLM cache (``llm_cache.sqlite`` in the output folder) is
reused between runs, so a rerun with unchanged prompts costs no model call. Tables are
written to the output folder (entities, relationships, entity_aliases, entity_mentions).

Figures:
- book: ``bench/eval_gold.py``'s entity and pair recall and resolution checks, plus type
  accuracy (the share of found gold entities whose entity type equals the gold type,
  over the node each resolved to) and the entities whose title names Project Gutenberg or
  its licence (boilerplate);
- 2wiki: the share of passages whose title without its parenthesis is an entity title
  or alias (normalized), over the chosen half (even/odd line numbers: the rules were
  looked at on the even half; the odd half is held out), and the same share counting
  only entities mentioned in the passage's own text unit;
- multilingual: per language, recall and precision of the extracted entity titles against
  the gold lists, type accuracy of the found gold names, per candidate source.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.stamp import save_result  # noqa: E402
from kgloom.core import schemas  # noqa: E402
from kgloom.core.storage import write_table  # noqa: E402
from kgloom.embedding.tokenizer import default_tokenizer  # noqa: E402
from kgloom.extraction.cooccurrence import cooccurrence_graph  # noqa: E402
from kgloom.extraction.extract import extract_graph  # noqa: E402
from kgloom.graph.entities import resolution_options  # noqa: E402
from kgloom.graph.resolution import resolve_entities  # noqa: E402
from kgloom.ingest.chunking import split_text_units  # noqa: E402
from kgloom.ingest.documents import read_documents  # noqa: E402
from kgloom.names.normalize import normalize_for_match  # noqa: E402
from kgloom.settings.indexing import IndexSettings, settings_from_mapping  # noqa: E402

BOOK = ROOT / "data" / "input"
WIKI = ROOT / "bench" / "data" / "2wiki-dev" / "corpus.jsonl"
SUITE = ROOT / "bench" / "data" / "multilingual"
GOLD = ROOT / "bench" / "data" / "christmas-carol-gold.json"


THREADS = 2  # llama.cpp threads (its default on this 2-core machine is 1)


def _llm(out: Path, model_path: str, fake: bool, settings: IndexSettings | None = None):
    """The cached model, None with ``method=fast`` (no model is opened)."""
    from kgloom.resources.model import LLMResource

    if settings is not None and settings.method == "fast":
        return None
    return LLMResource(model_path=model_path, fake=fake, n_threads=THREADS).open(out)


def _progress(label: str):
    t0 = time.perf_counter()

    def report(done: int, total: int) -> None:
        if done == total or done % 10 == 0:
            print(f"{label}: {done}/{total} units, {time.perf_counter() - t0:.0f} s",
                  file=sys.stderr, flush=True)
    return report


def build(input_dir: Path, out: Path, settings: IndexSettings, llm, files=None,
          label: str = "extraction") -> dict:
    """Documents -> units -> mentions -> resolved entities for ``input_dir``; tables
    written under ``out``; returns the frames and counters."""
    from kgloom.embedding.sentence_embedder import Embedder

    docs, _ = read_documents(input_dir, files=files, cut_boilerplate=settings.cut_boilerplate)
    units = split_text_units(docs, default_tokenizer(), settings.chunk_size,
                             settings.chunk_overlap)
    t0 = time.perf_counter()
    result = (cooccurrence_graph(units, settings, _progress(label), documents=docs)
              if settings.method == "fast" else
              extract_graph(units, llm, settings, _progress(label), documents=docs))
    seconds = time.perf_counter() - t0
    embedder = Embedder()
    ents, rels, aliases = resolve_entities(
        result.entity_mentions, result.relationship_mentions, embed=embedder.embed,
        similarity_threshold=settings.embedding_merge_threshold,
        **resolution_options(settings, llm, default_tokenizer()))
    for name, df in [(schemas.ENTITIES, ents), (schemas.RELATIONSHIPS, rels),
                     (schemas.ENTITY_ALIASES, aliases), (schemas.ENTITY_MENTIONS,
                                                         result.entity_mentions),
                     (schemas.TEXT_UNITS, units)]:
        write_table(df, out, name)
    st = llm.stats.get("extraction") if llm else None
    return {"docs": docs, "units": units, "result": result, "entities": ents,
            "relationships": rels, "aliases": aliases,
            "extraction_seconds": round(seconds, 1),
            "extraction_calls": st.calls if st else 0,
            "extraction_cache_hits": st.cache_hits if st else 0}


def type_accuracy(entities: pl.DataFrame, aliases: pl.DataFrame,
                  gold: list[tuple[str, str, list[str]]]) -> dict:
    """Share of found gold names (any form equals an entity title or alias) whose entity
    has the gold type; a gold name found on several nodes counts its most frequent one."""
    title_to = {normalize_for_match(t): (i, ty, f) for t, i, ty, f in
                entities.select("title", "id", "type", "frequency").iter_rows()}
    by_id = {i: (ty, f) for _, (i, ty, f) in title_to.items()}
    alias_to = {normalize_for_match(a): i
                for a, i in aliases.select("alias", "entity_id").iter_rows()}
    right, typed, wrong = 0, 0, {}
    for name, gtype, forms in gold:
        ids = {title_to[normalize_for_match(f)][0] for f in forms
               if normalize_for_match(f) in title_to}
        ids |= {alias_to[normalize_for_match(f)] for f in forms
                if normalize_for_match(f) in alias_to}
        ids = [i for i in ids if i in by_id]
        if not ids:
            continue
        best = max(ids, key=lambda i: by_id[i][1])
        typed += 1
        if by_id[best][0] == gtype:
            right += 1
        else:
            wrong[name] = f"{by_id[best][0]} (gold {gtype})"
    return {"type_accuracy": round(right / typed, 4) if typed else 0.0, "typed": typed,
            "right": right, "wrong": wrong}


def run_book(args, settings) -> dict:
    from bench.eval_gold import score

    out = Path(args.output_dir)
    llm = _llm(out, args.model_path, args.fake_llm, settings)
    b = build(BOOK, out, settings, llm, label="book")
    gold = json.loads(GOLD.read_text())
    res = score(out, gold)
    res.update(type_accuracy(b["entities"], b["aliases"],
                             [(e["name"], e["type"], e["aliases"]) for e in gold["entities"]]))
    res["entity_types"] = dict(Counter(b["entities"]["type"].to_list()))
    res["boilerplate_entities"] = [t for t in b["entities"]["title"].to_list()
                                   if re.search(r"gutenberg|licen[cs]e|e-?book|trademark", t, re.I)]
    res.update({k: b[k] for k in ("extraction_seconds", "extraction_calls",
                                  "extraction_cache_hits")})
    res["text_units"] = b["units"].height
    res["documents_boilerplate_cut"] = b["docs"]["boilerplate_cut"].to_list()
    return res


def wiki_title(title: str) -> str:
    """The title without a trailing parenthesis."""
    return re.sub(r"\s*\([^()]*\)\s*$", "", title).strip()


def run_2wiki(args, settings) -> dict:
    out = Path(args.output_dir)
    rows = [json.loads(line) for line in WIKI.read_text(encoding="utf-8").splitlines()]
    pick = {"all": rows, "even": rows[0::2], "odd": rows[1::2]}[args.half][::args.every]
    pick = pick[:args.limit] if args.limit else pick
    inp = out / "input"
    inp.mkdir(parents=True, exist_ok=True)
    (inp / f"2wiki-{args.half}.jsonl").write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in pick), encoding="utf-8")
    llm = _llm(out, args.model_path, args.fake_llm, settings)
    b = build(inp, out, settings, llm, label=f"2wiki-{args.half}")
    ents, aliases = b["entities"], b["aliases"]
    names = {normalize_for_match(t) for t in ents["title"]} | \
        {normalize_for_match(a) for a in aliases["alias"]}
    # per passage: titles of the entities mentioned in its own unit(s)
    units = b["units"].join(b["docs"].select(pl.col("id").alias("document_id"), "title"),
                            on="document_id")
    unit_title = dict(units.select("id", "title").iter_rows())
    own: dict[str, set[str]] = {}
    for uid, t in b["result"].entity_mentions.select("text_unit_id", "title").iter_rows():
        own.setdefault(unit_title[uid], set()).add(normalize_for_match(t))
    hit = [normalize_for_match(wiki_title(r["title"])) in names for r in pick]
    hit_own = [normalize_for_match(wiki_title(r["title"])) in own.get(r["title"], set())
               for r in pick]
    return {"half": args.half, "every": args.every, "limit": args.limit, "passages": len(pick),
            "title_is_entity_title_or_alias": round(sum(hit) / len(pick), 4),
            "title_is_entity_of_own_passage": round(sum(hit_own) / len(pick), 4),
            "entities": ents.height, "entity_types": dict(Counter(ents["type"].to_list())),
            "missed_sample": [wiki_title(r["title"]) for r, h in zip(pick, hit) if not h][:30],
            **{k: b[k] for k in ("extraction_seconds", "extraction_calls",
                                 "extraction_cache_hits")}}


def run_multilingual(args, settings) -> dict:
    from bench.bench_candidates import score_names, suite_languages

    out = Path(args.output_dir)
    llm = _llm(out, args.model_path, args.fake_llm)
    res: dict = {}
    for source in args.sources.split(","):
        s = settings_from_mapping({"candidate_source": source}, settings)
        for lang in suite_languages():
            gold = json.loads((SUITE / f"{lang}.gold.json").read_text(encoding="utf-8"))
            o = out / source / lang
            b = build(SUITE, o, s, llm, files=[SUITE / f"{lang}.txt"], label=f"{source}/{lang}")
            titles = sorted(set(b["result"].entity_mentions["title"].to_list()))
            r = score_names(titles, gold)
            r.update(type_accuracy(b["entities"], b["aliases"],
                                   [(g["name"], g["type"], [g["name"], *g["aliases"]])
                                    for g in gold["names"] if g["type"] != "OTHER"]))
            res.setdefault(lang, {})[source] = r
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", choices=["book", "2wiki", "multilingual"])
    ap.add_argument("--output-dir", required=True)
    ap.add_argument("--half", choices=["all", "even", "odd"], default="all")
    ap.add_argument("--candidate-source", default="auto")
    ap.add_argument("--sources", default="auto,proper_names,segmenter,ngram,open",
                    help="multilingual: candidate sources to compare")
    ap.add_argument("--no-titles", action="store_true", help="title_candidates off")
    ap.add_argument("--model-path", default="")
    ap.add_argument("--fake-llm", action="store_true")
    ap.add_argument("--save", default="")
    ap.add_argument("--threads", type=int, default=THREADS, help="llama.cpp threads")
    ap.add_argument("--every", type=int, default=1,
                    help="2wiki: only every k-th passage of the chosen half (time budget)")
    ap.add_argument("--limit", type=int, default=0,
                    help="2wiki: only the first n passages of that sample (0: all)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="an IndexSettings field (repeatable), e.g. --set extraction_text=full")
    args = ap.parse_args()
    globals()["THREADS"] = args.threads
    settings = IndexSettings(candidate_source=args.candidate_source,
                             title_candidates=not args.no_titles)
    settings = settings_from_mapping(dict(kv.split("=", 1) for kv in args.set), settings)
    t0 = time.perf_counter()
    res = {"book": run_book, "2wiki": run_2wiki, "multilingual": run_multilingual}[
        args.corpus](args, settings)
    res = {"corpus": args.corpus, "candidate_source": args.candidate_source,
           "title_candidates": not args.no_titles, "fake_llm": args.fake_llm,
           "settings": dict(kv.split("=", 1) for kv in args.set),
           "wall_seconds": round(time.perf_counter() - t0, 1), **res}
    text = json.dumps(res, indent=1, ensure_ascii=False, default=str)
    print(text)
    save = Path(args.save or ROOT / "bench" / "results" / f"quality-{args.corpus}.json")
    save_result(save, res, args, indent=1, default=str)


if __name__ == "__main__":
    main()
