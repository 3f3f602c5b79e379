"""Applications over an index, each one command: ``graph_import`` (``kgloom import-graph``),
``graphrag_settings`` and ``embeddings_server`` (the GraphRAG route: ``kgloom
graphrag-settings``, ``kgloom serve-embeddings``). ``serve/`` and ``cli/`` are the other
applications, packages of their own."""
