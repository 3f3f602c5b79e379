"""An index carries its own state: `kgloom index` as a new user runs it (no DAGSTER_HOME
exported, a working folder that is neither the repository nor the index) keeps its
Dagster instance in the output folder, so a second output folder built from the same
inputs finds every file new, and a folder moved elsewhere finds nothing to do."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # the CLI end to end, in its own processes

ROOT = Path(__file__).resolve().parents[2]
CORPUS = {
    "mills.txt": "Zephyr Mills supplies Yarrow Textiles with wool from Orkney.\n",
    "notes/retail.md": "Yarrow Textiles sells to Alder Retail in Leeds. Alder Retail hires "
                       "Birch Couriers.\n",
}


def kgloom(cwd: Path, *args: str) -> str:
    """Run ``kgloom ARGS`` in ``cwd`` with no DAGSTER_HOME; return stdout + stderr."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("DAGSTER_HOME", "KGLOOM_INPUT_DIR", "KGLOOM_OUTPUT_DIR")}
    env.update(PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    res = subprocess.run([sys.executable, "-m", "kgloom.cli", *args], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout + res.stderr


def test_each_output_folder_keeps_its_own_partition_state(tmp_path):
    inp, work, other = tmp_path / "input", tmp_path / "work", tmp_path / "other"
    for name, text in CORPUS.items():
        (inp / name).parent.mkdir(parents=True, exist_ok=True)
        (inp / name).write_text(text, encoding="utf-8")
    work.mkdir()
    other.mkdir()
    index = ("index", "--fake-llm", "--input-dir", str(inp), "--output-dir")

    first = kgloom(work, *index, "out_a")
    assert "2 new, 0 changed, 0 deleted, 0 unchanged" in first, first
    assert (work / "out_a" / ".dagster_home" / "dagster.yaml").exists()
    assert not (work / ".dagster_home").exists()  # nothing left in the working folder

    # the same inputs into a second folder, from the same working folder: all new to it
    second = kgloom(work, *index, "out_b")
    assert "2 new, 0 changed, 0 deleted, 0 unchanged" in second, second

    # the first index moved elsewhere, run from another folder: nothing to do
    moved = other / "moved"
    shutil.move(str(work / "out_a"), moved)
    again = kgloom(other, *index, str(moved))
    assert "0 new, 0 changed, 0 deleted, 2 unchanged" in again, again
    assert "graph up to date" in again, again
    status = kgloom(tmp_path, "status", "--input-dir", str(inp), "--output-dir", str(moved))
    assert "unchanged" in status and " ok " in status and "missing" not in status, status

    # a copy is its own index: a changed file is changed in the copy only
    copy = other / "copy"
    shutil.copytree(moved, copy)
    (inp / "mills.txt").write_text("Zephyr Mills supplies Yarrow Textiles with linen.\n",
                                   encoding="utf-8")
    changed = kgloom(other, *index, str(copy))
    assert "0 new, 1 changed, 0 deleted, 1 unchanged" in changed, changed
    still = kgloom(tmp_path, "partitions", "--input-dir", str(inp), "--output-dir", str(moved))
    assert "changed    mills.txt" in still, still
