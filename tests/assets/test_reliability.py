"""Crashes, concurrent writers, no-op runs and hostile inputs, with real `kgloom`
processes where the behaviour is about processes (SIGKILL, SIGINT, a held lock, a held
pool slot); the fake LLM throughout."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import dagster as dg
import polars as pl
import psutil
import pytest
from typer.testing import CliRunner

from kgloom.cli.runner import index_folder, register_partitions
from kgloom.core.stats import read_stage_stats
from kgloom.definitions import build_resources
from kgloom.pipelines.input_files import INPUT_FILES
from kgloom.pipelines.instance import INSTANCE_TEMPLATE
from kgloom.pipelines.recovery import recover_dead_runs
from kgloom.reports import community_reports
from kgloom.resources import IndexConfigResource

# real kgloom processes killed, locked and raced
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "data" / "input" / "a-christmas-carol.txt"


def excerpt(start: int, n_chars: int) -> str:
    """A slice of the bundled book, from the first paragraph break after ``start``."""
    text = BOOK.read_text(encoding="utf-8")
    i = text.index("\n\n", start)
    return text[i: i + n_chars].strip()


@pytest.fixture
def home(tmp_path) -> Path:
    """A DAGSTER_HOME with kgloom's instance settings (pool llm limited to 1)."""
    h = tmp_path / "dagster_home"
    h.mkdir()
    (h / "dagster.yaml").write_text(INSTANCE_TEMPLATE.read_text())
    return h


def open_instance(home: Path) -> dg.DagsterInstance:
    return dg.DagsterInstance.from_config(str(home))


def start_index(home: Path, inp: Path, out: Path, log: Path, delay_s: float = 0.0,
                *extra: str) -> subprocess.Popen:
    """Start `kgloom index --fake-llm` as its own process; stdout+stderr go to ``log``."""
    env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONPATH": str(ROOT),
           "HF_HUB_OFFLINE": "1", "KGLOOM_FAKE_LLM_DELAY_S": str(delay_s)}
    cmd = [sys.executable, "-m", "kgloom.cli", "index", "--fake-llm", "--input-dir", str(inp),
           "--output-dir", str(out), *extra]
    # as from a terminal: a shell starts background jobs with SIGINT ignored, and an
    # ignored signal stays ignored across exec, so Ctrl-C would not reach the child
    return subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log.open("w"),
                            stderr=subprocess.STDOUT,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def wait_for(condition, timeout: float, what: str, proc: subprocess.Popen | None = None):
    """Poll ``condition()`` every 0.2 s until truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"process ended ({proc.returncode}) before: {what}")
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for: {what}")


def wait_exit(proc: subprocess.Popen, log: Path, stall_s: float = 600.0) -> int:
    """Wait for ``proc`` to exit while it makes progress: fail only when its ``log``
    has not grown for ``stall_s`` seconds (a hung command), however long the whole run
    takes on a loaded machine (a fixed 300 s wait failed at load 6-7 on 2 cores)."""
    size, last_growth = -1, time.monotonic()
    while proc.poll() is None:
        now_size = log.stat().st_size if log.exists() else 0
        if now_size != size:
            size, last_growth = now_size, time.monotonic()
        elif time.monotonic() - last_growth > stall_s:
            pytest.fail(f"no progress for {stall_s:.0f} s (log {log}):\n"
                        + log.read_text()[-3000:])
        time.sleep(0.5)
    return proc.returncode


def llm_slot_holders(home: Path) -> set[str]:
    with open_instance(home) as instance:
        info = instance.event_log_storage.get_concurrency_info("llm")
        return {s.run_id for s in info.claimed_slots}


def corpus(tmp_path: Path, name: str = "input") -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "stave1.txt").write_text(excerpt(20000, 2500), encoding="utf-8")
    return d


def test_kill_9_mid_extraction_then_the_next_index_recovers(tmp_path, home, monkeypatch):
    inp, out = corpus(tmp_path), tmp_path / "out"
    first = start_index(home, inp, out, tmp_path / "first.log", 120)
    try:  # a condition, with a bound only against a hang (startup takes ~20 s unloaded)
        held = wait_for(lambda: llm_slot_holders(home), 900, "the llm pool slot", first)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    (run_id,) = held

    # status shows the orphaned run with its age and that its process is gone
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    from kgloom.cli import app

    res = CliRunner().invoke(app, ["status", "--input-dir", str(inp), "--output-dir", str(out)])
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if run_id[:8] in x)
    assert "STARTED" in line and "process gone" in line and "kgloom index" in line

    second = start_index(home, inp, out, tmp_path / "second.log")
    assert wait_exit(second, tmp_path / "second.log") == 0, \
        (tmp_path / "second.log").read_text()[-3000:]
    log = (tmp_path / "second.log").read_text()
    assert f"recovered run {run_id[:8]}" in log and "its process is gone" in log
    with open_instance(home) as instance:
        assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.FAILURE
    assert llm_slot_holders(home) == set()

    # nothing lost: the resumed index equals an uninterrupted one
    ref = tmp_path / "ref"
    _, report = index_folder(build_resources(str(inp), str(ref), fake_llm=True),
                             dg.DagsterInstance.ephemeral())
    assert report.success
    for table in ("entities", "relationships", "communities", "text_units"):
        assert pl.read_parquet(out / f"{table}.parquet").equals(
            pl.read_parquet(ref / f"{table}.parquet")), table


def cached_replies(out: Path, stage: str) -> int:
    """Rows of ``stage`` in the output's LLM cache (0 while it does not exist yet)."""
    db = out / "llm_cache.sqlite"
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db, timeout=1) as con:
            return con.execute("SELECT count(*) FROM llm_calls WHERE stage = ?",
                               (stage,)).fetchone()[0]
    except sqlite3.Error:  # created but not yet holding the table
        return 0


@pytest.mark.parametrize("where", ["inside_extraction", "at_the_stage_boundary"])
def test_a_killed_index_resumes_and_asks_the_model_nothing_twice(tmp_path, home, where):
    """kill -9 inside the extraction stage (some units' replies cached, the stage's
    tables not written) or once it has finished (its tables written, the reports stage
    under way): the next index reuses every reply and table the killed one finished."""
    inp, out = tmp_path / "input", tmp_path / "out"
    inp.mkdir()
    (inp / "staves.txt").write_text(excerpt(20000, 12000), encoding="utf-8")
    first = start_index(home, inp, out, tmp_path / "first.log", 1.0)
    stage, need = (("extraction", 2) if where == "inside_extraction"
                   else ("community_reports", 1))
    try:
        wait_for(lambda: cached_replies(out, stage) >= need, 900, f"{need} {stage} replies",
                 first)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    done = cached_replies(out, "extraction")
    before = read_stage_stats(out).get("extraction")

    second = start_index(home, inp, out, tmp_path / "second.log")
    assert wait_exit(second, tmp_path / "second.log") == 0, \
        (tmp_path / "second.log").read_text()[-3000:]
    total = cached_replies(out, "extraction")
    after = read_stage_stats(out)["extraction"]
    if where == "inside_extraction":
        assert before is None  # the killed stage wrote nothing
        assert 2 <= done < total
        # the resumed stage got the killed run's replies from the cache, asked the rest
        llm = after["llm"]
        assert llm["cache_hits"] == done and llm["calls"] == total - done
    else:
        assert before is not None and done == total  # extraction had finished
        assert after == before  # and was not run again
    ref = tmp_path / "ref"
    _, report = index_folder(build_resources(str(inp), str(ref), fake_llm=True),
                             dg.DagsterInstance.ephemeral())
    assert report.success
    for table in ("entities", "relationships", "community_reports"):
        assert pl.read_parquet(out / f"{table}.parquet").equals(
            pl.read_parquet(ref / f"{table}.parquet")), table


def test_a_second_writer_waits_naming_the_holder_and_a_blocked_step_sleeps(tmp_path, home):
    inp = corpus(tmp_path)
    out_a, out_b = tmp_path / "out_a", tmp_path / "out_b"
    holder = start_index(home, inp, out_a, tmp_path / "holder.log", 300)
    procs = [holder]
    try:
        wait_for(lambda: llm_slot_holders(home), 120, "the llm pool slot", holder)
        # the same output folder: waits for the lock, naming who holds it
        same = start_index(home, inp, out_a, tmp_path / "same.log")
        # another output folder: gets its own lock, then waits for the llm pool slot
        other = start_index(home, inp, out_b, tmp_path / "other.log")
        procs += [same, other]
        wait_for(lambda: "waiting for the output folder" in (tmp_path / "same.log").read_text(),
                 120, "the lock message", same)
        message = (tmp_path / "same.log").read_text()
        assert f"pid {holder.pid}" in message and "(kgloom index) since" in message
        wait_for(lambda: "blocked by limit for pool llm" in (tmp_path / "other.log").read_text(),
                 120, "the pool wait", other)

        # a step blocked on the pool sleeps: under a tenth of a core over 3 s (spinning: 40-100 %)
        cpu = psutil.Process(other.pid)
        before, t0 = sum(cpu.cpu_times()[:2]), time.monotonic()
        time.sleep(3)
        share = (sum(cpu.cpu_times()[:2]) - before) / (time.monotonic() - t0)
        assert share < 0.1, f"the blocked process used {share:.0%} of a core"

        # Ctrl-C stops both waiting commands within seconds, as interrupted (130)
        for proc in (same, other):
            proc.send_signal(signal.SIGINT)
        assert same.wait(timeout=30) == 130, (tmp_path / "same.log").read_text()[-2000:]
        assert other.wait(timeout=30) == 130, (tmp_path / "other.log").read_text()[-2000:]
        with open_instance(home) as instance:
            statuses = {r.status for r in instance.get_runs()
                        if r.tags.get("kgloom/pid") == str(other.pid)}
            assert statuses and dg.DagsterRunStatus.STARTED not in statuses
            pending = instance.event_log_storage.get_concurrency_info("llm").pending_steps
            assert not [p for p in pending if p.run_id not in llm_slot_holders(home)]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
    # the holder was killed: recovery frees its slot
    with open_instance(home) as instance:
        assert [r.pid for r in recover_dead_runs(instance)] == [str(holder.pid)]
    assert llm_slot_holders(home) == set()


def test_runs_of_dead_processes_are_failed_and_freed_and_live_ones_kept():
    import logging

    from dagster._core.launcher import WorkerStatus
    from dagster._daemon.monitoring.run_monitoring import monitor_started_run

    from kgloom.core.processes import process_tags
    from kgloom.pipelines.launcher import PidCheckingRunLauncher

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead_tags = process_tags(sleeper.pid)
    sleeper.kill()
    sleeper.wait()
    launcher = {"module": "kgloom.pipelines.launcher", "class": "PidCheckingRunLauncher"}
    with dg.instance_for_test(overrides={"run_launcher": launcher,
                                         "run_monitoring": {"enabled": True}}) as instance:
        assert isinstance(instance.run_launcher, PidCheckingRunLauncher)
        storage = instance.event_log_storage
        storage.set_concurrency_slots("llm", 1)
        runs = {}
        for name, tags in (("dead", dead_tags), ("dead_daemon_run", dead_tags),
                           ("alive", process_tags()),
                           ("elsewhere", {**dead_tags, "kgloom/host": "another-host"})):
            run = dg.DagsterRun(job_name="ingest_job", status=dg.DagsterRunStatus.STARTED,
                                tags={**tags, "kgloom/command": "kgloom index"})
            runs[name] = instance.add_run(run).run_id
        assert storage.claim_concurrency_slot("llm", runs["dead"], "extracted_graph").is_claimed
        health = {n: instance.run_launcher.check_run_worker_health(
            instance.get_run_by_id(r)).status for n, r in runs.items()}
        assert health == {"dead": WorkerStatus.FAILED, "dead_daemon_run": WorkerStatus.FAILED,
                          "alive": WorkerStatus.RUNNING, "elsewhere": WorkerStatus.RUNNING}

        # the daemon's run monitoring fails a run whose worker is gone
        record = instance.get_run_record_by_id(runs["dead_daemon_run"])
        monitor_started_run(instance, None, record, logging.getLogger("test"))
        assert instance.get_run_by_id(runs["dead_daemon_run"]).status == \
            dg.DagsterRunStatus.FAILURE

        # the CLI's recovery fails the other one and frees its slot
        recovered = recover_dead_runs(instance)
        assert [r.run_id for r in recovered] == [runs["dead"]]
        assert "its process is gone" in recovered[0].describe()
        status = {n: instance.get_run_by_id(r).status for n, r in runs.items()}
        assert status == {"dead": dg.DagsterRunStatus.FAILURE,
                          "dead_daemon_run": dg.DagsterRunStatus.FAILURE,
                          "alive": dg.DagsterRunStatus.STARTED,
                          "elsewhere": dg.DagsterRunStatus.STARTED}
        assert not storage.get_concurrency_info("llm").claimed_slots
        assert recover_dead_runs(instance) == []  # idempotent


RACER = """
import sys, time
from pathlib import Path
import dagster as dg
from kgloom.cli.runner import register_partitions
home, rounds, go = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
instance = dg.DagsterInstance.from_config(home)
print("ready", flush=True)
while not go.exists():
    time.sleep(0.001)
for r in range(rounds):  # both processes register the same keys, round after round
    register_partitions(instance, [f"r{r:03d}-{i}.txt" for i in range(5)])
"""


def test_two_processes_registering_partitions_at_once_both_succeed(tmp_path):
    # Registering reads the keys, then inserts the missing ones; two processes doing it
    # in lockstep collide (measured: Dagster's bare add_dynamic_partitions failed 77 of
    # 600 rounds with "UNIQUE constraint failed").
    rounds, home, go = 150, tmp_path / "home", tmp_path / "go"
    home.mkdir()
    with open_instance(home):  # create the storage first, as a used instance has it
        pass
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    racers = [subprocess.Popen([sys.executable, "-c", RACER, str(home), str(rounds), str(go)],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True) for _ in range(2)]
    for proc in racers:
        assert proc.stdout.readline().strip() == "ready"
    go.touch()
    for proc in racers:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
    with open_instance(home) as instance:
        assert len(instance.get_dynamic_partitions(INPUT_FILES)) == rounds * 5


def test_two_index_commands_started_together_on_a_fresh_instance_both_succeed(tmp_path):
    # the case: two `kgloom index` at once on a new DAGSTER_HOME (both create the
    # instance's storage, register the same partitions and want the one llm pool slot)
    inp, home = corpus(tmp_path), tmp_path / "fresh_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(INSTANCE_TEMPLATE.read_text())
    outs = [tmp_path / "out_a", tmp_path / "out_b"]
    procs = [start_index(home, inp, out, tmp_path / f"{out.name}.log") for out in outs]
    try:
        for proc, out in zip(procs, outs):
            log = tmp_path / f"{out.name}.log"
            assert wait_exit(proc, log) == 0, log.read_text()[-3000:]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for table in ("documents", "entities", "relationships", "communities", "text_units"):
        assert pl.read_parquet(outs[0] / f"{table}.parquet").equals(
            pl.read_parquet(outs[1] / f"{table}.parquet")), table
    with open_instance(home) as instance:
        assert instance.get_dynamic_partitions(INPUT_FILES) == ["stave1.txt"]
        assert {r.status for r in instance.get_runs()} == {dg.DagsterRunStatus.SUCCESS}


def test_partition_registration_retries_a_lost_race():
    from sqlalchemy.exc import IntegrityError

    instance = dg.DagsterInstance.ephemeral()
    real = instance.add_dynamic_partitions
    calls = []

    def racing(name, keys):  # another process inserts the same keys first
        calls.append(list(keys))
        if len(calls) == 1:
            real(name, keys)
            raise IntegrityError("INSERT", {}, Exception("UNIQUE constraint failed"))
        return real(name, keys)

    instance.add_dynamic_partitions = racing
    assert register_partitions(instance, ["a.txt", "b.txt"]) == []
    assert sorted(instance.get_dynamic_partitions(INPUT_FILES)) == ["a.txt", "b.txt"]
    assert register_partitions(instance, ["a.txt", "c.txt"]) == ["c.txt"]


def lancedb_versions(out: Path) -> dict[str, int]:
    import lancedb

    db = lancedb.connect(str(out / "lancedb"))
    return {n: db.open_table(n).version for n in ("text_units", "entities", "community_reports")}


def file_times(out: Path) -> dict[str, int]:
    return {str(p.relative_to(out)): p.stat().st_mtime_ns for p in out.rglob("*")
            if p.is_file() and "lancedb" not in p.parts}


def test_no_change_is_a_no_op_and_a_retry_runs_from_the_failure(tmp_path, monkeypatch):
    inp, out = corpus(tmp_path), tmp_path / "out"
    (inp / "stave3.md").write_text(excerpt(90000, 2000), encoding="utf-8")
    with dg.instance_for_test() as instance:
        resources = build_resources(str(inp), str(out), fake_llm=True)
        _, first = index_folder(resources, instance)
        assert first.success and first.graph_run
        versions, times = lancedb_versions(out), file_times(out)

        # nothing changed: no run at all, no file rewritten, no LanceDB version
        diff, again = index_folder(resources, instance)
        assert diff.unchanged == ["stave1.txt", "stave3.md"]
        assert again.graph_up_to_date and not again.graph_run and not again.partition_runs
        assert lancedb_versions(out) == versions and file_times(out) == times

        # the nightly schedule skips too (its resources from the env, as the code location's)
        monkeypatch.setenv("KGLOOM_INPUT_DIR", str(inp))
        monkeypatch.setenv("KGLOOM_OUTPUT_DIR", str(out))
        monkeypatch.setenv("KGLOOM_FAKE_LLM", "1")
        from kgloom.pipelines.jobs import nightly_index_schedule

        with dg.build_schedule_context(instance=instance,
                                       resources=build_resources()) as ctx:
            tick = nightly_index_schedule.evaluate_tick(ctx)
        assert not tick.run_requests and "up to date" in tick.skip_message

        # a changed file, and the report stage fails: the stages before it succeeded
        (inp / "stave3.md").write_text(excerpt(120000, 2000), encoding="utf-8")

        def broken(*args, **kwargs):
            raise RuntimeError("the report stage broke")

        real = community_reports.build_community_reports
        monkeypatch.setattr("kgloom.assets.report_assets.build_community_reports", broken)
        _, failed = index_folder(resources, instance)
        assert failed.graph_ok is False
        # the retry runs the failed stage and what depends on it, not the whole graph
        monkeypatch.setattr("kgloom.assets.report_assets.build_community_reports", real)
        _, retry = index_folder(resources, instance)
        assert retry.success and not retry.partition_runs
        assert retry.graph_assets == ["community_reports", "index_summary", "vector_index"]
        assert lancedb_versions(out)["text_units"] > versions["text_units"]
        _, last = index_folder(resources, instance)
        assert last.graph_up_to_date

        # without reports (--no-reports): stale reports alone do not make the graph stale
        (inp / "stave1.txt").write_text(excerpt(60000, 2500), encoding="utf-8")
        _, bare = index_folder(resources, instance, reports=False)
        assert bare.success and "community_reports" not in bare.graph_assets
        _, bare_again = index_folder(resources, instance, reports=False)
        assert bare_again.graph_up_to_date
        _, full = index_folder(resources, instance)
        assert full.graph_assets == ["community_reports", "index_summary", "vector_index"]


def run_cli(args: list[str], home: Path, monkeypatch) -> tuple[int, str]:
    from kgloom.cli import app

    monkeypatch.setenv("DAGSTER_HOME", str(home))
    res = CliRunner().invoke(app, args)
    return res.exit_code, res.output


def test_no_loadable_document_exits_nonzero_and_an_empty_graph_is_loud(tmp_path, home,
                                                                       monkeypatch):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "cafe.txt").write_bytes("café".encode("cp1252"))
    (bad / "noise.txt").write_bytes(bytes(range(128, 256)) * 8)
    code, output = run_cli(["index", "--fake-llm", "--input-dir", str(bad), "--output-dir",
                            str(tmp_path / "out_bad")], home, monkeypatch)
    assert code == 1, output
    assert "no document could be loaded" in output and "cafe.txt" in output

    # a GBK-only folder: the book decodes, but no capitalized name: loud, not silent
    gbk = tmp_path / "gbk"
    gbk.mkdir()
    text = ("第一章 大雪纷飞的夜晚，老人独自坐在窗前，望着远方的群山。他想起了年轻时的朋友们，"
            "他们曾经一起走过很多地方。") * 40
    (gbk / "book.txt").write_bytes(text.encode("gbk"))
    out = tmp_path / "out_gbk"
    code, output = run_cli(["index", "--fake-llm", "--input-dir", str(gbk), "--output-dir",
                            str(out)], home, monkeypatch)
    assert code == 0, output
    assert "WARNING: the graph is empty: 0 entities from 1 document" in output
    assert "entities_found" in output and "have no candidate name" in output
    docs = pl.read_parquet(out / "documents.parquet")
    assert docs["encoding"].to_list() == ["gb18030"] and docs["text"][0] == text
    with open_instance(home) as instance:
        record = instance.get_latest_asset_check_evaluation_record(
            dg.AssetCheckKey(dg.AssetKey("extracted_graph"), "entities_found"))
        evaluation = record.event.dagster_event.event_specific_data
        assert not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.WARN
    summary = json.loads((out / "index-summary.json").read_text())
    assert summary["rows"]["documents"] == 1 and summary["rows"]["entities"] == 0


HOLD = """
import select, sys
from kgloom.core.lock import writer_lock
with writer_lock(sys.argv[1], "kgloom index"):
    print("held", flush=True)
    # until told to let go (a bound only against a test that died)
    select.select([sys.stdin], [], [], float(sys.argv[2]))
"""


@dg.asset
def probe(index: IndexConfigResource) -> None:
    """Writes one file to the output folder (needs the index resource, hence the lock)."""
    (index.out / "probe.txt").write_text("written while holding the lock")


def _release_when_the_run_waits(instance: dg.DagsterInstance, holder: subprocess.Popen,
                                seen: list[str], stop: threading.Event) -> None:
    """Poll the instance's event log until a run logs that it waits for the output
    folder; then (or when ``stop`` is set) tell ``holder`` to release the lock."""
    try:
        while not stop.is_set():
            for run in instance.get_runs():
                for entry in instance.all_logs(run.run_id):
                    if "waiting for the output folder" in (entry.user_message or ""):
                        seen.append(entry.user_message)
                        return
            time.sleep(0.2)
    finally:
        holder.stdin.write("release\n")
        holder.stdin.flush()


def test_a_dagster_run_waits_for_the_writer_lock_and_logs_the_holder(tmp_path):
    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out), "1800"], text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert holder.stdout.readline().strip() == "held"
    seen: list[str] = []
    stop = threading.Event()
    with dg.instance_for_test() as instance:
        # the lock is held until the run reports that it waits (not for a fixed time)
        releaser = threading.Thread(target=_release_when_the_run_waits,
                                    args=(instance, holder, seen, stop), daemon=True)
        releaser.start()
        try:
            result = dg.materialize([probe], instance=instance, resources={
                "index": IndexConfigResource(input_dir=str(tmp_path), output_dir=str(out))})
        finally:
            stop.set()
            releaser.join(timeout=60)
        logs = [e.user_message for e in instance.all_logs(result.run_id)]
        run = instance.get_run_by_id(result.run_id)
    holder.wait(timeout=60)
    assert seen, "the lock was released before the run said it waits"
    assert result.success and (out / "probe.txt").exists()
    assert holder.returncode == 0
    assert any(f"pid {holder.pid}" in m and "(kgloom index)" in m for m in logs), logs
    assert run.tags["kgloom/pid"] == str(os.getpid())  # the run records its process
