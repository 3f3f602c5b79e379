"""Small PNG plots for asset metadata (matplotlib, Agg backend; no Dagster here)."""

from __future__ import annotations

import io


def bar_chart_png(counts: dict[int, int] | dict[str, int], title: str, xlabel: str,
                  ylabel: str = "count", log_y: bool = False) -> bytes:
    """Return a PNG (bytes, ~10-30 kB) of a bar chart of ``counts`` ({x: count}), e.g. a
    degree distribution {degree: entities}. Uses matplotlib's Agg backend (no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = list(counts)
    fig, ax = plt.subplots(figsize=(6, 3), dpi=80)
    ax.bar([str(x) for x in xs] if xs and isinstance(xs[0], str) else xs,
           list(counts.values()), color="#4f6bd8")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if log_y:
        ax.set_yscale("log")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()

