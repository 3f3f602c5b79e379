"""Atomic reads and writes of the output tables (parquet) and JSON side files.

Every write goes to a temporary file in the same folder and is then renamed over the
target (``os.replace``, atomic on POSIX), so a crash never leaves a half-written table.
The file gets the mode a plain ``open(path, "w")`` would give it (0666 minus the umask),
not ``tempfile.mkstemp``'s private 0600, so other accounts can read the outputs when the
umask allows it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import polars as pl

from kgloom.core import schemas


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


class DiskFullError(OSError):
    """A write ran out of disk space; the message names the folder, the free space and
    (when known) the space the write needed. Nothing already published was touched: the
    half-written temporary file is removed and the target keeps its previous content."""


class UnreadableTableError(OSError):
    """A parquet file that exists but cannot be read (truncated, not parquet, a disk
    error); the message names the file."""


# The OS's words for ENOSPC / EDQUOT, as writers that report them without an errno (Arrow,
# polars' Rust IO: "No space left on device (os error 28)") carry them in their message.
_NO_SPACE_WORDS = ("no space left on device", "os error 28", "disk quota exceeded")


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` reports a full disk or quota (by errno or the OS's words)."""
    return (isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)) or \
        any(w in str(exc).lower() for w in _NO_SPACE_WORDS)


def _mb(n: float) -> str:
    """A size for people: bytes, kB, MB or GB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} bytes"


def disk_full_error(folder: Path, needed: int | None, cause: BaseException) -> DiskFullError:
    """A :class:`DiskFullError` for a write into ``folder`` that needed ``needed``
    bytes (None: unknown), with the free space of its disk (``shutil.disk_usage``)."""
    try:
        free = _mb(shutil.disk_usage(folder).free)
    except OSError:
        free = "unknown"
    need = f"; the write needed about {_mb(needed)}" if needed else ""
    err = DiskFullError(
        f"no space left on the disk of {folder} (free: {free}{need}): free some space "
        f"there, or point --output-dir at a larger disk, and run the command again; what "
        f"was already published is unchanged ({type(cause).__name__}: {str(cause)[:200]})")
    err.errno = errno.ENOSPC
    return err


def _atomic(path: Path, write) -> Path:
    """Write ``path`` through ``write(tmp)`` into a temporary file of its folder, then
    rename it over ``path``. A full disk (ENOSPC / EDQUOT, or a writer's "no space left"
    message) raises :class:`DiskFullError` naming the folder and its free space (a
    ``write`` that knows the space it needs raises its own, see :func:`write_table`);
    the target is left as it was."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        if is_disk_full(exc):
            raise disk_full_error(path.parent, None, exc) from exc
        raise
    try:
        try:
            if hasattr(os, "fchmod"):  # POSIX; mkstemp makes the file 0600
                os.fchmod(fd, 0o666 & ~current_umask())
        finally:
            os.close(fd)
        write(tmp)
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if not isinstance(exc, DiskFullError) and is_disk_full(exc):
            raise disk_full_error(path.parent, None, exc) from exc
        raise
    return path


def _check_parquet_written(tmp: Path, target: Path, needed: int | None) -> None:
    """Read back the footer of a just-written parquet file before it replaces
    ``target``: a writer that hit a full disk without saying so leaves a truncated file
    (later read as "Invalid thrift: transport error"); it must never be published."""
    import pyarrow.parquet as pq

    try:
        pq.read_metadata(tmp)
    except Exception as exc:  # any unreadable footer means a bad write
        try:
            nearly_full = shutil.disk_usage(tmp.parent).free < max(needed or 0, 1 << 20)
        except OSError:
            nearly_full = False
        if nearly_full:
            raise disk_full_error(tmp.parent, needed, exc) from exc
        raise UnreadableTableError(f"writing {target} produced an unreadable parquet file "
                                   f"({exc}); nothing was published") from exc


def write_table(df: pl.DataFrame, output_dir: str | Path, name: str) -> Path:
    """Write ``df`` to ``<output_dir>/<name>.parquet`` atomically; return the path.

    Raises:
        DiskFullError: the disk filled up (names the folder, the free space and the
            frame's in-memory size as the space needed, an upper bound of the file).
    """
    path = table_path(output_dir, name)

    def write(tmp: str) -> None:
        try:
            df.write_parquet(tmp)
        except Exception as exc:  # polars reports a full disk in several ways
            if is_disk_full(exc):
                raise disk_full_error(path.parent, int(df.estimated_size()), exc) from exc
            raise
        _check_parquet_written(Path(tmp), path, int(df.estimated_size()))

    return _atomic(path, write)


@contextlib.contextmanager
def named_parquet(path: str | Path) -> Iterator[Path]:
    """Around any read of parquet file ``path``: a missing file raises
    FileNotFoundError naming it, an unreadable one (truncated by a full disk or a crash
    of another tool, or not parquet) :class:`UnreadableTableError` naming it, its size
    and the cause. A readable file without an asked column passes the reader's error."""
    path = Path(path)
    try:
        yield path
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} does not exist") from None
    except (pl.exceptions.ColumnNotFoundError, pl.exceptions.SchemaError, KeyError):
        raise  # a readable file without the asked columns: the caller's error to name
    # arrow raises ValueError or OSError
    except (pl.exceptions.PolarsError, OSError, ValueError) as exc:
        if isinstance(exc, UnreadableTableError):
            raise
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist") from exc
        size = path.stat().st_size
        raise UnreadableTableError(
            f"{path} ({size} bytes) is not a readable parquet file ({exc}): it was "
            "truncated or damaged; run the command that writes it again (e.g. `kgloom "
            "index`)") from exc


def read_parquet(path: str | Path, columns: list[str] | None = None) -> pl.DataFrame:
    """Read parquet file ``path`` (only ``columns`` when given): the one reader of
    published and stage tables, so an unreadable file is always named
    (:func:`named_parquet`).

    Raises:
        FileNotFoundError: the file is missing (names it).
        UnreadableTableError: it exists but cannot be read (names it).
    """
    with named_parquet(path) as p:
        return pl.read_parquet(p, columns=columns)


def parquet_rows(path: str | Path) -> int:
    """Rows of parquet file ``path``, from its footer (errors as :func:`read_parquet`)."""
    import pyarrow.parquet as pq

    with named_parquet(path) as p:
        return int(pq.read_metadata(p).num_rows)


def read_table(output_dir: str | Path, name: str,
               schema: Mapping[str, schemas.ColumnType] | None = None,
               columns: list[str] | None = None) -> pl.DataFrame:
    """Read ``<output_dir>/<name>.parquet`` (only ``columns`` when given).

    When the file is missing and ``schema`` is given, return an empty frame of it
    (of its ``columns``).

    Raises:
        FileNotFoundError: when the file is missing and no ``schema`` was given.
        UnreadableTableError: the file is truncated or damaged (names it).
    """
    path = table_path(output_dir, name)
    if not path.exists():
        if schema is None:
            raise FileNotFoundError(f"{path} does not exist: materialize its asset first")
        empty = schemas.empty(schema)
        return empty.select(columns) if columns else empty
    return read_parquet(path, columns=columns)


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
