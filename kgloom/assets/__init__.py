"""Every asset of the index, one module per stage, each with its asset checks:
``ingest_assets`` (documents, text_units), ``extraction_assets`` (extracted_graph),
``corpus_assets`` (corpus), ``graph_assets`` (entities, relationships, entity_aliases,
covariates; communities), ``report_assets`` (community_reports), ``publish_assets``
(graph_files, vector_index, index_summary); ``metadata``
holds what they share (progress, previews, plots, timing, cost metadata).

Each asset reads its tables from the ``index`` resource's table store
(:class:`kgloom.core.layout.TableStore`), calls one domain function of its stage, writes its
tables back atomically and reports metadata. Every file under the output folder has one
writing asset, and each asset declares as dependencies the assets whose files it reads.
The LLM cache (``llm_cache.sqlite``) is a shared SQLite database every LLM stage reads and
writes. ``ALL_ASSETS`` is the list definitions, jobs and the runner load, in pipeline order.
"""

from kgloom.assets.corpus_assets import corpus
from kgloom.assets.extraction_assets import extracted_graph
from kgloom.assets.graph_assets import communities, entity_graph
from kgloom.assets.ingest_assets import documents, text_units
from kgloom.assets.publish_assets import graph_files, index_summary, vector_index
from kgloom.assets.report_assets import community_reports

ALL_ASSETS = [documents, text_units, extracted_graph, corpus, entity_graph, communities,
              community_reports, graph_files, vector_index, index_summary]

__all__ = ["ALL_ASSETS"]
