"""The asset graph in pipeline order: each stage's assets live beside its Dagster-free
logic (``kgloom.<stage>.*_assets``); this list is what definitions, jobs and the runner load.

Each asset reads its inputs, calls one domain function, writes its output atomically and
reports metadata. Every file under the output folder has one writing asset, and each asset
declares as dependencies the assets whose files it reads. Levels (``IndexConfigResource``
maps them to folders): partition (``documents``, ``text_units``, ``extracted_graph``),
corpus (``corpus``), published (``entities`` ... ``index_summary``). The LLM cache
(``llm_cache.sqlite``) is a shared SQLite database every LLM stage reads and writes.
"""

from kgloom.corpus.corpus_asset import corpus
from kgloom.extraction.extraction_assets import extracted_graph
from kgloom.graph.graph_assets import communities, entity_graph
from kgloom.ingest.ingest_assets import documents, text_units
from kgloom.publish.publish_assets import graph_files, index_summary, vector_index
from kgloom.reports.report_assets import community_reports

ALL_ASSETS = [documents, text_units, extracted_graph, corpus, entity_graph, communities,
              community_reports, graph_files, vector_index, index_summary]

__all__ = ["ALL_ASSETS"]
