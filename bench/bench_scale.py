"""Scaling figures: the LLM in-process vs behind llama-cpp-python servers, Leiden's time and
memory on large synthetic graphs, and a cost model of indexing 10^6 documents.

Parts (``--part``; each saves its JSON under bench/results/):

- ``servers`` -> ``scale_servers.json``: the 12-unit slice of the bundled book (24,000
  characters from "Marley was dead") indexed from an empty cache, whole pipeline, through
  (a) the in-process model (llama-cpp-python, default threads), (b) one
  ``python -m llama_cpp.server`` (1 decode thread, like (a)), (c) two servers with one
  thread each and ``llm_concurrency`` 2. Wall time, LLM calls and tokens per stage, stage
  seconds, the machine's load average (``os.getloadavg``) before and after each, and
  whether every parquet table is byte-identical to (a)'s. Servers are named by the GGUF's
  SHA-256 so the cache keys, and every table, can equal (a)'s. Slow: the model runs ~3
  times on 2 shared cores (tens of minutes).
- ``leiden`` -> ``scale_leiden.json``: kgloom's Leiden (``communities._leiden``: igraph's
  ``community_leiden`` on modularity, seeded, ``LEIDEN_ITERATIONS`` passes) and the whole
  ``hierarchical_leiden`` call the pipeline makes, on synthetic planted-partition graphs of
  10^5, 10^6, 10^7 edges, each in its own subprocess (wall and CPU seconds, peak RSS from
  ``resource.getrusage``, modularity, communities per level), with a wall-clock limit per
  size: what does not finish is reported as such. ``--methods`` adds level-0 baselines
  measured in the same run (kgloom's call before, leidenalg iterated until nothing moves;
  igraph's Leiden iterated likewise) and their CPU ratio and modularity difference to
  kgloom's. The model extrapolates linearly from the largest two sizes.
- ``model`` -> ``scale_model.json``: the cost of 10^6 documents of 1,500 tokens on K GPU
  servers (K = 1, 8, 64) from the measured tokens per text unit (``scale_servers.json``),
  a published vLLM throughput for a 7B model (``VLLM_SOURCE``), an assumed prefill rate
  (stated), the CPU seconds per unit of the other stages measured here, and the Leiden
  fit; which stage dominates.

Run: ``python bench/bench_scale.py --part servers`` (then ``leiden``, then ``model``). The
``leidenalg-converged`` baseline uses leidenalg, a dependency (``index.community_backend``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import SLICE_CHARS, book_slice, build_index  # noqa: E402
from bench.stamp import load_average as load  # noqa: E402
from bench.stamp import save_result  # noqa: E402

RESULTS = ROOT / "bench" / "results"


def parquet_bytes(out: Path) -> dict[str, bytes]:
    """Every parquet table under an output folder (LanceDB's own files left out)."""
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*.parquet"))
            if "lancedb" not in p.parts}


def run_variant(name: str, inp: Path, out: Path, urls: list[str], concurrency: int) -> dict:
    """Index ``inp`` into ``out`` from an empty cache (one ``kgloom index --force``
    process with its own Dagster instance, :func:`bench.harness.build_index`); return the
    figures of the run."""
    from kgloom.core.stats import read_stage_stats
    from kgloom.llm import LLMCache

    run = build_index(inp, out, dagster_home=out.with_name(out.name + "-dagster_home"),
                      log=out.with_name(out.name + ".log"), check=False, force=True,
                      llm_urls=urls, llm_concurrency=concurrency)
    cache = LLMCache(out / "llm_cache.sqlite")
    per_stage = {r["stage"]: r for r in cache.summary()}
    stages = read_stage_stats(out)
    summary = json.loads((out / "index-summary.json").read_text())
    return {"variant": name, "urls": len(urls), "llm_concurrency": concurrency,
            "success": run.success, "wall_seconds": run.wall_seconds,
            "llm_calls": sum(r["rows"] for r in per_stage.values()),
            "llm_per_stage": per_stage,
            "stage_seconds": {k: v.get("seconds") for k, v in sorted(stages.items())},
            "text_units": summary["rows"].get("text_units"),
            "rows": summary["rows"], "load_before": run.load_before,
            "load_after": run.load_after}


def part_servers(args) -> dict:
    from kgloom.llm import SMOLLM2_SHA256, default_gguf_path
    from kgloom.llm.testing import LlamaCppServer

    work = Path(args.work or tempfile.mkdtemp(prefix="scale-bench-"))
    inp = work / "input"
    inp.mkdir(parents=True, exist_ok=True)
    (inp / "carol-slice.txt").write_text(book_slice(), encoding="utf-8")
    gguf = str(default_gguf_path())
    results: dict = {"what": "12-unit book slice, whole pipeline from an empty cache",
                     "chars": SLICE_CHARS, "cpu_count": os.cpu_count(), "variants": []}
    path = RESULTS / "scale_servers.json"

    def save(r: dict) -> None:
        results["variants"].append(r)
        print(json.dumps({k: v for k, v in r.items() if k != "llm_per_stage"}), flush=True)
        save_result(path, results, args)

    wanted = args.variants.split(",")
    if "a" in wanted:
        save(run_variant("a_in_process", inp, work / "a", [], 1))
    if "b" in wanted:  # one server, threads as in-process (1 decode, all cores for prompts)
        with LlamaCppServer(gguf, SMOLLM2_SHA256, n_threads=1, n_threads_batch=os.cpu_count(),
                            log_path=str(work / "server-b.log")) as srv:
            save(run_variant("b_one_server", inp, work / "b", [srv.url], 1))
    if "c" in wanted:  # two servers, one thread each, two calls in flight
        with LlamaCppServer(gguf, SMOLLM2_SHA256, n_threads=1, n_threads_batch=1,
                            log_path=str(work / "server-c1.log")) as s1, \
                LlamaCppServer(gguf, SMOLLM2_SHA256, n_threads=1, n_threads_batch=1,
                               log_path=str(work / "server-c2.log")) as s2:
            save(run_variant("c_two_servers_concurrency_2", inp, work / "c",
                             [s1.url, s2.url], 2))
    done = {r["variant"][0]: work / r["variant"][0] for r in results["variants"]}
    if "a" in done:
        base = parquet_bytes(done["a"])
        results["identical_to_a"] = {
            v: {"tables": len(base),
                "differing": sorted(k for k in base if parquet_bytes(d).get(k) != base[k])}
            for v, d in done.items() if v != "a"}
    a = next((r for r in results["variants"] if r["variant"].startswith("a")), None)
    if a:
        results["speedup_vs_a"] = {r["variant"]: round(a["wall_seconds"] / r["wall_seconds"], 3)
                                   for r in results["variants"]}
    save_result(path, results, args)
    print(json.dumps({k: results.get(k) for k in ("identical_to_a", "speedup_vs_a")}, indent=2))
    return results


# ------------------------------------------------------------------------------ Leiden

_LEIDEN_CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[4])
import igraph as ig
import numpy as np
import polars as pl
from kgloom.graph.communities import _leiden, hierarchical_leiden

def rss_mib():
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)

edges, seed, method = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
t0 = time.perf_counter()
# planted partition, like an entity graph: n = edges / 5 vertices (mean degree 10) in blocks
# of 20; pairs drawn with 80 % inside a block, the rest between random vertices; self-loops
# and repeated pairs dropped (kgloom's graph is simple), then exactly `edges` pairs kept
rng = np.random.default_rng(seed)
n, block, drawn = edges // 5, 20, edges * 3 // 2
src = rng.integers(0, n, drawn)
dst = np.where(rng.random(drawn) < 0.8, (src // block) * block + rng.integers(0, block, drawn),
               rng.integers(0, n, drawn))
dst = np.minimum(dst, n - 1)
lo, hi = np.minimum(src, dst), np.maximum(src, dst)
key = np.unique((lo * n + hi)[lo != hi])
del src, dst, lo, hi
key = np.sort(rng.choice(key, edges, replace=False))
src, dst = key // n, key % n
del key
g = ig.Graph(n=n, edges=np.column_stack([src, dst]))
g.es["weight"] = 1.0
row = {"method": method, "edges": g.ecount(), "vertices": g.vcount(),
       "inside_block_share": round(float(np.mean(src // block == dst // block)), 3),
       "build_seconds": round(time.perf_counter() - t0, 2)}
t1, c1 = time.perf_counter(), time.process_time()
if method == "kgloom":
    membership = _leiden(g, seed)
elif method == "leidenalg-converged":  # kgloom's call before: leidenalg until nothing moves
    import leidenalg
    membership = leidenalg.find_partition(g, leidenalg.ModularityVertexPartition,
                                          weights="weight", n_iterations=-1,
                                          seed=seed).membership
elif method == "igraph-converged":  # igraph's C Leiden until nothing moves
    import random
    ig.set_random_number_generator(random.Random(seed))
    membership = g.community_leiden(objective_function="modularity", weights="weight",
                                    n_iterations=-1).membership
else:
    raise SystemExit(f"unknown method {method!r}")
row.update({"leiden_seconds": round(time.perf_counter() - t1, 2),
            "leiden_cpu_seconds": round(time.process_time() - c1, 2),
            "modularity": round(g.modularity(membership, weights="weight"), 5),
            "communities": len(set(membership)), "peak_rss_mib_level0": rss_mib()})
print(json.dumps(row), flush=True)
if method == "kgloom":  # the call the pipeline makes: every level, from polars tables
    t2 = time.perf_counter()
    v = pl.int_range(n, eager=True)
    eid = lambda col: pl.format("e{}", col.cast(pl.String).str.zfill(9))
    entities = pl.DataFrame({"v": v}).select(
        eid(pl.col("v")).alias("id"),
        pl.concat_list(pl.format("u{}", pl.col("v") // 4)).alias("text_unit_ids"))
    relationships = pl.DataFrame({"s": src, "t": dst}).select(
        pl.format("r{}", pl.int_range(pl.len()).cast(pl.String).str.zfill(10)).alias("id"),
        eid(pl.col("s")).alias("source_id"), eid(pl.col("t")).alias("target_id"),
        pl.lit(1.0).alias("weight"))
    del g, src, dst, v
    row["tables_seconds"] = round(time.perf_counter() - t2, 2)
    t3, c3 = time.perf_counter(), time.process_time()
    communities, stats = hierarchical_leiden(entities, relationships, 10, seed)
    row.update({"hierarchical_seconds": round(time.perf_counter() - t3, 2),
                "hierarchical_cpu_seconds": round(time.process_time() - c3, 2),
                "community_rows": communities.height,
                **{k: stats[k] for k in ("levels", "communities_per_level",
                                         "modularity_per_level", "max_size_per_level",
                                         "louvain_modularity", "splits",
                                         "oversized_at_last_level")}})
row["peak_rss_mib"] = rss_mib()
print(json.dumps(row), flush=True)
"""

LEIDEN_NOTE = (
    "planted partition: edges/5 vertices (mean degree 10) in blocks of 20, pairs drawn 80 % "
    "inside a block, repeats and self-loops dropped, weights 1.0. method 'kgloom': "
    "kgloom.graph.communities._leiden (igraph community_leiden, modularity, "
    "LEIDEN_ITERATIONS passes, seeded) = level 0, then hierarchical_leiden (every level, "
    "from polars tables; includes its Louvain baseline and the community rows) = "
    "hierarchical_*; 'leidenalg-converged': kgloom's call before (leidenalg "
    "ModularityVertexPartition, n_iterations=-1); 'igraph-converged': igraph "
    "community_leiden with n_iterations=-1; both level 0 only. *_cpu_seconds is the "
    "process's CPU time (the 2 cores are shared: wall time depends on the load); "
    "peak_rss_mib is the child process's peak resident set (getrusage)")


def part_leiden(args) -> dict:
    """Each (method, size) in its own subprocess under a wall-clock limit; rows are merged
    into an existing scale_leiden.json by (method, target size), so sizes can be measured
    in separate runs. A size that runs past the limit is recorded as an error row with
    the CPU seconds it used, and the last row the child printed (level 0 may finish
    before the hierarchy does)."""
    import resource

    path = RESULTS / "scale_leiden.json"
    sizes = [int(float(s)) for s in args.edges.split(",")]
    methods = args.methods.split(",")
    res: dict = {}
    for method in methods:
        for n in sizes:
            before = load()
            cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
            try:
                proc = subprocess.run([sys.executable, "-c", _LEIDEN_CHILD, str(n),
                                       "3735928559", method, str(ROOT)], capture_output=True,
                                      text=True, timeout=args.leiden_timeout)
                lines = proc.stdout.strip().splitlines()
                row = (json.loads(lines[-1]) if proc.returncode == 0
                       else {**(json.loads(lines[-1]) if lines else {}),
                             "error": proc.stderr[-500:]})
            except subprocess.TimeoutExpired as exc:  # killed and reaped: its CPU counts
                cpu = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime - cpu0
                out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) \
                    else (exc.stdout or "")
                lines = out.strip().splitlines()
                row = {**(json.loads(lines[-1]) if lines else {}),
                       "error": f"did not finish within {args.leiden_timeout} s wall "
                                f"({cpu:.0f} s CPU, graph build included)"}
            row = {"method": method, "target_edges": n, **row, "load_before": before,
                   "load_after": load()}
            print(json.dumps(row), flush=True)
            res = _merge_leiden_row(path, row, args)
    return res


def _merge_leiden_row(path: Path, row: dict, args) -> dict:
    """Write ``row`` into scale_leiden.json (replacing the same method and target size),
    with the per-size ratios to the baselines and the linear fit, stamped with ``args``;
    returns the file's content but its stamp."""
    old = json.loads(path.read_text()) if path.exists() else {}
    rows = [r for r in old.get("sizes", []) + old.get("baselines", [])
            if "method" in r and (r["method"], r["target_edges"])
            != (row["method"], row["target_edges"])] + [row]
    rows.sort(key=lambda r: (r["method"] != "kgloom", r["method"], r["target_edges"]))
    ours = {r["target_edges"]: r for r in rows if r["method"] == "kgloom"}
    vs = []
    for r in rows:  # kgloom's level 0 against each baseline at the same size
        k = ours.get(r["target_edges"])
        if r["method"] != "kgloom" and k and "leiden_cpu_seconds" in r \
                and "leiden_cpu_seconds" in k:
            vs.append({"baseline": r["method"], "edges": r["edges"],
                       "cpu_ratio_baseline_over_kgloom": round(
                           r["leiden_cpu_seconds"] / max(k["leiden_cpu_seconds"], 0.01), 1),
                       "modularity_kgloom_minus_baseline": round(
                           k["modularity"] - r["modularity"], 5)})
    done = [r for r in ours.values() if "hierarchical_cpu_seconds" in r and "error" not in r]
    fit = {}
    if len(done) >= 2:  # per-edge cost of the whole hierarchical call, largest two sizes
        a, b = done[-2], done[-1]
        slope = (b["peak_rss_mib"] - a["peak_rss_mib"]) / (b["edges"] - a["edges"])
        fit = {"cpu_seconds_per_edge": b["hierarchical_cpu_seconds"] / b["edges"],
               "cpu_growth": round((b["hierarchical_cpu_seconds"]
                                    / a["hierarchical_cpu_seconds"])
                                   / (b["edges"] / a["edges"]), 3),
               "mib_per_edge": slope, "mib_base": a["peak_rss_mib"] - slope * a["edges"],
               "from": [a["edges"], b["edges"]], "of": "hierarchical_leiden"}
    res = {"graph": LEIDEN_NOTE, "cpu_count": os.cpu_count(),
           "sizes": [r for r in rows if r["method"] == "kgloom"],
           "baselines": [r for r in rows if r["method"] != "kgloom"],
           "kgloom_vs_baselines": vs, "linear_fit": fit}
    save_result(path, res, args)
    return res


# ------------------------------------------------------------------------------ cost model

# Published vLLM throughput for a 7B model on one GPU: Lambda Labs, "LLMs inference
# benchmarks, using vLLM, on Lambda Cloud" (github.com/LambdaLabsML/vllm-benchmark,
# benchmark_v0.md, 2024; vLLM 0.5.4, benchmark_serving.py on ShareGPT, 320 prompts in
# flight): Mistral-7B-Instruct-v0.3 output token throughput 3281.19 tok/s on 1x H100 80GB
# SXM, 1591.4 tok/s on 1x A100 80GB SXM. The same report says vLLM 0.6.0 "more than
# doubles output throughput" for Llama 3.1 8B; the model keeps the 0.5.4 figure.
VLLM_SOURCE = ("Lambda Labs, 'LLMs inference benchmarks, using vLLM, on Lambda Cloud', "
               "github.com/LambdaLabsML/vllm-benchmark benchmark_v0.md (2024): "
               "Mistral-7B-Instruct-v0.3, vLLM 0.5.4, ShareGPT, 320 prompts: "
               "3281.19 output tok/s on 1x H100-80GB-SXM, 1591.4 on 1x A100-80GB-SXM")
VLLM_OUTPUT_TPS = {"H100": 3281.19, "A100": 1591.4}
# Prompt tokens (prefill) are compute-bound: 2 FLOPs per parameter per token (7.25e9
# parameters, Mistral 7B) at an assumed 40 % of the GPU's dense BF16 peak (NVIDIA
# datasheets: H100 SXM 989 TFLOPS, A100 312 TFLOPS). An assumption, not a measurement.
PEAK_BF16_FLOPS = {"H100": 989e12, "A100": 312e12}
PREFILL_MFU, PARAMS_7B = 0.40, 7.25e9


def embedding_rate(texts: list[str]) -> dict:
    """Text units embedded per CPU second by kgloom's embedder (all-MiniLM-L6-v2 on one
    CPU thread, windows of 256 tokens), after the model is loaded: three timed passes,
    the fastest. CPU time, since the wall time of a shared machine says little."""
    from kgloom.embedding.sentence_embedder import Embedder

    emb = Embedder()
    emb.embed(texts[:2], threads=1)  # warm up
    # one torch thread: on a shared 2-core machine two threads wait on each other
    runs = [_timed(emb.embed, texts, 1) for _ in range(3)]
    wall, cpu = min(r[0] for r in runs), min(r[1] for r in runs)
    return {"texts": len(texts), "wall_seconds": round(wall, 2), "cpu_seconds": round(cpu, 2),
            "units_per_cpu_second": round(len(texts) / cpu, 2)}


def _timed(fn, *a) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of ``fn(*a)``."""
    t0, c0 = time.perf_counter(), time.process_time()
    fn(*a)
    return time.perf_counter() - t0, time.process_time() - c0


def corpus_bytes_per_unit(out: Path) -> dict:
    """In-memory bytes per text unit of the tables the corpus combine holds (polars
    ``estimated_size`` of the combined stage tables of an index)."""
    import polars as pl

    sd = out / "stages"
    units = pl.read_parquet(sd / "text_units.parquet").height
    sizes = {name: pl.read_parquet(sd / f"{name}.parquet").estimated_size()
             for name in ("text_units", "entity_mentions", "relationship_mentions",
                          "claim_mentions", "documents")}
    return {"units": units, "bytes_per_unit": {k: round(v / units) for k, v in sizes.items()},
            "total_bytes_per_unit": round(sum(sizes.values()) / units)}


def part_model(args) -> dict:
    servers = json.loads((RESULTS / "scale_servers.json").read_text())
    a = next(r for r in servers["variants"] if r["variant"].startswith("a"))
    units = a["text_units"]
    per_stage = a["llm_per_stage"]
    tokens = {s: {"calls_per_unit": round(v["rows"] / units, 3),
                  "prompt_tokens_per_unit": round(v["prompt_tokens"] / units, 1),
                  "completion_tokens_per_unit": round(v["completion_tokens"] / units, 1)}
              for s, v in per_stage.items()}
    prompt_u = sum(v["prompt_tokens"] for v in per_stage.values()) / units
    completion_u = sum(v["completion_tokens"] for v in per_stage.values()) / units
    docs, doc_tokens, chunk, overlap = 10**6, 1500, 600, 100
    units_per_doc = 1 + -(-(doc_tokens - chunk) // (chunk - overlap))  # 600/100 windows
    total_units = docs * units_per_doc
    total_prompt, total_completion = prompt_u * total_units, completion_u * total_units
    stage_s = a["stage_seconds"]
    cpu_per_unit = {k: (stage_s.get(k) or 0) / units for k in
                    ("documents", "text_units", "graph_files")}
    work = Path(args.work or "")
    import polars as pl

    texts = pl.read_parquet(work / "a" / "stages" / "text_units.parquet")["text"].to_list()
    embed = embedding_rate(texts)
    combine = corpus_bytes_per_unit(work / "a")
    combine_gib = combine["total_bytes_per_unit"] * total_units / 2**30
    leiden = json.loads((RESULTS / "scale_leiden.json").read_text())
    fit = leiden["linear_fit"]
    # edges: the slice's relationships per unit, an upper bound (names repeat across units)
    edges = a["rows"]["relationships"] / units * total_units
    done = [r for r in leiden["sizes"]
            if "hierarchical_cpu_seconds" in r and "error" not in r]
    # the whole hierarchical call; without two finished sizes: CPU per edge of the largest
    # finished one, scaled linearly
    per_edge = fit["cpu_seconds_per_edge"] if fit else (
        done[-1]["hierarchical_cpu_seconds"] / done[-1]["edges"] if done else None)
    leiden_h = per_edge * edges / 3600 if per_edge else None
    leiden_gib = (fit["mib_base"] + fit["mib_per_edge"] * edges) / 1024 if fit else None
    gpus = {}
    for gpu in ("H100", "A100"):
        prefill_tps = PREFILL_MFU * PEAK_BF16_FLOPS[gpu] / (2 * PARAMS_7B)
        decode_h = total_completion / VLLM_OUTPUT_TPS[gpu] / 3600
        prefill_h = total_prompt / prefill_tps / 3600
        rows = []
        for k in (1, 8, 64):
            llm_h = (decode_h + prefill_h) / k
            other = {"embedding (vector_index, one CPU process)":
                     total_units / embed["units_per_cpu_second"] / 3600,
                     "writing (graph_files, one process)":
                     cpu_per_unit["graph_files"] * total_units / 3600,
                     "leiden (hierarchical, one process)": leiden_h or 0.0}
            stages = {"llm": llm_h, **other}
            rows.append({"gpu_servers": k, "hours": {n: round(h, 1) for n, h in stages.items()},
                         "dominant": max(stages, key=stages.get)})
        gpus[gpu] = {"output_tokens_per_s": VLLM_OUTPUT_TPS[gpu],
                     "prefill_tokens_per_s_assumed": round(prefill_tps),
                     "gpu_hours_decode": round(decode_h, 1),
                     "gpu_hours_prefill": round(prefill_h, 1), "per_k": rows}
    res = {"documents": docs, "tokens_per_document": doc_tokens,
           "text_units_per_document": units_per_doc, "text_units": total_units,
           "measured_from": f"{a['variant']}: {units} text units of the book, SmolLM2-135M "
                            "tokens (a 7B model's tokenizer counts similar numbers for "
                            "English); calls per unit of summaries and reports scale with "
                            "entities and communities, taken per unit as measured",
           "tokens_per_unit_by_stage": tokens, "prompt_tokens_per_unit": round(prompt_u, 1),
           "completion_tokens_per_unit": round(completion_u, 1),
           "total_prompt_tokens": round(total_prompt),
           "total_completion_tokens": round(total_completion),
           "cpu_seconds_per_unit_measured_here": {k: round(v, 3) for k, v in
                                                  cpu_per_unit.items()},
           "embedding_measured_here": embed,
           "corpus_combine": {**combine, "gib_for_all_units": round(combine_gib, 1)},
           "vllm_source": VLLM_SOURCE,
           "prefill_assumption": f"{PREFILL_MFU:.0%} of dense BF16 peak, "
                                 f"2 x {PARAMS_7B:.3g} FLOPs per prompt token",
           "edges_upper_bound": round(edges),
           "leiden_cpu_hours": round(leiden_h, 2) if leiden_h else None,
           "leiden_cpu_hours_is": "hierarchical_leiden, linear fit" if fit else
           "hierarchical_leiden, linear from the largest finished size",
           "leiden_peak_rss_gib_linear_fit": round(leiden_gib, 1) if leiden_gib else None,
           "gpus": gpus}
    save_result(RESULTS / "scale_model.json", res, args)
    print(json.dumps(res, indent=2))
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=["servers", "leiden", "model"], required=True)
    ap.add_argument("--variants", default="a,b,c", help="servers: which of a,b,c")
    ap.add_argument("--work", default="", help="servers: working folder (default: a temp "
                    "one); model: the servers part's folder (its a/ index is read)")
    ap.add_argument("--edges", default="1e5,1e6,1e7", help="leiden: graph sizes (edges)")
    ap.add_argument("--methods", default="kgloom", help="leiden: kgloom, leidenalg-converged, "
                    "igraph-converged (comma-separated; the last two are level-0 baselines)")
    ap.add_argument("--leiden-timeout", type=int, default=1200, help="leiden: wall seconds "
                    "per method and size")
    args = ap.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    {"servers": part_servers, "leiden": part_leiden, "model": part_model}[args.part](args)


if __name__ == "__main__":
    main()
