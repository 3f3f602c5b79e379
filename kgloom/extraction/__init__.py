"""Extraction stage (domain only, no Dagster): candidate names, then LLM entity/relationship
and claim extraction per text unit, and its checks. Its asset:
:mod:`kgloom.assets.extraction_assets` (``extracted_graph``)."""
