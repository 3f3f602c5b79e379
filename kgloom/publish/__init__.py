"""Publish stage: the output tables (graph nodes/edges, denormalized text units, GraphML,
Neo4j CSV) and the LanceDB vector index (``publish_assets``: ``graph_files``,
``vector_index``, ``index_summary``)."""
