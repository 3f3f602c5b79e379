"""Graph stage: mentions -> resolved entities and relationships with summaries and metrics,
then hierarchical Leiden communities (``graph_assets``: ``entities`` ..., ``communities``)."""
