"""Speculative choice decoding against one evaluation per branching: the same extraction
calls on the same pool passages with the real bundled model, every variant in one run,
paired; prints and saves JSON.

Usage: python bench/bench_choice_lookahead.py [--units 60] [--start 0]
       [--variants 0:0,4:32,3:16,8:64] [--save bench/results/choice_lookahead.json]

A variant ``L:T`` decodes each extraction reply with
:func:`kgloom.llm.choices.decode_choices` at ``lookahead=L``, ``budget=T`` (``0:0``: one
evaluation per branching, the baseline). One LLM per variant, each behind its own empty
LLM cache and its own KV prefix; each passage is extracted by every variant in an order
that rotates passage by passage, so the machine's load hits all alike. Figures per
variant: wall seconds per unit, the speedup over the first variant, llama.cpp
evaluations and the tokens evaluated past a refuted guess, and how many units give the
same entity names, types and relationships as the first variant (speculation is meant to
change none).
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

from bench.bench_choice_decoding import (  # noqa: E402
    logged_llms,
    summary,
    variants_and_units,
)
from bench.bench_extraction_packs import found_in  # noqa: E402
from bench.stamp import load_average, save_result  # noqa: E402
from kgloom.extraction.extract import extract_unit  # noqa: E402
from kgloom.llm import choices  # noqa: E402
from kgloom.settings.indexing import IndexSettings  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--units", type=int, default=60)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--variants", default="0:0,4:32,3:16,8:64",
                    help="comma-separated LOOKAHEAD:BUDGET; the first is the baseline")
    ap.add_argument("--save", default=str(ROOT / "bench" / "results" / "choice_lookahead.json"))
    args = ap.parse_args()

    variants, units = variants_and_units(args.variants, args.start, args.units)
    base = variants[0]
    settings = IndexSettings()
    llms, calls = logged_llms({v: {} for v in variants}, "kgloom-lookahead-")
    for v, llm in llms.items():
        la, budget = (int(x) for x in v.split(":"))
        llm.backend.lookahead, llm.backend.lookahead_tokens = la, budget  # type: ignore[union-attr]
    plain = choices.decode_choices
    current = {"v": base}
    decoded: dict[str, Counter[str]] = {v: Counter() for v in variants}

    def counted(*a, **kw):
        reply = plain(*a, **kw)
        c = decoded[current["v"]]
        c["replies"] += 1
        c["evaluations"] += reply.evaluations
        c["branchings"] += reply.batches
        c["tokens_past_refuted_guesses"] += reply.speculated_tokens
        return reply

    choices.decode_choices = counted  # the backend imports it at each call
    load_before = load_average()
    wall: Counter[str] = Counter()
    found: dict[str, list[dict]] = {v: [] for v in variants}
    try:
        for i, (text, title) in enumerate(units):
            k = i % len(variants)
            for v in variants[k:] + variants[:k]:
                current["v"] = v
                start = time.perf_counter()
                out = extract_unit(llms[v], f"u{i}", text, settings, Counter(), None, title)
                wall[v] += time.perf_counter() - start
                found[v].append(found_in(out))
            if (i + 1) % 10 == 0:
                print(f"{i + 1}/{len(units)} " + ", ".join(f"{v} {wall[v]:.0f} s"
                                                          for v in variants), flush=True)
    finally:
        choices.decode_choices = plain
    result = {
        "corpus": "2wiki-pool", "units": len(units), "start": args.start,
        "model": "bundled SmolLM2-135M-Instruct (llm.weights auto)", "baseline": base,
        "cores": os.cpu_count(), "load_before": load_before, "load_after": load_average(),
        "variants": {v: {**summary(calls[v], wall[v], len(units)), **decoded[v],
                         "speedup": round(wall[base] / max(wall[v], 1e-9), 2),
                         "units_same_as_baseline": sum(a == b for a, b in
                                                       zip(found[base], found[v]))}
                     for v in variants},
    }
    print(json.dumps({v: [r["seconds_per_unit"], r["speedup"], r["evaluations"],
                          r["units_same_as_baseline"]] for v, r in result["variants"].items()}))
    save_result(Path(args.save), result, args)


if __name__ == "__main__":
    main()
