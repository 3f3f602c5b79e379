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

Usage: python bench/bench_embedder.py [--rounds 3] [--threads 2]
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="0: by load")
    ap.add_argument("--save", type=Path, default=ROOT / "bench" / "results" /
                    "embedder_backends.json")
    args = ap.parse_args()
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
