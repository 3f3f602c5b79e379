"""Wiring shared by the assets: progress reporting and per-stage stats files."""


import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import dagster as dg
import polars as pl
from tqdm import tqdm

from kgloom.storage import write_json

STAGES_DIR = "stages"  # intermediate tables and per-stage stats, under the output folder


def stages_dir(output_dir: Path) -> Path:
    """Return ``<output_dir>/stages`` (created)."""
    p = Path(output_dir) / STAGES_DIR
    p.mkdir(parents=True, exist_ok=True)
    return p


def progress(context: dg.AssetExecutionContext, stage: str) -> Callable[[int, int], None]:
    """Return a ``progress(done, total)`` callback: a tqdm bar on stderr and a Dagster log
    line every 10% (so both the CLI and the UI show progress)."""
    state: dict = {"bar": None, "last": -1}

    def report(done: int, total: int) -> None:
        if state["bar"] is None:
            state["bar"] = tqdm(total=total, desc=stage, unit="item", file=sys.stderr,
                                dynamic_ncols=True)
        state["bar"].update(done - state["bar"].n)
        decile = done * 10 // max(total, 1)
        if decile != state["last"]:
            state["last"] = decile
            context.log.info(f"{stage}: {done}/{total}")
        if done >= total:
            state["bar"].close()

    return report


def write_stage_stats(output_dir: Path, stage: str, seconds: float, llm: dict | None = None,
                      **counts) -> dict:
    """Write ``stages/<stage>.stats.json`` (seconds, LLM stats, counts); return the dict."""
    stats = {"stage": stage, "seconds": round(seconds, 2), "llm": llm or {}, **counts}
    write_json(stats, stages_dir(output_dir) / f"{stage}.stats.json")
    return stats


def read_stage_stats(output_dir: Path) -> dict[str, dict]:
    """Return every ``stages/*.stats.json`` keyed by stage."""
    out = {}
    for p in sorted(stages_dir(output_dir).glob("*.stats.json")):
        d = json.loads(p.read_text())
        out[d["stage"]] = d
    return out


def preview(df: pl.DataFrame, columns: list[str], n: int = 10) -> dg.MetadataValue:
    """A markdown table of the first ``n`` rows of ``columns`` for asset metadata."""
    head = df.select([c for c in columns if c in df.columns]).head(n)
    lines = ["| " + " | ".join(head.columns) + " |", "|" + "---|" * len(head.columns)]
    for row in head.iter_rows():
        cells = [str(v).replace("|", "/").replace("\n", " ")[:80] for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return dg.MetadataValue.md("\n".join(lines))


class Timer:
    """Context manager measuring wall-clock seconds."""

    def __enter__(self) -> "Timer":
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.perf_counter() - self.t0
