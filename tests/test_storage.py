"""Outputs are written atomically with the mode the umask gives (kgloom.storage)."""

from __future__ import annotations

import os
import stat

import polars as pl
import pytest

from kgloom import emit, storage


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
             emit.write_graphml(carol_tables["entities"], carol_tables["relationships"],
                                tmp_path / "graph.graphml")]
    nodes, rels = emit.write_neo4j_import(carol_tables["entities"],
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
