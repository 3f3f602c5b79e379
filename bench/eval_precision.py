"""Entity precision, recall, wrong merges, splits and types of an index against a
precision gold (every named thing a careful reader lists); print and save JSON.

Usage:
    python bench/eval_precision.py --index standard=data/output --index fast=/tmp/fast
    python bench/eval_precision.py --build fast,standard   # index the book first (/tmp)

Gold: ``bench/data/christmas-carol-entities.json`` (method: ``bench/data/README.md``).
Each gold entity has aliases (surface forms the text writes), a type (``also_types``
allowed), and ``required`` (a graph must have it) or not (accepted, not counted for
recall). Titles and aliases are compared by kgloom's resolution key
(:func:`kgloom.names.normalize.normalize_title`: case, punctuation, a trailing "'s" and a
leading "the" do not count). An alias key that two gold entities share is *ambiguous*:
it makes a title accepted but ties the node to neither.

Figures per index (entities.parquet and entity_aliases.parquet of its folder):

- ``precision``: entities whose title is a gold alias / all entities.
- ``recall``: required gold entities with an alias among the index's titles or alias
  surfaces / required gold entities (``recall_all``: over every gold entity).
- ``wrong_merges``: nodes whose surfaces (title and aliases) are aliases of two or more
  gold entities; ``splits``: gold entities whose aliases are on two or more nodes.
- ``types``: nodes whose title is an unambiguous gold alias and whose type is the gold
  type or one of its ``also_types`` / such nodes.
- ``rejected``: every title that is no gold alias, with its type and frequency, most
  frequent first, to be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kgloom.names.normalize import normalize_title  # noqa: E402

DEFAULT_GOLD = ROOT / "bench" / "data" / "christmas-carol-entities.json"


def alias_index(gold: dict) -> tuple[dict[str, str], set[str]]:
    """({alias key: gold entity name} for keys of one entity, {keys of several})."""
    owners: dict[str, set[str]] = {}
    for e in gold["entities"]:
        for a in [e["name"], *e["aliases"]]:
            key = normalize_title(a)
            if key:
                owners.setdefault(key, set()).add(e["name"])
    unique = {k: next(iter(v)) for k, v in owners.items() if len(v) == 1}
    return unique, {k for k, v in owners.items() if len(v) > 1}


def score(entities: pl.DataFrame, aliases: pl.DataFrame, gold: dict) -> dict:
    """Score one index's ``entities`` (id, title, type, frequency) and ``aliases``
    (alias, entity_id) against ``gold``; see the module docstring for each figure."""
    unique, ambiguous = alias_index(gold)
    gold_by_name = {e["name"]: e for e in gold["entities"]}
    surfaces: dict[str, set[str]] = {i: {t} for i, t in zip(entities["id"], entities["title"])}
    for a, i in zip(aliases["alias"], aliases["entity_id"]):
        if i in surfaces:
            surfaces[i].add(a)
    freq = entities["frequency"] if "frequency" in entities.columns else [None] * entities.height
    accepted, rejected, typed, typed_ok, wrong_types = 0, [], 0, 0, []
    node_gold: dict[str, set[str]] = {}
    for i, title, etype, f in zip(entities["id"], entities["title"], entities["type"], freq):
        key = normalize_title(title)
        if key in unique or key in ambiguous:
            accepted += 1
        else:
            rejected.append({"title": title, "type": etype, "frequency": f})
        if key in unique:
            g = gold_by_name[unique[key]]
            typed += 1
            if etype in {g["type"], *g.get("also_types", [])}:
                typed_ok += 1
            else:
                wrong_types.append({"title": title, "type": etype, "gold": g["type"]})
        node_gold[i] = {unique[k] for k in map(normalize_title, surfaces[i]) if k in unique}
    title_of = dict(zip(entities["id"], entities["title"]))
    merges = [{"node": title_of[i], "gold": sorted(g)} for i, g in node_gold.items() if len(g) > 1]
    nodes_of: dict[str, list[str]] = {}
    for i, g in node_gold.items():
        for name in g:
            nodes_of.setdefault(name, []).append(title_of[i])
    required = [e["name"] for e in gold["entities"] if e["required"]]
    found = set(nodes_of)
    n = entities.height
    return {
        "entities": n,
        "precision": round(accepted / n, 4) if n else 0.0,
        "recall": round(sum(r in found for r in required) / len(required), 4),
        "recall_all": round(len(found) / len(gold["entities"]), 4),
        "wrong_merges": len(merges),
        "splits": sum(len(v) > 1 for v in nodes_of.values()),
        "types": round(typed_ok / typed, 4) if typed else 0.0,
        "missed_required": [r for r in required if r not in found],
        "wrong_merge_nodes": merges,
        "split_entities": {k: sorted(v) for k, v in nodes_of.items() if len(v) > 1},
        "wrong_types": wrong_types,
        "rejected": sorted(rejected, key=lambda r: (-(r["frequency"] or 0), r["title"])),
    }


def score_folder(output_dir: Path, gold: dict) -> dict:
    """:func:`score` of the tables in ``output_dir``."""
    return score(pl.read_parquet(output_dir / "entities.parquet"),
                 pl.read_parquet(output_dir / "entity_aliases.parquet"), gold)


def build_book(method: str, root: Path) -> Path:
    """Index the bundled book with ``method`` into ``root/<method>/output`` (the
    harness's ``kgloom index``) and return that folder."""
    from bench.harness import build_index, write_input

    work = root / method
    inp = work / "input"
    if not inp.exists():
        write_input("book", inp)
    out = work / "output"
    build_index(inp, out, settings=[f"method={method}"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", action="append", default=[],
                    help="LABEL=FOLDER of an index to score (repeatable)")
    ap.add_argument("--build", default="",
                    help="comma-separated methods to index the book with first (fast,standard)")
    ap.add_argument("--work", default="/tmp/kgloom-precision")
    ap.add_argument("--gold", default=str(DEFAULT_GOLD))
    ap.add_argument("--save", default=str(ROOT / "bench" / "results" / "precision-book.json"))
    args = ap.parse_args()
    gold = json.loads(Path(args.gold).read_text())
    folders = dict(s.split("=", 1) for s in args.index)
    for method in filter(None, args.build.split(",")):
        folders[method] = str(build_book(method, Path(args.work)))
    result = {"gold": str(Path(args.gold).relative_to(ROOT)) if Path(args.gold).is_relative_to(ROOT)
              else args.gold,
              "gold_entities": len(gold["entities"]),
              "gold_required": sum(e["required"] for e in gold["entities"]),
              "indexes": {label: score_folder(Path(f), gold) for label, f in folders.items()}}
    for label, r in result["indexes"].items():
        print(f"{label}: entities {r['entities']}  precision {r['precision']}  recall "
              f"{r['recall']}  wrong merges {r['wrong_merges']}  splits {r['splits']}  "
              f"types {r['types']}")
        print("  rejected:", ", ".join(x["title"] for x in r["rejected"]))
        print("  missed:", ", ".join(r["missed_required"]))
        print("  merges:", r["wrong_merge_nodes"])
    from bench.stamp import save_result

    save_result(args.save, result, args)


if __name__ == "__main__":
    main()
