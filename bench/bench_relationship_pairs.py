"""Relationships as ``[source, target]`` pairs (kgloom's reply since 2026-12-04) against
``{"source": .., "target": ..}`` objects: the same extraction calls on the same text units
with the real bundled model, both forms in one run, paired; prints and saves JSON.

Usage: python bench/bench_relationship_pairs.py [--units 60] [--start 0]
       [--corpus pool|book] [--save bench/results/relationship_pairs.json]

Why it can pay: the choice decoder evaluates every reply token, forced or chosen, and
the keys ``{"source": "`` and ``", "target": "`` are about 6 of a relationship's ~19
tokens; a pool passage's reply holds about 3 relationships. ``objects`` is the reply
with keyed objects (:func:`objects_schema`, :func:`objects_example`: kgloom's until
2026-12-04), ``pairs`` the one in :mod:`kgloom.extraction.extract`. One LLM per form,
each behind its own empty LLM cache and KV prefix; each unit is extracted by both in an
order that alternates unit by unit, so the machine's load hits both alike. Figures per
form: wall seconds per unit, prompt tokens evaluated and their seconds, reply tokens
and seconds, the speedup over ``objects``, and how the ``pairs`` findings agree with
``objects``' (entity names, types, extracted relationships;
:func:`bench.bench_extraction_packs.agreement`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.bench_choice_decoding import units_of  # noqa: E402
from bench.bench_prompt_layout import paired_result, run_paired  # noqa: E402
from bench.stamp import save_result  # noqa: E402
from kgloom.extraction import extract  # noqa: E402

PAIRS_SCHEMA, PAIRS_EXAMPLE = extract.extraction_schema, extract._example_reply


def objects_schema(names, settings, typed=None, max_relationships=None) -> dict:
    """:func:`kgloom.extraction.extract.extraction_schema` with each pair item as a
    ``{"source", "target"}`` object (the same enums)."""
    schema = PAIRS_SCHEMA(names, settings, typed, max_relationships)
    rels = schema["properties"]["relationships"]
    item = rels["items"]
    if item.get("type") == "array":
        source, target = item["prefixItems"]
        rels["items"] = {"type": "object", "properties": {"source": source, "target": target},
                         "required": ["source", "target"], "additionalProperties": False}
    return schema


def objects_example(llm_descriptions: bool) -> str:
    """The few-shot reply of :func:`kgloom.extraction.extract._example_reply` with its
    pairs written as objects."""
    reply = json.loads(PAIRS_EXAMPLE(llm_descriptions))
    reply["relationships"] = [r if isinstance(r, dict) else {"source": r[0], "target": r[1]}
                              for r in reply["relationships"]]
    return json.dumps(reply)


FORMS = {"objects": (objects_schema, objects_example), "pairs": (PAIRS_SCHEMA, PAIRS_EXAMPLE)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--units", type=int, default=60)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--corpus", choices=("pool", "book"), default="pool")
    ap.add_argument("--save", default=str(ROOT / "bench" / "results"
                                          / "relationship_pairs.json"))
    args = ap.parse_args()

    units = units_of(args.corpus, args.start, args.units)
    names = list(FORMS)

    def use(v: str) -> None:  # both read at each call (the unit's schema, the template)
        extract.extraction_schema, extract._example_reply = FORMS[v]

    try:
        calls, wall, found, load_before = run_paired(units, names, use, "kgloom-pairs-")
    finally:
        extract.extraction_schema, extract._example_reply = PAIRS_SCHEMA, PAIRS_EXAMPLE
    result = paired_result(args, len(units), names, calls, wall, found, load_before,
                           shipped="pairs")
    save_result(Path(args.save), result, args)


if __name__ == "__main__":
    main()
