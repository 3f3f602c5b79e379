"""Search benchmark (issue 15): routing accuracy, dynamic vs static global search, local
search answers beside plain vector RAG, and every context's budget.

Parts (``--parts``, comma-separated; each needs only what it names):

- ``routing``: bench/data/search/routing.jsonl (48 labelled questions). Always: the rules
  (:func:`kgloom.query.routing.route_by_rules`) with *oracle linking* (the names written
  in the file): coverage (share a rule decides) and accuracy on those. With ``--book-index``
  / ``--wiki-index``: the same with kgloom's own linker on that index. With a model
  (not ``--no-model``): full ``auto`` routing (rules, then the classifier call) accuracy.
- ``global``: bench/data/search/{book,2wiki}-thematic.jsonl on ``--book-index`` /
  ``--wiki-index``: static search at ``--level`` and dynamic selection, per question the
  LLM calls and prompt tokens of each (all stages: rate, map, answer), the reports the
  dynamic run rated and its rating calls (several reports per call), and the share of
  the static run's top-rated reports (those its 5 best key points came from) that the
  dynamic run also mapped (``top_kept_share``: its selection and, when that gave no
  point above 0, the relevant parents its children had replaced, mapped as a fallback;
  ``top_selected_share``: the selection alone) or rated relevant and then perhaps
  replaced by its children (``top_rated_relevant_share``); Microsoft's anchor is 77%
  fewer tokens than static level 1. An answer call follows only a map that found a
  point scored above 0, so the totals are given beside the answers each search gave and
  the rating + map tokens alone (``*_rate_map_tokens``); how often the map fell back and
  then answered (``dynamic_map_fallbacks``, ``dynamic_answered_after_fallback``). With
  ``--keep-parent`` a third search per question: dynamic selection keeping relevant
  parents beside their children (GraphRAG's ``keep_parent``), its calls, tokens and
  answers (``keep_parent_*``).
- ``local``: bench/data/2wiki-dev/questions.jsonl on ``--wiki-index``: answer exact match
  and token F1 (SQuAD's normalization: lower case, no punctuation or articles) of local
  search and of ``direct`` (plain vector RAG) with the same model in the same run, and the
  share of answers citing a text unit of a gold supporting passage.

Every context is checked against its budget (``over_budget`` counts the breaches).

Figures are those of the model given; with ``--fake-llm`` (kgloom.llm.fake.FakeBackend)
calls and token counts show the algorithm's shape only and answers mean nothing: the JSON
says which (``llm``). Prompt tokens are the backend's (the fake one counts words).

Usage:
    python bench/eval_search.py --parts routing
    python bench/eval_search.py --parts global,local --book-index BOOK/output \\
        --wiki-index WIKI/output [--fake-llm | --model PATH] [--limit N] \\
        [--save bench/results/eval_search.json]

The query LLM cache is written to ``--work`` (default /tmp/kgloom-eval-search), never
into the indexes.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import string
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench" / "data"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(ROOT))

from bench.stamp import save_result  # noqa: E402

TOP_POINTS = 5  # the static answer's top-rated reports: those of its best key points


def load_jsonl(path: Path) -> list[dict]:
    """One JSON object per non-empty line."""
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def normalize(text: str) -> str:
    """SQuAD v1.1's answer normalization (Rajpurkar et al. 2016, evaluate-v1.1.py):
    lower case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match(pred: str | None, gold: str) -> float:
    """1.0 when the normalized strings are equal, else 0.0 (None: 0.0)."""
    return float(pred is not None and normalize(pred) == normalize(gold))


def token_f1(pred: str | None, gold: str) -> float:
    """SQuAD's token F1 of the normalized strings (0.0 for None or no overlap)."""
    if pred is None:
        return 0.0
    p, g = normalize(pred).split(), normalize(gold).split()
    common = sum((Counter(p) & Counter(g)).values())
    if not common:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def mean(values: list[float]) -> float | None:
    """The mean rounded to 4 places; None for no values."""
    return round(sum(values) / len(values), 4) if values else None


def llm_totals(result) -> dict[str, Any]:
    """(calls, prompt_tokens) over every stage of one search result, and the same per
    stage (``stages``: search_rate / search_map / search_answer ...)."""
    llm = result.info.get("llm", {})
    total = llm.get("total", {})
    return {"calls": int(total.get("calls", 0)),
            "prompt_tokens": int(total.get("prompt_tokens", 0)),
            "stages": {k: {"calls": int(v.get("calls", 0)),
                           "prompt_tokens": int(v.get("prompt_tokens", 0))}
                       for k, v in llm.items() if k != "total"}}


def _stage_tokens(rows: list[dict], method: str, stages: tuple[str, ...]) -> int:
    """Prompt tokens of ``method`` (static / dynamic) over ``rows`` in ``stages``."""
    return sum(v["prompt_tokens"] for r in rows
               for k, v in r[method].get("stages", {}).items() if k in stages)


def within_budget(result, map_budget: int) -> bool:
    """The result's context (local / direct / reduce) and every map batch fit their budget."""
    ctx = result.context
    ok = ctx.tokens <= ctx.budget or not ctx.items
    return ok and all(b.tokens <= map_budget for b in result.map_batches)


# --- routing ---------------------------------------------------------------------------------
def eval_routing(questions: list[dict], searchers: dict, use_model: bool) -> dict:
    """Rules with oracle linking; rules with index linking and full auto routing when a
    searcher of the question's corpus is given."""
    from kgloom.query.routing import route_by_rules

    out: dict = {"questions": len(questions),
                 "labels": dict(Counter(q["route"] for q in questions))}

    def score(decided: list[tuple[str, str | None]]) -> dict:
        by_rule = [(lab, got) for lab, got in decided if got is not None]
        confusion = Counter(f"{lab}->{got}" for lab, got in by_rule if lab != got)
        return {"coverage": round(len(by_rule) / len(decided), 4) if decided else None,
                "accuracy_when_decided": mean([float(lab == got) for lab, got in by_rule]),
                "decided": len(by_rule), "errors": dict(confusion)}

    oracle = []
    for q in questions:
        r = route_by_rules(q["question"], [e.upper() for e in q["entities"]])
        oracle.append((q["route"], r.route if r else None))
    out["rules_oracle_linking"] = score(oracle)
    linked, auto, rows = [], [], []
    for q in questions:
        s = searchers.get(q["corpus"])
        if s is None:
            continue
        titles = s.link_titles(q["question"])
        r = route_by_rules(q["question"], titles)
        linked.append((q["route"], r.route if r else None))
        row = {"id": q["id"], "label": q["route"], "rules": r.route if r else None,
               "linked": titles[:5]}
        if use_model:
            from kgloom.query.routing import route_question
            from kgloom.query.structured_search.search_base import CallLog

            got, _ = route_question(q["question"], titles, CallLog(s.llm), s.config.seed)
            auto.append(float(got.route == q["route"]))
            row.update(auto=got.route, decided_by=got.decided_by)
        rows.append(row)
    if linked:
        out["rules_index_linking"] = score(linked)
    if auto:
        out["auto_accuracy"] = mean(auto)
        out["auto_questions"] = len(auto)
    out["rows"] = rows
    return out


# --- global ----------------------------------------------------------------------------------
def eval_global(searcher, questions: list[dict], level: int,
                keep_parent: bool = False,
                on_row: Callable[[dict], None] | None = None) -> dict:
    """Static (``level``) and dynamic global search per question (module doc); with
    ``keep_parent`` also dynamic search keeping relevant parents (GraphRAG's option; its
    rating calls are the dynamic run's, served by the query cache). ``on_row`` gets the
    figures so far (:func:`global_figures`) after each question, e.g. to save them."""

    rows = []
    keeper = None
    if keep_parent:
        keeper = copy.copy(searcher)
        keeper.config = searcher.config.model_copy(update={"keep_parent": True})
    for q in questions:
        t0 = time.perf_counter()
        static = searcher.search(q["question"], mode="global", level=level)
        t1 = time.perf_counter()
        dynamic = searcher.search(q["question"], mode="global", dynamic=True)
        t2 = time.perf_counter()
        top = []
        for item in static.context.items[:TOP_POINTS]:
            top += [r for r in re.findall(r"\[(C\d+)\]", item.text)]
        top = list(dict.fromkeys(top))
        sel = dynamic.info.get("selection", {})
        selected = {f"C{c}" for c in sel.get("selected", [])}
        # what the dynamic run mapped: its selection, then any fallback to the parents
        kept = {r for b in dynamic.map_batches for r in b.refs}
        fallback = dynamic.info.get("map", {}).get("fallback")
        extra = {}
        if keeper is not None:
            kp = keeper.search(q["question"], mode="global", dynamic=True)
            extra = {"keep_parent": llm_totals(kp), "keep_parent_answer": kp.answer,
                     "keep_parent_route": kp.route,
                     "keep_parent_selected": len(kp.info.get("selection", {})
                                                 .get("selected", [])),
                     "keep_parent_over_budget": int(not within_budget(
                         kp, searcher.config.map_budget))}
        rows.append({
            "id": q["id"], "static": llm_totals(static), "dynamic": llm_totals(dynamic),
            "dynamic_map_fallback": fallback, **extra,
            "static_reports": len(static.info.get("selection", {}).get("selected", [])),
            "dynamic_selected": len(sel.get("selected", [])), "dynamic_rated": sel.get("rated"),
            "dynamic_rating_calls": sel.get("rating_calls"),
            "dynamic_pruned_reports": sel.get("pruned_reports"),
            "dynamic_route": dynamic.route,
            "static_top_reports": top,
            "top_kept_share": round(len(set(top) & kept) / len(top), 4) if top else None,
            "top_selected_share": round(len(set(top) & selected) / len(top), 4)
            if top else None,
            # kept or looked into: rated relevant, then perhaps replaced by its children
            "top_rated_relevant_share": round(sum(
                1 for c in top if (sel.get("ratings", {}).get(c[1:]) or 0)
                >= searcher.config.threshold) / len(top), 4)
            if top else None,
            "static_seconds": round(t1 - t0, 2), "dynamic_seconds": round(t2 - t1, 2),
            "failures": len(static.failures) + len(dynamic.failures),
            "over_budget": sum(int(not within_budget(x, searcher.config.map_budget))
                               for x in (static, dynamic)),
            "static_answer": static.answer, "dynamic_answer": dynamic.answer})
        print(f"  {q['id']}: static {rows[-1]['static']} dynamic {rows[-1]['dynamic']}",
              flush=True)
        if on_row is not None:
            on_row({**global_figures(rows, level, keeper is not None),
                    "partial": f"{len(rows)} of {len(questions)} questions"})
    return global_figures(rows, level, keeper is not None)


def global_figures(rows: list[dict], level: int, keep_parent: bool) -> dict:
    """The global part's totals over per-question ``rows`` (as :func:`eval_global`
    makes them), with the rows."""
    st = sum(r["static"]["prompt_tokens"] for r in rows)
    dy = sum(r["dynamic"]["prompt_tokens"] for r in rows)
    return {
        "level": level, "questions": len(rows),
        "static_calls": sum(r["static"]["calls"] for r in rows),
        "dynamic_calls": sum(r["dynamic"]["calls"] for r in rows),
        "dynamic_rating_calls": sum(r["dynamic_rating_calls"] or 0 for r in rows),
        "dynamic_rated": sum(r["dynamic_rated"] or 0 for r in rows),
        "static_prompt_tokens": st, "dynamic_prompt_tokens": dy,
        "dynamic_over_static_tokens": round(dy / st, 4) if st else None,
        "token_reduction": round(1 - dy / st, 4) if st else None,
        # an answer call follows only when the map found a point scored above 0, so the
        # totals differ by answers given: selection + map alone compare the searches
        "static_answered": sum(r["static_answer"] is not None for r in rows),
        "dynamic_answered": sum(r["dynamic_answer"] is not None for r in rows),
        # of which by global search; the rest fell back to local search (nothing rated
        # relevant), which answers from entities and text units, not reports
        "dynamic_answered_global": sum(r["dynamic_answer"] is not None
                                       and r["dynamic_route"] == "global" for r in rows),
        "dynamic_fell_back_to_local": sum(r["dynamic_route"] != "global" for r in rows),
        "static_rate_map_tokens": _stage_tokens(rows, "static", ("search_rate", "search_map")),
        "dynamic_rate_map_tokens": _stage_tokens(rows, "dynamic",
                                                 ("search_rate", "search_map")),
        "anchor_microsoft_token_reduction": 0.77,
        "top_kept_share": mean([r["top_kept_share"] for r in rows
                                if r["top_kept_share"] is not None]),
        "top_selected_share": mean([r["top_selected_share"] for r in rows
                                    if r["top_selected_share"] is not None]),
        "dynamic_map_fallbacks": sum(r["dynamic_map_fallback"] is not None for r in rows),
        "dynamic_answered_after_fallback": sum(
            r["dynamic_map_fallback"] is not None and r["dynamic_answer"] is not None
            for r in rows),
        **({"keep_parent_calls": sum(r["keep_parent"]["calls"] for r in rows),
            "keep_parent_prompt_tokens": sum(r["keep_parent"]["prompt_tokens"] for r in rows),
            "keep_parent_over_static_tokens": round(
                sum(r["keep_parent"]["prompt_tokens"] for r in rows) / st, 4) if st else None,
            "keep_parent_answered": sum(r["keep_parent_answer"] is not None for r in rows),
            "keep_parent_answered_global": sum(r["keep_parent_answer"] is not None
                                               and r["keep_parent_route"] == "global"
                                               for r in rows)}
           if keep_parent else {}),
        "top_rated_relevant_share": mean([r["top_rated_relevant_share"] for r in rows
                                          if r["top_rated_relevant_share"] is not None]),
        "over_budget": sum(r["over_budget"] + r.get("keep_parent_over_budget", 0)
                           for r in rows),
        "failures": sum(r["failures"] for r in rows), "rows": rows}


# --- local -----------------------------------------------------------------------------------
def eval_local(searcher, questions: list[dict], budget: int | None) -> dict:
    """Local search and direct (plain vector RAG) answers per 2Wiki question."""
    units = searcher.index.units
    title_of = dict(zip(units.ids, units.document_titles))
    rows = []
    for q in questions:
        row = {"id": q["id"], "answer": q["answer"]}
        for mode in ("local", "direct"):
            t0 = time.perf_counter()
            res = searcher.search(q["question"], mode=mode, budget=budget)
            cited_units = [s["id"] for s in res.cited() if s["kind"] == "text_units"]
            gold = set(q["supporting_titles"])
            row[mode] = {"pred": res.answer, "em": exact_match(res.answer, q["answer"]),
                         "f1": round(token_f1(res.answer, q["answer"]), 4),
                         "cites_gold": float(any(title_of.get(u) in gold for u in cited_units)),
                         "context_has_gold": float(any(
                             title_of.get(x.source_id) in gold for x in res.context.items
                             if x.kind == "text_units")),
                         "tokens": res.context.tokens, "budget": res.context.budget,
                         "over_budget": int(not within_budget(res, searcher.config.map_budget)),
                         "failures": len(res.failures), **llm_totals(res),
                         "seconds": round(time.perf_counter() - t0, 2)}
        rows.append(row)
        print(f"  {q['id']}: local {row['local']['pred']!r} direct {row['direct']['pred']!r} "
              f"gold {q['answer']!r}", flush=True)
    out: dict = {"questions": len(rows)}
    for mode in ("local", "direct"):
        out[mode] = {k: mean([r[mode][k] for r in rows])
                     for k in ("em", "f1", "cites_gold", "context_has_gold", "tokens")}
        out[mode]["over_budget"] = sum(r[mode]["over_budget"] for r in rows)
        out[mode]["failures"] = sum(r[mode]["failures"] for r in rows)
        out[mode]["prompt_tokens"] = sum(r[mode]["prompt_tokens"] for r in rows)
    d = out["direct"]["f1"]
    out["local_over_direct_f1"] = round(out["local"]["f1"] / d, 4) if d else None
    out["rows"] = rows
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default="routing", help="routing,global,local")
    ap.add_argument("--book-index", default="", help="an index of A Christmas Carol")
    ap.add_argument("--wiki-index", default="", help="an index of bench/data/2wiki-dev")
    ap.add_argument("--fake-llm", action="store_true", help="kgloom.llm.fake.FakeBackend")
    ap.add_argument("--no-model", action="store_true", help="routing: rules only")
    ap.add_argument("--model", default="", help="a GGUF (default: the bundled SmolLM2-135M)")
    ap.add_argument("--level", type=int, default=1, help="static global search's level")
    ap.add_argument("--keep-parent", action="store_true", help="global: also dynamic "
                    "search keeping relevant parents (GraphRAG's keep_parent)")
    ap.add_argument("--budget", type=int, default=None, help="local / direct context tokens")
    ap.add_argument("--limit", type=int, default=0, help="questions per list (0: all)")
    ap.add_argument("--work", default="/tmp/kgloom-eval-search", help="query LLM caches")
    ap.add_argument("--save", default="", help="write the figures as JSON here")
    ap.add_argument("--note", default="", help="provenance recorded in the JSON (e.g. how "
                    "the indexes were built)")
    args = ap.parse_args()
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    from kgloom.query.searcher import Searcher

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    searchers = {}
    llm_kind = "fake" if args.fake_llm else "model"
    for name, path in (("book", args.book_index), ("2wiki", args.wiki_index)):
        if path:
            searchers[name] = Searcher(path, fake_llm=args.fake_llm,
                                       model_path=args.model or None,
                                       cache_path=work / f"{name}-{llm_kind}.sqlite")
    llm = "fake (kgloom.llm.fake.FakeBackend): counts show the algorithm, answers mean nothing" \
        if args.fake_llm else f"model {args.model or 'bundled SmolLM2-135M-Instruct'}"
    results: dict = {"llm": llm, "limit": args.limit or None, "note": args.note,
                     "indexes": {k: str(v.index.output_dir) for k, v in searchers.items()}}

    def take(rows: list[dict]) -> list[dict]:
        return rows[:args.limit] if args.limit else rows

    start = time.perf_counter()
    if "routing" in parts:
        print("routing ...", flush=True)
        results["routing"] = eval_routing(load_jsonl(DATA / "search" / "routing.jsonl"),
                                          searchers,
                                          use_model=not args.no_model and bool(searchers))
        print(json.dumps({k: v for k, v in results["routing"].items() if k != "rows"}))
    if "global" in parts:
        for name, file in (("book", "book-thematic.jsonl"), ("2wiki", "2wiki-thematic.jsonl")):
            if name in searchers:
                print(f"global search, {name} ...", flush=True)
                def save_partial(figures: dict, key: str = f"global_{name}") -> None:
                    if args.save:  # a long run keeps what it measured if cut short
                        save_result(args.save, {**results, key: figures}, args, default=str)

                results[f"global_{name}"] = eval_global(
                    searchers[name], take(load_jsonl(DATA / "search" / file)), args.level,
                    args.keep_parent, save_partial)
                print(json.dumps({k: v for k, v in results[f"global_{name}"].items()
                                  if k != "rows"}))
    if "local" in parts and "2wiki" in searchers:
        print("local search vs direct, 2wiki ...", flush=True)
        results["local_2wiki"] = eval_local(
            searchers["2wiki"], take(load_jsonl(DATA / "2wiki-dev" / "questions.jsonl")),
            args.budget)
        print(json.dumps({k: v for k, v in results["local_2wiki"].items() if k != "rows"}))
    results["seconds"] = round(time.perf_counter() - start, 1)
    if args.save:
        save_result(args.save, results, args, default=str)


if __name__ == "__main__":
    main()
