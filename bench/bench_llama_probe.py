"""The llama.cpp probe: settings of the LLM resource chosen by measurement. A grid of
``n_batch``, ``n_ubatch``, ``flash_attn`` and ``n_threads`` (and, with ``--configs``,
grammar-first sampling against llama-cpp-python's sampler chain), each running the same
real extraction calls through the pipeline's own backend
(:class:`kgloom.llm.LlamaCppBackend`), in rounds; prints and saves medians as JSON.
The one probe of llama.cpp: ``bench_speed.py probe`` runs it on its own configurations.

Usage:
    python bench/bench_llama_probe.py [--rounds 3] [--budget-s 1200] [--units 5,40,70]
                                      [--configs "1,512,512,0;1,512,512,0,0"]
                                      [--save bench/results/llama_probe.json]

The calls: the extraction prompts and bounded reply schemas of
:mod:`kgloom.extraction.extract` (candidate names, ``extraction_schema``,
``extraction_template``, ``max_tokens`` = :func:`kgloom.llm.reply_token_bound`, the
settings' seed) on text units ``--units`` of the bundled book, chunked by the pipeline's
own ingest code; greedy grammar-constrained decoding as in the pipeline; no LLM cache.
``reuse_prefix`` is off, so every call evaluates its whole prompt (the pipeline reuses
the KV cache of a shared prefix; prompt evaluation is where the batch sizes act).

Each configuration loads its own model once. A round runs every configuration once
(all calls), in an order shuffled with a fixed seed per round, so load changes on the
shared machine spread over the configurations instead of falling on some. Figures per
configuration: median seconds per call, prompt-eval and decode tokens/s (llama.cpp's own
perf counters: ``n_p_eval`` / ``t_p_eval``, completion tokens / ``t_eval``), the ratio of
its median seconds per call to the current defaults' (``n_batch`` 512, ``n_ubatch`` 512,
no flash attention, grammar-first sampling, at the same thread count) in each round, and
whether its replies are byte-identical to the defaults' (greedy decoding: they should
be). The 1-minute load average is recorded before and after each round. Rounds stop
early when the next one would pass ``--budget-s``.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.stamp import load_average, save_result  # noqa: E402

BOOK_DIR = ROOT / "data" / "input"
DEFAULT = {"n_batch": 512, "n_ubatch": 512, "flash_attn": False, "grammar_first": True}
UNITS = "5,40,70"  # text unit indexes of the book


def load() -> float:
    """The machine's 1-minute load average."""
    return load_average()[0]


def grid(batches: list[int], ubatches: list[int], threads: list[int]) -> list[dict]:
    """Every configuration of the grid with ``n_ubatch`` <= ``n_batch`` (llama.cpp caps
    the physical batch at the logical one), each with and without flash attention."""
    return [{"n_threads": t, "n_batch": b, "n_ubatch": u, "flash_attn": fa,
             "grammar_first": True}
            for t, b, u, fa in itertools.product(threads, batches, ubatches, (False, True))
            if u <= b]


def parse_configs(spec: str) -> list[dict]:
    """Configurations from ``threads,n_batch,n_ubatch,flash_attn(0/1)[,grammar_first(0/1,
    default 1)]`` items separated by ``;`` (a subset of the grid when time is short;
    grammar_first 0: llama-cpp-python's own sampler chain).

    Raises:
        SystemExit: on an item that is not four or five integers.
    """
    out = []
    for item in filter(None, (x.strip() for x in spec.split(";"))):
        try:
            t, b, u, fa, *gf = (int(x) for x in item.split(","))
            if len(gf) > 1:
                raise ValueError(item)
        except ValueError:
            raise SystemExit(
                f"--configs: {item!r} is not threads,n_batch,n_ubatch,fa[,gf]") from None
        out.append({"n_threads": t, "n_batch": b, "n_ubatch": u, "flash_attn": bool(fa),
                    "grammar_first": bool(gf[0]) if gf else True})
    return out


def name(cfg: dict) -> str:
    """A configuration's short label, e.g. ``t1 b512 u128 fa`` (``chain``: the sampler
    chain instead of grammar-first sampling)."""
    return (f"t{cfg['n_threads']} b{cfg['n_batch']} u{cfg['n_ubatch']}"
            + (" fa" if cfg["flash_attn"] else "")
            + ("" if cfg.get("grammar_first", True) else " chain"))


def extraction_calls(units: list[int]) -> list[tuple[str, list[dict], dict, int, int]]:
    """(unit id, messages, schema, max_tokens, seed) of the extraction call of each text
    unit index in ``units``, built by kgloom's ingest and extraction code."""
    from kgloom.embedding.tokenizer import default_tokenizer
    from kgloom.extraction import extract
    from kgloom.ingest.chunking import split_text_units
    from kgloom.ingest.documents import read_documents
    from kgloom.llm import reply_token_bound
    from kgloom.names.candidates import candidate_names, word_counts
    from kgloom.settings.indexing import IndexSettings

    docs, _ = read_documents(BOOK_DIR)
    tu = split_text_units(docs, default_tokenizer())
    vocab = word_counts(tu["text"].to_list())
    s = IndexSettings()
    tmpl = extract.extraction_template(s.llm_descriptions)
    calls = []
    for i in units:
        text = tu["text"][i]
        names = candidate_names(text, vocabulary=vocab,
                                        candidate_source=s.candidate_source)
        schema = extract.extraction_schema(names, s)
        msgs = tmpl.messages(types=", ".join(s.entity_types), names=", ".join(names),
                             text=text)
        calls.append((tu["id"][i], msgs, schema, reply_token_bound(schema), s.seed))
    return calls


def configurations(args) -> list[dict]:
    """The configurations to run: ``args.configs`` (:func:`parse_configs`) when given,
    else the grid of ``args.batches`` x ``args.ubatches`` x ``args.threads``.

    Raises:
        SystemExit: when they leave out the defaults (:data:`DEFAULT`).
    """
    ints = lambda spec: [int(x) for x in spec.split(",")]  # noqa: E731
    cfgs = (parse_configs(args.configs) if args.configs else
            grid(ints(args.batches), ints(args.ubatches), ints(args.threads)))
    if not any(all(c[k] == v for k, v in DEFAULT.items()) for c in cfgs):
        raise SystemExit("the configurations must include the defaults "
                         "(n_batch 512, n_ubatch 512, no flash attention, grammar-first)")
    return cfgs


def run(args) -> dict:
    """Run the grid in rounds; return the figures (see the module doc)."""
    import llama_cpp

    from kgloom.llm import LlamaCppBackend, default_gguf_path

    path = args.model_path or str(default_gguf_path())
    cfgs = configurations(args)
    calls = extraction_calls([int(x) for x in args.units.split(",")])
    res: dict = {"cores": os.cpu_count(), "llama_cpp_python": llama_cpp.__version__,
                 "model": Path(path).name, "units": [c[0] for c in calls],
                 "configs": [name(c) for c in cfgs], "load_before": load(),
                 "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                 "reuse_prefix": False, "rounds": []}
    print(f"{len(cfgs)} configurations x {len(calls)} calls; load {res['load_before']}",
          flush=True)
    backends = {name(c): LlamaCppBackend(path, reuse_prefix=False, **c) for c in cfgs}
    rows: list[dict] = []
    replies: dict[str, dict[str, set[str]]] = {k: {} for k in backends}
    t_start = time.perf_counter()
    for r in range(args.rounds):
        elapsed = time.perf_counter() - t_start
        if r and elapsed / r * (r + 1) > args.budget_s:
            res["stopped"] = f"after {r} rounds: round {r + 1} would pass {args.budget_s} s"
            break
        order = list(backends)
        random.Random(1000 + r).shuffle(order)
        rnd = {"round": r + 1, "load_before": load()}
        for k in order:
            for unit, msgs, schema, max_tokens, seed in calls:
                c = backends[k].complete(msgs, schema, max_tokens, seed)
                replies[k].setdefault(unit, set()).add(c.text)
                rows.append({"round": r + 1, "config": k, "unit": unit,
                             "seconds": c.seconds, "prompt_eval_tokens": c.prompt_eval_tokens,
                             "prompt_seconds": c.prompt_seconds,
                             "completion_tokens": c.completion_tokens,
                             "decode_seconds": c.generation_seconds, "load": load(),
                             "reply_sha256": hashlib.sha256(c.text.encode()).hexdigest()})
                print(f"round {r + 1} {k} {unit}: {c.seconds:.1f} s", flush=True)
        rnd["load_after"] = load()
        rnd["seconds"] = round(time.perf_counter() - t_start - elapsed, 1)
        res["rounds"].append(rnd)
        print(json.dumps(rnd), flush=True)
        # the figures so far after every round, so a stopped run leaves them
        save_result(args.save, {**res, "calls": rows, "complete": False,
                                 "figures": figures(rows, replies, cfgs)}, args)
    res["load_after"] = load()
    res["calls"] = rows
    res["figures"] = figures(rows, replies, cfgs)
    # greedy decoding: every configuration, thread counts included, should reply the same
    res["distinct_replies_per_unit"] = {
        u: len(set().union(*(r[u] for r in replies.values()))) for u in res["units"]}
    return res


def figures(rows: list[dict], replies: dict, cfgs: list[dict]) -> dict:
    """Per configuration: medians over rounds of its mean seconds per call, prompt-eval
    and decode tokens/s (sums over the round's calls), per-round ratio of seconds per call
    to the defaults at the same thread count, and reply identity with the defaults."""
    def per_round(k: str) -> dict[int, dict]:
        out: dict[int, dict] = {}
        for x in (x for x in rows if x["config"] == k):
            d = out.setdefault(x["round"], {"n": 0, "s": 0.0, "pt": 0, "ps": 0.0, "ct": 0,
                                            "cs": 0.0})
            d["n"] += 1
            d["s"] += x["seconds"]
            d["pt"] += x["prompt_eval_tokens"]
            d["ps"] += x["prompt_seconds"]
            d["ct"] += x["completion_tokens"]
            d["cs"] += x["decode_seconds"]
        return out

    by = {name(c): per_round(name(c)) for c in cfgs}
    out = {}
    for c in cfgs:
        k = name(c)
        base = name({**c, **DEFAULT})
        rounds = sorted(by[k])
        ratio = [(by[k][r]["s"] / by[k][r]["n"]) / (by[base][r]["s"] / by[base][r]["n"])
                 for r in rounds if r in by[base]]
        same = all(len(v) == 1 for v in replies[k].values()) and all(
            replies[k][u] == replies[base][u] for u in replies[base])
        out[k] = {
            **c,
            "seconds_per_call": round(statistics.median(
                by[k][r]["s"] / by[k][r]["n"] for r in rounds), 3),
            "prompt_tok_per_s": round(statistics.median(
                by[k][r]["pt"] / by[k][r]["ps"] for r in rounds), 1),
            "decode_tok_per_s": round(statistics.median(
                by[k][r]["ct"] / by[k][r]["cs"] for r in rounds), 1),
            "ratio_to_default_per_round": [round(x, 3) for x in ratio],
            "ratio_to_default": round(statistics.median(ratio), 3),
            "same_replies_as_default": same,
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budget-s", type=float, default=1200.0)
    ap.add_argument("--units", default=UNITS, help="text unit indexes of the book")
    ap.add_argument("--batches", default="128,256,512")
    ap.add_argument("--ubatches", default="128,512")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--configs", default="",
                    help="instead of the grid: threads,n_batch,n_ubatch,fa[,gf];... (fa, gf "
                         "0/1; gf 0: the sampler chain instead of grammar-first)")
    ap.add_argument("--model-path", default="")
    ap.add_argument("--save", default=str(ROOT / "bench" / "results" / "llama_probe.json"))
    args = ap.parse_args()
    res = run(args)
    print(f"{'config':<18} {'s/call':>7} {'ratio':>6} {'prompt t/s':>10} "
          f"{'decode t/s':>10} same")
    for k, f in sorted(res["figures"].items(), key=lambda kv: kv[1]["seconds_per_call"]):
        print(f"{k:<18} {f['seconds_per_call']:>7} {f['ratio_to_default']:>6} "
              f"{f['prompt_tok_per_s']:>10} {f['decode_tok_per_s']:>10} "
              f"{f['same_replies_as_default']}")
    save_result(args.save, {**res, "complete": True}, args)


if __name__ == "__main__":
    main()
