"""Work outside the model that an index repeats per unit or per community, each against
the way kgloom did it before 2026-12-04 in the same run, on the same data; no model;
prints and saves JSON.

Usage: python bench/bench_outside_model.py [--passages 6119] [--parts 8]
       [--communities 20000] [--save bench/results/outside_model.json]

- ``known_names``: finding a corpus's multi-word names in each unit in any letter case
  (:func:`kgloom.names.candidates._known_matches`, word by word) against one
  case-insensitive regular expression alternating every name (the reference it must
  equal, built as before). Texts: the 2Wiki pool's passages (``bench/data/2wiki-pool``),
  split into ``--parts`` consecutive parts as the pool bench splits its input files, each
  part its own corpus (:func:`kgloom.names.candidates.word_counts`). Reports seconds,
  matches, and whether every unit's matches are equal.
- ``rule_reports``: :func:`kgloom.report_writer.rule_report` of many small communities
  with the members read from :class:`kgloom.report_writer.MemberRows` built once, against
  filtering and sorting the entity and relationship tables per community (``rows=None``,
  the former way). Tables: a synthetic graph of ``--communities`` communities of 2-5
  entities (seeded; at the default 20,000, about 70,000 entities and 59,000
  relationships, the order of the pool's 30,000 and 43,000). Reports seconds and
  whether the reports are equal.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import polars as pl  # noqa: E402
import regex  # noqa: E402

from bench.stamp import load_average, save_result  # noqa: E402
from kgloom.names.candidates import _known_index, _known_matches, word_counts  # noqa: E402
from kgloom.report_writer import MemberRows, rule_report  # noqa: E402

POOL = ROOT / "bench" / "data" / "2wiki-pool" / "corpus.jsonl"


def reference_pattern(stats: Counter) -> regex.Pattern | None:
    """The former search: one case-insensitive alternation of the corpus's names, longest
    first, words joined by any whitespace, not inside a word."""
    keys = sorted((k[1] for k in stats if isinstance(k, tuple) and k[0] == "name"),
                  key=len, reverse=True)
    if not keys:
        return None
    return regex.compile(
        r"(?<![\p{L}\p{M}\p{N}])(?:" + "|".join(
            r"\s+".join(regex.escape(w) for w in k.split()) for k in keys)
        + r")(?![\p{L}\p{M}\p{N}])", regex.IGNORECASE | regex.FULLCASE)


def known_names(texts: list[str], parts: int) -> dict:
    """Both searches over ``texts`` split into ``parts`` corpora (see the module doc)."""
    size, extra = divmod(len(texts), parts)
    seconds = {"reference": 0.0, "word_index": 0.0}
    matches = {"reference": 0, "word_index": 0}
    names, different, start = 0, 0, 0
    for i in range(parts):
        chunk = texts[start:start + size + (i < extra)]
        start += len(chunk)
        stats = word_counts(chunk)
        t = time.perf_counter()
        pattern = reference_pattern(stats)
        old = [[(m.start(), m.end()) for m in pattern.finditer(x)] if pattern else []
               for x in chunk]
        seconds["reference"] += time.perf_counter() - t
        t = time.perf_counter()
        index = _known_index(stats)
        new = [list(_known_matches(x, index)) for x in chunk]
        seconds["word_index"] += time.perf_counter() - t
        names += sum(len(v) for v in index.values())
        matches["reference"] += sum(map(len, old))
        matches["word_index"] += sum(map(len, new))
        different += sum(a != b for a, b in zip(old, new))
    return {"texts": len(texts), "parts": parts, "corpus_names": names,
            "seconds": {k: round(v, 3) for k, v in seconds.items()}, "matches": matches,
            "units_with_different_matches": different,
            "speedup": round(seconds["reference"] / max(seconds["word_index"], 1e-9), 1)}


def synthetic_graph(communities: int, seed: int = 7) -> tuple[pl.DataFrame, pl.DataFrame,
                                                              list[dict]]:
    """Entities, relationships and communities of 2-5 members (each member pair related
    with probability 0.6), degrees from the relationships; titles repeat on purpose so
    ties in degree are ordered by title."""
    rng = random.Random(seed)
    ents, rels, comms = [], [], []
    for c in range(communities):
        members = [f"e{c}_{k}" for k in range(rng.randint(2, 5))]
        for m in members:
            ents.append({"id": m, "title": f"NAME {rng.randint(0, 5000)}",
                         "description": f"{m} is described here.\nA second line."})
        inside = []
        for a in range(len(members)):
            for b in range(a + 1, len(members)):
                if rng.random() < 0.6:
                    rid = f"r{len(rels)}"
                    rels.append({"id": rid, "source": members[a], "target": members[b],
                                 "description": f"{members[a]} knows {members[b]}."})
                    inside.append(rid)
        comms.append({"community": c, "entity_ids": members, "relationship_ids": inside})
    degree = Counter(x for r in rels for x in (r["source"], r["target"]))
    entities = pl.DataFrame([{**e, "degree": degree[e["id"]]} for e in ents])
    relationships = pl.DataFrame([{**r, "combined_degree": degree[r["source"]]
                                   + degree[r["target"]]} for r in rels])
    return entities, relationships, comms


def rule_reports(communities: int) -> dict:
    """Both ways of reading a rule report's members (see the module doc)."""
    entities, relationships, comms = synthetic_graph(communities)
    t = time.perf_counter()
    old = [rule_report(c, entities, relationships) for c in comms]
    tables = time.perf_counter() - t
    t = time.perf_counter()
    rows = MemberRows.of(entities, relationships)
    new = [rule_report(c, entities, relationships, rows) for c in comms]
    lookups = time.perf_counter() - t
    return {"communities": communities, "entities": entities.height,
            "relationships": relationships.height,
            "seconds": {"filter_per_community": round(tables, 3),
                        "member_rows": round(lookups, 3)},
            "ms_per_report": {"filter_per_community": round(1000 * tables / communities, 3),
                              "member_rows": round(1000 * lookups / communities, 3)},
            "reports_equal": old == new,
            "speedup": round(tables / max(lookups, 1e-9), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passages", type=int, default=6119, help="first N pool passages")
    ap.add_argument("--parts", type=int, default=8, help="corpora the passages are split into")
    ap.add_argument("--communities", type=int, default=20000)
    ap.add_argument("--save", default=str(ROOT / "bench" / "results" / "outside_model.json"))
    args = ap.parse_args()
    if args.passages < 1 or args.parts < 1 or args.communities < 1:
        ap.error("--passages, --parts and --communities must be at least 1")
    with POOL.open(encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f if line.strip()][:args.passages]
    load_before = load_average()
    result = {"known_names": known_names(texts, args.parts),
              "rule_reports": rule_reports(args.communities),
              "load_before": load_before, "load_after": load_average()}
    print(json.dumps(result, indent=2))
    save_result(Path(args.save), result, args)


if __name__ == "__main__":
    main()
