"""The query side: retrieval and search over a published index's files (no server, no
Dagster), laid out as GraphRAG's query package is.

- ``index.py``: :class:`~kgloom.query.query_index.QueryIndex`, the read-only handle on one
  published build (text units, vectors, mentions, the entity graph, search's tables),
  opened once and shared by retrieval and search.
- ``modes.py``: the one registry of modes and of the options each reads.
- ``retrieval/<mode>.py``: one module per retrieval mode, each
  ``retrieve(index, question, top_k, settings, **options)``; shared steps in
  ``retrieval/base.py``, knobs in ``retrieval/config.py``.
- ``context_builder/``: search contexts: packing and verbalizing (``context.py``), the
  local context (``local_context.py``), the community hierarchy and its selection
  (``community_context.py``), the tables search reads (``tables.py``).
- ``structured_search/<method>/search.py``: local, global and basic (``direct``) search
  over ``structured_search/base.py`` (knobs, result, answer).
- ``retriever.py`` / ``search.py``: the entry points (:class:`Retriever`, :class:`Searcher`)
  the CLI, the server and the benches call; they dispatch.
- ``algorithms.py`` (BFS, rerank, PageRank, RRF), ``multihop.py`` (BFS over the edge
  files with DuckDB), ``linking.py``, ``routing.py``, ``render.py``.
"""
