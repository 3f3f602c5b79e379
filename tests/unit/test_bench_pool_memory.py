"""bench/bench_pool_memory.py: the replay keeps only extraction's cached replies, and each
Dagster step gets the peak of the RSS samples inside its window."""

from __future__ import annotations

import datetime as dt
import json
import sqlite3

import pytest

from bench.bench_pool_memory import analyze, prepare
from kgloom.llm.backend import Completion
from kgloom.llm.cache import LLMCache


def test_prepare_keeps_the_input_and_only_extraction_replies(tmp_path):
    source = tmp_path / "pool"
    (source / "input").mkdir(parents=True)
    (source / "input" / "part-00.jsonl").write_text('{"title": "A", "text": "B"}\n')
    (source / "output").mkdir()
    cache = LLMCache(source / "output" / "llm_cache.sqlite")
    for i, stage in enumerate(("extraction", "extraction", "resolution", "community_reports")):
        cache.put(f"k{i}", stage, "m", "t", f"i{i}", {},
                  Completion(text="{}", prompt_tokens=1, completion_tokens=1, seconds=0.1))
    cache.close()
    work = tmp_path / "work"
    (work / "output").mkdir(parents=True)
    (work / "output" / "stale.parquet").write_text("old")
    prepare(source, work)
    assert (work / "input" / "part-00.jsonl").read_text() == '{"title": "A", "text": "B"}\n'
    assert not (work / "output" / "stale.parquet").exists()
    with sqlite3.connect(work / "output" / "llm_cache.sqlite") as con:
        assert con.execute("SELECT stage, COUNT(*) FROM llm_calls GROUP BY stage").fetchall() \
            == [("extraction", 2)]
    with pytest.raises(FileNotFoundError, match=r"llm_cache\.sqlite"):
        prepare(tmp_path / "nothing", work)


def test_analyze_gives_each_step_the_peak_inside_its_window(tmp_path):
    t0 = dt.datetime(2026, 12, 3, 12, 0, 0, tzinfo=dt.UTC)
    runs = tmp_path / "dagster_home" / "history" / "runs"
    runs.mkdir(parents=True)
    with sqlite3.connect(runs / "r1.db") as con:
        con.execute("CREATE TABLE event_logs (id INTEGER PRIMARY KEY, dagster_event_type TEXT,"
                    " step_key TEXT, timestamp TIMESTAMP)")
        for kind, step, sec in (("STEP_START", "entity_graph", 10), ("STEP_SUCCESS",
                                "entity_graph", 20), ("STEP_START", "vector_index", 21),
                                ("STEP_SUCCESS", "vector_index", 30)):
            stamp = (t0 + dt.timedelta(seconds=sec)).replace(tzinfo=None).isoformat(" ")
            con.execute("INSERT INTO event_logs (dagster_event_type, step_key, timestamp) "
                        "VALUES (?, ?, ?)", (kind, step, stamp))
    (tmp_path / "replay.json").write_text(json.dumps({
        "wall_seconds": 31, "peak_rss_mb": 900, "returncode": 0, "t0_epoch": t0.timestamp(),
        "timeline": [[5, 100], [12, 700], [19, 900], [25, 400], [29, 500]]}))
    (tmp_path / "output").mkdir()
    (tmp_path / "output" / "index-summary.json").write_text('{"cost": {"stages": {}}}')
    got = analyze(tmp_path)
    assert [(s["step"], s["seconds"], s["peak_rss_mb"]) for s in got["steps"]] == [
        ("entity_graph", 10.0, 900), ("vector_index", 9.0, 500)]
