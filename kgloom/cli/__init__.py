"""The command line and what it runs: ``main`` (the ``kgloom`` Typer app: index, backfill,
partitions, status, cache, query, import-graph, graphrag-settings, serve-embeddings, serve,
ui), ``mcp_command`` (``kgloom mcp``, registered on that app), ``runner`` (in-process
materializations of the asset graph), ``status`` (``kgloom status``) and ``logs`` (the run
loggers and the log file). This package sits above the Dagster packages
(:mod:`kgloom.assets`, :mod:`kgloom.resources`, :mod:`kgloom.pipelines`) and the query
side; nothing below imports it.
"""

from kgloom.cli import mcp_command  # noqa: F401 - registers `kgloom mcp` on the app
from kgloom.cli.main import app

__all__ = ["app"]
