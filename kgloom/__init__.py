"""kgloom: a GraphRAG index built by a local LLM, as a Dagster asset graph.

A regular package (not a namespace one), so a checkout's ``kgloom`` never silently merges
with another copy on ``sys.path`` (e.g. a git worktree beside an editable install).
Stages: :mod:`kgloom.ingest`, :mod:`kgloom.extraction`, :mod:`kgloom.corpus`,
:mod:`kgloom.graph`, :mod:`kgloom.reports`, :mod:`kgloom.publish`, then
:mod:`kgloom.query`; the Dagster code location is :mod:`kgloom.definitions`.
"""

import os as _os

# polars allocates through its own jemalloc (symbols prefixed ``_rjem_``), which keeps freed
# pages resident for dirty_decay_ms (10 s by default) and purges them only when it next
# allocates. In a long pipeline that holds every stage's high-water mark: on a 4 MB
# document, denormalizing the text units peaked at 317 MB of RSS and kept it, against
# 207 MB and 161 MB kept with immediate purging, for ~20 % more CPU in polars (a few seconds
# of an index). Set before polars loads (this package imports first); a value the user
# set wins. Source: jemalloc's manual, "opt.dirty_decay_ms", "opt.background_thread" and
# the MALLOC_CONF environment variable (prefixed _RJEM_ in polars' build).
_os.environ.setdefault("_RJEM_MALLOC_CONF",
                       "background_thread:true,dirty_decay_ms:0,muzzy_decay_ms:0")
