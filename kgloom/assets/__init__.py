"""Thin Dagster wiring, one module per stage: each asset reads its inputs, calls one
domain function, writes its output atomically and reports metadata.

Every file under the output folder has one writing asset, and each asset declares as
dependencies the assets whose files it reads. Levels (``IndexConfigResource`` maps them
to folders): partition (``documents``, ``text_units``, ``extracted_graph``), corpus
(``corpus``), published (``entities`` ... ``index_summary``). The LLM cache
(``llm_cache.sqlite``) is a shared SQLite database every LLM stage reads and writes.
"""

from kgloom.assets.corpus import corpus
from kgloom.assets.emit import graph_files, index_summary, vector_index
from kgloom.assets.extraction import extracted_graph
from kgloom.assets.graph import communities, community_reports, entity_graph
from kgloom.assets.ingest import documents, text_units

ALL_ASSETS = [documents, text_units, extracted_graph, corpus, entity_graph, communities,
              community_reports, graph_files, vector_index, index_summary]

__all__ = ["ALL_ASSETS", "communities", "community_reports", "corpus", "documents",
           "entity_graph", "extracted_graph", "graph_files", "index_summary", "text_units",
           "vector_index"]
