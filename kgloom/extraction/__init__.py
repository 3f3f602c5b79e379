"""Extraction stage: candidate names, LLM entity/relationship and claim extraction per text
unit with grammar-bounded replies, and its checks (``extraction_assets``: ``extracted_graph``)."""
