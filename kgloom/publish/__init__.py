"""Publish stage (domain only, no Dagster): the output tables (graph nodes/edges,
denormalized text units, GraphML, Neo4j CSV) and the LanceDB vector index. Its assets:
:mod:`kgloom.assets.publish_assets` (``graph_files``, ``vector_index``, ``index_summary``)."""
