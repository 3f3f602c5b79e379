"""Incremental indexing on the bundled book: first run, no-change run, add one
document, delete it. Prints and saves the figures as JSON.

Usage: python bench/bench_incremental.py [--work-dir /tmp/kgloom-bench-inc] [--fake-llm]
                                         [--save bench/results/incremental.json] [--resume]

Each step runs ``kgloom index`` as a subprocess (:func:`bench.harness.build_index`; real
model unless --fake-llm) against a
fresh output folder and a fresh DAGSTER_HOME, so the first run is a real first run (empty
LLM cache) and the no-change run is compared with it in the same bench run, as a ratio.
LLM calls are counted per stage as new rows in the LLM cache (every call that reaches
the model stores exactly one row; cache hits store none).

Checks (issue "Run it the Dagster way"):
- add: extraction calls == the new document's text units; report calls == communities
  whose report key (members + internal relationships) is new; the communities whose
  membership changed are printed beside it. Other LLM calls the addition causes
  (description summaries and merge checks of entities the document mentions) are
  printed by stage.
- delete: the document's text units are gone from every table and no entity,
  relationship or community refers to them.
- no change: 0 LLM calls, wall time as a share of the first run's.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import BOOK, build_index, write_input  # noqa: E402
from bench.stamp import commit, save_result  # noqa: E402
from kgloom.core.layout import partition_dir  # noqa: E402
from kgloom.llm import cache_rows, new_rows  # noqa: E402

ADDED = ROOT / "bench" / "data" / "added-document.txt"


def run_index(work: Path, fake: bool) -> dict:
    """Run ``kgloom index`` once (:func:`bench.harness.build_index`); return wall seconds
    and LLM calls per stage."""
    out = work / "output"
    before = cache_rows(out)
    run = build_index(work / "input", out, dagster_home=work / "dagster_home",
                      log=work / "logs" / f"run-{int(time.time())}.log", fake_llm=fake)
    calls = new_rows(before, cache_rows(out))
    return {"wall_seconds": run.wall_seconds, "llm_calls": calls,
            "llm_calls_total": sum(calls.values())}


def tables(out: Path) -> dict[str, pl.DataFrame]:
    """The emitted tables the checks read."""
    names = ["text_units", "entities", "relationships", "communities", "community_reports"]
    return {n: pl.read_parquet(out / f"{n}.parquet") for n in names}


def structure(t: dict[str, pl.DataFrame]) -> tuple[set, set]:
    """(community memberships, report keys) of one index."""
    members = {frozenset(m) for m in t["communities"]["entity_ids"].to_list()}
    return members, set(t["community_reports"]["report_key"].to_list())


def refers_to(t: dict[str, pl.DataFrame], unit_ids: set[str]) -> dict[str, int]:
    """Rows of each table that refer to any of ``unit_ids``."""
    def hits(df: pl.DataFrame, col: str) -> int:
        return df.filter(pl.col(col).list.eval(pl.element().is_in(list(unit_ids))).list.any()
                         ).height
    return {"text_units": t["text_units"].filter(pl.col("id").is_in(list(unit_ids))).height,
            "entities": hits(t["entities"], "text_unit_ids"),
            "relationships": hits(t["relationships"], "text_unit_ids"),
            "communities": hits(t["communities"], "text_unit_ids")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work-dir", default="/tmp/kgloom-bench-inc")
    ap.add_argument("--fake-llm", action="store_true")
    ap.add_argument("--save", default=str(ROOT / "bench" / "results" / "incremental.json"))
    ap.add_argument("--resume", action="store_true",
                    help="keep --work-dir's index and the first run's figures from --save; "
                         "measure the other steps again (e.g. after a code change)")
    args = ap.parse_args()
    work = Path(args.work_dir)
    out = work / "output"
    if args.resume:
        res = json.loads(Path(args.save).read_text())
    else:
        shutil.rmtree(work, ignore_errors=True)
        write_input("book", work / "input")
        res = {"model": "fake" if args.fake_llm else "bundled SmolLM2-135M-Instruct",
               "corpus": BOOK.name, "added_document": ADDED.name}
        print("first run (empty cache) ...", flush=True)
        res["first_run"] = run_index(work, args.fake_llm)
        print(json.dumps(res["first_run"]), flush=True)
    res["commit"] = commit()
    res["first_run"].setdefault("commit", res["commit"])
    (work / "input" / ADDED.name).unlink(missing_ok=True)
    print("no-change run ...", flush=True)
    res["no_change_run"] = run_index(work, args.fake_llm)
    res["no_change_wall_share"] = round(res["no_change_run"]["wall_seconds"]
                                        / res["first_run"]["wall_seconds"], 4)
    print(json.dumps(res["no_change_run"]), flush=True)

    before = tables(out)
    shutil.copy(ADDED, work / "input" / ADDED.name)
    print("add one document ...", flush=True)
    add = run_index(work, args.fake_llm)
    after = tables(out)
    new_units = pl.read_parquet(partition_dir(out, ADDED.name) / "text_units.parquet")
    unit_ids = set(new_units["id"].to_list())
    m0, k0 = structure(before)
    m1, k1 = structure(after)
    add["document_text_units"] = len(unit_ids)
    add["communities_with_changed_membership"] = len(m1 - m0)
    add["communities_with_new_report_key"] = len(k1 - k0)
    add["extraction_calls_equal_units"] = add["llm_calls"].get("extraction", 0) == len(unit_ids)
    st = json.loads((out / "stages" / "community_reports.stats.json").read_text())
    add["report_stage"] = {"llm_calls": st["llm"].get("calls", 0),
                           "prompt_cache_hits": st["llm"].get("cache_hits", 0),
                           "context_methods": st.get("context_methods", {})}
    # every community with a new structure got a newly written report (a model call, or
    # the prompt cache when its context text did not change, e.g. the new member did not
    # fit the budget); every other community kept its report without any call
    written = add["report_stage"]["llm_calls"] + add["report_stage"]["prompt_cache_hits"]
    add["report_calls_plus_prompt_hits_equal_changed_communities"] = written == len(k1 - k0)
    add["report_calls_at_most_changed_communities"] = (
        add["llm_calls"].get("community_reports", 0) <= len(k1 - k0))
    add["other_llm_calls"] = {k: v for k, v in add["llm_calls"].items()
                              if k not in ("extraction", "community_reports")}
    add["entities_before_after"] = [before["entities"].height, after["entities"].height]
    res["add_document"] = add
    print(json.dumps(add), flush=True)

    (work / "input" / ADDED.name).unlink()
    print("delete it ...", flush=True)
    delete = run_index(work, args.fake_llm)
    gone = tables(out)
    delete["rows_referring_to_its_text_units"] = refers_to(gone, unit_ids)
    delete["contribution_removed"] = not any(delete["rows_referring_to_its_text_units"].values())
    delete["partition_folder_removed"] = not (out / "stages" / "partitions" / ADDED.name).exists()
    delete["entities_before_after"] = [after["entities"].height, gone["entities"].height]
    delete["same_entities_as_before_adding"] = (
        set(gone["entities"]["id"].to_list()) == set(before["entities"]["id"].to_list()))
    res["delete_document"] = delete
    print(json.dumps(delete), flush=True)

    res["figures"] = {
        "add_llm_calls": add["llm_calls_total"],
        "add_extraction_calls_equal_units": add["extraction_calls_equal_units"],
        "add_report_calls_at_most_changed_communities":
            add["report_calls_at_most_changed_communities"],
        "add_reports_rewritten_equal_changed_communities":
            add["report_calls_plus_prompt_hits_equal_changed_communities"],
        "delete_contribution_removed": delete["contribution_removed"],
        "no_change_llm_calls": res["no_change_run"]["llm_calls_total"],
        "no_change_wall_share_of_first_run": res["no_change_wall_share"],
    }
    print(json.dumps(res["figures"], indent=2))
    save_result(args.save, res, args)


if __name__ == "__main__":
    main()
