"""Freed memory goes back to the OS between stages (a long index must not keep every
stage's high-water mark resident)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # a Python subprocess per probe

ROOT = Path(__file__).resolve().parents[2]

_PROBE = """
import time, psutil
import kgloom  # first, as every kgloom entry point does
import polars as pl
p = psutil.Process()
before = p.memory_info().rss
df = pl.DataFrame({"x": pl.int_range(0, 30_000_000, eager=True)}).with_columns(y=pl.col("x") * 2)
peak = p.memory_info().rss
del df
time.sleep(0.5)
print((peak - before) >> 20, (p.memory_info().rss - before) >> 20)
"""


def _probe(env_value: str | None) -> tuple[int, int]:
    """(MiB allocated by a 480 MB polars frame, MiB still resident after it is freed)."""
    env = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    if env_value is not None:
        env["_RJEM_MALLOC_CONF"] = env_value
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.split()
    return int(out[0]), int(out[1])


def test_polars_frees_its_memory_after_importing_kgloom():
    grown, kept = _probe(None)
    assert grown > 300  # the frame was really allocated
    assert kept < 0.2 * grown, (grown, kept)


def test_a_users_allocator_setting_wins():
    # jemalloc's own default (pages kept 10 s after free) when the user asks for it
    grown, kept = _probe("dirty_decay_ms:10000")
    assert kept > 0.8 * grown, (grown, kept)
