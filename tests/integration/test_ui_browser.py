"""The Dagster UI end to end in a real browser (headless Debian Chromium via Playwright).

Starts ``kgloom ui`` (Dagster's ``dg dev``: webserver + daemon) as a new user would: no
DAGSTER_HOME exported, from a folder that is neither the repository nor the index, on a
free local port, with a two-file corpus and the fake LLM. Opens the asset graph, skips the
first-visit "Join the Dagster community" dialog, clicks "Materialize all" (and, when the
assets are partitioned, picks all partitions and launches the backfill in the launch
dialog), then waits through the index's instance for every asset (every partition) to be
materialized and checks that every run succeeded and the index files were written. Then
the CLI, from yet another folder, reads it back: ``kgloom status`` shows every asset ok
and ``kgloom index`` finds nothing new and the graph up to date.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # drives Chromium through the Dagster UI

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
EXPECTED_OUTPUTS = ["index-summary.json", "entities.parquet", "graph-nodes.parquet",
                    "community_reports.parquet"]
SERVER_START_TIMEOUT_S = 120
RUN_TIMEOUT_S = 300

CORPUS = {
    "lovelace.txt": "Ada Lovelace worked with Charles Babbage in London. Babbage designed the "
                    "Analytical Engine, and Lovelace wrote the first published program for "
                    "it.\n\nMary Somerville introduced Ada Lovelace to Charles Babbage.\n",
    "turing.txt": "Alan Turing studied at King's College, Cambridge. During the war Turing "
                  "worked at Bletchley Park with Joan Clarke and Gordon Welchman.\n\nAfter "
                  "the war Alan Turing moved to Manchester.\n",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _log_tail(path: Path, n_chars: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-n_chars:]
    except OSError:
        return "(no server log)"


def _partitioned_assets() -> tuple[dict, dict]:
    """Return ({dynamic partitions def name: def}, {asset key: partitions def}) of the
    code location's materializable assets (both empty while nothing is partitioned)."""
    import dagster as dg

    from kgloom.definitions import defs

    graph = defs.resolve_asset_graph()
    partitioned = {k: graph.get(k).partitions_def for k in graph.get_all_asset_keys()
                   if graph.get(k).is_materializable and graph.get(k).partitions_def}
    dynamic = {p.name: p for p in partitioned.values()
               if isinstance(p, dg.DynamicPartitionsDefinition) and p.name}
    return dynamic, partitioned


def _stop(proc: subprocess.Popen) -> None:
    """End kgloom ui's whole process group (dg dev, its webserver, daemon, code servers and
    run workers): SIGTERM, then SIGKILL whatever is left after 10 s (dg dev can take
    longer than that to shut down while runs are in progress)."""
    deadline = time.monotonic() + 10
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        while time.monotonic() < deadline:  # until the whole group is gone
            proc.poll()
            os.killpg(proc.pid, 0)
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


@pytest.fixture
def dagster_ui(tmp_path):
    """Start ``kgloom ui`` on a two-file corpus; yield a dict with url, home (the index's
    instance), input, output, partition keys, the environment and log path; end the
    process group on teardown."""
    from kgloom.core.inputs import list_input_files

    input_dir, output_dir, elsewhere = (tmp_path / "input", tmp_path / "output",
                                        tmp_path / "elsewhere")
    for d in (input_dir, elsewhere):
        d.mkdir()
    for name, text in CORPUS.items():
        (input_dir / name).write_text(text, encoding="utf-8")
    _, partitioned = _partitioned_assets()
    keys = [p.relative_to(input_dir).as_posix() for p in list_input_files(input_dir)]

    port = _free_port()
    env = {k: v for k, v in os.environ.items()
           if k not in ("DAGSTER_HOME", "KGLOOM_INPUT_DIR", "KGLOOM_OUTPUT_DIR")}
    env.update(KGLOOM_FAKE_LLM="1", HF_HUB_OFFLINE="1", PYTHONPATH=os.pathsep.join(
        [str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    log_path = tmp_path / "kgloom-ui.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kgloom.cli", "ui", "--input-dir", str(input_dir),
             "--output-dir", str(output_dir), "--host", "127.0.0.1", "--port", str(port)],
            cwd=elsewhere, env=env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"kgloom ui exited with {proc.returncode}:\n{_log_tail(log_path)}")
            try:
                with urllib.request.urlopen(f"{url}/server_info", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"kgloom ui not up after {SERVER_START_TIMEOUT_S} s:\n"
                            f"{_log_tail(log_path)}")
            time.sleep(0.5)
        yield {"url": url, "home": output_dir / ".dagster_home", "input": input_dir,
               "output": output_dir, "keys": keys, "partitioned": partitioned, "env": env,
               "log": log_path, "proc": proc}
    finally:
        _stop(proc)


def _all_materialized(instance, asset_keys, partitioned: dict, keys: list[str]) -> bool:
    for key in asset_keys:
        if key in partitioned:
            if not set(keys) <= instance.get_materialized_partitions(key):
                return False
        elif instance.get_latest_materialization_event(key) is None:
            return False
    return True


def _read_back_from_the_cli(ui: dict, cwd: Path) -> None:
    """What the UI built, seen by the CLI from another folder with no DAGSTER_HOME: every
    asset ok in ``kgloom status``, and ``kgloom index`` finds nothing new to do."""
    cwd.mkdir()
    folders = ["--input-dir", str(ui["input"]), "--output-dir", str(ui["output"])]

    def kgloom(*args: str) -> str:
        res = subprocess.run([sys.executable, "-m", "kgloom.cli", *args, *folders],
                             cwd=cwd, env=ui["env"], capture_output=True, text=True,
                             timeout=RUN_TIMEOUT_S)
        assert res.returncode == 0, res.stdout + res.stderr
        return res.stdout + res.stderr

    status = kgloom("status")
    states = dict(re.findall(r"^(\w+)\s+(ok|stale|missing|failed)\b", status, re.M))
    assert states and set(states.values()) == {"ok"}, status
    index = kgloom("index", "--fake-llm")
    assert f"0 new, 0 changed, 0 deleted, {len(ui['keys'])} unchanged" in index, index
    assert "graph up to date" in index, index


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(),
                    reason=f"{CHROMIUM} is missing (apt-get install chromium)")
@pytest.mark.skipif(importlib.util.find_spec("playwright") is None,
                    reason="the playwright Python package is missing (pip install playwright)")
def test_materialize_all_from_the_ui(dagster_ui, tmp_path):
    import dagster as dg
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import expect, sync_playwright

    from kgloom.definitions import defs

    graph = defs.resolve_asset_graph()
    asset_keys = [k for k in graph.get_all_asset_keys() if graph.get(k).is_materializable]
    partitioned, keys = dagster_ui["partitioned"], dagster_ui["keys"]
    terminal = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE,
                dg.DagsterRunStatus.CANCELED}
    t0 = time.monotonic()

    with sync_playwright() as pw, dg.DagsterInstance.from_config(
            str(dagster_ui["home"])) as instance:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(30_000)
        try:
            page.goto(f"{dagster_ui['url']}/asset-groups")
            # "materialization Materialize all" (accessible names start with the icon's name;
            # "Materialize all..." when a launch dialog will follow)
            materialize = page.get_by_role("button", name=re.compile(r"\bMaterialize all"))
            expect(materialize).to_be_enabled(timeout=90_000)

            # First visit with a fresh DAGSTER_HOME: the community dialog opens 1 s after
            # its query answers; skip it (it would cover the page).
            nux = page.get_by_role("dialog").filter(has_text="Join the Dagster community")
            try:
                nux.wait_for(state="visible", timeout=15_000)
            except PlaywrightTimeout:  # not shown (dismissed before): nothing to skip
                pass
            else:
                nux.get_by_role("button", name="Skip", exact=True).click()
                expect(nux).to_be_hidden()

            materialize.click()
            launch_dialog = page.get_by_role("dialog").filter(
                has_text="Launch runs to materialize")
            launched = page.get_by_text(re.compile(r"Launched run|Created backfill"))
            expect(launch_dialog.or_(launched).first).to_be_visible()
            if launch_dialog.is_visible():
                # partitioned assets: choose every partition, then launch
                launch_dialog.get_by_role("button", name="All", exact=True).click()
                expect(launch_dialog).to_contain_text(f"{len(keys)} partitions")
                launch_dialog.get_by_role(
                    "button", name=re.compile(r"\bLaunch (backfill|\d+ runs?)$")).click()
                expect(launch_dialog).to_be_hidden()
            expect(launched).to_be_visible()
            t_launch = time.monotonic()

            # Wait until every asset (every partition of the partitioned ones) is
            # materialized and no run is in progress, or a run ends badly. (An asset
            # backfill's own status turns COMPLETED only on the daemon's next 30 s tick.)
            deadline = time.monotonic() + RUN_TIMEOUT_S
            while True:
                runs = instance.get_runs()
                if any(r.status in terminal - {dg.DagsterRunStatus.SUCCESS} for r in runs):
                    break
                if (runs and all(r.status in terminal for r in runs)
                        and _all_materialized(instance, asset_keys, partitioned, keys)):
                    break
                assert dagster_ui["proc"].poll() is None, (
                    f"kgloom ui died:\n{_log_tail(dagster_ui['log'])}")
                assert time.monotonic() < deadline, (
                    f"runs not finished after {RUN_TIMEOUT_S} s: "
                    f"{[(r.run_id[:8], r.status.value) for r in runs]}, backfills "
                    f"{[(b.backfill_id, b.status.value) for b in instance.get_backfills()]}"
                    f"\n{_log_tail(dagster_ui['log'])}")
                time.sleep(1)
            t_done = time.monotonic()

            statuses = {r.run_id[:8]: r.status.value for r in runs}
            backfills = {b.backfill_id: b.status.value for b in instance.get_backfills()}
            assert not any(re.search("FAIL|CANCEL", v) for v in backfills.values()), backfills
            assert runs, "no run was launched"
            assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs), (
                f"run statuses {statuses}\n{_log_tail(dagster_ui['log'])}")
            for name in EXPECTED_OUTPUTS:
                assert (dagster_ui["output"] / name).exists(), name
            summary = json.loads((dagster_ui["output"] / "index-summary.json").read_text())
            assert summary["rows"]["documents"] == len(CORPUS)
            print(f"UI flow {t_launch - t0:.1f} s, runs {t_done - t_launch:.1f} s, "
                  f"{len(runs)} run(s), backfills {backfills}")
            log = _log_tail(dagster_ui["log"], 200_000)
            assert "SupersessionWarning" not in log and "temporary directory" not in log, log
            _read_back_from_the_cli(dagster_ui, tmp_path / "another")
        except BaseException:
            shot = tmp_path / "failure.png"
            try:
                page.screenshot(path=str(shot), full_page=True)
                print(f"screenshot: {shot}")
            except Exception as e:  # noqa: BLE001 - keep the original failure
                print(f"no screenshot: {e}")
            raise
        finally:
            browser.close()
