"""The input folder: which files are inputs, their partition keys, and the one place a key
becomes a path (no Dagster, no stage).

One partition per input file: its key is the file's path relative to the input folder, in
POSIX form (``book.txt``, ``letters/1843.jsonl``); a JSONL or CSV file holds many
documents but is one partition. Every door a key enters by (CLI, sensor, Dagster API,
launchpad, backfill) goes through :func:`input_path`, which refuses a key leading outside
the folder. The readers of each suffix are :mod:`kgloom.ingest.documents`.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from kgloom.core import layout
from kgloom.core.ids import file_sha256
from kgloom.core.layout import DOCUMENTS, PartitionKeyError

SUPPORTED_SUFFIXES = (".txt", ".md", ".jsonl", ".csv")


def scan_input_files(input_dir: str | Path) -> tuple[list[Path], list[dict]]:
    """Return the supported files under ``input_dir`` (recursive, sorted by path) and the
    entries skipped for safety, as failures rows.

    Hidden files and folders (name starting with ".") and unsupported suffixes are left
    out silently. A symbolic link is followed only when what it points to resolves to a
    file inside ``input_dir``; a link to anything outside (or to nothing) is skipped with
    a failures row naming the link (stage ``documents``, ``item_id`` its path relative to
    ``input_dir``, ``detail`` its target), so one odd entry never stops the corpus.
    Symlinked folders are not descended into (``Path.rglob`` does not follow them); a
    supported-looking one is reported the same way.

    Returns:
        (files: paths under ``input_dir`` as written there, never resolved, so a link
        inside keeps its own name; skipped: dicts of ``FAILURES_SCHEMA`` fields).

    Raises:
        FileNotFoundError: when ``input_dir`` does not exist.
    """
    root = Path(input_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"input folder {root} does not exist")
    real_root = root.resolve()
    files: list[Path] = []
    skipped: list[dict] = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if any(part.startswith(".") for part in rel.parts):
            continue
        linked = any((root / Path(*rel.parts[:i])).is_symlink()
                     for i in range(1, len(rel.parts) + 1))
        if not linked:
            if p.is_file() and p.suffix.lower() in SUPPORTED_SUFFIXES:
                files.append(p)
            continue
        if p.suffix.lower() not in SUPPORTED_SUFFIXES and not p.is_dir():
            continue
        target = p.resolve()
        if not target.is_relative_to(real_root):
            reason = "symlink to a path outside the input folder: skipped"
        elif p.is_dir():
            reason = "symlink to a folder: not followed"
        elif not p.is_file():
            reason = "broken symlink (its target does not exist): skipped"
        else:
            files.append(p)
            continue
        skipped.append({"stage": DOCUMENTS, "item_id": rel.as_posix(), "reason": reason,
                        "detail": f"-> {target}"})
    return files, skipped


def list_input_files(input_dir: str | Path) -> list[Path]:
    """Return the supported files under ``input_dir`` (recursive), sorted by path: the
    files of :func:`scan_input_files` (hidden entries and links leading outside the
    folder left out).

    Raises:
        FileNotFoundError: when ``input_dir`` does not exist.
    """
    return scan_input_files(input_dir)[0]


def partition_key(input_dir: str | Path, path: str | Path) -> str:
    """Return the partition key of input file ``path``: its POSIX path relative to
    ``input_dir`` (e.g. ``letters/1843.jsonl``), as written (a symlink keeps its own
    name; paths are made absolute, not resolved).

    Raises:
        PartitionKeyError: when ``path`` is not under ``input_dir``.
    """
    try:
        return Path(os.path.abspath(path)).relative_to(os.path.abspath(input_dir)).as_posix()
    except ValueError:
        raise PartitionKeyError(f"{path} is not inside the input folder {input_dir}") from None


def check_key_shape(key: str) -> None:
    """Check the form of partition key ``key`` alone (no file system): a relative POSIX
    path (:func:`kgloom.core.layout.check_key_shape`) of a supported file
    (:data:`kgloom.core.inputs.SUPPORTED_SUFFIXES`).

    Raises:
        PartitionKeyError: naming the key and what is wrong with it.
    """
    layout.check_key_shape(key)
    if Path(key).suffix.lower() not in SUPPORTED_SUFFIXES:
        layout.raise_key_error(
            key, f"it is not a supported input file ({', '.join(SUPPORTED_SUFFIXES)})")


def input_path(input_dir: str | Path, key: str) -> Path:
    """Return the input file of partition ``key``, checked to stay in ``input_dir``:
    the key's form (:func:`check_key_shape`), then the path resolved (symlinks followed)
    must lie inside the resolved input folder, and be a file when it exists. A key whose
    file is gone passes (its partition is then deleted; see
    :func:`read_partition_documents`). This is the one place a key becomes a path, so
    every door a key enters by (CLI, sensor, Dagster API, launchpad, backfill) is checked.

    Raises:
        PartitionKeyError: when the key is malformed or leads outside ``input_dir``.
    """
    check_key_shape(key)
    path = Path(input_dir) / Path(*key.split("/"))
    if not path.resolve().is_relative_to(Path(input_dir).resolve()):
        raise PartitionKeyError(
            f"refused partition key {key!r}: it resolves to {path.resolve()}, outside the "
            f"input folder {Path(input_dir).resolve()} (a symlink leading out?); nothing "
            "was read")
    if path.exists() and not path.is_file():
        raise PartitionKeyError(f"refused partition key {key!r}: {path} is not a file; "
                                "nothing was read")
    return path


def valid_key(input_dir: str | Path, key: str) -> bool:
    """True when ``key`` passes :func:`input_path` (its file may be gone)."""
    try:
        input_path(input_dir, key)
    except PartitionKeyError:
        return False
    return True


def scan_inputs(input_dir: str | Path) -> tuple[dict[str, str], list[dict]]:
    """Return ({partition key: hex SHA-256 of the file's bytes} for every supported file,
    the entries skipped for safety as failures rows: symlinks leading outside the folder;
    see :func:`kgloom.core.inputs.scan_input_files`).

    Raises:
        FileNotFoundError: when ``input_dir`` does not exist.
    """
    files, skipped = scan_input_files(input_dir)
    return {partition_key(input_dir, p): file_sha256(str(p)) for p in files}, skipped


def input_hashes(input_dir: str | Path) -> dict[str, str]:
    """Return {partition key: hex SHA-256 of the file's bytes} for every supported file
    (:func:`scan_inputs` without the skipped entries).

    Raises:
        FileNotFoundError: when ``input_dir`` does not exist.
    """
    return scan_inputs(input_dir)[0]


def refused_inputs(input_dir: str | Path, live_keys: list[str]) -> list[dict]:
    """Failures rows (stage ``documents``) for what the corpus leaves out for safety: each
    live key that :func:`input_path` refuses, and each symlink of ``input_dir`` leading
    outside it (:func:`scan_inputs`; none when the folder is missing)."""
    rows = []
    for key in sorted(live_keys):
        try:
            input_path(input_dir, key)
        except PartitionKeyError as exc:
            rows.append({"stage": DOCUMENTS, "item_id": key,
                         "reason": "refused partition key: not a file inside the input folder",
                         "detail": str(exc)})
    with contextlib.suppress(FileNotFoundError):
        rows += scan_inputs(input_dir)[1]
    return rows
