"""Lazy community reports against eager ones, with the fake LLM (no model loaded).

Builds one corpus twice with ``kgloom index --fake-llm`` (bench/harness.py): eager
(``llm_reports: eager``, the default) and lazy (``--set llm_reports=lazy``), then runs
global search questions on the lazy index with the fake model, twice each (a second
search handle with a fresh LLM cache), and records:

- the reports stage's LLM calls in each build (``index-summary.json``), its LLM, rule and
  lazy report counts and its wall seconds;
- per question: the report calls the first search made (``info["llm"]``), the lazy
  reports it wrote and how many stay awaiting, and the report calls of the second
  search (0 when the side table serves them).

The fake model answers instantly, so the seconds here are not the model's; the counts
are what a real model would be asked (on the 2Wiki slice the bundled SmolLM2-135M on 2
cores took 56.2 s of model time for 5 report calls, bench/results/speed-2wiki-session10.json).

    python -m bench lazy_reports [--corpus book|slice|2wiki] [--limit N] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from bench.harness import CORPORA, build_index, write_input
from bench.stamp import ROOT, save_result

QUESTIONS = ("What are the main themes of the story?",
             "Who are the people around Scrooge and how are they related?",
             "What happens at Christmas?")
RESULT = ROOT / "bench" / "results" / "lazy_reports_{corpus}.json"


def _stage(out: Path) -> dict:
    summary = json.loads((out / "index-summary.json").read_text())
    stage = summary["stages"]["community_reports"]
    return {"llm_calls": summary.get("llm", {}).get("community_reports", {}).get("calls", 0),
            "llm_reports": stage.get("llm_reports", 0),
            "rule_reports": stage.get("rule_reports", 0),
            "lazy_reports": stage.get("lazy_reports", 0),
            "reports": stage.get("reports", 0), "seconds": stage.get("seconds"),
            "communities": summary["rows"].get("communities", 0)}


def _search(out: Path, cache: Path, question: str, dynamic: bool) -> dict:
    from kgloom.query.searcher import Searcher

    s = Searcher(out, fake_llm=True, cache_path=cache)
    res = s.search(question, mode="global", dynamic=dynamic)
    lazy = res.info.get("lazy_reports", {})
    return {"report_calls": res.info["llm"].get("community_reports", {}).get("calls", 0),
            "written": lazy.get("written", 0), "rejected": lazy.get("rejected", 0),
            "reused": lazy.get("reused", 0), "awaiting_after": lazy.get("awaiting_after"),
            "map_calls": res.info["llm"].get("search_map", {}).get("calls", 0),
            "rate_calls": res.info["llm"].get("search_rate", {}).get("calls", 0)}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", choices=CORPORA, default="book")
    ap.add_argument("--limit", type=int, default=0, help="2wiki: the first N passages")
    ap.add_argument("--workdir", default="", help="kept when given (default: a temp dir)")
    args = ap.parse_args(argv)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-lazy-"))
    inp = work / "input"
    write_input(args.corpus, inp, args.limit)
    builds = {}
    for mode in ("eager", "lazy"):
        out = work / mode
        run = build_index(inp, out, dagster_home=work / f"home-{mode}", fake_llm=True,
                          settings=[f"llm_reports={mode}"])
        builds[mode] = {**_stage(out), "index_wall_seconds": run.wall_seconds,
                        "load_before": run.load_before}
    lazy_out = work / "lazy"
    searches = []  # each question from an empty side table, then again
    for i, question in enumerate(QUESTIONS):
        for dynamic in (False, True):
            cache = work / f"q{i}{'d' if dynamic else 's'}"
            first = _search(lazy_out, cache / "query_cache.sqlite", question, dynamic)
            again = _search(lazy_out, cache / "again.sqlite", question, dynamic)
            searches.append({"question": question, "dynamic": dynamic, "first": first,
                             "second_report_calls": again["report_calls"]})
    session, total = [], 0  # every question in turn over one side table
    for i, question in enumerate(QUESTIONS):
        for dynamic in (False, True):
            got = _search(lazy_out, work / "session" / f"q{i}{dynamic}.sqlite", question,
                          dynamic)
            total += got["report_calls"]
            session.append({"question": question, "dynamic": dynamic,
                            "report_calls": got["report_calls"],
                            "cumulative_report_calls": total,
                            "awaiting_after": got["awaiting_after"]})
    result = {"corpus": args.corpus, "limit": args.limit, "builds": builds,
              "searches": searches, "session": session,
              "figures": {"eager_report_calls": builds["eager"]["llm_calls"],
                          "lazy_report_calls_at_index": builds["lazy"]["llm_calls"],
                          "lazy_marked": builds["lazy"]["lazy_reports"],
                          "max_report_calls_of_one_first_search": max(
                              s["first"]["report_calls"] for s in searches),
                          "report_calls_of_second_searches": sum(
                              s["second_report_calls"] for s in searches),
                          "session_report_calls": total}}
    save_result(str(RESULT).format(corpus=args.corpus), result, args)
    print(json.dumps(result["figures"], indent=2))
    return result


if __name__ == "__main__":
    main()
