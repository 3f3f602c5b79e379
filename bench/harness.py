"""The one way a bench builds an index: ``kgloom index`` in its own process.

Every bench that needs a fresh index calls :func:`build_index`: the command a user runs
(``python -m kgloom.cli index``), with the source tree ``src`` on ``PYTHONPATH`` (this
checkout by default; a ``git archive`` of another commit for bench_speed.py's baseline),
its own ``DAGSTER_HOME`` (default ``<output_dir>/../dagster_home``, so runs of different
benches never share an instance), ``HF_HUB_OFFLINE=1``, and its output in a log file.
A separate process gives every bench the same figures, measured the same way: wall
seconds of the whole command, CPU seconds and peak resident memory of the process
(``os.wait4``'s resource usage; with ``sample_rss`` also a 0.2 s psutil timeline over
the process and its children), the load average before and after, and the JSON summary
the command prints (LLM calls this run, rows, partition runs, cost).

:func:`write_input` writes the benches' standard corpora into an input folder: the
bundled book, its 24,000-character slice from "Marley was dead", the 2Wiki development
passages (optionally the first N), one JSONL file per input.

Benches that read an index they are given (``--output-dir`` / ``--index``) build
nothing; bench_quality.py runs extraction and resolution alone (no Dagster, no
summaries or reports) and so calls the domain functions itself.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from bench.stamp import ROOT, load_average

BOOK = ROOT / "data" / "input" / "a-christmas-carol.txt"
WIKI = ROOT / "bench" / "data" / "2wiki-dev" / "corpus.jsonl"
SLICE_START, SLICE_CHARS = "Marley was dead", 24_000
CORPORA = ("book", "slice", "2wiki")


def book_slice(chars: int = SLICE_CHARS) -> str:
    """``chars`` characters of the bundled book from "Marley was dead"."""
    text = BOOK.read_text(encoding="utf-8")
    start = text.index(SLICE_START)
    return text[start:start + chars]


def write_input(corpus: str, folder: Path, limit: int = 0,
                chars: int = SLICE_CHARS) -> Path:
    """Write one of :data:`CORPORA` into ``folder`` (created) and return the file:
    ``book`` (a copy of the bundled book), ``slice`` (:func:`book_slice` of ``chars``,
    ``marley-slice.txt``), ``2wiki`` (the development passages, the first ``limit`` when
    non-zero, ``2wiki-dev.jsonl``).

    Raises:
        ValueError: on another corpus name.
    """
    folder.mkdir(parents=True, exist_ok=True)
    if corpus == "book":
        dest = folder / BOOK.name
        shutil.copyfile(BOOK, dest)
    elif corpus == "slice":
        dest = folder / "marley-slice.txt"
        dest.write_text(book_slice(chars), encoding="utf-8")
    elif corpus == "2wiki":
        lines = WIKI.read_text(encoding="utf-8").splitlines()
        lines = lines[:limit] if limit else lines
        dest = folder / "2wiki-dev.jsonl"
        dest.write_text("\n".join(lines) + "\n", encoding="utf-8")
    else:
        raise ValueError(f"unknown corpus {corpus!r}; one of {CORPORA}")
    return dest


def export_ref(ref: str, dest: Path) -> str:
    """Unpack ``git archive <ref>`` of this repository into ``dest`` (a source tree for
    :func:`build_index`'s ``src``, so editing the work tree during a run changes
    nothing); return the short commit."""
    commit = subprocess.run(["git", "rev-parse", "--short", ref], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.strip()
    tar = subprocess.run(["git", "archive", "--format=tar", ref], cwd=ROOT, check=True,
                         capture_output=True).stdout
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
        tf.extractall(dest, filter="data")
    return commit


class PeakRSS:
    """Samples the summed RSS (bytes) of a process and its children every ``interval``
    seconds in a thread; ``peak`` and ``timeline`` ((seconds since start, bytes) pairs;
    ``t0_epoch`` is the start as a Unix time) until :meth:`stop`."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        import psutil

        self._psutil = psutil
        self.proc, self.interval, self.peak = psutil.Process(pid), interval, 0
        self.timeline: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.t0 = time.perf_counter()
        self.t0_epoch = time.time()  # to line the samples up with the event log's times
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                procs = [self.proc] + self.proc.children(recursive=True)
                rss = sum(p.memory_info().rss for p in procs)
            except self._psutil.Error:
                rss = 0
            self.peak = max(self.peak, rss)
            self.timeline.append((round(time.perf_counter() - self.t0, 1), rss))
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


@dataclasses.dataclass
class IndexRun:
    """One ``kgloom index`` command: what it was and what it cost.

    ``wall_seconds``: the whole command (imports and model load included);
    ``cpu_seconds``: user + system CPU of the process and the children it waited for;
    ``peak_rss_mb``: its peak resident memory (MiB; ``ru_maxrss``, or the sampled peak
    over the process tree when larger); ``load_before`` / ``load_after``: 1, 5, 15-minute
    load averages; ``summary``: the JSON the command printed on stdout (empty when it
    printed none); ``log``: stdout and stderr.
    """

    command: list[str]
    output_dir: Path
    returncode: int
    wall_seconds: float
    cpu_seconds: float
    peak_rss_mb: float
    load_before: list[float]
    load_after: list[float]
    log: Path
    summary: dict
    rss: PeakRSS | None = None

    @property
    def success(self) -> bool:
        return self.returncode == 0


def index_command(input_dir: Path, output_dir: Path, fake_llm: bool = False,
                  model_path: str = "", llm_urls: Sequence[str] = (),
                  llm_concurrency: int | None = None, reports: bool = True,
                  force: bool = False, settings: Sequence[str] = ()) -> list[str]:
    """The ``kgloom index`` command line for these options (``settings``: ``key=value``
    index settings, passed as ``--set``)."""
    cmd = [sys.executable, "-m", "kgloom.cli", "index", "--input-dir", str(input_dir),
           "--output-dir", str(output_dir)]
    cmd += ["--fake-llm"] if fake_llm else []
    cmd += ["--model-path", model_path] if model_path else []
    for url in llm_urls:
        cmd += ["--llm-url", url]
    cmd += ["--llm-concurrency", str(llm_concurrency)] if llm_concurrency else []
    cmd += [] if reports else ["--no-reports"]
    cmd += ["--force"] if force else []
    for kv in settings:
        cmd += ["--set", kv]
    return cmd


def _printed_summary(stdout: str) -> dict:
    """The JSON object the command printed on stdout (the last one starting at a line
    ``{``; lines after it are ignored); empty when there is none."""
    lines = stdout.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.rstrip("\n") == "{"]
    if not starts:
        return {}
    try:
        obj, _ = json.JSONDecoder().raw_decode("".join(lines[starts[-1]:]))
    except json.JSONDecodeError:
        return {}
    return obj if isinstance(obj, dict) else {}


def build_index(input_dir: Path, output_dir: Path, *, dagster_home: Path | None = None,
                src: Path = ROOT, log: Path | None = None, check: bool = True,
                sample_rss: bool = False, env: dict[str, str] | None = None,
                fake_llm: bool = False, model_path: str = "", llm_urls: Sequence[str] = (),
                llm_concurrency: int | None = None, reports: bool = True,
                force: bool = False, settings: Sequence[str] = ()) -> IndexRun:
    """Run ``kgloom index`` on ``input_dir`` into ``output_dir`` in its own process and
    return the :class:`IndexRun`.

    Args:
        dagster_home: the run's Dagster instance (default ``output_dir.parent /
            "dagster_home"``; created).
        src: the source tree on ``PYTHONPATH`` and the working folder.
        log: where stdout and stderr go (default ``output_dir.parent / "index.log"``);
            stdout alone also goes to ``<log>.stdout``.
        check: raise when the command fails.
        sample_rss: sample the process tree's RSS every 0.2 s (``IndexRun.rss``).
        env: extra environment variables.
        fake_llm, model_path, llm_urls, llm_concurrency, reports, force, settings: the
            command's options (:func:`index_command`).

    Raises:
        SystemExit: when ``check`` and the command exits non-zero (names the log).
    """
    output_dir, home = Path(output_dir), Path(dagster_home or Path(output_dir).parent
                                              / "dagster_home")
    home.mkdir(parents=True, exist_ok=True)
    log = Path(log or output_dir.parent / "index.log")
    log.parent.mkdir(parents=True, exist_ok=True)
    out_path = log.with_name(log.name + ".stdout")
    cmd = index_command(input_dir, output_dir, fake_llm, model_path, llm_urls,
                        llm_concurrency, reports, force, settings)
    run_env = {**os.environ, "DAGSTER_HOME": str(home.resolve()), "HF_HUB_OFFLINE": "1",
               "PYTHONPATH": str(src), **(env or {})}
    before = load_average()
    t0 = time.perf_counter()
    with log.open("w") as err, out_path.open("w") as out:
        proc = subprocess.Popen(cmd, env=run_env, cwd=src, stdout=out, stderr=err)
        sampler = PeakRSS(proc.pid) if sample_rss else None
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if sampler:
            sampler.stop()
    wall = time.perf_counter() - t0
    stdout = out_path.read_text()
    with log.open("a") as err:
        err.write(stdout)
    peak = usage.ru_maxrss / 1024  # KiB on Linux
    if sampler:
        peak = max(peak, sampler.peak / 2**20)
    run = IndexRun(command=cmd, output_dir=output_dir, returncode=proc.returncode,
                   wall_seconds=round(wall, 1),
                   cpu_seconds=round(usage.ru_utime + usage.ru_stime, 1),
                   peak_rss_mb=round(peak, 1), load_before=before,
                   load_after=load_average(), log=log, summary=_printed_summary(stdout),
                   rss=sampler)
    if check and not run.success:
        raise SystemExit(f"kgloom index failed ({run.returncode}); see {log}")
    return run
