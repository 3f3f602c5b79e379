"""The extraction prompt's instruction after the text (kgloom's layout until 2026-12-03)
against before it: the same extraction calls on the same pool passages with the real
bundled model, both layouts in one run, paired; prints and saves JSON.

Usage: python bench/bench_prompt_layout.py [--units 60] [--start 0] [--corpus pool|book]
       [--save bench/results/prompt_layout.json]

Why it can pay: the backend keeps the KV cache of the prompt prefix a call shares with the
previous one (:class:`kgloom.llm.llamacpp.LlamaCppBackend`), and everything up to a
unit's text is the same in every extraction call (system, the few-shot turn, the entity
types). An instruction after the text is evaluated again in every call; before the text
it joins the shared prefix, evaluated once. ``text_last`` is the layout with the
instruction after the text (:data:`TEXT_LAST`); ``text_first`` the one in
:mod:`kgloom.extraction.extract` when it differs, else :data:`TEXT_FIRST`. One LLM per
layout, each behind its own empty LLM cache and KV prefix; each passage is extracted by
both in an order that alternates passage by passage, so the machine's load hits both
alike. Figures per layout: wall seconds per unit, prompt tokens evaluated and their
seconds, reply tokens and seconds, the speedup over ``text_last``, and how the
``text_first`` findings agree with ``text_last``'s (entity names, types, extracted
relationships; :func:`bench.bench_extraction_packs.agreement`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.bench_choice_decoding import logged_llms, summary, units_of  # noqa: E402
from bench.bench_extraction_packs import agreement, found_in  # noqa: E402
from bench.stamp import load_average, save_result  # noqa: E402
from kgloom.extraction import extract  # noqa: E402
from kgloom.settings.indexing import IndexSettings  # noqa: E402

# the user turn with the instruction after the text (kgloom's until 2026-12-03)
TEXT_LAST = ("Entity types: {types} (OTHER: not an entity)\n"
             "Text:\n\"\"\"\n{text}\n\"\"\"\n"
             "Give each name its entity type, or OTHER when it is not a person, organization, "
             "location or event. Then list how the entities are related in this text.")
# the same words with the instruction before the text
TEXT_FIRST = ("Entity types: {types} (OTHER: not an entity)\n"
              "Give each name its entity type, or OTHER when it is not a person, organization, "
              "location or event. Then list how the entities are related in the text.\n"
              "Text:\n\"\"\"\n{text}\n\"\"\"")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--units", type=int, default=60)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--corpus", choices=("pool", "book"), default="pool")
    ap.add_argument("--save", default=str(ROOT / "bench" / "results" / "prompt_layout.json"))
    args = ap.parse_args()

    layouts = {"text_last": TEXT_LAST,
               "text_first": extract._USER if extract._USER != TEXT_LAST else TEXT_FIRST}
    units = units_of(args.corpus, args.start, args.units)
    shipped = extract._USER
    names = list(layouts)

    def use(v: str) -> None:
        extract._USER = layouts[v]  # read by extraction_template at each call

    try:
        calls, wall, found, load_before = run_paired(units, names, use, "kgloom-layout-")
    finally:
        extract._USER = shipped
    result = paired_result(args, len(units), names, calls, wall, found, load_before,
                           layouts=layouts,
                           shipped=next(v for v, u in layouts.items() if u == shipped))
    save_result(Path(args.save), result, args)


def run_paired(units: list[tuple[str, str | None]], names: list[str],
               use: Callable[[str], None], prefix: str
               ) -> tuple[dict, dict[str, float], dict[str, list[dict]], list[float]]:
    """Extract each of ``units`` (text, record title) once per variant of ``names``, the
    variants' order alternating unit by unit; ``use(v)`` sets variant ``v`` up before its
    call. One real-model LLM per variant (:func:`bench.bench_choice_decoding.logged_llms`,
    temporary folders named ``prefix``...), default settings. Returns each variant's
    completions, wall seconds and :func:`bench.bench_extraction_packs.found_in` per unit,
    and the load average before."""
    settings = IndexSettings()
    llms, calls = logged_llms({v: {} for v in names}, prefix)
    load_before = load_average()
    wall = {v: 0.0 for v in names}
    found: dict[str, list[dict]] = {v: [] for v in names}
    for i, (text, title) in enumerate(units):
        for v in (names if i % 2 == 0 else names[::-1]):
            use(v)
            start = time.perf_counter()
            out = extract.extract_unit(llms[v], f"u{i}", text, settings, Counter(), None, title)
            wall[v] += time.perf_counter() - start
            found[v].append(found_in(out))
        if (i + 1) % 10 == 0:
            print(f"{i + 1}/{len(units)} " + ", ".join(f"{v} {wall[v]:.0f} s" for v in names),
                  flush=True)
    return calls, wall, found, load_before


def paired_result(args: argparse.Namespace, n_units: int, names: list[str], calls: dict,
                  wall: dict, found: dict, load_before: list[float], **extra) -> dict:
    """The JSON of a paired extraction bench over ``n_units`` units of ``args.corpus``
    from ``args.start``: per variant of ``names`` (the first is the baseline) its
    :func:`bench.bench_choice_decoding.summary` and speedup over the baseline, the second
    variant's agreement with the baseline, and ``extra`` fields; printed in short."""
    base = names[0]
    result = {
        "corpus": args.corpus, "units": n_units, "start": args.start,
        "model": "bundled SmolLM2-135M-Instruct (llm.weights auto)", "baseline": base,
        **extra, "cores": os.cpu_count(), "load_before": load_before,
        "load_after": load_average(),
        "variants": {v: {**summary(calls[v], wall[v], n_units),
                         "speedup": round(wall[base] / max(wall[v], 1e-9), 2)}
                     for v in names},
        "agreement": agreement(found[base], found[names[1]], (base, names[1])),
    }
    print(json.dumps({v: [r["seconds_per_unit"], r["speedup"], r["prompt_tokens_evaluated"],
                          r["reply_tokens"]] for v, r in result["variants"].items()}))
    print(json.dumps(result["agreement"]))
    return result


if __name__ == "__main__":
    main()
