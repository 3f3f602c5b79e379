"""The pool bench end to end (bench/eval_pool.py --passages) with the fake LLM on a tiny pool
of 12 passages at two sizes: the counts in its JSON are the index's own (parquet rows,
report kinds, LanceDB rows), the sizes are nested and hold the supporting passages, the
scaling table compares them, and rerunning the command keeps the finished sizes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import lancedb
import polars as pl
import pytest

ROOT = Path(__file__).resolve().parents[2]
POOL = ROOT / "bench" / "data" / "2wiki-pool" / "corpus.jsonl"

pytestmark = pytest.mark.integration  # two `kgloom index` processes (~1 minute)


def run_bench(tmp_path: Path, *extra: str) -> dict:
    save = tmp_path / "result.json"
    cmd = [sys.executable, str(ROOT / "bench" / "eval_pool.py"), "--corpus",
           str(tmp_path / "pool.jsonl"), "--questions", str(tmp_path / "questions.jsonl"),
           "--work", str(tmp_path / "work"), "--parts", "2", "--fake-llm", "--modes", "bm25",
           "--save", str(save), *(extra or ("--passages", "6,12,50"))]
    run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1",
                              "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    return json.loads(save.read_text())


def test_two_sizes_counts_are_the_index_tables_and_a_rerun_keeps_them(tmp_path):
    lines = POOL.read_text(encoding="utf-8").splitlines()[:12]
    (tmp_path / "pool.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    titles = [json.loads(line)["title"] for line in lines]
    support = [titles[10], titles[7], titles[11]]  # beyond the first 6 passages
    questions = [{"id": "q1", "type": "comparison", "question": f"{support[0]} or {support[1]}?",
                  "supporting_titles": support[:2]},
                 {"id": "q2", "type": "inference", "question": f"Who is {support[2]}?",
                  "supporting_titles": support[2:]}]
    (tmp_path / "questions.jsonl").write_text(
        "".join(json.dumps(q) + "\n" for q in questions), encoding="utf-8")

    result = run_bench(tmp_path)
    assert [s["passages"] for s in result["sizes"]] == [6, 12]  # 50: the pool, once
    folders = {s["passages"]: Path(s["work"]) / "output" for s in result["sizes"]}
    assert folders[12].parent == tmp_path / "work"  # the whole pool: the work folder itself
    docs = {n: set(pl.read_parquet(out / "documents.parquet")["title"].to_list())
            for n, out in folders.items()}
    assert set(support) <= docs[6] < docs[12] == set(titles)
    for size in result["sizes"]:
        out, idx = folders[size["passages"]], size["index"]
        counts = idx["counts"]
        for name in ("documents", "text_units", "entities", "relationships", "communities",
                     "community_reports"):
            assert counts[name] == pl.read_parquet(out / f"{name}.parquet").height, name
        assert counts["documents"] == size["passages"]
        by = pl.read_parquet(out / "community_reports.parquet")["generated_by"].to_list()
        assert counts["llm_reports"] == by.count("llm")
        assert counts["rule_reports"] == by.count("rules")
        assert counts["llm_reports"] + counts["rule_reports"] == counts["community_reports"]
        db = lancedb.connect(out / "lancedb")
        per_table = {t: db.open_table(t).count_rows() for t in counts["vectors_per_table"]}
        assert per_table == counts["vectors_per_table"]
        assert counts["vectors"] == sum(per_table.values()) > 0
        units = pl.read_parquet(out / "text_units.parquet")
        assert counts["unit_neighbor_ids"] == sum(
            len(x) for x in units["neighbor_entity_ids"].to_list())
        assert counts["unit_neighbor_triples"] == sum(
            len(x) for x in units["neighbor_triples"].to_list()) > 0
        summary = json.loads((out / "index-summary.json").read_text())
        summaries = json.loads((out / "stages" / "summaries.stats.json").read_text())
        assert (counts["summarized_items"], counts["summary_texts"]) == (
            summaries["summarized_items"], summaries["summary_texts"])
        assert idx["stages"]["extraction"]["llm_calls"] == \
            summary["cost"]["stages"]["extraction"]["calls"] > 0
        assert idx["seconds_per_passage"] == pytest.approx(idx["wall_seconds"] / size["passages"],
                                                           abs=1e-3)
        assert idx["input_files"] == 2 and not idx["resumed"] and size["complete"]
        assert "floor" not in size  # the fake LLM has no floor
        assert [m["mode"] for m in size["modes"]] == ["bm25"]
    assert result["sizes"][-1]["index"]["counts"]["llm_reports"] > 0  # both kinds counted
    pair = result["scaling"]["pairs"][0]
    assert (pair["from"], pair["to"]) == (6, 12)
    assert pair["counts"]["text_units"]["values"] == [
        result["sizes"][0]["index"]["counts"]["text_units"],
        result["sizes"][1]["index"]["counts"]["text_units"]]
    assert result["stamp"]["commit"] and "subsets" in result

    again = run_bench(tmp_path)  # the same command: both sizes kept, nothing rebuilt
    assert again["sizes"] == result["sizes"]
    # measured again over a finished index (as after an interruption): says it resumed,
    # ran no partition, and its per-stage figures still cover the whole index
    [six] = run_bench(tmp_path, "--passages", "6", "--again", "--no-retrieval")["sizes"]
    assert six["index"]["resumed"] and six["index"]["partitions_run"] == 0
    assert six["index"]["counts"] == result["sizes"][0]["index"]["counts"]
    assert six["index"]["stages"]["extraction"] == result["sizes"][0]["index"]["stages"][
        "extraction"]
