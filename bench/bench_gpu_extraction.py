"""Extraction on a GPU: the pool bench's extraction calls replayed through kgloom's own
llama.cpp backend (choice decoder included) with every layer offloaded
(``n_gpu_layers=-1``, as ``KGLOOM_N_GPU_LAYERS=-1`` sets it), against the same calls on
the same machine's CPU, and the prompt-evaluation floor on the GPU.

Usage (two steps, because a GPU machine may lack kgloom's other dependencies):

    # here: write the calls the index makes for the pool bench's N-passage subset
    python bench/bench_gpu_extraction.py record --passages 600 --calls /tmp/calls.json.gz
    # on the GPU machine (llama-cpp-python built with CUDA; needs only kgloom/llm's
    # dependencies: jsonschema, tenacity): replay them
    python bench/bench_gpu_extraction.py replay --calls /tmp/calls.json.gz \\
        --model SmolLM2-135M-Instruct.Q4_1.gguf --out DIR

``record`` runs :func:`kgloom.extraction.extract.extract_unit` on the subset
(:func:`bench.eval_pool.select_passages`, the passages' text as the index reads it) with
the fake backend and keeps each ``complete(messages, schema, max_tokens, seed)`` it makes:
an extraction prompt does not depend on any reply, so these are calls of the kind a real
run sends. They are not all the same calls: the index also passes the corpus's vocabulary
(which changes some candidate lists; 358 of the 600 prompts equal the index's word for
word), and its 604 calls for 600 passages include 4 retries that are not in the file.

``replay`` converts the GGUF to F16 (:func:`kgloom.llm.model_files.converted_gguf`) and
times, each in its own :class:`kgloom.llm.llamacpp.LlamaCppBackend`: every call on the GPU
(F16), the first 100 on the GPU as the Q4_1 file, the first 40 on 2 CPU threads (F16,
the machine's own CPU: a same-machine ratio), then ``--workers`` processes sharing the
calls, each with its own backend on the GPU (aggregate throughput: what a model server
with concurrency would reach at best), and the floor (:func:`bench.floor.prompt_floor`,
512-token chunks). Each part saves ``gpu_extraction.json`` and its replies under
``--out``; a ``--budget-s`` stops the long parts early (the JSON says how many calls
ran).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
import time
from collections import Counter
from multiprocessing import get_context
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def record(passages: int, path: Path) -> dict:
    """Write the extraction calls of the pool bench's ``passages`` subset to ``path``
    (gzipped JSON ``{"info", "texts", "calls": [{messages, schema, max_tokens,
    seed}]}``); returns its ``info`` and call count."""
    import tempfile

    from bench.eval_pool import POOL, QUESTIONS, passage_texts, select_passages
    from bench.eval_qa import load_questions
    from kgloom.extraction import extract
    from kgloom.llm.client import open_llm
    from kgloom.names.normalize import record_title
    from kgloom.settings.indexing import IndexSettings

    lines = [line for line in POOL.read_text(encoding="utf-8").splitlines() if line.strip()]
    chosen, info = select_passages(lines, load_questions(QUESTIONS), passages)
    texts = passage_texts(chosen)
    titles = [record_title(json.loads(line).get("title")) for line in chosen]
    calls: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        llm = open_llm(Path(tmp) / "cache.sqlite", fake=True)
        backend = llm.backend
        complete = backend.complete

        def logged(messages, schema, max_tokens, seed):
            calls.append({"messages": messages, "schema": schema, "max_tokens": max_tokens,
                          "seed": seed})
            return complete(messages, schema, max_tokens, seed)

        backend.complete = logged  # type: ignore[method-assign]
        settings = IndexSettings()
        for i, (text, title) in enumerate(zip(texts, titles)):
            extract.extract_unit(llm, f"u{i}", text, settings, Counter(), None, title)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump({"info": info, "texts": texts, "calls": calls}, f)
    return {"info": info, "calls": len(calls)}


def replay_calls(model: Path, calls: list[dict], n_gpu_layers: int, threads: int | None,
                 stop_at: float) -> tuple[dict, list[str]]:
    """Time ``calls`` on one new backend (the first call, repeated before the clock
    starts, loads and warms it) until ``stop_at`` (``time.time()``); returns the figures
    and the reply texts."""
    from kgloom.llm.llamacpp import LlamaCppBackend

    start = time.perf_counter()
    backend = LlamaCppBackend(model, n_gpu_layers=n_gpu_layers, n_threads=threads,
                              model_id="replay")
    backend.complete(**calls[0])
    load_s = time.perf_counter() - start
    rows, replies = [], []
    start = time.perf_counter()
    for call in calls:
        if time.time() > stop_at:
            break
        reply = backend.complete(**call)
        rows.append(reply)
        replies.append(reply.text)
    wall = time.perf_counter() - start
    figures = {"weights": model.name, "n_gpu_layers": n_gpu_layers, "threads": threads,
               "load_and_first_call_s": round(load_s, 2), "calls": len(rows),
               "wall_s": round(wall, 2), "s_per_call": round(wall / max(len(rows), 1), 4),
               "prompt_eval_tokens": sum(r.prompt_eval_tokens for r in rows),
               "completion_tokens": sum(r.completion_tokens for r in rows),
               "prompt_s": round(sum(r.prompt_seconds for r in rows), 2),
               "generation_s": round(sum(r.generation_seconds for r in rows), 2),
               "p50_call_s": round(statistics.median(r.seconds for r in rows), 4)
               if rows else None}
    return figures, replies


def _worker(args: tuple[str, list[dict]]) -> float:
    """One process of the parallel part: its own GPU backend, its share of the calls;
    returns their wall seconds (after a warm-up call)."""
    model, calls = args
    figures, _ = replay_calls(Path(model), calls, -1, 2, float("inf"))
    return figures["wall_s"]


def replay(args: argparse.Namespace) -> dict:
    """The ``replay`` step (module doc); returns the result and saves it as it goes."""
    import llama_cpp

    from kgloom.core.ids import file_sha256
    from kgloom.llm.model_files import converted_gguf

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with gzip.open(args.calls, "rt", encoding="utf-8") as f:
        data = json.load(f)
    calls, texts = data["calls"], data["texts"]
    if not calls:
        raise SystemExit(f"{args.calls} holds no extraction calls (record more passages)")
    deadline = time.time() + args.budget_s
    result: dict = {"info": data["info"], "calls_recorded": len(calls),
                    "system_info": llama_cpp.llama_print_system_info().decode(errors="replace")}

    def save() -> None:
        (out / "gpu_extraction.json").write_text(json.dumps(result, indent=1))

    model = Path(args.model)
    start = time.perf_counter()
    f16 = converted_gguf(model, file_sha256(str(model)), "f16", out / "converted")
    result["convert_s"] = round(time.perf_counter() - start, 2)
    parts = (("gpu_f16", f16, -1, None, len(calls), 0.55), ("gpu_q4_1", model, -1, None, 100, 0.65),
             ("cpu2_f16", f16, 0, 2, 40, 0.85))
    for name, path, layers, threads, limit, share in parts:
        stop_at = deadline - (1 - share) * args.budget_s
        result[name], replies = replay_calls(Path(path), calls[:limit], layers, threads, stop_at)
        (out / f"replies_{name}.json").write_text(json.dumps(replies))
        save()
        print(name, result[name], flush=True)
    for workers in args.workers:
        start = time.perf_counter()
        # spawn: a process forked after this one has used CUDA hangs at its first call
        with get_context("spawn").Pool(workers) as pool:
            seconds = pool.map(_worker, [(str(f16), calls[i::workers]) for i in range(workers)])
        result[f"gpu_f16_workers_{workers}"] = {
            "calls": len(calls), "wall_s_incl_load": round(time.perf_counter() - start, 2),
            "worker_s": seconds, "s_per_call": round(max(seconds) / len(calls), 4)}
        save()
        print(workers, result[f"gpu_f16_workers_{workers}"], flush=True)
    from bench.floor import prompt_floor

    llm = llama_cpp.Llama(model_path=str(f16), n_ctx=4096, n_gpu_layers=-1, n_batch=512,
                          n_ubatch=512, verbose=False)
    result["floor_gpu_f16"] = prompt_floor(texts, llm, 4096, chunk_tokens=512, budget_s=20)
    save()
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="step", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--passages", type=int, default=600, help="at least 1")
    rec.add_argument("--calls", type=Path, required=True)
    rep = sub.add_parser("replay")
    rep.add_argument("--calls", type=Path, required=True)
    rep.add_argument("--model", type=Path, required=True, help="the bundled Q4_1 GGUF")
    rep.add_argument("--out", type=Path, required=True)
    rep.add_argument("--budget-s", type=float, default=230.0)
    rep.add_argument("--workers", type=lambda s: [int(x) for x in s.split(",") if x],
                     default=[4, 8])
    args = ap.parse_args()
    if args.step == "record" and args.passages < 1:
        ap.error("--passages must be at least 1")
    print(record(args.passages, args.calls) if args.step == "record" else replay(args))


if __name__ == "__main__":
    main()
