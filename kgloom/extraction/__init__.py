"""Extraction stage: candidate names, then LLM entity/relationship and claim extraction per
text unit, and its checks (``extraction_assets``: ``extracted_graph``, one partition per
input file)."""
