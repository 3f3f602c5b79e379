"""What the assets share: progress reporting, metadata previews and plots, timing, the
cost and endpoint metadata of a stage."""

import sys
import time
from collections.abc import Callable
from typing import TypedDict

import dagster as dg
import polars as pl
from tqdm import tqdm


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


def preview(df: pl.DataFrame, columns: list[str], n: int = 10) -> dg.MetadataValue:
    """A markdown table of the first ``n`` rows of ``columns`` for asset metadata."""
    head = df.select([c for c in columns if c in df.columns]).head(n)
    lines = ["| " + " | ".join(head.columns) + " |", "|" + "---|" * len(head.columns)]
    for row in head.iter_rows():
        cells = [str(v).replace("|", "/").replace("\n", " ")[:80] for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return dg.MetadataValue.md("\n".join(lines))


class Timer:
    """Wall-clock seconds: a context manager (``seconds`` once it exits), or started at
    creation with ``Timer.started()`` and read any time through ``elapsed`` (an asset's
    whole duration: model loading and table writes included)."""

    def __enter__(self) -> "Timer":
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.perf_counter() - self.t0

    @classmethod
    def started(cls) -> "Timer":
        """A timer running from now."""
        return cls().__enter__()

    @property
    def elapsed(self) -> float:
        """Seconds since the timer started."""
        return time.perf_counter() - self.t0


def png_md(png: bytes, alt: str) -> dg.MetadataValue:
    """A PNG embedded in markdown metadata as a data URI (the Dagster UI renders it)."""
    import base64

    return dg.MetadataValue.md(f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode()})")


def cost_metadata(stats: dict) -> dict:
    """Asset metadata of one stage's cost (``stats["cost"]``, see
    :func:`kgloom.core.stats.stage_cost`) and LLM counters (``llm_*``): wall and model
    seconds, model share of the wall time, seconds outside llama.cpp's prompt and decode
    timings, calls and tokens, threads per call."""
    llm = {f"llm_{k}": (dg.MetadataValue.json(v) if isinstance(v, dict) else v)
           for k, v in (stats.get("llm") or {}).items()}
    cost = stats.get("cost") or {}
    return {**llm, **{k: v for k, v in cost.items() if k in (
        "wall_seconds", "model_seconds", "model_share", "embedder_seconds",
        "embedder_load_seconds", "llm_outside_seconds")}}


def endpoint_metadata(cached) -> dict:
    """``{"llm_endpoints": json}`` with each model server's calls, errors, timeouts and
    seconds when the LLM is behind servers (``OpenAIChatBackend.endpoint_stats``); {}
    in-process."""
    stats = getattr(cached.backend, "endpoint_stats", None)
    return {"llm_endpoints": dg.MetadataValue.json(stats())} if stats else {}


class EmbedderTime(TypedDict, total=False):
    """Keyword arguments of :func:`kgloom.core.stats.write_stage_stats`; all are set by
    :func:`embedder_time`, none for a stage without an embedder."""

    embedder_seconds: float
    embedder_load_seconds: float
    embedder_threads: dict[str, dict[str, float]]


def embedder_time(emb, mark: dict[int, tuple[int, int, float]]) -> EmbedderTime:
    """A stage's embedder time for :func:`kgloom.core.stats.write_stage_stats`:
    ``embedder_seconds`` = forward passes since ``mark`` (the shared embedder's
    :meth:`~kgloom.embedding.windows.WindowedEmbedder.passes` when the stage began) plus
    the embedder's load when this stage is the first to claim it;
    ``embedder_load_seconds`` = that load (0 on later stages); ``embedder_threads`` =
    the stage's passes by the threads each ran on, ``{"2": {"passes", "windows",
    "seconds"}}`` (a pass picks its threads by the machine's load, so the same texts
    can take longer on one thread than on two)."""
    load = emb.claim_load_seconds()
    threads: dict[str, dict[str, float]] = {}
    spent = 0.0
    for t, (n, windows, seconds) in emb.passes().items():
        n0, w0, s0 = mark.get(t, (0, 0, 0.0))
        if n > n0:
            spent += seconds - s0
            threads[str(t)] = {"passes": n - n0, "windows": windows - w0,
                               "seconds": round(seconds - s0, 3)}
    return {"embedder_seconds": spent + load,
            "embedder_load_seconds": round(load, 3), "embedder_threads": threads}
