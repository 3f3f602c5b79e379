"""Where the index reads and writes, and the index settings, as one resource."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
from dagster._core.errors import DagsterExecutionInterruptedError
from dagster._utils.interrupts import check_captured_interrupt

from kgloom.core.inputs import input_path
from kgloom.core.layout import Level, PartitionKeyError
from kgloom.core.lock import LockWaitCancelled, writer_lock
from kgloom.core.processes import COMMAND_TAG, PID_TAG, process_tags
from kgloom.resources.index_store import IndexStore
from kgloom.settings.indexing import IndexSettings


class IndexSettingsConfig(dg.Config, IndexSettings):
    """:class:`kgloom.settings.indexing.IndexSettings` as Dagster config (the UI's launchpad
    shows and edits every field): the same fields, defaults and checks, with the tuple fields held
    as lists, the form Dagster config takes."""

    # pydantic copies field defaults (RUF012); lists on purpose, in place of the tuples
    record_edges: list[str] = []  # noqa: RUF012  # pyright: ignore[reportIncompatibleVariableOverride]
    entity_types: list[str] = list(IndexSettings().entity_types)  # noqa: RUF012  # pyright: ignore[reportIncompatibleVariableOverride]
    resolution_methods: list[str] = list(IndexSettings().resolution_methods)  # noqa: RUF012  # pyright: ignore[reportIncompatibleVariableOverride]


class IndexConfigResource(dg.ConfigurableResource):
    """Input and output folders (the ``paths`` section of :class:`kgloom.settings.Settings`)
    and the ``index`` section as one typed field, ``index_settings``.

    For the whole run that uses it, the resource holds the writer lock of the output
    folder (:func:`kgloom.core.lock.writer_lock`; a run launched while another writer works
    waits, and its log names the holder) and records the run's process in the run's tags
    (:func:`kgloom.core.processes.process_tags`), so a run whose process dies is
    found and failed by crash recovery.
    """

    input_dir: str = "data/input"
    output_dir: str = "data/output"
    index_settings: IndexSettingsConfig = IndexSettingsConfig()

    def settings(self) -> IndexSettings:
        """Return the domain settings (tuples where the config holds lists); the values
        were checked when the config was built."""
        return IndexSettings.model_validate(self.index_settings.model_dump())

    @contextlib.contextmanager
    def yield_for_execution(self, context: dg.InitResourceContext
                            ) -> Iterator[IndexConfigResource]:
        """Hold the output folder's writer lock while the run uses this resource.

        Raises:
            DagsterExecutionInterruptedError: when the run is interrupted while waiting.
        """
        run = context.run
        if run is None:  # a sensor or schedule evaluation reads, it never writes
            yield self
            return
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
        """The output folder (created on first use): the published level (GraphRAG
        tables, graph files, LanceDB, index summary)."""
        p = Path(self.output_dir)
        p.mkdir(parents=True, exist_ok=True)
        return p

    @property
    def store(self) -> IndexStore:
        """The whole output folder: its tables by (table, level, partition)
        (:class:`kgloom.core.layout.TableStore`) and every other file the stages write
        there (:class:`kgloom.resources.index_store.IndexStore`); the assets reach the
        folder only through it."""
        return IndexStore(self.out)

    def partition(self, key: str) -> str:
        """Return ``key`` once it is known to name a file inside the input folder, with its
        folder at the partition level made: every partitioned asset asks first.

        Raises:
            dagster.Failure: when ``key`` does not name a file inside the input folder
                (:func:`kgloom.core.inputs.input_path`: ``../secret.txt``, a
                symlink leading out, ...), before any folder is made: a crafted key from
                the Dagster API, the launchpad or a backfill fails the run with this
                message.
        """
        try:
            input_path(self.input_dir, key)
            self.store.folder(Level.PARTITION, key)
            return key
        except PartitionKeyError as exc:
            raise dg.Failure(description=str(exc)) from None
