"""The benches' shared harness: the stamp every result carries, the `kgloom index` command a
bench builds its index with, the registry behind `python -m bench`, and bench/README.md's
results table, which must be the one generated from bench/results/*.json."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import BENCHES, HERE
from bench import table as bt
from bench.harness import _printed_summary, index_command
from bench.stamp import save_result, stamp

ROOT = Path(__file__).resolve().parents[2]


def test_stamp_names_commit_date_host_load_settings_and_command(tmp_path):
    s = stamp(settings=argparse.Namespace(save=tmp_path / "x.json", runs=3))
    assert set(s) == {"commit", "date", "host", "load_average", "settings", "command"}
    assert s["commit"] and s["date"].endswith("+00:00") and len(s["load_average"]) == 3
    assert s["settings"] == {"save": str(tmp_path / "x.json"), "runs": 3}  # JSON-safe
    assert {"name", "cpus", "python", "platform"} <= set(s["host"])
    assert s["command"].startswith("python ")
    save_result(tmp_path / "out" / "r.json", {"figure": 1.5}, {"k": "v"})
    saved = json.loads((tmp_path / "out" / "r.json").read_text())
    assert saved["figure"] == 1.5 and saved["stamp"]["settings"] == {"k": "v"}
    assert not list((tmp_path / "out").glob("*.tmp"))  # written whole, then renamed


def test_index_command_passes_every_option(tmp_path):
    cmd = index_command(tmp_path / "in", tmp_path / "out", fake_llm=True, model_path="m.gguf",
                        llm_urls=["http://a:1", "http://b:2"], llm_concurrency=2,
                        reports=False, force=True, settings=["method=fast", "chunk_size=300"])
    assert cmd[:4] == [sys.executable, "-m", "kgloom.cli", "index"]
    for flag in ("--fake-llm", "--no-reports", "--force"):
        assert flag in cmd
    assert cmd[cmd.index("--model-path") + 1] == "m.gguf"
    assert [cmd[i + 1] for i, a in enumerate(cmd) if a == "--llm-url"] == ["http://a:1",
                                                                          "http://b:2"]
    assert [cmd[i + 1] for i, a in enumerate(cmd) if a == "--set"] == ["method=fast",
                                                                      "chunk_size=300"]
    plain = index_command(tmp_path / "in", tmp_path / "out")
    assert not {"--fake-llm", "--no-reports", "--force", "--set"} & set(plain)


def test_the_printed_summary_is_read_past_lines_after_it():
    stdout = ("input files: 1 new\n{\n  \"partition_runs\": 1,\n  \"rows\": {\"a\": 2}\n}\n"
              "graph up to date: nothing changed\nindex written to /x\n")
    assert _printed_summary(stdout) == {"partition_runs": 1, "rows": {"a": 2}}
    assert _printed_summary("no json here\n") == {}


def test_every_registered_bench_has_its_script_and_is_listed():
    for name, bench in BENCHES.items():
        if bench.script.endswith(".py"):
            assert (HERE / bench.script).is_file(), name
        assert bench.about and bench.results, name
    out = subprocess.run([sys.executable, "-m", "bench", "--list"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    assert [line.split()[0] for line in out.splitlines()] == list(BENCHES)


def test_table_lookup_and_row():
    result = {"sizes": [{"rows": 1}, {"rows": 9}], "stamp": {"commit": "abc1234",
                                                             "date": "2026-12-02T10:00:00+00:00",
                                                             "load_average": [1.5, 1, 1]}}
    assert bt.lookup(result, "sizes.-1.rows") == 9
    assert bt.lookup(result, "sizes.5.rows") is None and bt.lookup(result, "nope.x") is None
    row = bt.row("ann.json", result)
    assert row[1:5] == ["`ann`", "abc1234", "2026-12-02", "1.5"]
    assert "rows (largest) 9" in row[5]


def test_every_result_file_belongs_to_a_bench_and_the_readme_table_is_generated():
    for path in (HERE / "results").glob("*.json"):
        assert bt.bench_of(path.name), f"no bench in bench/__init__.py writes {path.name}"
    readme = (HERE / "README.md").read_text(encoding="utf-8")
    assert bt.with_table(readme, bt.table()) == readme, \
        "bench/README.md's results table is stale: run `python -m bench table`"


def test_one_llama_probe_bench_speed_probe_configurations():
    """bench_speed.py probe runs bench_llama_probe.py on configurations that hold the
    defaults, the thread, batch and flash-attention variants and the sampler chain."""
    from bench import bench_llama_probe as lp
    from bench import bench_speed

    ns = argparse.Namespace(configs=bench_speed.PROBE_CONFIGS, batches="", ubatches="",
                            threads="")
    names = [lp.name(c) for c in lp.configurations(ns)]
    assert names == ["t1 b512 u512", "t2 b512 u512", "t1 b512 u512 fa", "t1 b2048 u2048",
                     "t1 b128 u128", "t1 b512 u512 chain"]
    grid = lp.configurations(argparse.Namespace(configs="", batches="128,512",
                                                ubatches="128,512", threads="1"))
    assert all(c["grammar_first"] for c in grid) and len(grid) == 6  # u <= b, fa on/off
    with pytest.raises(SystemExit, match="defaults"):
        lp.configurations(argparse.Namespace(configs="1,256,256,0", batches="",
                                             ubatches="", threads=""))
