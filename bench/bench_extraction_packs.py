"""Short text units packed into one extraction call against one call per unit: the same
pool passages with the real bundled model, both in one run, paired; prints and saves JSON.

Usage: python bench/bench_extraction_packs.py [--units 60] [--start 0] [--block 12]
       [--budget 300] [--save bench/results/pack_extraction.json]

Two LLM objects of the same GGUF, each behind its own empty LLM cache and its own KV
prefix: ``alone`` extracts every passage with
:func:`kgloom.extraction.extract.extract_unit` (``extraction_pack_tokens`` 0, today's
default); ``packed`` groups consecutive passages with
:func:`kgloom.extraction.extract.pack_units` (``--budget`` chunking tokens) and extracts
each group with :func:`kgloom.extraction.extract.extract_pack`. Passages are taken in
blocks of ``--block``; each block is extracted by both variants in alternating order
block by block, so the machine's load hits both alike. Passages are records of
bench/data/2wiki-pool/corpus.jsonl, their titles candidates as the index makes them.

Figures: wall seconds per variant and their ratio; calls, prompt tokens evaluated, reply
tokens with llama.cpp's seconds; how the packed variant's units agree with their own
calls (the same entity names; of the entity names both kept, the same type; the
extracted relationships of each, and of ``alone``'s kept by ``packed``); the packing
counters (packed calls, packed units, fallbacks).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.bench_choice_decoding import logged_llms, summary, units_of  # noqa: E402
from bench.stamp import load_average, save_result  # noqa: E402
from kgloom.embedding.tokenizer import default_tokenizer  # noqa: E402
from kgloom.extraction.extract import extract_pack, extract_unit, pack_units  # noqa: E402
from kgloom.settings.indexing import IndexSettings  # noqa: E402

VARIANTS = ("alone", "packed")


def found_in(result: tuple[list[dict], list[dict], list[dict]]) -> dict:
    ents, rels, _ = result
    return {"types": {e["title"]: e["type"] for e in ents},
            "rels": {(r["source"], r["target"]) for r in rels if r["kind"] == "extracted"}}


def agreement(alone: list[dict], packed: list[dict],
              labels: tuple[str, str] = ("alone", "packed")) -> dict:
    """How ``packed``'s per-unit findings agree with ``alone``'s (lists of :func:`found_in`);
    ``labels`` name the two in the keys."""
    a_name, p_name = labels
    both = [(a, p) for a, p in zip(alone, packed)]
    shared = [(a["types"][n], p["types"][n]) for a, p in both
              for n in set(a["types"]) & set(p["types"])]
    rel_alone = sum(len(a["rels"]) for a, _ in both)
    return {
        "units": len(both),
        "same_entity_names": sum(set(a["types"]) == set(p["types"]) for a, p in both),
        "entities": {a_name: sum(len(a["types"]) for a, _ in both),
                     p_name: sum(len(p["types"]) for _, p in both)},
        "shared_entity_names": len(shared),
        "same_type": sum(x == y for x, y in shared),
        "extracted_relationships": {a_name: rel_alone,
                                    p_name: sum(len(p["rels"]) for _, p in both)},
        f"{a_name}_relationships_kept_by_{p_name}": sum(len(a["rels"] & p["rels"])
                                                        for a, p in both),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--units", type=int, default=60)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--block", type=int, default=12)
    ap.add_argument("--budget", type=int, default=300)
    ap.add_argument("--save", default=str(ROOT / "bench" / "results" / "pack_extraction.json"))
    args = ap.parse_args()

    units = units_of("pool", args.start, args.units)
    tok = default_tokenizer()
    n_tokens = [tok.count(t) for t, _ in units]
    alone_settings = IndexSettings()
    packed_settings = IndexSettings(extraction_pack_tokens=args.budget)
    llms, calls = logged_llms({v: {} for v in VARIANTS}, "kgloom-packs-")
    load_before = load_average()
    wall: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    found: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    for b, lo in enumerate(range(0, len(units), args.block)):
        block = list(range(lo, min(lo + args.block, len(units))))
        rows = [(f"u{i}", units[i][0], units[i][1]) for i in block]
        for v in (VARIANTS if b % 2 == 0 else VARIANTS[::-1]):
            start = time.perf_counter()
            if v == "alone":
                out = [extract_unit(llms[v], uid, text, alone_settings, Counter(), None, title)
                       for uid, text, title in rows]
            else:
                out = []
                for pack in pack_units([n_tokens[i] for i in block], args.budget):
                    out += extract_pack(llms[v], [rows[j] for j in pack], packed_settings,
                                        counts)
            wall[v] += time.perf_counter() - start
            found[v] += [found_in(r) for r in out]
        print(f"{block[-1] + 1}/{len(units)} alone {wall['alone']:.0f} s, packed "
              f"{wall['packed']:.0f} s", flush=True)
    result = {
        "corpus": "2wiki-pool", "units": len(units), "start": args.start,
        "budget_tokens": args.budget, "block": args.block,
        "median_unit_tokens": sorted(n_tokens)[len(n_tokens) // 2],
        "model": "bundled SmolLM2-135M-Instruct", "cores": os.cpu_count(),
        "load_before": load_before, "load_after": load_average(),
        "variants": {v: summary(calls[v], wall[v], len(units)) for v in VARIANTS},
        "speedup": round(wall["alone"] / max(wall["packed"], 1e-9), 2),
        "agreement": agreement(found["alone"], found["packed"]),
        "packing": {k: counts[k] for k in ("packed_calls", "packed_units",
                                           "packs_split_after_failure",
                                           "packs_split_to_fit_context")},
    }
    print(json.dumps({k: result[k] for k in ("speedup", "agreement", "packing")}))
    save_result(Path(args.save), result, args)


if __name__ == "__main__":
    main()
