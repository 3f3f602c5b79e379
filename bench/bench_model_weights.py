"""The bundled GGUF's weights as they ship (Q4_1) against the same weights converted
(F16, BF16, Q8_0, Q4_0): the same extraction calls on the same pool passages with the
real model, every variant in one run, paired; prints and saves JSON.

Usage: python bench/bench_model_weights.py [--units 60] [--start 0] [--block 6]
       [--weights file,f16,bf16,q8_0,q4_0] [--save bench/results/model_weights.json]

One LLM per variant (:func:`kgloom.llm.open_llm` on the file that
:func:`kgloom.llm.model_files.converted_gguf` makes, in a temporary folder), each behind
its own empty LLM cache and its own KV prefix. Passages are taken in blocks of
``--block``; each block is extracted by every variant (default settings,
:func:`kgloom.extraction.extract.extract_unit`) in an order that rotates block by block,
so the machine's load hits all alike. Figures per variant: wall seconds and seconds per
unit, the speedup over ``file``, calls, prompt tokens evaluated and reply tokens with
llama.cpp's seconds, and how its units agree with ``file``'s (the same entity names; of
the names both kept, the same type; the extracted relationships of each, and of
``file``'s kept).
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

from bench.bench_choice_decoding import (  # noqa: E402
    logged_llms,
    summary,
    variants_and_units,
)
from bench.bench_extraction_packs import agreement, found_in  # noqa: E402
from bench.stamp import load_average, save_result  # noqa: E402
from kgloom.extraction.extract import extract_unit  # noqa: E402
from kgloom.llm.model_files import (  # noqa: E402
    SMOLLM2_SHA256,
    WEIGHT_TYPES,
    converted_gguf,
    default_gguf_path,
)
from kgloom.settings.indexing import IndexSettings  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--units", type=int, default=60)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--block", type=int, default=6)
    ap.add_argument("--weights", default="file," + ",".join(WEIGHT_TYPES),
                    help="comma-separated variants; the first is the baseline")
    ap.add_argument("--save", default=str(ROOT / "bench" / "results" / "model_weights.json"))
    args = ap.parse_args()

    variants, units = variants_and_units(args.weights, args.start, args.units)
    base = variants[0]
    settings = IndexSettings()
    folder = Path(tempfile.mkdtemp(prefix="kgloom-weights-"))
    paths = {w: converted_gguf(default_gguf_path(), SMOLLM2_SHA256, w, folder)
             for w in variants}
    llms, calls = logged_llms({w: {"model_path": paths[w]} for w in variants},
                              "kgloom-weights-cache-")
    load_before = load_average()
    wall: Counter[str] = Counter()
    found: dict[str, list[dict]] = {w: [] for w in variants}
    for b, lo in enumerate(range(0, len(units), args.block)):
        block = range(lo, min(lo + args.block, len(units)))
        k = b % len(variants)
        for w in variants[k:] + variants[:k]:
            start = time.perf_counter()
            out = [extract_unit(llms[w], f"u{i}", units[i][0], settings, Counter(), None,
                                units[i][1]) for i in block]
            wall[w] += time.perf_counter() - start
            found[w] += [found_in(r) for r in out]
        print(f"{block[-1] + 1}/{len(units)} " + ", ".join(f"{w} {wall[w]:.0f} s"
                                                          for w in variants), flush=True)
    result = {
        "corpus": "2wiki-pool", "units": len(units), "start": args.start, "block": args.block,
        "model": "bundled SmolLM2-135M-Instruct (Q4_1 file)", "baseline": base,
        "file_bytes": {w: paths[w].stat().st_size for w in variants},
        "cores": os.cpu_count(), "load_before": load_before, "load_after": load_average(),
        "variants": {w: {**summary(calls[w], wall[w], len(units)),
                         "speedup": round(wall[base] / max(wall[w], 1e-9), 2),
                         "agreement_with_baseline": agreement(found[base], found[w],
                                                               ("baseline", "variant"))}
                     for w in variants},
    }
    print(json.dumps({w: [v["seconds_per_unit"], v["speedup"],
                          v["agreement_with_baseline"]["same_entity_names"],
                          v["agreement_with_baseline"]["same_type"]]
                      for w, v in result["variants"].items()}))
    save_result(Path(args.save), result, args)


if __name__ == "__main__":
    main()
