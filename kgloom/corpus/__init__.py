"""Corpus stage: partition folders, input fingerprints, and combining the live partitions
into the corpus level under ``stages/`` (``corpus_asset``: ``corpus``)."""
