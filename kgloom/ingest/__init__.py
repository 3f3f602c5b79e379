"""Ingest stage (domain only, no Dagster): an input file -> documents (decoding, cleaning)
-> token-bounded text units. Its assets: :mod:`kgloom.assets.ingest_assets`."""
