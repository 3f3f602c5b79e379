"""kgloom: a GraphRAG index built by a local LLM, as a Dagster asset graph.

A regular package (not a namespace one), so a checkout's ``kgloom`` never silently merges
with another copy on ``sys.path`` (e.g. a git worktree beside an editable install).
Stages: :mod:`kgloom.ingest`, :mod:`kgloom.extraction`, :mod:`kgloom.corpus`,
:mod:`kgloom.graph`, :mod:`kgloom.reports`, :mod:`kgloom.publish`, then
:mod:`kgloom.query`; the Dagster code location is :mod:`kgloom.definitions`.
"""
