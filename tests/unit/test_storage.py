"""Outputs are written atomically with the mode the umask gives (kgloom.core.storage); one
writer at a time per output folder (kgloom.core.lock)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import polars as pl
import pytest

from kgloom.core import schemas, storage
from kgloom.publish import tables


@pytest.fixture
def umask():
    """Set a umask for the test and restore the old one."""
    old = os.umask(0o022)
    yield lambda mask: os.umask(mask)
    os.umask(old)


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o077, 0o002])
def test_every_writer_gives_files_the_mode_of_the_umask(tmp_path, umask, mask, carol_tables):
    umask(mask)
    expected = 0o666 & ~mask
    paths = [storage.write_table(pl.DataFrame({"a": [1]}), tmp_path, "t"),
             storage.write_json({"a": 1}, tmp_path / "x.json"),
             storage.write_text("hello", tmp_path / "x.txt"),
             tables.write_graphml(carol_tables["entities"], carol_tables["relationships"],
                                  tmp_path / "graph.graphml")]
    nodes, rels = tables.write_neo4j_import(carol_tables["entities"],
                                            carol_tables["relationships"], tmp_path / "neo4j")
    for path in [*paths, nodes, rels]:
        assert stat.S_IMODE(path.stat().st_mode) == expected, (path.name, oct(mask))
    assert storage.current_umask() == mask
    assert not list(tmp_path.glob(".*.tmp"))  # no temporary file left behind


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    storage.write_text("old", tmp_path / "x.txt")

    def boom(tmp):
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        storage._atomic(tmp_path / "x.txt", boom)
    assert (tmp_path / "x.txt").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["x.txt"]


def test_the_writer_lock_is_reentrant_and_names_its_holder(tmp_path):
    import subprocess
    import sys

    from kgloom.core.lock import holder, writer_lock

    with writer_lock(tmp_path, "kgloom test"):
        with writer_lock(tmp_path, "kgloom test, again"):  # this process: no wait
            note = holder(tmp_path)
        assert note["pid"] == os.getpid() and note["command"] == "kgloom test"
        # another process waits, is told who holds the lock, and can give up
        child = subprocess.run(
            [sys.executable, "-c",
             "import sys\nfrom kgloom.core.lock import writer_lock, LockWaitCancelled\n"
             "try:\n"
             "    with writer_lock(sys.argv[1], 'child', on_wait=print,\n"
             "                     should_stop=lambda: True, poll_s=0.1):\n"
             "        print('acquired')\n"
             "except LockWaitCancelled:\n"
             "    print('gave up')\n", str(tmp_path)],
            capture_output=True, text=True, timeout=120,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
        assert f"pid {os.getpid()}" in child.stdout and "(kgloom test)" in child.stdout
        assert child.stdout.strip().endswith("gave up"), child.stderr
    assert holder(tmp_path) is None  # released: no stale note
    with writer_lock(tmp_path, "next"):
        assert holder(tmp_path)["command"] == "next"


def test_read_table_reads_only_the_columns_asked_for(tmp_path):
    """The reports stage reads text units' ids and token counts, not their texts; a
    missing table with a schema gives an empty frame of those columns."""
    from kgloom.core.storage import read_table, write_table

    assert read_table(tmp_path, schemas.TEXT_UNITS, schemas.TEXT_UNITS_SCHEMA,
                      columns=["id", "n_tokens"]).columns == ["id", "n_tokens"]
    units = schemas.empty(schemas.TEXT_UNITS_SCHEMA).vstack(pl.DataFrame(
        [{"id": "u1", "text": "Scrooge.", "n_tokens": 3}]).select(
        [pl.lit(None).cast(t).alias(c) if c not in ("id", "text", "n_tokens") else
         pl.col(c).cast(t) for c, t in schemas.TEXT_UNITS_SCHEMA.items()]))
    write_table(units, tmp_path, schemas.TEXT_UNITS)
    got = read_table(tmp_path, schemas.TEXT_UNITS, columns=["id", "n_tokens"])
    assert got.to_dicts() == [{"id": "u1", "n_tokens": 3}]
