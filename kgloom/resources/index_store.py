"""The whole output folder as the assets see it: the ``index`` resource's store.

:class:`IndexStore` is :class:`kgloom.core.layout.TableStore` (tables by table, level and
partition) plus every other file a stage writes or reads under the output folder: the
stats files, the partition markers, the corpus refresh, the embedding cache, the vector
index, the index summary and the build marker. Each method hands its own output folder
to the domain function that owns the file, so an asset never holds the raw folder.
No domain logic here: one call per method.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kgloom.core.builds import publish_build
from kgloom.core.layout import SUMMARY_FILE, TableStore, stored_partitions
from kgloom.core.stats import build_index_summary, write_stage_stats
from kgloom.core.storage import write_json
from kgloom.corpus.partitions import (
    CorpusTables,
    graph_inputs_fingerprint,
    mark_stage,
    refresh_corpus,
)
from kgloom.embedding.embedding_cache import EmbeddingCache, open_embedding_cache

if TYPE_CHECKING:
    from kgloom.embedding.windows import WindowedEmbedder
    from kgloom.settings.indexing import IndexSettings


class IndexStore(TableStore):
    """Every file under one output folder (see the module docstring).

    Args:
        output_dir: the output folder (the published level).
    """

    def stored_partitions(self) -> list[str]:
        """The keys of the partitions with a folder under the output, sorted
        (:func:`kgloom.core.layout.stored_partitions`)."""
        return stored_partitions(self.output_dir)

    def write_stats(self, stage: str, seconds: float, llm: dict | None = None,
                    partition: str | None = None, **fields: Any) -> dict:
        """Write ``stage``'s ``<stage>.stats.json`` in its stage folder and return the
        dict (:func:`kgloom.core.stats.write_stage_stats`: ``fields`` are its keyword
        arguments, ``embedder_seconds``, ``part_of`` and counts).

        Raises:
            kgloom.core.layout.PartitionKeyError: a malformed partition key.
            kgloom.core.storage.DiskFullError: the disk filled up.
        """
        return write_stage_stats(self.output_dir, stage, seconds, llm, partition=partition,
                                 **fields)

    def mark_stage(self, key: str, stage: str, **fields: Any) -> dict:
        """Write partition ``key``'s marker ``<stage>.manifest.json`` with ``fields``
        (:func:`kgloom.corpus.partitions.mark_stage`); return the marker.

        Raises:
            ValueError: a stage that is not a partition stage.
        """
        return mark_stage(self.output_dir, key, stage, **fields)

    def graph_inputs(self, keys: list[str], settings: IndexSettings, model_id: str,
                     embedder: str) -> str:
        """The hex SHA-256 of what the graph-wide stages read: partitions ``keys``' markers,
        ``settings``, the models and the code
        (:func:`kgloom.corpus.partitions.graph_inputs_fingerprint`)."""
        return graph_inputs_fingerprint(self.output_dir, keys, settings, model_id, embedder)

    def refresh_corpus(self, keys: list[str],
                       input_dir: str | Path) -> tuple[CorpusTables, list[str]]:
        """Combine the live partitions ``keys`` into the corpus level, removing deleted
        ones' folders (:func:`kgloom.corpus.partitions.refresh_corpus`); return the tables
        and the removed keys."""
        return refresh_corpus(self.output_dir, keys, input_dir)

    def embedding_cache(self) -> EmbeddingCache:
        """The index's embedding cache (``embedding_cache.sqlite``), opened; close it after
        use (:func:`kgloom.embedding.embedding_cache.open_embedding_cache`)."""
        return open_embedding_cache(self.output_dir)

    def sync_vectors(self, embedder: WindowedEmbedder,
                     progress: Callable[[str], Callable[[int, int], None] | None] | None = None,
                     log: Callable[[str], None] | None = None) -> tuple[dict, dict]:
        """Mirror the published tables into the LanceDB folder
        (:func:`kgloom.publish.vectors.sync_index`); return (written, expected) as it does.

        Raises:
            see :func:`kgloom.publish.vectors.sync_index`.
        """
        from kgloom.publish.vectors import sync_index  # LanceDB: loaded by this stage only

        return sync_index(self.output_dir, embedder, progress=progress, log=log)

    def index_summary(self, method: str) -> dict:
        """The index summary of what the folder holds now
        (:func:`kgloom.core.stats.build_index_summary`)."""
        return build_index_summary(self.output_dir, method)

    def write_summary(self, summary: dict) -> Path:
        """Write ``index-summary.json`` atomically; return its path.

        Raises:
            kgloom.core.storage.DiskFullError: the disk filled up; the old file is kept.
        """
        path = self.file(SUMMARY_FILE)
        write_json(summary, path)
        return path

    def publish_build(self) -> dict[str, Any]:
        """Publish the folder as one build, the build marker ``build.json`` last
        (:func:`kgloom.core.builds.publish_build`); return the marker."""
        return publish_build(self.output_dir)
