"""Thin Dagster wiring, one module per stage: each asset reads its inputs, calls one
domain function, writes its output atomically and reports metadata."""

from kgloom.assets.emit import graph_files, index_summary, vector_index
from kgloom.assets.extraction import extracted_graph
from kgloom.assets.graph import communities, community_reports, entity_graph
from kgloom.assets.ingest import documents, text_units

ALL_ASSETS = [documents, text_units, extracted_graph, entity_graph, communities,
              community_reports, graph_files, vector_index, index_summary]

__all__ = ["ALL_ASSETS"]
