"""Choice decoding against the grammar path: the same extraction calls on the same text
units with the real bundled model, both in one run, paired; prints and saves JSON.

Usage: python bench/bench_choice_decoding.py [--corpus pool|book] [--units 30]
       [--start 0] [--save bench/results/choice_decoding.json]

Two ``LlamaCppBackend`` objects of the same GGUF, each behind its own empty LLM cache:
``grammar`` decodes every reply token by token under its llama.cpp grammar
(``choice_decoding=False``); ``choice`` decodes the extraction reply with
:func:`kgloom.llm.choices.decode_choices` (the default). Each text unit is extracted by
both (:func:`kgloom.extraction.extract.extract_unit`, default settings), in alternating
order unit by unit, so the machine's load hits both alike; each backend keeps its own KV
prefix. Figures: wall seconds per variant and their ratio; prompt tokens evaluated and
reply tokens with llama.cpp's seconds; the agreement of the two (units with the same
entity names, the same extracted relationships) and how many relationships each kept.
Corpora: ``pool``: passages of bench/data/2wiki-pool/corpus.jsonl (record titles as
candidates, as the index does); ``book``: text units of the bundled book.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.stamp import load_average, save_result  # noqa: E402
from kgloom.extraction.extract import extract_unit  # noqa: E402
from kgloom.llm import CachedLLM, Completion, open_llm  # noqa: E402
from kgloom.names.normalize import record_title  # noqa: E402
from kgloom.settings.indexing import IndexSettings  # noqa: E402

VARIANTS = ("grammar", "choice")


def units_of(corpus: str, start: int, n: int) -> list[tuple[str, str | None]]:
    """(text, record title or None) of ``n`` units from ``start``."""
    if corpus == "pool":
        path = ROOT / "bench" / "data" / "2wiki-pool" / "corpus.jsonl"
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
                if line.strip()][start:start + n]
        return [(r["text"], record_title(r["title"])) for r in rows]
    from kgloom.embedding.tokenizer import default_tokenizer
    from kgloom.ingest.chunking import split_text_units
    from kgloom.ingest.documents import read_documents

    docs, _ = read_documents(ROOT / "data" / "input")
    units = split_text_units(docs, default_tokenizer())
    return [(t, None) for t in units["text"].to_list()[start:start + n]]


def variants_and_units(spec: str, start: int, n: int
                       ) -> tuple[list[str], list[tuple[str, str | None]]]:
    """The comma-separated variant names of ``spec`` (the first is the baseline) and
    :func:`units_of` the pool from ``start``, ``n`` of them: what the paired benches with
    a variant list start from."""
    return [v.strip() for v in spec.split(",") if v.strip()], units_of("pool", start, n)


def summary(calls: list[Completion], wall: float, n: int) -> dict:
    """One variant's figures over its ``calls``."""
    return {"wall_seconds": round(wall, 2), "seconds_per_unit": round(wall / max(n, 1), 3),
            "calls": len(calls),
            "prompt_tokens_evaluated": sum(c.prompt_eval_tokens for c in calls),
            "prompt_seconds": round(sum(c.prompt_seconds for c in calls), 2),
            "reply_tokens": sum(c.completion_tokens for c in calls),
            "reply_seconds": round(sum(c.generation_seconds for c in calls), 2)}


def logged_llms(variants: dict[str, dict], prefix: str
                ) -> tuple[dict[str, CachedLLM], dict[str, list[Completion]]]:
    """One real-model LLM per variant (``open_llm`` with that variant's keyword
    arguments), each behind its own empty cache in a new temporary folder; every reply a
    variant's backend gives is appended to its list of completions."""
    calls: dict[str, list[Completion]] = {v: [] for v in variants}
    llms: dict[str, CachedLLM] = {}
    work = Path(tempfile.mkdtemp(prefix=prefix))
    for v, kwargs in variants.items():
        llm = open_llm(work / f"{v}.sqlite", **kwargs)
        backend = llm.backend
        complete = backend.complete  # type: ignore[union-attr]

        def logged(*a, _complete=complete, _v=v, **kw):
            reply = _complete(*a, **kw)
            calls[_v].append(reply)
            return reply

        backend.complete = logged  # type: ignore[union-attr]
        llms[v] = llm
    return llms, calls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", choices=("pool", "book"), default="pool")
    ap.add_argument("--units", type=int, default=30)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--save", default=str(ROOT / "bench" / "results" / "choice_decoding.json"))
    args = ap.parse_args()

    units = units_of(args.corpus, args.start, args.units)
    settings = IndexSettings()
    llms, calls = logged_llms({v: {"choice_decoding": v == "choice"} for v in VARIANTS},
                              "kgloom-choice-")
    load_before = load_average()
    wall: Counter[str] = Counter()
    found: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    for i, (text, title) in enumerate(units):
        for v in (VARIANTS if i % 2 == 0 else VARIANTS[::-1]):
            start = time.perf_counter()
            ents, rels, _ = extract_unit(llms[v], f"u{i}", text, settings, Counter(), None,
                                         title)
            wall[v] += time.perf_counter() - start
            found[v].append({"names": sorted(e["title"] for e in ents),
                             "rels": sorted((r["source"], r["target"]) for r in rels
                                            if r["kind"] == "extracted")})
        print(f"{i + 1}/{len(units)} grammar {wall['grammar']:.0f} s, choice "
              f"{wall['choice']:.0f} s", flush=True)
    pairs = list(zip(found["grammar"], found["choice"]))
    result = {
        "corpus": args.corpus, "units": len(units), "start": args.start,
        "model": "bundled SmolLM2-135M-Instruct", "cores": os.cpu_count(),
        "load_before": load_before, "load_after": load_average(),
        "variants": {v: summary(calls[v], wall[v], len(units)) for v in VARIANTS},
        "speedup": round(wall["grammar"] / max(wall["choice"], 1e-9), 2),
        "same_entity_names": sum(a["names"] == b["names"] for a, b in pairs),
        "same_extracted_relationships": sum(a["rels"] == b["rels"] for a, b in pairs),
        "extracted_relationships": {v: sum(len(x["rels"]) for x in found[v])
                                    for v in VARIANTS},
        "entities": {v: sum(len(x["names"]) for x in found[v]) for v in VARIANTS},
    }
    print(json.dumps({k: result[k] for k in ("speedup", "same_entity_names", "units")}))
    save_result(Path(args.save), result, args)


if __name__ == "__main__":
    main()
