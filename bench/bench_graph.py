"""Graph-quality figures of an index: duplicates, partitions, modularity, determinism,
report coverage, and DuckDB vs networkx traversal. Prints and saves JSON.

Usage: python bench/bench_graph.py [--output-dir data/output] [--save bench/results/graph.json]
"""

from __future__ import annotations

import argparse
import io
import json
import random
import re
import sys
import time
import unicodedata
from pathlib import Path

import networkx as nx
import polars as pl

from kgloom.graph.communities import hierarchical_leiden
from kgloom.names.candidates import is_grounded
from kgloom.query.graph_bfs import bfs
from kgloom.settings.indexing import COMMUNITY_BACKENDS, IndexSettings

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.stamp import save_result  # noqa: E402


def loose_key(title: str) -> str:
    """Title with case, whitespace and punctuation removed (the duplicate test's key)."""
    t = unicodedata.normalize("NFKC", title).casefold()
    return " ".join(re.sub(r"[^\w\s]", " ", t).split())


def parquet_bytes(df: pl.DataFrame) -> bytes:
    buf = io.BytesIO()
    df.write_parquet(buf)
    return buf.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output-dir", default=str(ROOT / "data" / "output"))
    ap.add_argument("--save", default=str(ROOT / "bench" / "results" / "graph.json"))
    ap.add_argument("--community-backend", default=IndexSettings().community_backend,
                    choices=COMMUNITY_BACKENDS, help="who runs Leiden (the index setting)")
    args = ap.parse_args()
    out = Path(args.output_dir)
    ents = pl.read_parquet(out / "entities.parquet")
    rels = pl.read_parquet(out / "relationships.parquet")
    comms = pl.read_parquet(out / "communities.parquet")
    reports = pl.read_parquet(out / "community_reports.parquet")
    s = IndexSettings()

    keys = ents["title"].map_elements(loose_key, return_dtype=pl.String)
    dupes = ents.with_columns(k=keys).group_by("k").agg(pl.col("title")).filter(
        pl.col("title").list.len() > 1)

    partition = {}
    for level in sorted(comms["level"].unique()):
        members = comms.filter(pl.col("level") == level)["entity_ids"].explode()
        partition[int(level)] = (members.len() == members.n_unique() == ents.height
                                 and set(members) == set(ents["id"]))

    t0 = time.perf_counter()
    c1, stats = hierarchical_leiden(ents, rels, s.max_cluster_size, s.seed, period="bench",
                                    backend=args.community_backend)
    leiden_s = time.perf_counter() - t0
    c2, _ = hierarchical_leiden(ents, rels, s.max_cluster_size, s.seed, period="bench",
                                backend=args.community_backend)

    g = nx.Graph()
    g.add_nodes_from(ents["id"])
    g.add_edges_from(zip(rels["source_id"], rels["target_id"]))
    seeds = ents.sort("pagerank", descending=True)["id"].head(20).to_list()
    seeds = random.Random(0).sample(seeds, min(5, len(seeds)))
    t0 = time.perf_counter()
    duck = bfs(out, seeds, depth=2)
    duck_s = time.perf_counter() - t0
    ref = set()
    for seed in seeds:
        ref |= set(nx.single_source_shortest_path_length(g, seed, cutoff=2))

    mentions = pl.read_parquet(out / "stages" / "entity_mentions.parquet")
    unit_text = dict(pl.read_parquet(out / "text_units.parquet").select("id", "text").iter_rows())
    grounded = sum(is_grounded(t, unit_text[u]) for u, t in
                   mentions.select("text_unit_id", "title").iter_rows())
    failures = pl.read_parquet(out / "failures.parquet")
    unparseable = failures.filter(pl.col("reason").str.contains("not JSON|breaks the schema"))

    status = pl.read_parquet(out / "stages" / "extraction_units.parquet")
    failed_units = set(status.filter(pl.col("status") == "failed")["text_unit_id"])

    result = {
        "text_units": len(unit_text),
        "text_units_with_status": status.height,
        "text_units_extracted": status.filter(pl.col("status") == "extracted").height,
        "text_units_failed": len(failed_units),
        "failed_units_listed_in_failures": failed_units <= set(failures["item_id"]),
        "entity_mentions": mentions.height,
        "entity_mentions_grounded_rate": round(grounded / max(mentions.height, 1), 4),
        "unparseable_replies": unparseable.height,
        "failures_by_stage": dict(failures.group_by("stage").len().iter_rows()),
        "entities": ents.height, "relationships": rels.height,
        "connected_components": nx.number_connected_components(g),
        "entities_outside_largest_component": ents.height - len(max(nx.connected_components(g),
                                                                    key=len, default=[])),
        "titles_differing_only_by_case_space_punct": dupes.height,
        "duplicate_examples": dupes.head(5)["title"].to_list(),
        "levels": int(comms["level"].max()) + 1 if comms.height else 0,
        "communities_per_level": {int(k): int(v) for k, v in
                                  comms.group_by("level").len().sort("level").iter_rows()},
        "every_level_partitions_all_entities": partition,
        "modularity_per_level": stats.get("modularity_per_level"),
        "louvain_modularity": stats.get("louvain_modularity"),
        "level0_modularity_ge_louvain": (stats.get("modularity_per_level") or [0])[0]
        >= (stats.get("louvain_modularity") or 0) - 1e-12,
        "communities_byte_identical_two_runs": parquet_bytes(c1) == parquet_bytes(c2),
        "leiden_seconds": round(leiden_s, 3),
        "community_backend": args.community_backend,
        "reports": reports.height, "communities": comms.height,
        "report_coverage": round(reports.height / max(comms.height, 1), 4),
        "duckdb_depth2_nodes": duck.height,
        "duckdb_equals_networkx": set(duck["entity_id"]) == ref,
        "duckdb_seconds": round(duck_s, 3),
    }
    print(json.dumps(result, indent=2, default=str))
    save_result(args.save, result, args, default=str)


if __name__ == "__main__":
    main()
