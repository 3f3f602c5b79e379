"""Where the index reads and writes, and the index settings, as one resource."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
from dagster._core.errors import DagsterExecutionInterruptedError
from dagster._utils.interrupts import check_captured_interrupt

from kgloom.config import DEFAULT_ENTITY_TYPES, IndexSettings
from kgloom.lock import LockWaitCancelled, writer_lock
from kgloom.pipelines.recovery import COMMAND_TAG, PID_TAG, process_tags


class IndexConfigResource(dg.ConfigurableResource):
    """Input and output folders plus :class:`kgloom.config.IndexSettings` fields.

    For the whole run that uses it, the resource holds the writer lock of the output
    folder (:func:`kgloom.lock.writer_lock`; a run launched while another writer works
    waits, and its log names the holder) and records the run's process in the run's tags
    (:func:`kgloom.pipelines.recovery.process_tags`), so a run whose process dies is
    found and failed by crash recovery.
    """

    input_dir: str = "data/input"
    output_dir: str = "data/output"
    chunk_size: int = 600
    chunk_overlap: int = 100
    entity_types: list[str] = list(DEFAULT_ENTITY_TYPES)
    max_gleanings: int = 0
    extract_claims: bool = False
    co_mention_edges: bool = True
    max_cluster_size: int = 10
    seed: int = 0xDEADBEEF
    report_max_input_tokens: int = 800
    report_llm_min_members: int = 3
    report_llm_min_relationships: int = 0
    reuse_reports: bool = True
    summary_method: str = "extractive"  # extractive | llm
    llm_descriptions: bool = False
    resolution_methods: list[str] = ["normalized", "name_extension", "name_context", "embedding"]
    embedding_merge_threshold: float = 0.92
    verify_merges_with_llm: bool = True
    cut_boilerplate: bool = True
    candidate_source: str = "auto"  # auto | proper_names | segmenter | ngram | open
    title_candidates: bool = True

    def settings(self) -> IndexSettings:
        """Return the domain settings built from this resource's fields."""
        return IndexSettings(chunk_size=self.chunk_size, chunk_overlap=self.chunk_overlap,
                             entity_types=tuple(t.upper() for t in self.entity_types),
                             max_gleanings=self.max_gleanings,
                             extract_claims=self.extract_claims,
                             co_mention_edges=self.co_mention_edges,
                             max_cluster_size=self.max_cluster_size, seed=self.seed,
                             report_max_input_tokens=self.report_max_input_tokens,
                             report_llm_min_members=self.report_llm_min_members,
                             report_llm_min_relationships=self.report_llm_min_relationships,
                             summary_method=self.summary_method,
                             reuse_reports=self.reuse_reports,
                             llm_descriptions=self.llm_descriptions,
                             resolution_methods=tuple(self.resolution_methods),
                             embedding_merge_threshold=self.embedding_merge_threshold,
                             verify_merges_with_llm=self.verify_merges_with_llm,
                             cut_boilerplate=self.cut_boilerplate,
                             candidate_source=self.candidate_source,
                             title_candidates=self.title_candidates)

    @contextlib.contextmanager
    def yield_for_execution(self, context: dg.InitResourceContext
                            ) -> Iterator["IndexConfigResource"]:
        """Hold the output folder's writer lock while the run uses this resource.

        Raises:
            DagsterExecutionInterruptedError: when the run is interrupted while waiting.
        """
        run = context.run
        if context.instance is not None and run is not None and PID_TAG not in run.tags:
            context.instance.add_run_tags(run.run_id, process_tags())
        command = (run.tags.get(COMMAND_TAG) if run else None) or (
            f"dagster run {run.run_id[:8]}" if run else "dagster")
        warn = context.log.warning if context.log else None
        try:
            with writer_lock(self.output_dir, command, on_wait=warn,
                             should_stop=check_captured_interrupt):
                yield self
        except LockWaitCancelled as exc:
            raise DagsterExecutionInterruptedError(str(exc)) from exc

    @property
    def out(self) -> Path:
        """The output folder (created on first use)."""
        p = Path(self.output_dir)
        p.mkdir(parents=True, exist_ok=True)
        return p
