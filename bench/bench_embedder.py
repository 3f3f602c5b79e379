"""The embedder's two backends on the same texts: sentence-transformers (torch) against
the ONNX Runtime export of the same model (kgloom/embedding/onnx_runtime.py).

Texts: the 354 passages of the 2Wiki development slice (bench/data/2wiki-dev/corpus.jsonl;
median ~60 tokens, like text units of short documents) and, as short texts like entity
titles with a description, each passage's title plus its first sentence. Each backend embeds
each set ``--rounds`` times, alternating (torch, onnx, torch, onnx ...), through
``Embedder.embed`` (windows, pooling and all), on ``--threads`` threads (default 0: chosen
by load, as in an index run).
Figures: seconds per round, the median ratio torch / onnx per set, and the smallest cosine
between the two backends' vectors of one text (1.0 = the same vector).

With ``--memory N``: instead, resident memory of each way to load the embedder, each in
its own fresh process, embedding the first N passages of the 2Wiki pool
(bench/data/2wiki-pool/corpus.jsonl) once: ``torch`` (sentence-transformers),
``onnx`` (sentence-transformers loaded, forward passes on ONNX Runtime: the index's
embedder until 2026-12-03) and ``onnx_no_torch``
(:class:`kgloom.embedding.onnx_runtime.OnnxEmbedder`, what
:func:`kgloom.embedding.index_embedder` loads). Figures: RSS after loading and after the
pass, the process's peak RSS (``ru_maxrss``), seconds, whether torch was imported, and
the smallest cosine of each way's vectors to ``torch``'s.

Usage: python bench/bench_embedder.py [--rounds 3] [--threads 2] [--memory N]
           [--save bench/results/embedder_backends.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.stamp import load_average, save_result, when  # noqa: E402

CORPUS = ROOT / "bench" / "data" / "2wiki-dev" / "corpus.jsonl"


def text_sets(corpus: Path) -> dict[str, list[str]]:
    """{"passages": the passages' texts, "short": title + first sentence of each}."""
    rows = [json.loads(line) for line in corpus.read_text(encoding="utf-8").splitlines()
            if line.strip()]
    passages = [r["text"] for r in rows]
    short = [f"{r['title']}: {r['text'].split('. ')[0]}" for r in rows]
    return {"passages": passages, "short": short}


POOL = ROOT / "bench" / "data" / "2wiki-pool" / "corpus.jsonl"
WAYS = ("torch", "onnx", "onnx_no_torch")


def memory_child(way: str, n: int, vectors: Path) -> dict:
    """Load the embedder ``way`` (:data:`WAYS`) in this process, embed the pool's first
    ``n`` passages, save their vectors to ``vectors`` (.npy); return the figures (MiB,
    seconds)."""
    import resource

    import numpy as np
    import psutil

    proc = psutil.Process()
    t0 = time.perf_counter()
    if way == "onnx_no_torch":
        from kgloom.embedding import default_embedder_path
        from kgloom.embedding.onnx_runtime import OnnxEmbedder, ensure_export

        reason = ensure_export(default_embedder_path())
        if reason:
            raise SystemExit(f"no ONNX export: {reason}")
        emb = OnnxEmbedder()
    else:
        from kgloom.embedding.sentence_embedder import Embedder

        emb = Embedder(backend=way)
    load_s, rss_load = time.perf_counter() - t0, proc.memory_info().rss
    texts = [json.loads(line)["text"] for line in POOL.read_text(encoding="utf-8")
             .splitlines()[:n]]
    t0 = time.perf_counter()
    vecs = emb.embed(texts)
    np.save(vectors, vecs)
    return {"way": way, "texts": len(texts), "load_seconds": round(load_s, 1),
            "pass_seconds": round(time.perf_counter() - t0, 1),
            "rss_after_load_mb": round(rss_load / 2**20),
            "rss_after_pass_mb": round(proc.memory_info().rss / 2**20),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "torch_imported": "torch" in sys.modules}


def memory(n: int) -> dict:
    """:func:`memory_child` of every way in :data:`WAYS`, each in a fresh process, and
    each way's smallest cosine to the torch vectors."""
    import subprocess
    import tempfile

    import numpy as np

    out: dict = {"texts": n, "ways": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for way in WAYS:
            vec = Path(tmp) / f"{way}.npy"
            done = subprocess.run([sys.executable, __file__, "--memory-child", way,
                                   "--memory", str(n), "--vectors", str(vec)],
                                  capture_output=True, text=True, check=True)
            out["ways"][way] = json.loads(done.stdout.strip().splitlines()[-1])
            print(out["ways"][way], flush=True)
        ref = np.load(Path(tmp) / "torch.npy")
        for way in WAYS:
            cos = (np.load(Path(tmp) / f"{way}.npy") * ref).sum(axis=1)
            out["ways"][way]["min_cosine_to_torch"] = round(float(cos.min()), 7)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="0: by load")
    ap.add_argument("--save", type=Path, default=ROOT / "bench" / "results" /
                    "embedder_backends.json")
    ap.add_argument("--memory", type=int, default=0, metavar="N",
                    help="resident memory of each way to load the embedder on N pool passages")
    ap.add_argument("--memory-child", choices=WAYS, help=argparse.SUPPRESS)
    ap.add_argument("--vectors", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_child:
        print(json.dumps(memory_child(args.memory_child, args.memory, args.vectors)))
        return
    if args.memory:
        save_result(args.save, {"benchmark": "embedder memory: each way to load it, in its "
                                "own process, on the 2Wiki pool's passages", **when(),
                                "cores": os.cpu_count(), "load_before": load_average(),
                                **memory(args.memory), "load_after": load_average()}, args)
        return
    from kgloom.embedding.sentence_embedder import Embedder

    loads = {}
    for backend in ("torch", "onnx"):
        t0 = time.perf_counter()
        loads[backend] = Embedder(backend=backend)
        loads[backend].load_total_s = round(time.perf_counter() - t0, 2)
    result = {"benchmark": "embedder backends: sentence-transformers (torch) vs ONNX Runtime, "
                           "same all-MiniLM-L6-v2 weights", **when(), "cores": os.cpu_count(),
              "onnx_backend": loads["onnx"].backend, "threads": args.threads or "by load",
              "load_seconds": {k: v.load_total_s for k, v in loads.items()}, "sets": {}}
    for name, texts in text_sets(CORPUS).items():
        secs: dict[str, list[float]] = {"torch": [], "onnx": []}
        vecs = {}
        for _ in range(args.rounds):
            for backend, emb in loads.items():
                t0 = time.perf_counter()
                vecs[backend] = emb.embed(texts, threads=args.threads or None)
                secs[backend].append(round(time.perf_counter() - t0, 3))
        cos = (vecs["torch"] * vecs["onnx"]).sum(axis=1)
        ratios = [t / o for t, o in zip(secs["torch"], secs["onnx"])]
        result["sets"][name] = {
            "texts": len(texts), "windows_tokens": sum(
                len(i) for i in loads["torch"].tokenizer(texts, verbose=False)["input_ids"]),
            "seconds": secs, "torch_over_onnx_median": round(statistics.median(ratios), 2),
            "torch_over_onnx_each_round": [round(r, 2) for r in ratios],
            "min_cosine": float(cos.min()), "load_after": load_average()}
        print(name, result["sets"][name], flush=True)
    save_result(args.save, result, args)


if __name__ == "__main__":
    main()
