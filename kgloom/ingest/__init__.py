"""Ingest stage: input files -> documents (decoding, cleaning) -> token-bounded text units,
one Dagster partition per input file (``ingest_assets``: ``documents``, ``text_units``)."""
