"""Score an index against the hand-made gold set; print and save the figures as JSON.

Usage: python bench/eval_gold.py [--output-dir data/output] [--gold PATH] [--save PATH]

Rules (from the gold file's "about"): an entity is found when any of its aliases equals
an extracted entity title after case-folding and whitespace normalization; a pair is found
when the graph has an edge, either direction, between the entities the two gold entities
resolved to. "Extracted titles" are the final entity titles plus every surface form in
entity_aliases (what the LLM extracted before resolution); both recalls are reported.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_GOLD = ROOT / "bench" / "data" / "christmas-carol-gold.json"  # hand-made for kgloom


def norm(s: str) -> str:
    """Case-fold and collapse whitespace (the gold file's matching rule)."""
    return " ".join(s.casefold().split())


def score(output_dir: Path, gold: dict) -> dict:
    """Return entity recall, pair recall and resolution checks for one index folder."""
    ents = pl.read_parquet(output_dir / "entities.parquet")
    rels = pl.read_parquet(output_dir / "relationships.parquet")
    aliases = pl.read_parquet(output_dir / "entity_aliases.parquet")
    title_to_id = {norm(t): i for t, i in zip(ents["title"], ents["id"])}
    alias_to_id = dict(title_to_id)
    alias_to_id.update({norm(a): i for a, i in zip(aliases["alias"], aliases["entity_id"])})
    edges = {frozenset((s, t)) for s, t in zip(rels["source_id"], rels["target_id"])}

    per_entity, resolved = {}, {}
    for e in gold["entities"]:
        by_title = sorted({title_to_id[norm(a)] for a in e["aliases"] if norm(a) in title_to_id})
        by_alias = sorted({alias_to_id[norm(a)] for a in e["aliases"] if norm(a) in alias_to_id})
        per_entity[e["name"]] = {"found_as_title": bool(by_title), "found": bool(by_alias),
                                 "nodes": len(by_alias)}
        if by_alias:
            resolved[e["name"]] = by_alias
    pairs = []
    for a, b in gold["pairs"]:
        ok = any(frozenset((x, y)) in edges
                 for x in resolved.get(a, []) for y in resolved.get(b, []))
        pairs.append({"pair": [a, b], "found": ok})
    n = len(gold["entities"])
    found = [k for k, v in per_entity.items() if v["found"]]
    distinct = {"Mr. Fezziwig vs Mrs. Fezziwig": ("Fezziwig", "Mrs. Fezziwig"),
                "Bob Cratchit vs Mrs. Cratchit": ("Bob Cratchit", "Mrs. Cratchit")}
    return {
        "entity_recall": round(len(found) / n, 4),
        "entity_recall_titles_only": round(
            sum(v["found_as_title"] for v in per_entity.values()) / n, 4),
        "pair_recall": round(sum(p["found"] for p in pairs) / len(pairs), 4),
        "found_entities_on_one_node": sum(v["nodes"] == 1 for v in per_entity.values()
                                          if v["found"]),
        "found_entities": len(found),
        "missed_entities": [k for k, v in per_entity.items() if not v["found"]],
        "split_entities": {k: v["nodes"] for k, v in per_entity.items() if v["nodes"] > 1},
        "kept_distinct": {label: (bool(resolved.get(a)) and bool(resolved.get(b))
                                  and not set(resolved[a]) & set(resolved[b]))
                          for label, (a, b) in distinct.items()},
        "missed_pairs": [p["pair"] for p in pairs if not p["found"]],
        "entities": ents.height, "relationships": rels.height,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output-dir", default=str(ROOT / "data" / "output"))
    ap.add_argument("--gold", default=str(DEFAULT_GOLD))
    ap.add_argument("--save", default=str(ROOT / "bench" / "results" / "gold.json"))
    args = ap.parse_args()
    result = score(Path(args.output_dir), json.loads(Path(args.gold).read_text()))
    print(json.dumps(result, indent=2))
    from bench.stamp import save_result

    save_result(args.save, result, args)


if __name__ == "__main__":
    main()
