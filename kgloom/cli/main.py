"""``kgloom`` command line: index, backfill, partitions, status, cache, query, import-graph,
graphrag-settings, serve-embeddings, serve, ui and mcp.

The Typer ``app`` lives in :mod:`kgloom.cli.cli_common`, with the options and helpers the
commands share; each command module registers its commands on it when imported, here, in
the order ``kgloom --help`` lists them: :mod:`~kgloom.cli.build_commands` (index, backfill,
partitions, cache, status), :mod:`~kgloom.cli.query_command` (query),
:mod:`~kgloom.cli.graphrag_commands` (import-graph, graphrag-settings, serve-embeddings),
:mod:`~kgloom.cli.serve_commands` (serve, ui) and :mod:`~kgloom.cli.mcp_command` (mcp).
Every heavy import stays inside the commands, so start-up stays fast.
"""

from __future__ import annotations

# the import order is the order `kgloom --help` lists the commands in
# isort: off
from kgloom.cli import build_commands  # noqa: F401 - index, backfill, partitions, cache, status
from kgloom.cli import query_command  # noqa: F401 - query
from kgloom.cli import graphrag_commands  # noqa: F401 - import-graph, graphrag-settings, ...
from kgloom.cli import serve_commands  # noqa: F401 - serve, ui
from kgloom.cli import mcp_command  # noqa: F401 - mcp
# isort: on
from kgloom.cli.build_commands import _finish
from kgloom.cli.cli_common import _load, app
from kgloom.cli.serve_commands import _open_for_serving

__all__ = ["_finish", "_load", "_open_for_serving", "app"]  # tests import the helpers here

if __name__ == "__main__":
    app()
