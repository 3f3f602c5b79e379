"""Corpus stage (domain only, no Dagster): partition manifests, input fingerprints, and
combining the live partitions into the corpus level under ``stages/``. Its asset:
:mod:`kgloom.assets.corpus_assets` (``corpus``)."""
