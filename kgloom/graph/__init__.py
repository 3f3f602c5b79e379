"""Graph stage (domain only, no Dagster): mentions -> resolved entities and relationships
with summaries and metrics, then hierarchical Leiden communities. Its assets:
:mod:`kgloom.assets.graph_assets` (``entities`` ..., ``communities``)."""
