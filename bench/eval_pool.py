"""Retrieval on the standard 2WikiMultihopQA pool (6,119 passages): index it, then every
retrieval mode, ``vector`` and a BM25 baseline over the development questions.

Data: bench/data/2wiki-pool/corpus.jsonl (source, licence and the published figures in
its README) and the 40 development questions of bench/data/2wiki-dev/questions.jsonl
(every supporting passage is in the pool). The harness is bench/eval_qa.py's: the same
modes (:data:`eval_qa.MODES`), the same scoring (:func:`eval_qa.score_rankings`: R@2,
R@5, AR@5 = share of questions whose supporting passages are all in the top 5, HippoRAG
Table 6; latency p50/p95; the split per question type). This script adds the pool's
index build and the BM25 baseline.

Index: the passages are split into ``--parts`` JSONL files (default 8) under
``<work>/input``, because each input file is one partition (one Dagster run): a run
stopped by Ctrl-C, ``kill -9`` or a reboot keeps the partitions it finished and the
next run extracts only the others (with ``standard``, hours of model time); a split
file's bytes depend only on the pool, so a rerun changes nothing. The index is one
``kgloom index`` process (:func:`bench.harness.build_index`). Figures recorded
(:func:`build_pool_index`): wall seconds of the whole command and seconds per passage,
its CPU seconds (user + system: on a shared machine the load-independent figure), peak
resident memory of the indexing process (``ru_maxrss``), the machine's load before and
after (the machine is shared: read the seconds with the load beside them), the model
share of the command; per stage (index-summary.json) wall seconds, LLM calls, prompt and
completion tokens, model share; the index's counts (text units, entities,
relationships, communities, LLM and rule reports, vectors).

Sizes: ``--passages 600,2000,6119`` indexes nested subsets of the pool
(:func:`select_passages`: the supporting passages of the questions first, then the pool
in file order), each in its own work folder (``<work>/passages-<N>``; the whole pool in
``<work>`` itself), all in one result JSON with a scaling table
(:func:`scaling_table`: seconds per passage relative to the smallest size, and per stage
and count the growth exponent, flagging a stage whose seconds grow faster than the
passages). Rerunning the same command resumes: sizes finished in the result file are
kept (``--again`` measures them again), an interrupted size's index goes on from its
finished partitions (its entry then says ``resumed``: the command's figures cover what
was left; the per-stage seconds are whole).

Floor (issue 27, point 3; bench/floor.py): after each size's index, the same model
evaluates the passages' own tokens once (llama.cpp prompt evaluation, the index's
threads and batch settings); ``ratio`` = the index command's wall seconds / the floor.
``--floor-only`` measures just the floor of each size (the model's default settings,
``--threads`` to fix the threads); ``--fake-llm`` measures no floor. The bundled model
evaluates 100-200 prompt tokens/s on 2 busy cores, so the pool's 0.69 M tokens take about
an hour: ``--floor-budget-s 300`` measures the rate on a spread sample of the chunks and
extrapolates; ``--floor-chunk 512`` packs shorter chunks than the context (a tighter
floor: less attention per token).

The result is saved (bench/stamp.py) after each size's index, its floor and each
retrieval mode, so a stopped run leaves what it measured.

BM25: :class:`kgloom.query.lexical.LexicalIndex` (``bm25s``, Lù 2024: Lucene's BM25
variant, k1 1.5, b 0.75; English stop words, PyStemmer's Snowball stemmer), the graph
modes' word channel, over the index's own text units, so it ranks the same passages as
the graph modes.

Usage:
    python bench/eval_pool.py --set method=fast [--work /tmp/kgloom-pool] [--parts 8]
        [--passages 600,2000,6119] [--index DIR] [--questions FILE] [--corpus FILE]
        [--modes vector,ppr] [--no-retrieval] [--no-floor] [--floor-only] [--threads N]
        [--floor-chunk TOKENS] [--floor-budget-s S] [--again]
        [--save bench/results/eval_pool_fast.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sys
import time
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.eval_qa import MODES, evaluate, label, load_questions, score_rankings  # noqa: E402
from bench.harness import build_index  # noqa: E402
from bench.stamp import commit, load_average, save_result  # noqa: E402

POOL = ROOT / "bench" / "data" / "2wiki-pool" / "corpus.jsonl"
FLAG_EXPONENT = 1.1  # a stage whose seconds grow faster than passages**1.1 is flagged...
FLAG_MIN_SECONDS = 1.0  # ...when it takes at least this long at the larger size (below:
# timer noise; on the 12-passage test pool, 0.09 -> 0.51 s read as an exponent of 2.5)
# the counts whose growth the scaling table reports (index_counts' keys)
COUNTS = ("text_units", "entities", "relationships", "communities", "llm_reports",
          "rule_reports", "vectors", "unit_neighbor_ids", "unit_neighbor_triples",
          "summarized_items", "summary_texts")
SUBSETS = ("each size N indexes the first N passages of this order: every passage whose "
           "title supports a question of the questions file (in question order), then the "
           "rest of the pool in file order; sizes are nested, deterministic, and hold every "
           "supporting passage when N is at least 'supporting_passages', so retrieval is "
           "scored on each size; N beyond the pool is the whole pool")
QUESTIONS = ROOT / "bench" / "data" / "2wiki-dev" / "questions.jsonl"


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, MiB (Linux ``ru_maxrss`` is KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def pool_lines(corpus: Path) -> list[str]:
    """The non-blank lines of ``corpus`` (JSONL, one passage a line), in file order."""
    return [ln for ln in corpus.read_text(encoding="utf-8").splitlines() if ln.strip()]


def split_lines(lines: list[str], parts: int, dest: Path) -> list[Path]:
    """Write ``lines`` (JSONL passages) as ``parts`` files ``dest/part-00.jsonl`` ... of
    consecutive lines, sizes differing by at most one, never an empty file; a file whose
    bytes are already those is not rewritten (its partition stays built).

    Returns the files written or kept, in order.

    Raises:
        ValueError: when ``parts`` < 1.
    """
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    parts = min(parts, max(1, len(lines)))
    dest.mkdir(parents=True, exist_ok=True)
    size, extra = divmod(len(lines), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (i < extra)
        path = dest / f"part-{i:02d}.jsonl"
        body = "\n".join(lines[start:end]) + "\n"
        if not path.exists() or path.read_text(encoding="utf-8") != body:
            tmp = dest.parent / f".{dest.name}-{path.name}.tmp"  # outside the input folder
            tmp.write_text(body, encoding="utf-8")
            tmp.replace(path)
        out.append(path)
        start = end
    return out


def split_corpus(corpus: Path, parts: int, dest: Path) -> list[Path]:
    """:func:`split_lines` of the passages of ``corpus`` (:func:`pool_lines`)."""
    return split_lines(pool_lines(corpus), parts, dest)


def parse_sizes(spec: str) -> list[int]:
    """``--passages`` sizes: comma-separated positive integers, returned sorted, once each.

    Raises:
        SystemExit: on an item that is not a positive integer, or no item.
    """
    try:
        sizes = sorted({int(x) for x in spec.split(",") if x.strip()})
    except ValueError:
        raise SystemExit(f"--passages: {spec!r} is not N[,N,...]") from None
    if not sizes or sizes[0] < 1:
        raise SystemExit(f"--passages: {spec!r}: sizes must be positive integers")
    return sizes


def select_passages(lines: list[str], questions: list[dict], n: int) -> tuple[list[str], dict]:
    """The size-``n`` subset of the pool ``lines`` (JSONL passages with a ``title``):
    every passage whose title is a supporting title of ``questions`` first (in question
    order), then the other passages in file order, until ``n`` (the whole pool when ``n``
    is larger). Subsets of growing ``n`` are nested and depend only on the pool, the
    questions and ``n``; with every supporting passage in, retrieval can be scored on each
    subset. The chosen lines are returned in pool file order (so the whole pool's subset
    is the pool itself, split exactly as before).

    Returns:
        (the chosen lines, ``{"requested", "passages", "supporting_passages" (in the
        pool), "supporting_included", "supporting_titles_not_in_pool"}``).

    Raises:
        ValueError: a line that is not a JSON object.
    """
    by_title: dict[str, list[int]] = {}
    for i, line in enumerate(lines):
        row = json.loads(line)
        if not isinstance(row, dict):
            raise ValueError(f"pool line {i + 1} is not a JSON object")
        by_title.setdefault(str(row.get("title", "")), []).append(i)
    first: list[int] = []
    seen: set[int] = set()
    titles = list(dict.fromkeys(t for q in questions for t in q["supporting_titles"]))
    for title in titles:
        for i in by_title.get(title, []):
            if i not in seen:
                first.append(i)
                seen.add(i)
    rest = [i for i in range(len(lines)) if i not in seen]
    chosen = (first + rest)[:n]
    info = {"requested": n, "passages": len(chosen), "supporting_passages": len(first),
            "supporting_included": min(n, len(first)),
            "supporting_titles_not_in_pool": sum(t not in by_title for t in titles)}
    return [lines[i] for i in sorted(chosen)], info


def passage_texts(lines: list[str]) -> list[str]:
    """The ``text`` of each JSONL passage as the index reads it (normalized as
    :func:`kgloom.ingest.documents.normalize_text`; the title is not part of it)."""
    from kgloom.ingest.documents import normalize_text

    return [normalize_text(str(json.loads(line).get("text") or "")) for line in lines]


def stage_figures(summary: dict) -> dict:
    """Per stage of an index summary (``index-summary.json``: ``seconds_per_stage`` and
    ``cost.stages``): ``wall_seconds``, ``llm_calls``, ``prompt_tokens``,
    ``completion_tokens``, ``model_seconds``, ``model_share`` (model / wall seconds) and
    ``part_of`` (the stage whose wall time includes it) where there is one."""
    out = {}
    for stage, c in summary["cost"]["stages"].items():
        out[stage] = {"wall_seconds": summary["seconds_per_stage"].get(stage, c["wall_seconds"]),
                      "llm_calls": c["calls"], "prompt_tokens": c["prompt_tokens"],
                      "completion_tokens": c["completion_tokens"],
                      "model_seconds": c["model_seconds"], "model_share": c["model_share"],
                      **({"part_of": c["part_of"]} if c.get("part_of") else {})}
    return out


def index_counts(index: Path, summary: dict) -> dict:
    """What an index holds (:data:`COUNTS` and more): rows of documents, text units,
    entities, relationships, communities and community reports (the summary's ``rows``:
    parquet row counts), reports by ``generated_by`` (``llm_reports``, ``rule_reports``,
    from community_reports.parquet), vectors (rows of each LanceDB table as the
    ``vector_index`` stage wrote them; ``vectors`` is their sum) and the entries of the
    text units' ``neighbor_entity_ids`` / ``neighbor_triples`` lists (summed over units:
    ``unit_neighbor_ids``, ``unit_neighbor_triples``; graph_files computes them, and they
    grow faster than the units until each unit's lists reach their caps), and the
    summaries' work (``summarized_items``, ``summary_texts``: the summaries stage's stats;
    items named at least ``summary_min_descriptions`` times, whose share grows with the
    corpus)."""
    rows = summary["rows"]
    path = index / "community_reports.parquet"
    by: dict[str, int] = {}
    if path.exists():
        reports = pl.read_parquet(path, columns=["generated_by"])
        by = {str(k): int(v) for k, v in reports.group_by("generated_by").len().iter_rows()}
    stages = summary.get("stages") or {}
    tables = (stages.get("vector_index") or {}).get("tables") or {}
    summaries = stages.get("summaries") or {}
    per_table = {k: int(v.get("rows", 0)) for k, v in sorted(tables.items())}
    lists = {"unit_neighbor_ids": 0, "unit_neighbor_triples": 0}
    path = index / "text_units.parquet"
    if path.exists():
        units = pl.read_parquet(path, columns=["neighbor_entity_ids", "neighbor_triples"])
        lists = {"unit_neighbor_ids": int(units["neighbor_entity_ids"].list.len().sum()),
                 "unit_neighbor_triples": int(units["neighbor_triples"].list.len().sum())}
    return {"documents": rows.get("documents", 0), "text_units": rows.get("text_units", 0),
            "entities": rows.get("entities", 0), "relationships": rows.get("relationships", 0),
            "communities": rows.get("communities", 0),
            "community_reports": rows.get("community_reports", 0),
            "llm_reports": by.get("llm", 0), "rule_reports": by.get("rules", 0),
            "vectors": sum(per_table.values()), "vectors_per_table": per_table, **lists,
            "summarized_items": int(summaries.get("summarized_items", 0)),
            "summary_texts": int(summaries.get("summary_texts", 0))}


def build_pool_index(lines: list[str], work: Path, settings: list[str], parts: int,
                     fake_llm: bool = False) -> tuple[Path, dict, dict]:
    """Index the passages ``lines`` split into ``parts`` files under ``work/input``
    (incremental: finished partitions are kept) with the ``key=value`` index
    ``settings``, through :func:`bench.harness.build_index`.

    Returns:
        (the output folder, the build figures, the index summary). Figures: the command's
        ``wall_seconds``, ``seconds_per_passage``, ``cpu_seconds``, ``peak_rss_mb`` (the
        larger of ``ru_maxrss`` and the 0.2 s samples of the process tree's summed RSS),
        ``load_before`` / ``load_after``, ``model_share_of_command`` (model seconds of the
        stages this command ran / its wall seconds); ``resumed`` (the output folder existed
        before: the command's figures then cover only what was left);
        ``stages_wall_seconds`` and ``stage_seconds_per_passage`` (the summary's, whole
        even after a resume); per stage :func:`stage_figures`; :func:`index_counts`; LLM
        calls and tokens; the backend's settings.
    """
    out = work / "output"
    resumed = out.exists()
    files = split_lines(lines, parts, work / "input")
    # sample_rss: the peak over the process tree (Dagster may run steps in children)
    run = build_index(work / "input", out, dagster_home=work / "dagster_home",
                      fake_llm=fake_llm, settings=settings, sample_rss=True)
    summary = json.loads((out / "index-summary.json").read_text())
    n = max(1, len(lines))
    model_s = (run.summary.get("cost") or {}).get("model_seconds", 0.0)
    stages_wall = summary["cost"]["total"]["wall_seconds"]
    figures = {"passages": len(lines), "input_files": len(files),
               "partitions_run": run.summary.get("partition_runs"), "resumed": resumed,
               "wall_seconds": run.wall_seconds,
               "seconds_per_passage": round(run.wall_seconds / n, 4),
               "cpu_seconds": run.cpu_seconds, "peak_rss_mb": run.peak_rss_mb,
               "load_before": run.load_before, "load_after": run.load_after,
               "model_seconds_of_command": model_s,
               "model_share_of_command": round(model_s / run.wall_seconds, 4)
               if run.wall_seconds else 0.0,
               "stages_wall_seconds": stages_wall,
               "stage_seconds_per_passage": round(stages_wall / n, 4),
               "method": summary.get("method"), "rows": summary["rows"],
               "counts": index_counts(out, summary), "stages": stage_figures(summary),
               "llm_calls": summary["llm_calls"], "prompt_tokens": summary["prompt_tokens"],
               "completion_tokens": summary["completion_tokens"],
               "llm_backend": summary.get("llm_backend", {}),
               "embedder_seconds": {k: v["embedder_seconds"]
                                    for k, v in summary["cost"]["stages"].items()
                                    if v.get("embedder_seconds")},
               # each stage's forward passes by the threads they ran on (picked by load)
               "embedder_threads": {k: v["embedder_threads"]
                                    for k, v in summary["stages"].items()
                                    if isinstance(v, dict) and v.get("embedder_threads")},
               "extraction_counts": {k: v for k, v in summary["stages"].get(
                   "extraction", {}).items() if isinstance(v, (int, float))
                   and k not in ("seconds", "finished_at", "embedder_seconds")}}
    print(f"{len(lines)} passages indexed in {run.wall_seconds:.0f} s "
          f"({figures['seconds_per_passage']} s/passage, peak RSS {run.peak_rss_mb} MiB, "
          f"load {run.load_before} -> {run.load_after}{', resumed' if resumed else ''}): "
          f"{out}", flush=True)
    return out, figures, summary


def growth_exponent(a: float, b: float, n_a: float, n_b: float) -> float | None:
    """The exponent k of ``b / a = (n_b / n_a) ** k``: log(b/a) / log(n_b/n_a), rounded to
    3 places (1: grows like the passages; above: faster). None when a figure is not
    positive or ``n_a == n_b``."""
    if min(a, b, n_a, n_b) <= 0 or n_a == n_b:
        return None
    return round(math.log(b / a) / math.log(n_b / n_a), 3)


def scaling_table(sizes: list[dict], flag_above: float = FLAG_EXPONENT,
                  min_seconds: float = FLAG_MIN_SECONDS) -> dict:
    """How the cost grows across the built sizes (entries of the result's ``sizes`` with
    an ``index`` holding ``stages``; others are skipped).

    Returns:
        ``{"flag_above", "sizes": [per size: passages, seconds_per_passage and
        stage_seconds_per_passage with each relative to the smallest size's, resumed],
        "seconds_per_passage_spread" (largest / smallest seconds per passage - 1; the
        issue's goal: at most 0.2), "pairs": [per pair of sizes (each consecutive pair,
        and smallest to largest when there are more than two): "from", "to" (passages),
        per stage its seconds at both and :func:`growth_exponent` with
        ``faster_than_passages`` (exponent > ``flag_above``), per count (:data:`COUNTS`)
        its values and exponent], "faster_than_passages": [every flagged (stage, from,
        to, exponent)]}``; ``{}`` with no built size. A stage is flagged only where it
        takes at least ``min_seconds`` at the larger size of the pair (its exponent is
        reported either way).
    """
    built = sorted((s for s in sizes if "stages" in (s.get("index") or {})),
                   key=lambda s: s["index"]["passages"])
    if not built:
        return {}
    base = built[0]["index"]

    def rel(x: float, y: float) -> float | None:
        return round(x / y, 3) if y else None

    rows = [{"passages": s["index"]["passages"],
             "seconds_per_passage": s["index"]["seconds_per_passage"],
             "relative_to_smallest": rel(s["index"]["seconds_per_passage"],
                                         base["seconds_per_passage"]),
             "stage_seconds_per_passage": s["index"]["stage_seconds_per_passage"],
             "stage_relative_to_smallest": rel(s["index"]["stage_seconds_per_passage"],
                                               base["stage_seconds_per_passage"]),
             "resumed": s["index"].get("resumed", False)} for s in built]
    spp = [r["seconds_per_passage"] for r in rows]
    pairs_at = [(i, i + 1) for i in range(len(built) - 1)]
    pairs_at += [(0, len(built) - 1)] if len(built) > 2 else []
    pairs, flagged = [], []
    for i, j in pairs_at:
        a, b = built[i]["index"], built[j]["index"]
        na, nb = a["passages"], b["passages"]
        stages = {}
        for stage in sorted(set(a["stages"]) | set(b["stages"])):
            sa = (a["stages"].get(stage) or {}).get("wall_seconds", 0.0)
            sb = (b["stages"].get(stage) or {}).get("wall_seconds", 0.0)
            e = growth_exponent(sa, sb, na, nb)
            fast = e is not None and e > flag_above and sb >= min_seconds
            stages[stage] = {"seconds": [sa, sb], "exponent": e, "faster_than_passages": fast}
            if fast:
                flagged.append({"stage": stage, "from": na, "to": nb, "exponent": e})
        counts = {}
        for name in COUNTS:
            ca, cb = a["counts"].get(name, 0), b["counts"].get(name, 0)
            counts[name] = {"values": [ca, cb], "exponent": growth_exponent(ca, cb, na, nb)}
        pairs.append({"from": na, "to": nb, "stages": stages, "counts": counts})
    return {"flag_above": flag_above, "flag_min_seconds": min_seconds, "sizes": rows,
            "seconds_per_passage_spread": round(max(spp) / min(spp) - 1, 3)
            if min(spp) > 0 else None,
            "pairs": pairs, "faster_than_passages": flagged}


class BM25Baseline:
    """BM25 over passages (:class:`kgloom.query.lexical.LexicalIndex`, the graph modes'
    word channel); :meth:`search` returns their titles, best first.

    Args:
        texts: the passages.
        titles: each passage's title (several passages may share one).
    """

    def __init__(self, texts: list[str], titles: list[str]) -> None:
        from kgloom.query.lexical import LexicalIndex

        self.titles = titles
        self.lexical = LexicalIndex(texts)

    def search(self, query: str, k: int = 5) -> list[str]:
        """The titles of the ``k`` best passages for ``query`` (fewer when the pool is
        smaller), best first; passages sharing no word with it come last, in file order."""
        scores = self.lexical.scores(query)
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:k]
        return [self.titles[i] for i in order]


def index_passages(index: Path) -> tuple[list[str], list[str]]:
    """(texts, document titles) of the index's published text units."""
    units = pl.read_parquet(index / "text_units.parquet", columns=["text", "document_id"])
    docs = pl.read_parquet(index / "documents.parquet", columns=["id", "title"])
    joined = units.join(docs, left_on="document_id", right_on="id", how="left")
    return joined["text"].to_list(), joined["title"].to_list()


def evaluate_bm25(bm25: BM25Baseline, questions: list[dict], top_k: int = 5) -> dict:
    """BM25's figures (:func:`eval_qa.score_rankings`) over ``questions``."""
    rankings, secs = [], []
    for q in questions:
        start = time.perf_counter()
        rankings.append(bm25.search(q["question"], top_k))
        secs.append(time.perf_counter() - start)
    return {"mode": "bm25", "params": {"library": "bm25s"},
            **score_rankings(questions, rankings, secs)}


def score_retrieval(index: Path, questions: list[dict], wanted: set[str], top_k: int,
                    on_row=None) -> dict:
    """Every retrieval mode of :data:`eval_qa.MODES` (those named in ``wanted``; all when
    empty) and the BM25 baseline (when ``wanted`` is empty or names ``bm25``) over
    ``questions`` on ``index``; ``on_row`` is called after each mode (to save).

    Returns:
        ``{"modes": [per mode: eval_qa's figures, load_after], "best_graph_mode": the
        graph mode of highest R@5 (then R@2) with its gain over ``vector``, when both
        ran}``.
    """
    out: dict = {"modes": []}
    runs = [(m, p) for m, p in MODES
            if not wanted or label(m, p) in wanted or m in wanted]
    if runs:
        from kgloom.query.retriever import Retriever
        from kgloom.settings import load_settings

        retriever = Retriever.from_settings(index, load_settings())
        for mode, params in runs:
            row = evaluate(retriever, questions, mode, params, top_k)
            row.pop("per_question")
            row["load_after"] = load_average()
            out["modes"].append(row)
            print(f"{label(mode, params)}: R@2 {row['recall@2']} R@5 {row['recall@5']} "
                  f"AR@5 {row['all_recall@5']} p50 {row['latency_p50_s']} s", flush=True)
            if on_row:
                on_row(out)
    if not wanted or "bm25" in wanted:
        texts, titles = index_passages(index)
        start = time.perf_counter()
        bm25 = BM25Baseline(texts, titles)
        row = evaluate_bm25(bm25, questions, top_k)
        row["index_seconds"] = round(time.perf_counter() - start, 2)
        out["modes"].append(row)
        print(f"bm25: R@2 {row['recall@2']} R@5 {row['recall@5']} AR@5 {row['all_recall@5']}")
    vec = next((r for r in out["modes"] if r["mode"] == "vector"), None)
    graph = [r for r in out["modes"] if r["mode"] not in ("vector", "bm25", "two_step")]
    if vec and graph:
        best = max(graph, key=lambda r: (r["recall@5"], r["recall@2"]))
        out["best_graph_mode"] = {"mode": label(best["mode"], best["params"]),
                                  "recall@5": best["recall@5"],
                                  "recall@5_gain_over_vector":
                                      round(best["recall@5"] - vec["recall@5"], 1)}
    return out


def floor_of(lines: list[str], summary: dict | None, args: argparse.Namespace) -> dict:
    """The floor (:func:`bench.floor.measure_floor`) of the passages ``lines``, with the
    llama.cpp settings and thread count of the index whose ``summary`` is given (None:
    kgloom's defaults), or ``args.threads`` when non-zero; ``args.floor_chunk`` and
    ``args.floor_budget_s`` as :func:`bench.floor.prompt_floor`'s chunk and budget."""
    from bench.floor import floor_settings, measure_floor

    settings = floor_settings(summary, args.threads)
    print(f"floor: {len(lines)} passages, {settings['n_threads']} thread(s)", flush=True)
    out = measure_floor(passage_texts(lines), settings, chunk_tokens=args.floor_chunk,
                        budget_s=args.floor_budget_s)
    print(f"floor: {out['tokens']} tokens in {out['floor_seconds']} s "
          f"({out['tokens_per_s']} tokens/s"
          f"{', extrapolated from ' + str(out['evaluated_tokens']) if out['extrapolated'] else ''}"
          ")", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=POOL)
    ap.add_argument("--questions", type=Path, default=QUESTIONS)
    ap.add_argument("--work", type=Path, default=Path("/tmp/kgloom-pool"))
    ap.add_argument("--index", type=Path, default=None,
                    help="a finished index folder to reuse (no indexing)")
    ap.add_argument("--passages", default="",
                    help="N[,N,...]: index nested subsets of the pool of these sizes "
                         "(default: the whole pool)")
    ap.add_argument("--parts", type=int, default=8, help="input files each size is split into")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="an index setting, e.g. method=fast (repeatable)")
    ap.add_argument("--fake-llm", action="store_true", help="the fake LLM (no floor)")
    ap.add_argument("--modes", default="", help="comma-separated mode labels to run "
                    "(default: all of eval_qa.MODES, then bm25)")
    ap.add_argument("--no-retrieval", action="store_true", help="index and floor only")
    ap.add_argument("--no-floor", action="store_true", help="no floor measurement")
    ap.add_argument("--floor-only", action="store_true",
                    help="measure the floor of each size alone (no index, no retrieval)")
    ap.add_argument("--threads", type=int, default=0,
                    help="the floor's threads (default: the index's, see bench/floor.py)")
    ap.add_argument("--floor-chunk", type=int, default=512,
                    help="tokens per floor chunk (default 512: about an extraction "
                         "prompt's length, so attention over a long context is not "
                         "counted; 0: the context, n_ctx)")
    ap.add_argument("--floor-budget-s", type=float, default=0.0,
                    help="measure the floor's rate for this long and extrapolate "
                         "(default 0: evaluate every token; the pool takes ~1 h on 2 cores)")
    ap.add_argument("--again", action="store_true",
                    help="measure every size again (default: sizes finished in --save "
                         "by the same command are kept)")
    ap.add_argument("--top-k", type=int, default=5)
    ap.add_argument("--save", type=Path, default=None,
                    help="default bench/results/eval_pool_<method>.json "
                         "(--floor-only: eval_pool_floor.json)")
    args = ap.parse_args()

    from kgloom.settings.indexing import parse_assignments

    settings = parse_assignments(args.set)
    method = settings.get("method", "standard")
    name = "floor" if args.floor_only else method
    save = args.save or ROOT / "bench" / "results" / f"eval_pool_{name}.json"
    questions = load_questions(args.questions)
    lines = [] if args.index else pool_lines(args.corpus)
    sizes = parse_sizes(args.passages) if args.passages else [len(lines)]
    key = {"corpus": args.corpus.name, "questions": args.questions.name, "settings": settings,
           "fake_llm": args.fake_llm, "parts": args.parts, "floor_only": args.floor_only,
           "floor": [args.no_floor, args.threads, args.floor_chunk, args.floor_budget_s],
           "index": str(args.index) if args.index else None}
    result: dict = {"benchmark": f"2WikiMultihopQA pool: {args.corpus.name}, "
                                 f"{len(questions)} questions from {args.questions.name}",
                    "metric": "supporting-passage R@2, R@5, AR@5 (HippoRAG, arXiv "
                              "2405.14831, Tables 2 and 6); latency per query, warm; per "
                              "size: the index's cost, its growth, the floor",
                    "subsets": SUBSETS, "commit": commit(),
                    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "cores": os.cpu_count(), "settings": settings, "top_k": args.top_k,
                    "pool_passages": len(lines), "passages_requested": sizes,
                    "resume_key": key, "sizes": []}
    previous: dict[int, dict] = {}
    if save.exists() and not args.again:
        old = json.loads(save.read_text(encoding="utf-8"))
        if old.get("resume_key") == key:
            previous = {s["passages"]: s for s in old.get("sizes", []) if s.get("complete")}

    def save_now() -> None:
        result["scaling"] = scaling_table(result["sizes"])
        result["peak_rss_mb_bench"] = peak_rss_mb()
        result["load_end"] = load_average()
        save_result(save, result, args)

    wanted = {m.strip() for m in args.modes.split(",") if m.strip()}
    if args.index:
        entry: dict = {"passages": None, "index": {"reused": str(args.index)}}
        result["sizes"].append(entry)
        entry.update(score_retrieval(args.index, questions, wanted, args.top_k))
        entry["complete"] = True
        save_now()
        return
    done: set[int] = set()
    for n in sizes:
        chosen, selection = select_passages(lines, questions, n)
        if len(chosen) in done:  # N beyond the pool twice: the same subset
            continue
        done.add(len(chosen))
        if len(chosen) in previous:
            print(f"{len(chosen)} passages: kept from {save} (--again measures it again)")
            result["sizes"].append(previous[len(chosen)])
            continue
        entry = {"passages": len(chosen), "selection": selection}
        result["sizes"].append(entry)
        if args.floor_only:
            entry["floor"] = floor_of(chosen, None, args)
            entry["complete"] = True
            save_now()
            continue
        # the whole pool in the work folder itself (as before --passages), others beside it
        work = args.work if len(chosen) == len(lines) else args.work / f"passages-{len(chosen)}"
        entry["work"] = str(work)
        index, entry["index"], summary = build_pool_index(chosen, work, args.set, args.parts,
                                                          args.fake_llm)
        save_now()
        if not args.fake_llm and not args.no_floor:
            floor = floor_of(chosen, summary, args)
            secs = floor["floor_seconds"]
            floor["ratio"] = round(entry["index"]["wall_seconds"] / secs, 2) if secs else None
            floor["ratio_of_stages"] = (round(entry["index"]["stages_wall_seconds"] / secs, 2)
                                        if secs else None)
            entry["floor"] = floor
            save_now()
        if not args.no_retrieval:
            def keep(part: dict, e: dict = entry) -> None:
                e.update(part)
                save_now()

            keep(score_retrieval(index, questions, wanted, args.top_k, on_row=keep))
        entry["complete"] = True
        save_now()
    save_now()  # also when every size was kept
    scaling = result["scaling"]
    for row in scaling.get("sizes", []):
        print(f"{row['passages']:>6} passages: {row['seconds_per_passage']} s/passage "
              f"(x{row['relative_to_smallest']} of the smallest)")
    for flag in scaling.get("faster_than_passages", []):
        print(f"grows faster than the passages: {flag['stage']} "
              f"({flag['from']} -> {flag['to']}: exponent {flag['exponent']})")


if __name__ == "__main__":
    main()
