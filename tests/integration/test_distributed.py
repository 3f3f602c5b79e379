"""The documented multi-machine deployment, on 127.0.0.1: Dagster's celery executor with a
Redis broker, instance storage in PostgreSQL and two Celery workers; three partitions
ingested through them (fake LLM) equal an in-process run.

Skips, saying why, when redis-server, PostgreSQL (pg_ctl, initdb) or dagster-celery /
dagster-postgres are missing (``.ci/run`` installs redis-server with apt-get)."""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dagster as dg
import pytest

from kgloom.cli.runner import materialize_partitions, set_llm_pool_limit, sync_partitions
from kgloom.definitions import build_resources
from kgloom.llm.testing import free_port

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "data" / "input" / "a-christmas-carol.txt"
BIN = Path(sys.executable).parent


def _pg_tool(name: str) -> str | None:
    """pg_ctl / initdb on PATH, else in Debian's /usr/lib/postgresql/<version>/bin."""
    found = shutil.which(name) or sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found if isinstance(found, str) else (found[-1] if found else None)


def _missing() -> str:
    missing = [n for n in ("redis-server",) if not shutil.which(n)]
    missing += [n for n in ("initdb", "pg_ctl") if not _pg_tool(n)]
    missing += [m for m in ("dagster_celery", "dagster_postgres", "redis")
                if importlib.util.find_spec(m) is None]
    return ", ".join(missing)


pytestmark = [pytest.mark.integration, pytest.mark.skipif(
    bool(_missing()), reason=f"distributed deployment test needs {_missing()} "
    "(apt-get install redis-server postgresql; pip install dagster-celery dagster-postgres "
    "'celery[redis]', see deploy/README.md)")]


def _as_postgres_user() -> list[str]:
    """PostgreSQL refuses to run as root: run its tools as the postgres user then."""
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


def _wait(predicate, what: str, timeout: float, logs: list[Path]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    tails = "\n".join(f"--- {p}\n{p.read_text(errors='replace')[-1500:]}" for p in logs
                      if p.exists())
    raise AssertionError(f"{what} did not happen within {timeout} s\n{tails}")


@pytest.fixture(scope="module")
def services():
    """PostgreSQL and Redis on free 127.0.0.1 ports; yields their URLs; stops both."""
    base = Path(tempfile.mkdtemp(prefix="kgloom-dist-"))
    base.chmod(0o755)
    pg_dir, pg_port, redis_port = base / "pg", free_port(), free_port()
    pg_dir.mkdir()
    if os.geteuid() == 0:
        shutil.chown(pg_dir, "postgres", "postgres")
    sudo = _as_postgres_user()
    subprocess.run(sudo + [_pg_tool("initdb"), "-D", str(pg_dir), "-U", "dagster",
                           "--auth=trust", "-E", "UTF8"], check=True, capture_output=True)
    pg_log = base / "pg.log"
    pg_log.touch()
    if os.geteuid() == 0:
        shutil.chown(pg_log, "postgres", "postgres")
    subprocess.run(sudo + [_pg_tool("pg_ctl"), "-D", str(pg_dir), "-l", str(pg_log), "-w",
                           "-o", f"-p {pg_port} -k {pg_dir} -c listen_addresses=127.0.0.1",
                           "start"], check=True, capture_output=True)
    redis = subprocess.Popen(["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1",
                              "--save", "", "--appendonly", "no"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield {"base": base, "pg_url": f"postgresql+psycopg2://dagster@127.0.0.1:{pg_port}/postgres",
               "redis": f"redis://127.0.0.1:{redis_port}"}
    finally:
        redis.terminate()
        redis.wait(timeout=10)
        subprocess.run(sudo + [_pg_tool("pg_ctl"), "-D", str(pg_dir), "-m", "fast", "stop"],
                       capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def test_celery_workers_ingest_three_partitions_like_an_in_process_run(services, tmp_path):
    base = services["base"]
    text = BOOK.read_text(encoding="utf-8")
    start = text.index("Marley was dead")
    inp = tmp_path / "input"
    inp.mkdir()
    for i, name in enumerate(["stave1.txt", "notes/stave2.md", "stave3.txt"]):
        (inp / name).parent.mkdir(parents=True, exist_ok=True)
        (inp / name).write_text(text[start + 30000 * i: start + 30000 * i + 1500],
                                encoding="utf-8")
    home, out = base / "dagster_home", tmp_path / "celery_out"
    home.mkdir()
    (home / "dagster.yaml").write_text(
        f"storage:\n  postgres:\n    postgres_url: {services['pg_url']}\n"
        "concurrency:\n  pools:\n    default_limit: 2\ntelemetry:\n  enabled: false\n")
    celery_yaml = base / "celery.yaml"
    celery_yaml.write_text(f"execution:\n  config:\n    broker: {services['redis']}/0\n"
                           f"    backend: {services['redis']}/1\n")
    env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONPATH": str(ROOT),
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",  # celery, dagster
           "HF_HUB_OFFLINE": "1", "KGLOOM_EXECUTOR": "celery", "KGLOOM_FAKE_LLM": "1",
           "KGLOOM_INPUT_DIR": str(inp), "KGLOOM_OUTPUT_DIR": str(out),
           "KGLOOM_CELERY_BROKER": f"{services['redis']}/0",
           "KGLOOM_CELERY_BACKEND": f"{services['redis']}/1"}

    instance = dg.DagsterInstance.from_config(str(home))
    diff = sync_partitions(instance, str(inp), str(out))
    # the llm pool's row exists before three runs start at once: otherwise each run's
    # first step inserts the default limit and two can race on PostgreSQL's unique key
    # (Dagster's initialize_concurrency_limit_to_default; seen in 2 of ~6 full runs)
    set_llm_pool_limit(instance, 2)
    keys = sorted(diff.added)
    assert keys == ["notes/stave2.md", "stave1.txt", "stave3.txt"]

    workers, logs = [], []
    try:
        for name in ("w1", "w2"):
            log = base / f"worker-{name}.log"
            logs.append(log)
            workers.append(subprocess.Popen(
                [str(BIN / "dagster-celery"), "worker", "start", "-A", "dagster_celery.app",
                 "-y", str(celery_yaml), "--name", name, "--", "--concurrency", "1"],
                env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                start_new_session=True))  # its own process group: celery's children too
        _wait(lambda: all("ready." in p.read_text(errors="replace") for p in logs)
              or any(w.poll() is not None for w in workers),
              "both Celery workers ready", 120, logs)
        assert all(w.poll() is None for w in workers), [p.read_text()[-2000:] for p in logs]
        runs = [subprocess.Popen(
            [str(BIN / "dagster"), "job", "execute", "-m", "kgloom.definitions", "-j",
             "ingest_job", "--tags", json.dumps({"dagster/partition": key})],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for key in keys]
        outputs = [p.communicate(timeout=400)[0].decode(errors="replace") for p in runs]
        for key, p, o in zip(keys, runs, outputs):
            assert p.returncode == 0, f"{key}:\n{o[-3000:]}"
    finally:
        for w in workers:
            if w.poll() is None:
                os.killpg(w.pid, signal.SIGTERM)
        for w in workers:
            try:
                w.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(w.pid, signal.SIGKILL)

    # every step of the three runs ran in a Celery worker, and both workers took some
    records = instance.get_records_for_run
    done = [r for r in instance.get_runs() if r.job_name == "ingest_job"]
    assert len(done) == 3 and all(r.status == dg.DagsterRunStatus.SUCCESS for r in done)
    where = {}
    for run in done:
        for rec in records(run.run_id).records:
            ev = rec.event_log_entry.dagster_event
            if ev and ev.event_type_value == "ENGINE_EVENT" and ev.step_key and \
                    "Celery worker" in (ev.engine_event_data.metadata or {}):
                where[(run.tags["dagster/partition"], ev.step_key)] = \
                    ev.engine_event_data.metadata["Celery worker"].value
    assert len(where) == 9  # 3 partitions x documents, text_units, extracted_graph
    assert {w.split("@")[0] for w in where.values()} == {"w1", "w2"}

    # the same partitions in-process, one after another
    local = tmp_path / "local_out"
    resources = build_resources(str(inp), str(local), fake_llm=True)
    ephemeral = dg.DagsterInstance.ephemeral()
    sync_partitions(ephemeral, str(inp), str(local))
    assert materialize_partitions(keys, resources, ephemeral).success

    def tables(root: Path) -> dict[str, bytes]:
        return {str(p.relative_to(root)): p.read_bytes()
                for p in sorted((root / "stages" / "partitions").rglob("*.parquet"))}

    celery_tables, local_tables = tables(out), tables(local)
    assert len(local_tables) >= 3 * 5
    assert celery_tables.keys() == local_tables.keys()
    assert [k for k in local_tables if celery_tables[k] != local_tables[k]] == []
