"""Precision of an index's entities and relationships by hand labels on random samples:
draw the samples, then score the labels; print and save JSON.

Usage:
    python bench/eval_labels.py draw --index /tmp/pool/out --kind entities --n 200 \\
        --out bench/data/labels/pool-entities.jsonl
    python bench/eval_labels.py score bench/data/labels/pool-entities.jsonl ...
    python bench/eval_labels.py recheck bench/data/labels/pool-entities*.jsonl \\
        --corpus bench/data/2wiki-pool/corpus.jsonl

``draw`` takes ``n`` rows at random (``--seed``, default 0) from the index's
``entities.parquet`` or ``relationships.parquet`` and writes one JSON object a line: the
row's title, type and aliases (entities) or source, target, direction and description
(relationships), with the texts of up to ``--units`` (3) of its text units and the
titles of their documents (``document_titles``: a Wikipedia passage's subject is often
named only there), for a reader to label. A reader adds to each line:

- entities: ``"accept"``: true when the title is a named thing (person, place,
  organisation, work, event, ...) that a careful reader of those texts would list as an
  entity, false for a common word, a heading, an interjection, a cut or run-on name;
  ``"type_ok"``: whether its type fits (null when rejected);
- relationships: ``"supported"``: true when the texts support the relation its
  description states between the two entities; ``"direction_ok"``: true when source ->
  target reads as the texts state it (or the relation is symmetric), false when reversed.

``recheck`` reads each labelled entity's texts again with today's candidate rules
(:func:`kgloom.names.candidates.find_candidates`, with the counts of a whole corpus given
by ``--corpus``, a JSONL of records with a ``text``) and says, per file, which titles
are no longer candidates, accepted ones apart: a check of a name rule on every labelled
sample without indexing anything again (a title the rules still find may yet be dropped
later in the index, so this bounds what a rule can gain).

``score`` reports, per file, the share accepted (entities) or supported and supported in
the right direction (relationships), with a 95 % Wilson interval, and lists the rejected
rows. How the labels were made is in ``bench/data/labels/README.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def wilson(k: int, n: int, z: float = 1.96) -> list[float]:
    """The Wilson score interval of ``k`` successes in ``n`` trials ([0, 0] for n = 0)
    (Wilson 1927; the interval recommended by Brown, Cai & DasGupta 2001)."""
    if n == 0:
        return [0.0, 0.0]
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [round(centre - half, 4), round(centre + half, 4)]


def draw(index: Path, kind: str, n: int, seed: int, units: int) -> list[dict]:
    """``n`` random rows of ``kind`` (entities | relationships) of the index at
    ``index``, each with the texts of up to ``units`` of its text units, for labelling.

    Raises:
        ValueError: an unknown ``kind``.
    """
    if kind not in ("entities", "relationships"):
        raise ValueError(f"kind must be entities or relationships, got {kind!r}")
    table = pl.read_parquet(index / f"{kind}.parquet")
    frame = pl.read_parquet(index / "text_units.parquet", columns=["id", "text", "document_id"])
    texts = dict(zip(frame["id"].to_list(), frame["text"].to_list()))
    doc_titles = dict(pl.read_parquet(index / "documents.parquet", columns=["id", "title"])
                      .iter_rows())
    title_of = {u: doc_titles.get(d) for u, d in zip(frame["id"].to_list(),
                                                      frame["document_id"].to_list())}
    rows = table.sample(min(n, table.height), seed=seed, shuffle=True)
    out = []
    for r in rows.iter_rows(named=True):
        base = ({"id": r["id"], "title": r["title"], "type": r["type"],
                 "aliases": r.get("aliases") or []} if kind == "entities" else
                {"id": r["id"], "source": r["source"], "target": r["target"],
                 "kind": r.get("kind"), "description": r["description"]})
        shown = [u for u in (r["text_unit_ids"] or [])[:units] if u in texts]
        base["texts"] = [texts[u] for u in shown]
        base["document_titles"] = [title_of[u] for u in shown]
        out.append(base)
    return out


def recheck(lines: list[dict], corpus_texts: list[str]) -> dict:
    """For labelled entity rows ``lines``: which titles are still candidates of their own
    texts (:func:`kgloom.names.candidates.find_candidates`, compared after
    :func:`kgloom.names.normalize.normalize_for_match`) with the statistics of
    ``corpus_texts``. Returns {"accepted_found", "accepted", "rejected_found", "rejected":
    counts, "lost": accepted titles no longer found, "gone": rejected titles no longer
    found}; rows without ``accept`` are left out."""
    from kgloom.names.candidates import find_candidates, word_counts
    from kgloom.names.normalize import normalize_for_match

    stats = word_counts(corpus_texts)
    out: dict = {"accepted_found": 0, "accepted": 0, "rejected_found": 0, "rejected": 0,
                 "lost": [], "gone": []}
    for row in lines:
        if row.get("accept") is None:
            continue
        found = normalize_for_match(row["title"]) in {
            normalize_for_match(c.name) for t in row.get("texts", [])
            for c in find_candidates(t, stats=stats)}
        side = "accepted" if row["accept"] else "rejected"
        out[side] += 1
        out[side + "_found"] += found
        if not found:
            out["lost" if row["accept"] else "gone"].append(row["title"])
    return out


def score(lines: list[dict]) -> dict:
    """Figures of one labelled file (see the module docstring); rows without their label
    are counted as ``unlabelled`` and left out."""
    if any("title" in x for x in lines):  # an entity sample
        done = [x for x in lines if x.get("accept") is not None]
        ok = sum(bool(x["accept"]) for x in done)
        typed = [x for x in done if x["accept"] and x.get("type_ok") is not None]
        return {"kind": "entities", "labelled": len(done),
                "unlabelled": len(lines) - len(done),
                "precision": round(ok / len(done), 4) if done else 0.0,
                "precision_95ci": wilson(ok, len(done)),
                "types": round(sum(bool(x["type_ok"]) for x in typed) / len(typed), 4)
                if typed else 0.0,
                "rejected": [x["title"] for x in done if not x["accept"]]}
    done = [x for x in lines if x.get("supported") is not None]
    sup = [x for x in done if x["supported"]]
    right = [x for x in sup if x.get("direction_ok")]
    return {"kind": "relationships", "labelled": len(done),
            "unlabelled": len(lines) - len(done),
            "supported": round(len(sup) / len(done), 4) if done else 0.0,
            "supported_95ci": wilson(len(sup), len(done)),
            "precision": round(len(right) / len(done), 4) if done else 0.0,
            "precision_95ci": wilson(len(right), len(done)),
            "reversed": [f"{x['source']} -> {x['target']}" for x in sup
                         if x.get("direction_ok") is False],
            "unsupported": [f"{x['source']} -> {x['target']}" for x in done
                            if not x["supported"]]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    d = sub.add_parser("draw", help="write a sample to label")
    d.add_argument("--index", required=True)
    d.add_argument("--kind", choices=("entities", "relationships"), required=True)
    d.add_argument("--n", type=int, default=200)
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--units", type=int, default=3)
    d.add_argument("--out", required=True)
    r = sub.add_parser("recheck", help="labelled entities' titles under today's name rules")
    r.add_argument("files", nargs="+")
    r.add_argument("--corpus", required=True, help="JSONL of the records the files came from")
    r.add_argument("--save", default=str(ROOT / "bench" / "results" / "labels-recheck.json"))
    s = sub.add_parser("score", help="score labelled samples")
    s.add_argument("files", nargs="+")
    s.add_argument("--save", default=str(ROOT / "bench" / "results" / "labels.json"))
    args = ap.parse_args()
    if args.command == "draw":
        rows = draw(Path(args.index), args.kind, args.n, args.seed, args.units)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n"
                                          for r in rows), encoding="utf-8")
        print(f"wrote {len(rows)} rows to {args.out}")
        return
    loaded = {Path(f).stem: [json.loads(x) for x in Path(f).read_text().splitlines()
                             if x.strip()] for f in args.files}
    if args.command == "recheck":
        texts = [json.loads(x)["text"] for x in Path(args.corpus).read_text(
            encoding="utf-8").splitlines() if x.strip()]
        result = {name: recheck(rows, texts) for name, rows in loaded.items()}
    else:
        result = {name: score(rows) for name, rows in loaded.items()}
    for name, r in result.items():
        print(name, {k: v for k, v in r.items() if not isinstance(v, list)})
    from bench.stamp import save_result

    save_result(args.save, result, args)


if __name__ == "__main__":
    main()
