"""Atomic reads and writes of the output tables (parquet) and JSON side files.

Every write goes to a temporary file in the same folder and is then renamed over the
target (``os.replace``, atomic on POSIX), so a crash never leaves a half-written table.
The file gets the mode a plain ``open(path, "w")`` would give it (0666 minus the umask),
not ``tempfile.mkstemp``'s private 0600, so other accounts can read the outputs when the
umask allows it.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

import polars as pl

from kgloom import schemas


def table_path(output_dir: str | Path, name: str) -> Path:
    """Return ``<output_dir>/<name>.parquet``."""
    return Path(output_dir) / f"{name}.parquet"


_UMASK_LOCK = threading.Lock()


def current_umask() -> int:
    """Return the process umask (e.g. 0o022): from ``/proc/self/status`` where Linux has
    it, else set and restored under a lock (POSIX has no call that only reads it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


def _atomic(path: Path, write) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        try:
            if hasattr(os, "fchmod"):  # POSIX; mkstemp makes the file 0600
                os.fchmod(fd, 0o666 & ~current_umask())
        finally:
            os.close(fd)
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_table(df: pl.DataFrame, output_dir: str | Path, name: str) -> Path:
    """Write ``df`` to ``<output_dir>/<name>.parquet`` atomically; return the path."""
    return _atomic(table_path(output_dir, name), lambda tmp: df.write_parquet(tmp))


def read_table(output_dir: str | Path, name: str,
               schema: dict[str, pl.DataType] | None = None,
               columns: list[str] | None = None) -> pl.DataFrame:
    """Read ``<output_dir>/<name>.parquet`` (only ``columns`` when given).

    When the file is missing and ``schema`` is given, return an empty frame of it
    (of its ``columns``).

    Raises:
        FileNotFoundError: when the file is missing and no ``schema`` was given.
    """
    path = table_path(output_dir, name)
    if not path.exists():
        if schema is None:
            raise FileNotFoundError(f"{path} does not exist: materialize its asset first")
        empty = schemas.empty(schema)
        return empty.select(columns) if columns else empty
    return pl.read_parquet(path, columns=columns)


def write_json(obj: Any, path: str | Path) -> Path:
    """Write ``obj`` as indented JSON to ``path`` atomically; return the path."""
    text = json.dumps(obj, indent=2, sort_keys=True, default=str)
    return _atomic(Path(path), lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def write_text(text: str, path: str | Path) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; return the path."""
    return _atomic(Path(path), lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def failures_frame(rows: list[dict[str, str]]) -> pl.DataFrame:
    """Build a failures table from dicts with keys stage, item_id, reason, detail.

    ``detail`` is cut to 500 characters so a runaway reply cannot bloat the table.
    """
    fixed = [{"stage": r["stage"], "item_id": str(r["item_id"]), "reason": r["reason"],
              "detail": (r.get("detail") or "")[:500]} for r in rows]
    return pl.DataFrame(fixed, schema=schemas.FAILURES_SCHEMA) if fixed else schemas.empty(
        schemas.FAILURES_SCHEMA)
