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

Each variant runs ``kgloom index`` as a subprocess with its own source tree on
``PYTHONPATH`` (``git archive`` of a commit unpacked under ``--work-dir``; ``baseline``:
``--baseline-ref``, ``new``: ``--new-ref``, default ``HEAD``, so editing the tree during
a run changes nothing), a fresh DAGSTER_HOME and a fresh output folder, so nothing is
shared between them but the machine. ``--slice`` adds, in the same run right after the
book's new variant, the 24,000-character slice with the new defaults (wall seconds per
text unit). A JSON with the figures so far is saved after every variant. The machine's
1-minute load average is recorded before and after each run (other processes share the
cores): compare the ratios of one run, not seconds across runs.

Figures per variant: wall seconds of the whole command and per text unit; LLM calls per
stage (new rows in the LLM cache); each stage's wall and model seconds (``cost`` of
``index-summary.json``; for a baseline without it, the stages' ``seconds`` and LLM
seconds); the share of the wall time inside the models; community reports written by
the LLM and by rules, communities of 3+ members without an LLM report; replies that did
not parse in the end (failures rows) and replies retried once after a parse error; and
on the book the gold entity and pair recall (``bench/eval_gold.py``).
``probe`` measures, on the installed model and with nothing cached: prompt and decode
tokens/s per llama.cpp thread setting, batch size and flash attention (variants
alternated, medians), and grammar-first sampling against llama-cpp-python's chain on
the same prompts (time outside llama.cpp's timers, identical replies).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from kgloom.llm import cache_rows, new_rows  # noqa: E402

BOOK = ROOT / "data" / "input" / "a-christmas-carol.txt"
WIKI = ROOT / "bench" / "data" / "2wiki-dev" / "corpus.jsonl"
GOLD = ROOT / "bench" / "data" / "christmas-carol-gold.json"
SLICE_START, SLICE_CHARS = "Marley was dead", 24_000
PARSE_FAILURE = "not JSON|breaks the schema"


def load() -> float:
    """The machine's 1-minute load average."""
    return round(os.getloadavg()[0], 2)


def make_input(corpus: str, folder: Path, limit: int) -> None:
    """Write the corpus's input files into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    if corpus == "book":
        shutil.copy(BOOK, folder / BOOK.name)
    elif corpus == "slice":
        text = BOOK.read_text(encoding="utf-8")
        start = text.index(SLICE_START)
        (folder / "marley-slice.txt").write_text(text[start:start + SLICE_CHARS],
                                                 encoding="utf-8")
    else:
        lines = WIKI.read_text(encoding="utf-8").splitlines()
        lines = lines[:limit] if limit else lines
        (folder / "2wiki-dev.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def export_ref(ref: str, dest: Path) -> str:
    """Unpack ``git archive <ref>`` of this repository into ``dest``; return the commit."""
    commit = subprocess.run(["git", "rev-parse", "--short", ref], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.strip()
    tar = subprocess.run(["git", "archive", "--format=tar", ref], cwd=ROOT, check=True,
                         capture_output=True).stdout
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
        tf.extractall(dest, filter="data")
    return commit


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
    inp, out, home = work / "input", work / name / "output", work / name / "dagster_home"
    shutil.rmtree(work / name, ignore_errors=True)
    out.mkdir(parents=True)
    cmd = [sys.executable, "-m", "kgloom.cli", "index", "--input-dir", str(inp),
           "--output-dir", str(out)]
    cmd += ["--fake-llm"] if args.fake_llm else []
    cmd += ["--model-path", args.model_path] if args.model_path else []
    env = {**os.environ, "PYTHONPATH": str(src), "DAGSTER_HOME": str(home),
           "HF_HUB_OFFLINE": "1"}
    before = load()
    print(f"[{name}] kgloom index ({corpus}), load {before} ...", flush=True)
    t0 = time.perf_counter()
    res = subprocess.run(cmd, env=env, cwd=src, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    (work / name / "log.txt").write_text(res.stdout + res.stderr)
    if res.returncode != 0:
        raise SystemExit(f"{name}: kgloom index failed ({res.returncode}); see "
                         f"{work / name / 'log.txt'}")
    fig = variant_figures(out, corpus, wall, before, load())
    shown = ("wall_seconds", "llm_calls_total", "model_share_of_wall", "load_before",
             "load_after")
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
        from eval_gold import score

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
    make_input(corpus, work / "input", args.limit)
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


def probe(args) -> dict:
    """llama.cpp settings and grammar sampling measured on this machine, now."""
    import llama_cpp

    from kgloom.config import IndexSettings
    from kgloom.extraction import extract
    from kgloom.ingest.chunking import split_text_units
    from kgloom.ingest.documents import read_documents
    from kgloom.ingest.tokenizer import default_tokenizer
    from kgloom.llm import LlamaCppBackend, default_gguf_path, reply_token_bound
    from kgloom.reports.community_reports import REPORT_TEMPLATE

    path = args.model_path or str(default_gguf_path())
    text = BOOK.read_text(encoding="utf-8")
    start = text.index(SLICE_START)
    res: dict = {"cores": os.cpu_count(), "load_before": load(),
                 "llama_cpp_python": llama_cpp.__version__}

    def tok_per_s(settings: dict, reps: int) -> dict:
        """Median prompt (1,000 tokens) and decode (32 tokens) tokens/s per variant,
        variants alternated ``reps`` times."""
        llms = {k: llama_cpp.Llama(model_path=path, n_ctx=4096, verbose=False, **v)
                for k, v in settings.items()}
        toks = next(iter(llms.values())).tokenize(text[start:start + 8000].encode(),
                                                  add_bos=False)[:1000]
        got: dict = {k: {"prompt": [], "decode": []} for k in settings}
        for _ in range(reps):
            for k, llm in llms.items():
                llm.reset()
                t0 = time.perf_counter()
                llm.eval(toks)
                t1 = time.perf_counter()
                for t in toks[:32]:
                    llm.eval([t])
                t2 = time.perf_counter()
                got[k]["prompt"].append(len(toks) / (t1 - t0))
                got[k]["decode"].append(32 / (t2 - t1))
        return {k: {"prompt_tok_per_s": round(statistics.median(v["prompt"]), 1),
                    "decode_tok_per_s": round(statistics.median(v["decode"]), 1)}
                for k, v in got.items()}

    print("threads ...", flush=True)
    res["threads"] = tok_per_s({
        "decode 1, prompt 1": {"n_threads": 1, "n_threads_batch": 1},
        "decode 1, prompt 2 (llama-cpp-python's default here)":
            {"n_threads": 1, "n_threads_batch": 2},
        "decode 2, prompt 2": {"n_threads": 2, "n_threads_batch": 2}}, args.reps)
    res["load_after_threads"] = load()
    print(json.dumps(res["threads"]), flush=True)
    print("batch sizes, flash attention ...", flush=True)
    one = {"n_threads": 1, "n_threads_batch": 1}
    res["batch"] = tok_per_s({
        "n_batch 512, n_ubatch 512": {**one, "n_batch": 512, "n_ubatch": 512},
        "n_batch 512, flash_attn": {**one, "n_batch": 512, "n_ubatch": 512, "flash_attn": True},
        "n_batch 2048, n_ubatch 2048": {**one, "n_batch": 2048, "n_ubatch": 2048},
        "n_batch 128, n_ubatch 128": {**one, "n_batch": 128, "n_ubatch": 128}}, args.reps)
    res["load_after_batch"] = load()
    print(json.dumps(res["batch"]), flush=True)

    print("grammar-first sampling ...", flush=True)
    docs, _ = read_documents(ROOT / "data" / "input")
    units = split_text_units(docs, default_tokenizer())
    vocab = extract.word_counts(units["text"].to_list())
    s = IndexSettings()
    tmpl = extract.extraction_template(False)
    calls = []
    for i in (5, 40):
        t = units["text"][i]
        names = extract.candidate_names(t, vocabulary=vocab)
        schema = extract.extraction_schema(names, s)
        calls.append(("extraction", tmpl.messages(types=", ".join(s.entity_types),
                                                  names=", ".join(names), text=t), schema))
    context = ("Entities:\n- Scrooge (PERSON): Scrooge was his sole executor.\n"
               "- Marley (PERSON): Marley was dead: to begin with.\n- Fred (PERSON): his "
               "nephew Fred came.\nRelationships:\n- Scrooge -> Marley: Scrooge and he were "
               "partners for I don't know how many years.\n- Scrooge -> Fred: Fred wished "
               "Scrooge a merry Christmas.")
    calls.append(("report", REPORT_TEMPLATE.messages(context=context), REPORT_TEMPLATE.schema))
    backends = {gf: LlamaCppBackend(path, n_threads=1, grammar_first=gf) for gf in (False, True)}
    rows = []
    for kind, msgs, schema in calls:
        replies = {}
        for gf in (False, True):
            c = backends[gf].complete(msgs, schema, reply_token_bound(schema), 1)
            replies[gf] = c.text
            rows.append({"call": kind, "grammar_first": gf, "seconds": round(c.seconds, 2),
                         "prompt_seconds": round(c.prompt_seconds, 2),
                         "decode_seconds": round(c.generation_seconds, 2),
                         "outside_seconds": round(c.seconds - c.prompt_seconds
                                                  - c.generation_seconds, 2),
                         "completion_tokens": c.completion_tokens, "load": load()})
        rows[-1]["same_reply"] = replies[False] == replies[True]
    res["grammar_first"] = rows
    res["load_after"] = load()
    for r in rows:
        print(json.dumps(r), flush=True)
    return res


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
    save.parent.mkdir(parents=True, exist_ok=True)

    def partial(res: dict) -> None:
        summarize(res)
        save.write_text(json.dumps({**res, "complete": False}, indent=2) + "\n")
        print(f"partial figures saved to {save}", flush=True)

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
        res = probe(args)
    else:
        res = compare(args.corpus, args, after=after)
    print(json.dumps(res.get("figures", res), indent=2))
    save.write_text(json.dumps(res, indent=2) + "\n")
    print(f"saved {save}")


if __name__ == "__main__":
    main()
