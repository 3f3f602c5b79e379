"""Grounded community reports: how many LLM reports of an index name what their context lacks.

Reads an index folder (community_reports, communities, entities, relationships,
covariates parquet and ``llm_cache.sqlite``), rebuilds each LLM report's context exactly
as the reports stage built it (:func:`kgloom.report_writer.build_report_context`
with the index's ``report_max_input_tokens``, its children's reports, its members'
claims) and checks that rebuilt context against the LLM cache (the input hash of a cached
``community_reports`` call), then runs :func:`kgloom.report_writer.check_report`
on each reply. No model is called.

Figures (saved as JSON, stamped with commit, date and load average):

- ``before``: the index's LLM reports (per community, and per distinct reply: a report
  carried down a level or reused is one reply); how many name something outside their context
  (an ungrounded proper name, :func:`kgloom.names.grounding.ungrounded_names`), how many
  repeat the prompt's worked example, how many loop, and the union the check rejects;
- ``after``: the reports this commit's reports stage publishes from the same replies:
  a rejected reply is replaced by the rule report, so every published report is checked
  again (LLM replies kept and rule reports, against their full member context).

``--example`` says which worked example the replies were written under: ``sherlock``
(the report prompt before issue 28: Sherlock Holmes, Dr. Watson, Baker Street) or
``current`` (this commit's ``<placeholder>`` example).

``--regenerate N`` asks the model again (this commit's prompt, or ``--prompt
placeholders``: the same with the ``<placeholder>`` example tried for issue 28) for N of
the LLM reports, the rejected ones first, from the same contexts, in a
cache of its own, and checks the new replies: the prompt change measured.

Usage:
    python bench/eval_reports.py --index data/output [--example sherlock]
        [--report-max-input-tokens 800] [--regenerate N [--model GGUF]]
        [--save bench/results/eval_reports_book_real.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.stamp import save_result, when  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# The worked example of the report prompt up to issue 28 (kgloom commit 71f1f13), kept
# here to classify the replies written under it.
SHERLOCK_EXAMPLE = (
    "Entities:\n"
    "- Sherlock Holmes (PERSON): Holmes needed a friend to share rooms in Baker Street.\n"
    "- Dr. Watson (PERSON): Dr. Watson met Sherlock Holmes at the laboratory.\n"
    "- Mrs. Hudson (PERSON): \"Capital!\" said Mrs. Hudson, their landlady.\n"
    "- Baker Street (LOCATION): Holmes needed a friend to share rooms in Baker Street.\n"
    "Relationships:\n"
    "- Dr. Watson -> Sherlock Holmes: Holmes needed a friend to share rooms in Baker "
    "Street, and Watson agreed.\n"
    "- Mrs. Hudson -> Sherlock Holmes: \"Capital!\" said Mrs. Hudson, their landlady.\n"
    "- Sherlock Holmes -> Baker Street: Holmes needed a friend to share rooms in Baker "
    "Street, and Watson agreed.\n"
    + json.dumps({
        "title": "Sherlock Holmes, Dr. Watson and Baker Street",
        "summary": "Sherlock Holmes and Dr. Watson agree to share rooms in Baker Street, "
                   "where Mrs. Hudson is their landlady.",
        "rating": 5,
        "rating_explanation": "Holmes and Watson are the main pair; the others are tied to "
                              "them.",
        "findings": [
            {"summary": "Holmes and Watson share rooms",
             "explanation": "Holmes needed a friend to share rooms in Baker Street, and "
                            "Watson agreed."},
            {"summary": "Mrs. Hudson is their landlady",
             "explanation": "Mrs. Hudson is called their landlady."}]}))


# The placeholder example tried for issue 28 (9 of 22 replies copied its slots); the
# shipped prompt has no example.
_PH_CONTEXT = (
    "Entities:\n"
    "- <name 1> (PERSON): <a sentence of the text about <name 1>>\n"
    "- <name 2> (PERSON): <a sentence of the text about <name 2>>\n"
    "- <name 3> (LOCATION): <a sentence of the text about <name 3>>\n"
    "Relationships:\n"
    "- <name 1> -> <name 2>: <a sentence of the text naming <name 1> and <name 2>>\n"
    "- <name 2> -> <name 3>: <a sentence of the text naming <name 2> and <name 3>>")
_PH_REPORT = {
    "title": "<name 1>, <name 2> and <name 3>",
    "summary": "<how <name 1>, <name 2> and <name 3> are related, in the words of the data>",
    "rating": 5, "rating_explanation": "<why this group matters, from the data>",
    "findings": [{"summary": "<a fact about <name 1> and <name 2>>",
                  "explanation": "<the sentence of the data that states it>"},
                 {"summary": "<a fact about <name 2> and <name 3>>",
                  "explanation": "<the sentence of the data that states it>"}]}
PLACEHOLDER_EXAMPLE = (("Community data:\n" + _PH_CONTEXT, json.dumps(_PH_REPORT)),)




def cached_inputs(index: Path) -> set[str]:
    """The input hashes of the cached community_reports calls."""
    path = index / "llm_cache.sqlite"
    if not path.exists():
        return set()
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {r[0] for r in con.execute(
            "SELECT input_hash FROM llm_calls WHERE stage = 'community_reports'")}
    finally:
        con.close()


def classify(problems: list[str]) -> dict[str, bool]:
    return {"outside_context": any(p.startswith(("names what", "repeats the prompt's"))
                                   for p in problems),
            "example": any(p.startswith("repeats the prompt's") for p in problems),
            "placeholders": any(p.startswith("writes placeholders") for p in problems),
            "loop": any(p.startswith("repeats itself") for p in problems),
            "rejected": bool(problems)}


def regenerate(args, rows: list[dict], comms: pl.DataFrame, ents: pl.DataFrame,
               rels: pl.DataFrame, claims: pl.DataFrame | None, budget: int) -> dict:
    """Ask the model for ``args.regenerate`` reports again with this commit's prompt (the
    rejected ones first, then by community), each from the context its first reply had,
    and check the new replies against this commit's example."""
    import dataclasses
    import time

    from kgloom.embedding.tokenizer import default_tokenizer
    from kgloom.llm import open_llm, structured_call
    from kgloom.report_writer import (
        REPORT_TEMPLATE,
        STAGE,
        build_report_context,
        check_report,
        example_text,
        member_claims,
        report_schema,
    )
    from kgloom.settings.indexing import IndexSettings

    settings = IndexSettings()
    template = REPORT_TEMPLATE if args.prompt == "current" else dataclasses.replace(
        REPORT_TEMPLATE, examples=PLACEHOLDER_EXAMPLE,
        system=REPORT_TEMPLATE.system[:-1] + "; the example's <placeholders> stand for them.")
    llm = open_llm(args.cache, args.model or None, n_ctx=4096)
    by_comm = {c["community"]: c for c in comms.iter_rows(named=True)}
    reports = pl.read_parquet(args.index / "community_reports.parquet")
    done = {r["community"]: r for r in reports.iter_rows(named=True)}
    title_of = dict(zip(ents["id"].to_list(), ents["title"].to_list()))
    chosen = sorted([r for r in rows if r["distinct_reply"]],
                    key=lambda r: (not r["rejected"], r["community"]))[:args.regenerate]
    out, start = [], time.perf_counter()
    for r in chosen:
        c = by_comm[r["community"]]
        children = [done[k] for k in c["children"] if k in done]
        ctx, _ = build_report_context(c, ents, rels, children, budget, default_tokenizer(),
                                      member_claims(c, ents, claims))
        obj, _failure = structured_call(llm, template, STAGE, str(c["community"]),
                                        settings.seed, schema=report_schema(c, settings),
                                        context=ctx)
        members = [title_of[e] for e in c["entity_ids"] if e in title_of]
        problems = check_report(obj, ctx, members, example=example_text(template)) \
            if obj is not None else []
        out.append({"community": c["community"], "first_reply_rejected": r["rejected"],
                    "failed": obj is None, "title": obj["title"] if obj else None,
                    "problems": problems, **classify(problems)})
    return {"model": llm.model_id, "prompt": args.prompt, "cache": str(args.cache),
            "replies": len(out),
            "of_which_first_reply_rejected": sum(x["first_reply_rejected"] for x in out),
            "naming_outside_context": sum(x["outside_context"] for x in out),
            "repeat_the_example": sum(x["example"] for x in out),
            "write_placeholders": sum(x["placeholders"] for x in out),
            "looping": sum(x["loop"] for x in out),
            "rejected": sum(x["rejected"] for x in out),
            "failed": sum(x["failed"] for x in out),
            "seconds": round(time.perf_counter() - start, 1), "per_reply": out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--example", choices=["sherlock", "current"], default="sherlock")
    ap.add_argument("--report-max-input-tokens", type=int, default=None,
                    help="the index's setting (default: IndexSettings' default)")
    ap.add_argument("--regenerate", type=int, default=0, metavar="N",
                    help="also ask the model again, with this commit's report prompt, for N "
                         "LLM reports (the rejected ones first) and check the new replies")
    ap.add_argument("--model", default="", help="GGUF for --regenerate (default: bundled)")
    ap.add_argument("--prompt", choices=["current", "placeholders"], default="current",
                    help="--regenerate with this commit's report prompt (no example), or "
                         "with the <placeholder> example tried for issue 28")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/kgloom-eval-reports.sqlite"),
                    help="LLM cache of --regenerate (never the index's)")
    ap.add_argument("--save", type=Path, default=None)
    args = ap.parse_args()

    from kgloom.core.ids import content_id
    from kgloom.embedding.tokenizer import default_tokenizer
    from kgloom.names.grounding import ungrounded_names
    from kgloom.report_writer import (
        build_report_context,
        check_report,
        example_text,
        member_claims,
        report_text,
        rule_report,
    )
    from kgloom.settings.indexing import IndexSettings

    idx = args.index
    budget = args.report_max_input_tokens or IndexSettings().report_max_input_tokens
    reports = pl.read_parquet(idx / "community_reports.parquet")
    comms = pl.read_parquet(idx / "communities.parquet")
    ents = pl.read_parquet(idx / "entities.parquet")
    rels = pl.read_parquet(idx / "relationships.parquet")
    claims = pl.read_parquet(idx / "covariates.parquet") \
        if (idx / "covariates.parquet").exists() else None
    example = SHERLOCK_EXAMPLE if args.example == "sherlock" else example_text()
    inputs = cached_inputs(idx)
    tok = default_tokenizer()
    title_of = dict(zip(ents["id"].to_list(), ents["title"].to_list()))
    by_comm = {r["community"]: r for r in reports.iter_rows(named=True)}
    rows, published = [], []
    keys_seen: set = set()  # deepest level first, as the stage: the first is the one asked
    for c in comms.sort(["level", "community"], descending=[True, False]).iter_rows(named=True):
        rep = by_comm.get(c["community"])
        if rep is None:
            continue
        members = [title_of[e] for e in c["entity_ids"] if e in title_of]
        full_ctx, _ = build_report_context(c, ents, rels, [], 10**9, tok,
                                           member_claims(c, ents, claims))
        if rep["generated_by"] != "llm":
            published.append((c["community"], "rules", json.loads(rep["full_content_json"]),
                              full_ctx, members))
            continue
        children = [by_comm[k] for k in c["children"] if k in by_comm]
        ctx, method = build_report_context(c, ents, rels, children, budget, tok,
                                           member_claims(c, ents, claims))
        verified = content_id("inputs", json.dumps({"context": ctx}, sort_keys=True)) in inputs
        asked = rep.get("report_key") not in keys_seen  # else carried down / reused: one reply
        keys_seen.add(rep.get("report_key"))
        obj = json.loads(rep["full_content_json"])
        problems = check_report(obj, ctx, members, example=example)
        names = ungrounded_names(report_text(obj), ctx, tuple(members))
        rows.append({"community": c["community"], "level": c["level"], "size": c["size"],
                     "report_key": rep.get("report_key"), "distinct_reply": asked,
                     "context_method": method, "context_verified": verified,
                     "title": obj["title"], "problems": problems, "ungrounded_names": names,
                     **classify(problems)})
        if problems:
            published.append((c["community"], "rules (rejected llm)",
                              rule_report(c, ents, rels), full_ctx, members))
        else:
            published.append((c["community"], "llm", obj, ctx, members))
    n = len(rows)

    def count(key: str, distinct: bool = False) -> int:
        return sum(r[key] for r in rows if r["distinct_reply"] or not distinct)

    after = []
    for comm, how, obj, ctx, members in published:
        names = ungrounded_names(report_text(obj), ctx, tuple(members))
        after.append({"community": comm, "published_as": how, "ungrounded_names": names})
    out = {"benchmark": "community reports naming what their context lacks", **when(),
           "index": str(idx), "example": args.example, "report_max_input_tokens": budget,
           "reports": reports.height, "llm_reports": n,
           "contexts_verified_against_llm_cache": count("context_verified"),
           "distinct_llm_replies": count("distinct_reply"),
           "distinct_replies_verified_against_llm_cache": count("context_verified", True),
           "distinct_replies": {"naming_outside_context": count("outside_context", True),
                                "repeat_the_example": count("example", True),
                                "looping": count("loop", True),
                                "rejected": count("rejected", True)},
           "before": {"llm_reports_naming_outside_context": count("outside_context"),
                      "of_which_repeat_the_example": count("example"),
                      "llm_reports_looping": count("loop"),
                      "llm_reports_rejected": count("rejected"),
                      "llm_reports_with_an_ungrounded_name": sum(bool(r["ungrounded_names"])
                                                                 for r in rows)},
           "after": {"published_reports": len(after),
                     "published_llm_reports": sum(a["published_as"] == "llm" for a in after),
                     "published_rule_reports": sum(a["published_as"] != "llm" for a in after),
                     "replaced_by_rule_reports": sum(a["published_as"].startswith("rules (")
                                                     for a in after),
                     "published_reports_naming_outside_context": sum(
                         bool(a["ungrounded_names"]) for a in after),
                     "published_llm_reports_naming_outside_context": sum(
                         bool(a["ungrounded_names"]) for a in after
                         if a["published_as"] == "llm")},
           "per_llm_report": rows,
           "published_with_ungrounded_names": [a for a in after if a["ungrounded_names"]]}
    b, a = out["before"], out["after"]
    print(f"{n} LLM reports ({out['contexts_verified_against_llm_cache']} contexts verified "
          f"against the cache): {b['llm_reports_naming_outside_context']} name what their "
          f"context lacks ({b['of_which_repeat_the_example']} repeat the example), "
          f"{b['llm_reports_looping']} loop; rejected {b['llm_reports_rejected']}")
    dr = out["distinct_replies"]
    print(f"distinct replies {out['distinct_llm_replies']} "
          f"({out['distinct_replies_verified_against_llm_cache']} verified): "
          f"{dr['naming_outside_context']} name what their context lacks "
          f"({dr['repeat_the_example']} repeat the example), {dr['looping']} loop; "
          f"rejected {dr['rejected']}")
    print(f"published after the check: {a['published_llm_reports']} LLM + "
          f"{a['published_rule_reports']} rule reports; naming outside their context: "
          f"{a['published_reports_naming_outside_context']} "
          f"(LLM {a['published_llm_reports_naming_outside_context']})")
    if args.regenerate:
        out["regenerated"] = regenerate(args, rows, comms, ents, rels, claims, budget)
        g = out["regenerated"]
        print(f"regenerated {g['replies']} replies with this commit's prompt: "
              f"{g['naming_outside_context']} name what their context lacks "
              f"({g['repeat_the_example']} repeat the example), {g['looping']} loop, "
              f"{g['failed']} failed; {g['seconds']} s")
    if args.save:
        save_result(args.save, out, args)


if __name__ == "__main__":
    main()
