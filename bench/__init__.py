"""kgloom's benches: one registry of what each bench is, runs and writes.

:data:`BENCHES` names every bench (``python -m bench <name>``, bench/__main__.py): its
script, one line on what it measures, whether it loads the real model (slow: tens of
minutes to hours on 2 cores), the result files it writes under bench/results/ (glob
patterns) and the figures bench/table.py puts in bench/README.md's results table
(label, dotted path into the result JSON; an integer picks a list item, -1 the last).

Shared code: bench/harness.py builds an index (``kgloom index`` in its own process) and
writes the standard corpora; bench/stamp.py stamps and saves every result.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclasses.dataclass(frozen=True)
class Bench:
    """One bench: ``script`` (a file under bench/, or a module run with ``-m``),
    ``about`` (one line), ``real_model`` (loads the GGUF or the real embedder at full
    scale), ``results`` (glob patterns under bench/results/) and ``headline`` ((label,
    dotted path) pairs for the results table)."""

    script: str
    about: str
    real_model: bool
    results: tuple[str, ...]
    headline: tuple[tuple[str, str], ...] = ()


BENCHES: dict[str, Bench] = {
    "speed": Bench(
        "bench_speed.py", "whole-index speed: a git ref's defaults against this tree's "
        "(book, slice, 2wiki; `probe` runs the llama.cpp probe)", True, ("speed-*.json",),
        (("s/unit", "figures.wall_seconds_per_text_unit"),
         ("model share", "figures.model_share_of_wall"),
         ("new/baseline wall", "ratios_new_over_baseline.wall_seconds"),
         ("gold entity recall", "figures.gold_entity_recall"))),
    "llama_probe": Bench(
        "bench_llama_probe.py", "the llama.cpp probe: threads, batch sizes, flash "
        "attention, grammar-first sampling on real extraction calls", True,
        ("llama_probe*.json",),
        (("default s/call", "figures.t1 b512 u512.seconds_per_call"),
         ("default prompt tok/s", "figures.t1 b512 u512.prompt_tok_per_s"),
         ("default decode tok/s", "figures.t1 b512 u512.decode_tok_per_s"))),
    "incremental": Bench(
        "bench_incremental.py", "incremental indexing: first run, no-change run, add one "
        "document, delete it (LLM calls per step)", True, ("incremental*.json",),
        (("add: LLM calls", "figures.add_llm_calls"),
         ("no change: LLM calls", "figures.no_change_llm_calls"),
         ("no change: wall share", "figures.no_change_wall_share_of_first_run"))),
    "pool_memory": Bench(
        "bench_pool_memory.py", "peak memory per step of a finished pool index rebuilt "
        "with extraction replayed from its LLM cache", True, ("pool_memory*.json",),
        (("peak RSS MB", "peak_rss_mb"), ("wall s", "wall_seconds"))),
    "big_document": Bench(
        "bench_big_document.py", "one huge document (fake LLM): peak memory and wall "
        "time against the book alone", False, ("big_document*.json",),
        (("MB of text", "mb"), ("peak RSS MB", "big_document.peak_rss_mb"),
         ("RSS ratio", "ratios_to_baseline.peak_rss"),
         ("s/Mchar ratio", "ratios_to_baseline.seconds_per_million_chars"))),
    "scale": Bench(
        "bench_scale.py", "scaling: model servers vs in-process, Leiden on 10^5-10^7 "
        "edges, a cost model of 10^6 documents", True, ("scale_*.json",),
        (("2 servers speedup", "speedup_vs_a.c_two_servers_concurrency_2"),
         ("Leiden CPU s/edge", "linear_fit.cpu_seconds_per_edge"),
         ("1 H100: dominant stage", "gpus.H100.per_k.0.dominant"))),
    "extraction": Bench(
        "bench_extraction.py", "extraction throughput: prefix reuse and bounded schemas "
        "against neither, and one gleaning round", True, ("extraction*.json",),
        (("speedup", "speedup"),)),
    "choice_decoding": Bench(
        "bench_choice_decoding.py", "choice decoding against the grammar path: paired "
        "extraction calls, seconds and agreement", True, ("choice_decoding*.json",),
        (("speedup", "speedup"), ("same names", "same_entity_names"))),
    "extraction_packs": Bench(
        "bench_extraction_packs.py", "short units packed into one extraction call against "
        "one call per unit: paired pool passages, seconds and agreement", True,
        ("pack_extraction*.json",),
        (("speedup", "speedup"), ("same names", "agreement.same_entity_names"))),
    "choice_lookahead": Bench(
        "bench_choice_lookahead.py", "speculative choice decoding (lookahead) against one "
        "evaluation per branching: paired extraction calls, seconds, evaluations, agreement",
        True, ("choice_lookahead*.json",),
        (("4:32 speedup", "variants.4:32.speedup"),
         ("4:32 same units", "variants.4:32.units_same_as_baseline"))),
    "prompt_layout": Bench(
        "bench_prompt_layout.py", "the extraction instruction after the text against before "
        "it (in the cached prompt prefix): paired extraction calls, prompt tokens, agreement",
        True, ("prompt_layout*.json",),
        (("text_first speedup", "variants.text_first.speedup"),
         ("same names", "agreement.same_entity_names"))),
    "relationship_pairs": Bench(
        "bench_relationship_pairs.py", "relationships as [source, target] pairs against "
        "{source, target} objects in the extraction reply: paired calls, reply tokens, "
        "agreement", True, ("relationship_pairs*.json",),
        (("pairs speedup", "variants.pairs.speedup"),
         ("same names", "agreement.same_entity_names"))),
    "cache_commit": Bench(
        "bench_cache_commit.py", "one LLM-cache write (a committed row a model call) with "
        "the caches' SQLite settings against WAL's default full sync, no model", False,
        ("cache_commit*.json",),
        (("ms a write", "modes.NORMAL.ms_per_put_mean"), ("full sync / ours", "full_over_normal"))),
    "outside_model": Bench(
        "bench_outside_model.py", "work outside the model repeated per unit or community "
        "(corpus names in a unit, rule reports' members) against the former way, no model",
        False, ("outside_model*.json",),
        (("known names speedup", "known_names.speedup"),
         ("rule reports speedup", "rule_reports.speedup"))),
    "gpu_extraction": Bench(
        "bench_gpu_extraction.py", "the pool bench's extraction calls recorded here and "
        "replayed on a GPU machine (every layer offloaded) against its CPU, with the GPU "
        "floor and parallel workers", True, ("gpu_extraction*.json",),
        (("GPU s/call", "gpu_f16.s_per_call"),
         ("GPU over its CPU (2 threads)", "ratios.gpu_f16_over_cpu2_f16_same_machine"))),
    "model_weights": Bench(
        "bench_model_weights.py", "the bundled GGUF's Q4_1 weights against the same weights "
        "converted (F16, BF16, Q8_0, Q4_0): paired extraction calls, seconds and agreement",
        True, ("model_weights*.json",),
        (("F16 speedup", "variants.f16.speedup"), ("BF16 speedup", "variants.bf16.speedup"),
         ("BF16 same names", "variants.bf16.agreement_with_baseline.same_entity_names"))),
    "quality": Bench(
        "bench_quality.py", "extraction quality with the real model: book gold set, "
        "2Wiki titles, multilingual suite", True, ("quality-*.json",),
        (("entity recall", "entity_recall"), ("pair recall", "pair_recall"),
         ("type accuracy", "type_accuracy"),
         ("2Wiki title found", "title_is_entity_title_or_alias"))),
    "lazy_reports": Bench(
        "bench_lazy_reports.py", "lazy community reports against eager ones (fake LLM): "
        "report calls at index time and per global search", False, ("lazy_reports_*.json",),
        (("eager report calls", "figures.eager_report_calls"),
         ("lazy report calls", "figures.lazy_report_calls_at_index"),
         ("most calls of one search", "figures.max_report_calls_of_one_first_search"))),
    "report_stage": Bench(
        "bench_report_stage.py", "the community reports stage on a built index (replies "
        "from its LLM cache) against a baseline commit, in one run", False,
        ("report_stage*.json",),
        (("baseline s", "baseline.seconds"), ("new s", "new.seconds"), ("ratio", "ratio"))),
    "candidates": Bench(
        "bench_candidates.py", "candidate names without a model: multilingual suite, "
        "2Wiki titles, the book's gold entities", False, ("candidates*.json",),
        (("2Wiki title among candidates", "two_wiki.title_among_candidates"),
         ("book gold recall", "book.gold_recall_candidates"))),
    "hostile_text": Bench(
        "bench_hostile_text.py", "hostile text stays text: a prompt-injection document "
        "and acronym recall, no model", False, ("hostile_text*.json",),
        (("injection precision", "injection.candidate_precision"),
         ("acronym recall", "acronyms.recall"))),
    "gold": Bench(
        "eval_gold.py", "score an index against the book's hand-made gold set", False,
        ("gold*.json",),
        (("entity recall", "entity_recall"), ("pair recall", "pair_recall"))),
    "precision": Bench(
        "eval_precision.py", "entity precision, recall, wrong merges, splits and types "
        "against the book's precision gold (every named thing), per index method", False,
        ("precision*.json",),
        (("standard precision", "indexes.standard.precision"),
         ("standard recall", "indexes.standard.recall"),
         ("fast precision", "indexes.fast.precision"),
         ("fast recall", "indexes.fast.recall"))),
    "labels": Bench(
        "eval_labels.py", "precision of an index's entities and relationships by hand "
        "labels on random samples (draw, then score; bench/data/labels)", False,
        ("labels*.json",),
        (("book relationship precision", "book-relationships.precision"),
         ("HotpotQA entity precision", "hotpot-entities.precision"))),
    "graph": Bench(
        "bench_graph.py", "graph quality of an index: duplicates, modularity, "
        "determinism, report coverage, DuckDB vs networkx", False, ("graph.json",),
        (("entities", "entities"), ("relationships", "relationships"),
         ("report coverage", "report_coverage"),
         ("same communities twice", "communities_byte_identical_two_runs"))),
    "qa": Bench(
        "eval_qa.py", "multi-hop QA retrieval on the 2Wiki dev slice: every mode beside "
        "vector search (recall@k)", True, ("eval_qa*.json",),
        (("best graph mode", "best_graph_mode.mode"), ("R@5", "best_graph_mode.recall@5"),
         ("R@5 gain over vector", "best_graph_mode.recall@5_gain_over_vector"))),
    "pool": Bench(
        "eval_pool.py", "the 6,119-passage 2Wiki pool (or nested subsets, --passages): "
        "index cost per stage and its growth, the floor, every mode, vector and BM25", True,
        ("eval_pool_*.json", "eval_slice_*.json"),
        (("best graph mode", "best_graph_mode.mode"), ("R@5", "best_graph_mode.recall@5"),
         ("R@5 gain over vector", "best_graph_mode.recall@5_gain_over_vector"),
         # results with sizes (--passages, --floor-only): the largest size's figures
         ("passages", "sizes.-1.passages"), ("s/passage", "sizes.-1.index.seconds_per_passage"),
         ("s/passage spread", "scaling.seconds_per_passage_spread"),
         ("floor s", "sizes.-1.floor.floor_seconds"),
         ("floor tokens/s", "sizes.-1.floor.tokens_per_s"),
         ("wall/floor", "sizes.-1.floor.ratio"),
         ("best graph mode", "sizes.-1.best_graph_mode.mode"),
         ("R@5", "sizes.-1.best_graph_mode.recall@5"),
         ("R@5 gain over vector", "sizes.-1.best_graph_mode.recall@5_gain_over_vector"))),
    "named": Bench(
        "eval_named.py", "does a question's named entity reach the top k of a retrieval "
        "mode", False, ("eval_named*.json",),
        (("entities found", "entities.share"),
         ("question entities found", "book_questions.share"),
         ("entities found (real model, after)", "summary.book_real_after.entities_found"))),
    "relevance": Bench(
        "eval_relevance.py", "the low-relevance threshold: each corpus's questions and "
        "the other corpora's over the book, 2Wiki and HotpotQA indexes (nearest-unit "
        "cosine)", False, ("relevance*.json",),
        (("threshold", "threshold"), ("split-half threshold", "split_half_threshold"),
         ("2Wiki on book flagged", "pairs.book|2wiki.flagged_share"),
         ("book on 2Wiki flagged", "pairs.2wiki|book.flagged_share"))),
    "search": Bench(
        "eval_search.py", "search: routing accuracy, dynamic vs static global search, "
        "local search vs vector RAG", True, ("eval_search_*.json",),
        (("routing accuracy (rules)", "routing.rules_oracle_linking.accuracy_when_decided"),
         ("dynamic/static tokens (book)", "global_book.dynamic_over_static_tokens"),
         ("local F1", "local_2wiki.local.f1"), ("direct F1", "local_2wiki.direct.f1"))),
    "reports": Bench(
        "eval_reports.py", "community reports naming what their context lacks, before "
        "and after the check", False, ("eval_reports*.json",),
        (("LLM reports rejected", "before.llm_reports_rejected"),
         ("published naming outside", "after.published_reports_naming_outside_context"))),
    "sets": Bench(
        "eval_sets.py", "retrieval on every development set over built indexes (the book's "
        "30 questions and 20 later ones, the 2Wiki slice and pool, the HotpotQA sample): "
        "every mode, and a sweep of one setting", False, ("eval_sets*.json",),
        (("book bridge R@5", "sets.book.modes.bridge.recall@5"),
         ("book-later bridge R@5", "sets.book-later.modes.bridge.recall@5"),
         ("book vector R@5", "sets.book.modes.vector.recall@5"),
         ("hotpot bridge R@5", "sets.hotpot.modes.bridge.recall@5"),
         ("pool bridge R@5", "sets.pool.modes.bridge.recall@5"))),
    "embedders": Bench(
        "eval_embedders.py", "vector search alone with each candidate embedder on the "
        "HotpotQA sample, the 2Wiki slice and the book: recall and embedding cost", False,
        ("embedders*.json",),
        (("hotpot MiniLM R@5", "sets.hotpot.minilm.R@5"),
         ("hotpot e5-small R@5", "sets.hotpot.e5-small-q4.R@5"))),
    "answer_check": Bench(
        "eval_answer_check.py", "search answers naming what their context lacks: made-up "
        "names passed and correct answers flagged by the check, no model (seconds)", False,
        ("answer_check*.json",),
        (("book made-up passed", "figures.book made-up passed"),
         ("before", "before.figures.book made-up passed"),
         ("book correct flagged", "figures.book correct flagged"),
         ("own made-up passed", "figures.own made-up passed"),
         ("before", "before.figures.own made-up passed"),
         ("own correct flagged", "figures.own correct flagged"))),
    "embedder": Bench(
        "bench_embedder.py", "the embedder's backends: sentence-transformers (torch) "
        "against ONNX Runtime; --memory: each way's resident memory", False,
        ("embedder_backends*.json", "embedder_memory*.json"),
        (("torch/onnx (passages)", "sets.passages.torch_over_onnx_median"),
         ("min cosine", "sets.passages.min_cosine"))),
    "ann": Bench(
        "bench_ann.py", "when an IVF_PQ index pays: flat scan vs IVF_PQ on LanceDB tables "
        "of growing size", False, ("ann*.json",),
        (("rows (largest)", "sizes.-1.rows"), ("IVF_PQ/flat p50", "sizes.-1.ivf_over_flat"),
         ("IVF_PQ recall@10", "sizes.-1.ivf_pq_recall@10"))),
    "cli_cold_start": Bench(
        "bench_cli_cold_start.py", "cold start of `kgloom query`: whole CLI processes, "
        "median of N", False, ("cli_cold_start*.json",),
        (("fast median s", "configs.fast.median_seconds"),
         ("lancedb median s", "configs.lancedb.median_seconds"))),
    "serve": Bench(
        "bench_serve.py", "`kgloom serve` under load, while republishing, and the "
        "explorer's first render", False, ("serve_load*.json",),
        (("rps (1 client)", "load.0.rps"), ("p99 ms (1 client)", "load.0.p99_ms"),
         ("explorer usable ms", "explorer.page_usable_ms.median"))),
    "graphrag_compat": Bench(
        "graphrag_compat.py", "Microsoft GraphRAG's query engine over a kgloom output "
        "folder (graphrag's own virtualenv)", False, ("graphrag_compat*.json",),
        (("ok", "ok"),)),
    "graphrag_route": Bench(
        "graphrag_route.py", "GraphRAG's own `graphrag query`, all five methods, on a "
        "kgloom index (docs/graphrag.md)", True, ("graphrag_route*.json",),
        (("chat calls", "chat_calls"), ("context overflows", "context_overflows"))),
    "vs_graphrag": Bench(
        "vs_graphrag/compare.py", "indexing side by side: Microsoft GraphRAG 3.3.0 and "
        "kgloom on the same slice and model (run.sh)", True, ("vs_graphrag*.json",),
        (("kgloom wall s", "summary.table.wall_seconds.kgloom"),
         ("GraphRAG wall s", "summary.table.wall_seconds.graphrag"))),
    "retrieval": Bench(
        "bench.retrieval", "the fused-retrieve study on a graph of ogbn-arxiv's size "
        "(doctor, setup, run, results)", False, ("retrieval/results.json",),
        (("cells fused p50 <= baseline (files)", "targets.fused_p50_le_baseline_files.met_in"),
         ("of", "targets.fused_p50_le_baseline_files.cells"))),
}
