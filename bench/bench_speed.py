"""Whole-index speed: the current defaults (a git ref, default ``main``) against this
tree's defaults, on the same input, each from an empty output folder and LLM cache, one
after the other in one run; prints and saves the figures and their ratios as JSON.

Usage:
    python bench/bench_speed.py book   [--baseline-ref main] [--order new-first] [--slice]
    python bench/bench_speed.py slice  (24,000 characters of the book from "Marley was dead")
    python bench/bench_speed.py 2wiki  [--limit N] --variants new
    python bench/bench_speed.py probe  (llama.cpp threads, batch sizes, grammar sampling)
    python bench/bench_speed.py book --rescore  (figures again from a saved run's folders)
    (all take --work-dir, --save, --model-path, --fake-llm)

Each variant runs ``kgloom index`` as a subprocess (:func:`bench.harness.build_index`)
with its own source tree on
``PYTHONPATH`` (``git archive`` of a commit unpacked under ``--work-dir``; ``baseline``:
``--baseline-ref``, ``new``: ``--new-ref``, default ``HEAD``, so editing the tree during
a run changes nothing), a fresh DAGSTER_HOME and a fresh output folder, so nothing is
shared between them but the machine. ``--slice`` adds, in the same run right after the
book's new variant, the 24,000-character slice with the new defaults (wall seconds per
text unit). A JSON with the figures so far is saved after every variant. The machine's
1-minute load average is recorded before and after each run (other processes share the
cores): compare the ratios of one run, not seconds across runs.

Figures per variant: wall seconds of the whole command and per text unit, peak resident
memory of the command's process tree (MiB, sampled every 0.2 s); LLM calls per
stage (new rows in the LLM cache); each stage's wall and model seconds (``cost`` of
``index-summary.json``; for a baseline without it, the stages' ``seconds`` and LLM
seconds); the share of the wall time inside the models; community reports written by
the LLM and by rules, communities of 3+ members without an LLM report; replies that did
not parse in the end (failures rows) and replies retried once after a parse error; and
on the book the gold entity and pair recall (``bench/eval_gold.py``).
``probe`` runs the one llama.cpp probe (bench/bench_llama_probe.py) on the installed
model with nothing cached, over :data:`PROBE_CONFIGS`: seconds per extraction call,
prompt and decode tokens/s per thread count, batch size and flash attention, and
grammar-first sampling against llama-cpp-python's sampler chain (configurations
alternated in ``--reps`` rounds, medians; identical replies checked).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import build_index, export_ref, write_input  # noqa: E402
from bench.stamp import load_average, save_result  # noqa: E402
from kgloom.llm import cache_rows, new_rows  # noqa: E402

GOLD = ROOT / "bench" / "data" / "christmas-carol-gold.json"
PARSE_FAILURE = "not JSON|breaks the schema"


def load() -> float:
    """The machine's 1-minute load average."""
    return load_average()[0]


def stage_costs(out: Path) -> dict:
    """Per-stage cost of an index: its ``cost`` table when it has one, else one built
    from each stage's seconds and LLM seconds (an index written before cost tables)."""
    summary = json.loads((out / "index-summary.json").read_text())
    if "cost" in summary:
        return summary["cost"]
    stages = {}
    for name, secs in summary["seconds_per_stage"].items():
        llm = summary.get("llm", {}).get(name, {})
        part = name in ("summaries", "resolution")  # inside the entities stage
        stages[name] = {"wall_seconds": llm.get("seconds", 0.0) if part else secs,
                        "model_seconds": llm.get("seconds", 0.0),
                        "llm_seconds": llm.get("seconds", 0.0),
                        "llm_outside_seconds": round(max(0.0, llm.get("seconds", 0.0)
                                                         - llm.get("prompt_seconds", 0.0)
                                                         - llm.get("generation_seconds", 0.0)),
                                                     2),
                        "calls": llm.get("calls", 0),
                        "prompt_tokens": llm.get("prompt_tokens", 0),
                        "completion_tokens": llm.get("completion_tokens", 0),
                        **({"part_of": "entities"} if part else {})}
    for c in [c for c in stages.values() if "part_of" in c]:
        parent = stages.setdefault(c["part_of"], {k: 0.0 for k in c if k != "part_of"})
        for k in ("model_seconds", "llm_seconds", "llm_outside_seconds", "calls",
                  "prompt_tokens", "completion_tokens"):
            parent[k] = round(parent[k] + c[k], 2)  # a part's model time is its parent's
    top = [c for c in stages.values() if "part_of" not in c]
    total = {k: round(sum(c[k] for c in top), 2) for k in ("wall_seconds", "model_seconds",
                                                           "llm_seconds",
                                                           "llm_outside_seconds", "calls",
                                                           "prompt_tokens", "completion_tokens")}
    return {"stages": stages, "total": total, "note": "no cost table: built from "
            "seconds_per_stage and llm (entities: its seconds, its parts' LLM figures; "
            "summaries and resolution: their LLM seconds); no embedder seconds"}


def report_figures(out: Path) -> dict:
    """Reports by who wrote them and communities of 3+ members without an LLM report."""
    comms = pl.read_parquet(out / "communities.parquet")
    reps = pl.read_parquet(out / "community_reports.parquet")
    if "generated_by" not in reps.columns:
        reps = reps.with_columns(pl.lit("llm").alias("generated_by"))
    big = comms.filter(pl.col("size") >= 3)["community"]
    llm_big = reps.filter(pl.col("community").is_in(big.to_list())
                          & (pl.col("generated_by") == "llm"))
    return {"communities": comms.height, "reports": reps.height,
            "by": dict(reps.group_by("generated_by").len().sort("generated_by").iter_rows()),
            "communities_3plus": big.len(),
            "communities_3plus_without_llm_report": big.len() - llm_big.height}


def run_variant(name: str, src: Path, work: Path, corpus: str, args) -> dict:
    """One ``kgloom index`` from an empty output folder with ``src`` on PYTHONPATH."""
    inp, out = work / "input", work / name / "output"
    shutil.rmtree(work / name, ignore_errors=True)
    out.mkdir(parents=True)
    print(f"[{name}] kgloom index ({corpus}), load {load()} ...", flush=True)
    run = build_index(inp, out, src=src, log=work / name / "log.txt",
                      fake_llm=args.fake_llm, model_path=args.model_path, sample_rss=True)
    wall, before = run.wall_seconds, run.load_before[0]
    fig = variant_figures(out, corpus, wall, before, run.load_after[0])
    fig["peak_rss_mb"] = run.peak_rss_mb  # the process tree's, sampled every 0.2 s
    shown = ("wall_seconds", "llm_calls_total", "model_share_of_wall", "peak_rss_mb",
             "load_before", "load_after")
    print(f"[{name}] {json.dumps({k: fig[k] for k in shown})}", flush=True)
    return fig


def variant_figures(out: Path, corpus: str, wall: float, load_before: float,
                    load_after: float) -> dict:
    """The figures of one finished index in ``out`` whose command took ``wall`` s."""
    units = pl.read_parquet(out / "text_units.parquet").height
    failures = pl.read_parquet(out / "failures.parquet")
    calls = new_rows({}, cache_rows(out))
    cost = stage_costs(out)
    summary = json.loads((out / "index-summary.json").read_text())
    st = cost["stages"]

    def wall_of(*names: str) -> float:
        return round(sum(st.get(n, {}).get("wall_seconds", 0.0) for n in names), 2)

    fig = {"wall_seconds": round(wall, 1), "text_units": units,
           "wall_seconds_per_text_unit": round(wall / max(units, 1), 2),
           "load_before": load_before, "load_after": load_after,
           "llm_calls": calls, "llm_calls_total": sum(calls.values()),
           "model_seconds": cost["total"]["model_seconds"],
           "model_share_of_wall": round(cost["total"]["model_seconds"] / wall, 4),
           # the embedder's one-time load (imports, weights) is model time in the cost
           # table; the share without it, for comparison with runs before it was
           "embedder_load_seconds": cost["total"].get("embedder_load_seconds", 0.0),
           "model_share_of_wall_without_embedder_load": round(
               (cost["total"]["model_seconds"]
                - cost["total"].get("embedder_load_seconds", 0.0)) / wall, 4),
           "stages_wall_seconds": cost["total"]["wall_seconds"],
           "extraction_wall_seconds": wall_of("extraction"),
           "summaries_plus_reports_wall_seconds": wall_of("summaries", "community_reports"),
           "parse_failures": failures.filter(pl.col("reason").str.contains(PARSE_FAILURE)).height,
           "parse_retries": sum(int(v.get("retries", 0))
                                for v in summary.get("llm", {}).values()),
           "llm_backend": summary.get("llm_backend"),
           "failures": failures.height, "reports": report_figures(out), "cost": cost}
    if corpus == "book":
        from bench.eval_gold import score

        fig["gold"] = {k: v for k, v in score(out, json.loads(GOLD.read_text())).items()
                       if k in ("entity_recall", "pair_recall", "missed_entities",
                                "missed_pairs", "entities", "relationships")}
    return fig


def rescore(args) -> dict:
    """Recompute the figures of a saved run (``--save`` or the default JSON) from its
    output folders under ``--work-dir`` (wall seconds and loads as measured then): for
    figures added to this script after the run."""
    path = Path(args.save or ROOT / "bench" / "results" / f"speed-{args.corpus}.json")
    res = json.loads(path.read_text())
    runs = [(res, Path(args.work_dir) / res["corpus"])]
    if "slice" in res:
        runs.append((res["slice"], Path(args.work_dir) / "slice"))
    for part, work in runs:
        for name in ("baseline", "new"):
            if name in part and (work / name / "output" / "index-summary.json").exists():
                v = part[name]
                part[name] = variant_figures(work / name / "output", part["corpus"],
                                             v["wall_seconds"], v["load_before"],
                                             v["load_after"])
        load_end = part.get("load_end")
        summarize(part)
        part["load_end"] = load_end  # as measured at the end of the run
    res["rescored"] = True
    return res


def summarize(res: dict) -> None:
    """Add the ratios (when both variants ran) and the issue's figures (when ``new``
    ran) to ``res``, with what has run so far."""
    if "baseline" in res and "new" in res:
        b, n = res["baseline"], res["new"]
        res["ratios_new_over_baseline"] = {
            k: round(n[k] / b[k], 4) if b[k] else None
            for k in ("wall_seconds", "llm_calls_total", "model_seconds",
                      "extraction_wall_seconds", "summaries_plus_reports_wall_seconds")}
    if "new" in res:
        n = res["new"]
        res["figures"] = {
            "wall_seconds_per_text_unit": n["wall_seconds_per_text_unit"],
            "model_share_of_wall": n["model_share_of_wall"],
            "model_share_of_stages": n["cost"]["total"].get("model_share"),
            "summaries_plus_reports_less_than_extraction":
                n["summaries_plus_reports_wall_seconds"] < n["extraction_wall_seconds"],
            "communities_3plus_without_llm_report":
                n["reports"]["communities_3plus_without_llm_report"],
            "parse_failures": n["parse_failures"],
            **({"gold_entity_recall": n["gold"]["entity_recall"],
                "gold_pair_recall": n["gold"]["pair_recall"]} if "gold" in n else {}),
            **({"wall_ratio_new_over_baseline": res["ratios_new_over_baseline"]["wall_seconds"]}
               if "ratios_new_over_baseline" in res else {})}
        if "slice" in res:
            res["figures"]["slice_wall_seconds_per_text_unit"] = \
                res["slice"]["new"]["wall_seconds_per_text_unit"]
            res["figures"]["slice_text_units"] = res["slice"]["new"]["text_units"]
    res["load_end"] = load()


def compare(corpus: str, args, variants: list[str] | None = None,
            after: Callable[[str, dict], None] | None = None) -> dict:
    """Run the variants one after the other; figures and new/baseline ratios.
    ``after(variant, res)`` is called after each variant (partial saves, the slice)."""
    variants = variants or args.variants
    work = Path(args.work_dir) / corpus
    shutil.rmtree(work / "input", ignore_errors=True)
    write_input(corpus, work / "input", args.limit)
    res: dict = {"corpus": corpus, "limit": args.limit or None,
                 "model": "fake" if args.fake_llm else args.model_path or
                 "bundled SmolLM2-135M-Instruct", "cores": os.cpu_count(),
                 "load_start": load()}
    srcs = {}
    for name, ref in (("baseline", args.baseline_ref), ("new", args.new_ref)):
        if name in variants:
            res[f"{name}_ref"] = ref
            res[f"{name}_commit"] = export_ref(ref, work / f"{name}-src")
            srcs[name] = work / f"{name}-src"
    order = sorted(variants, key=lambda v: (v == "new") == (args.order == "baseline-first"))
    res["order"] = order
    for name in order:
        res[name] = run_variant(name, srcs[name], work, corpus, args)
        if after:
            after(name, res)
        summarize(res)
    res["complete"] = True
    return res


def probe(args, save: Path) -> dict:
    """llama.cpp settings and grammar-first sampling measured on this machine, now: the
    one llama.cpp probe (bench/bench_llama_probe.py) on :data:`PROBE_CONFIGS`, ``--reps``
    rounds."""
    from bench import bench_llama_probe as lp

    ns = argparse.Namespace(rounds=args.reps, budget_s=float("inf"), units=lp.UNITS,
                            configs=PROBE_CONFIGS, model_path=args.model_path,
                            batches="", ubatches="", threads="", save=str(save))
    return lp.run(ns)


# the probe's configurations (threads,n_batch,n_ubatch,flash_attn,grammar_first): thread
# counts, batch sizes and flash attention beside the defaults, and llama-cpp-python's
# sampler chain against grammar-first sampling
PROBE_CONFIGS = "1,512,512,0,1;2,512,512,0,1;1,512,512,1,1;1,2048,2048,0,1;1,128,128,0,1;" \
                "1,512,512,0,0"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", choices=["book", "slice", "2wiki", "probe"])
    ap.add_argument("--variants", default="baseline,new",
                    help="comma-separated: baseline (--baseline-ref), new (this tree)")
    ap.add_argument("--baseline-ref", default="main")
    ap.add_argument("--new-ref", default="HEAD")
    ap.add_argument("--slice", action="store_true",
                    help="book: then the 24,000-character slice, new defaults only")
    ap.add_argument("--order", choices=["baseline-first", "new-first"],
                    default="new-first")
    ap.add_argument("--limit", type=int, default=0, help="2wiki: first N passages")
    ap.add_argument("--reps", type=int, default=3, help="probe: alternations")
    ap.add_argument("--work-dir", default="/tmp/kgloom-bench-speed")
    ap.add_argument("--model-path", default="")
    ap.add_argument("--fake-llm", action="store_true")
    ap.add_argument("--save", default="")
    ap.add_argument("--rescore", action="store_true",
                    help="recompute the saved run's figures from its output folders")
    args = ap.parse_args()
    args.variants = [v for v in args.variants.split(",") if v]
    if set(args.variants) - {"baseline", "new"}:
        raise SystemExit("--variants: baseline and/or new")
    suffix = f"-{args.limit}" if args.limit else ""
    save = Path(args.save or ROOT / "bench" / "results" / f"speed-{args.corpus}{suffix}.json")

    def partial(res: dict) -> None:
        summarize(res)
        save_result(save, {**res, "complete": False}, args)
        print("(partial figures)", flush=True)

    def after(name: str, res: dict) -> None:
        # a partial JSON after every variant, so a long run leaves its figures so far;
        # the slice right after the book's new variant (same run)
        partial(res)
        if args.slice and args.corpus == "book" and name == "new":
            res["slice"] = compare("slice", args, ["new"])
            partial(res)

    if args.rescore:
        res = rescore(args)
    elif args.corpus == "probe":
        res = probe(args, save)
    else:
        res = compare(args.corpus, args, after=after)
    print(json.dumps(res.get("figures", res), indent=2))
    save_result(save, res, args)


if __name__ == "__main__":
    main()
