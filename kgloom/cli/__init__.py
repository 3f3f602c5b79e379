"""The command line and what it runs: ``main`` (the ``kgloom`` entry point: imports the
command modules, which register on the Typer app of ``cli_common``, with the options and
helpers they share), a module per command group (``build_commands``: index, backfill,
partitions, cache, status; ``query_command``: query; ``graphrag_commands``: import-graph,
graphrag-settings, serve-embeddings; ``serve_commands``: serve, ui; ``mcp_command``: mcp),
``runner`` (in-process materializations of the asset graph), ``status`` (what ``kgloom
status`` reads) and ``logs`` (the run loggers and the log file). This package sits above
the Dagster packages (:mod:`kgloom.assets`, :mod:`kgloom.resources`,
:mod:`kgloom.pipelines`) and the query side; nothing below imports it.
"""

from kgloom.cli.main import app  # imports every command module: each registers its commands

__all__ = ["app"]
