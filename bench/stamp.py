"""What every bench result is stamped with, and how it is saved (one place for both).

Every result JSON under bench/results/ carries a ``stamp`` object (:func:`stamp`):

- ``commit``: the short commit of the git checkout holding ``where`` (``+dirty`` added,
  with ``dirty=True``, when tracked files differ from it); outside a checkout (a
  ``git archive`` copy) env ``BENCH_COMMIT``, else ``"unknown"``;
- ``date``: UTC, ISO 8601 to the second;
- ``host``: machine name, CPU count, Python version and platform;
- ``load_average``: ``os.getloadavg()`` (1, 5, 15 minutes), rounded to 2 places: the
  machines are shared, so read every figure with the load beside it;
- ``settings``: the options the bench ran with (its argparse namespace, JSON-safe);
- ``command``: the command line that ran it.

:func:`save_result` writes a result with its stamp; :func:`save_json` writes any JSON;
:func:`when` gives the ``commit``, ``date`` and ``load_average`` keys some results also
carry at their top level.
Standard library only: graphrag_compat.py imports it from GraphRAG's own virtualenv.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def commit(where: str | Path = ROOT, dirty: bool = False) -> str:
    """Short commit of the checkout holding ``where`` (``+dirty`` when ``dirty`` and
    tracked files changed); env ``BENCH_COMMIT`` when ``where`` is not in a checkout (a
    run from a ``git archive`` snapshot), else ``"unknown"``."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(where), *args], capture_output=True,
                              text=True, check=True).stdout.strip()

    try:
        short = git("rev-parse", "--short", "HEAD")
        if dirty and git("status", "--porcelain", "--untracked-files=no"):
            short += "+dirty"
        return short
    except (subprocess.CalledProcessError, FileNotFoundError):
        return os.environ.get("BENCH_COMMIT", "unknown")


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages (``os.getloadavg``), rounded to 2 places."""
    return [round(x, 2) for x in os.getloadavg()]


def host() -> dict[str, Any]:
    """The machine: name, CPU count, Python version and platform string."""
    return {"name": platform.node(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "platform": platform.platform()}


def command() -> str:
    """The command line of this process as typed (``sys.orig_argv``: ``python
    bench/x.py ...`` or ``python -m bench x ...``), the interpreter written ``python``."""
    argv = list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])
    return shlex.join(["python", *argv[1:]])


def _json_safe(value: Any) -> Any:
    """``value`` with paths and other objects JSON cannot hold as strings."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_json_safe(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def when(where: str | Path = ROOT, dirty: bool = False) -> dict[str, Any]:
    """``{"commit", "date", "load_average"}`` now: the top-level keys some benches wrote
    before the ``stamp`` object (kept for their readers), and bench_serve.py's start and
    end."""
    return {"commit": commit(where, dirty), "date": _now(), "load_average": load_average()}


def _now() -> str:
    """UTC now, ISO 8601 to the second."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def stamp(where: str | Path = ROOT, dirty: bool = False,
          settings: argparse.Namespace | dict | None = None) -> dict[str, Any]:
    """``{"commit", "date", "host", "load_average", "settings", "command"}`` (see the
    module doc); ``settings``: the bench's options (an argparse namespace or a dict)."""
    opts = vars(settings) if isinstance(settings, argparse.Namespace) else settings or {}
    return {"commit": commit(where, dirty),
            "date": _now(),
            "host": host(), "load_average": load_average(),
            "settings": _json_safe(opts), "command": command()}


def save_json(path: str | Path, obj: Any, indent: int = 2, default=None) -> None:
    """Write ``obj`` to ``path`` as UTF-8 JSON (folder created; written to a temporary
    file, then renamed, so a stopped run never leaves half a file) and say so."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=indent, ensure_ascii=False, default=default)
                   + "\n", encoding="utf-8")
    tmp.replace(path)
    print(f"saved {path}", flush=True)


def save_result(path: str | Path, result: dict, settings: argparse.Namespace | dict | None,
                where: str | Path = ROOT, dirty: bool = False, indent: int = 2,
                default=None) -> None:
    """Write a bench's ``result`` with its ``stamp`` (:func:`stamp` of ``where``, taken
    now, with ``settings``) to ``path`` (:func:`save_json`)."""
    save_json(path, {**result, "stamp": stamp(where, dirty, settings)}, indent, default)
