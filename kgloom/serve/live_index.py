"""The index a server answers from: one open build at a time, switched between requests
when ``kgloom index`` publishes another (``kgloom serve``; docs/serve.md). No Dagster.

An :class:`IndexHandle` holds everything one published build needs in memory, opened
once: one :class:`kgloom.query.query_index.QueryIndex` shared by a
:class:`kgloom.query.retriever.Retriever` for the retrieval modes, a
:class:`kgloom.query.searcher.Searcher` for search, and a
:class:`kgloom.serve.graph_view.GraphView` for the graph endpoints. The index is
read-only once loaded; a Retriever or Searcher serves one call at a time (its settings
may be swapped for one call), so each has a lock; the graph view needs none.

:class:`LiveIndex` is what requests ask: before each request it compares the output
folder's ``build.json`` (the marker :func:`kgloom.core.builds.publish_build` writes last,
atomically) with the handle's; when another build was published, the first request to
notice opens a handle on it while the others go on with the old one, then every later
request gets the new one. A request keeps the handle it started with to the end, so it
sees one whole build, and every response names that build. A handle whose build was
pruned while a request used it raises :class:`kgloom.core.builds.IndexChangedError`:
:meth:`LiveIndex.call` then opens the current build and runs the request once more.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kgloom.core.builds import MARKER_FILE, OPEN_RETRIES, IndexChangedError, IndexInconsistentError
from kgloom.query.query_index import QueryIndex
from kgloom.query.retriever import IndexFilesMissingError, Retriever
from kgloom.query.searcher import Searcher, SearchSettings
from kgloom.serve.graph_view import GraphView
from kgloom.settings import Settings

logger = logging.getLogger(__name__)
T = TypeVar("T")
REOPEN_BACKOFF_S = 2.0  # after a failed open of a new build, keep the old one this long


@dataclass
class IndexHandle:
    """One published build, open (see module doc).

    Attributes:
        build_id: the build's id (None for a folder without ``build.json``).
        retriever: the retrieval modes' handle (the settings' ``retrieval`` section).
        searcher: search's handle (over the same index).
        graph: the graph endpoints' read-only view.
        retrieve_lock / search_lock: one call at a time per handle.
        opened_at: ``time.time()`` when it was opened.
    """

    build_id: str | None
    retriever: Retriever
    searcher: Searcher
    graph: GraphView
    retrieve_lock: threading.Lock = field(default_factory=threading.Lock)
    search_lock: threading.Lock = field(default_factory=threading.Lock)
    opened_at: float = field(default_factory=time.time)

    @classmethod
    def open(cls, output_dir: str | Path, llm: Any, embedder: Any = None,
             settings: Settings | None = None) -> IndexHandle:
        """Open the build ``output_dir``'s marker names now, with its tables loaded.

        Args:
            output_dir: the index folder.
            llm: the open :class:`kgloom.llm.CachedLLM` search answers with (shared by
                every handle; its cache lives outside the index folder).
            embedder: the index's embedder (an instance is shared by every handle; a
                folder or None: see :class:`Retriever`).
            settings: the settings (None: the defaults); their ``retrieval`` section
                (per-query defaults, graph backend, scoring knobs) and ``search`` section
                open the Retriever and the Searcher as ``kgloom query`` opens them
                (:meth:`Retriever.from_settings`, :meth:`Searcher.from_settings`), so
                the server answers a request as the CLI answers the same question.

        Raises:
            IndexFilesMissingError / IndexInconsistentError / EmbedderMismatchError: as
                :class:`Retriever` and :class:`Searcher`; IndexChangedError when the
                index was republished during every one of :data:`OPEN_RETRIES` tries.
        """
        settings = settings or Settings()
        for attempt in range(OPEN_RETRIES):
            try:
                index = QueryIndex.open(output_dir, embedder)
                retriever = Retriever.from_settings(index, settings)
                searcher = Searcher.from_settings(index, settings, llm=llm)
                _load_graph(index)  # now, not in the first graph request
                return cls(index.build.build_id, retriever, searcher, GraphView(index))
            except IndexChangedError:
                if attempt == OPEN_RETRIES - 1:
                    raise
        raise AssertionError("unreachable")

    def retrieve(self, question: str, mode: str, **params: Any):
        """:meth:`Retriever.retrieve` on this build, one call at a time."""
        with self.retrieve_lock:
            return self.retriever.retrieve(question, mode=mode, **params)

    def search(self, question: str, config: SearchSettings | None = None, **params: Any):
        """:meth:`Searcher.search` on this build, one call at a time, with ``config``
        (default: the handle's own) for this call only."""
        with self.search_lock:
            base = self.searcher.config
            self.searcher.config = config or base
            try:
                return self.searcher.search(question, **params)
            finally:
                self.searcher.config = base


def _load_graph(index: QueryIndex) -> None:
    """Load the entity graph of ``index`` now (a vector-only index has none)."""
    try:
        index.graph  # noqa: B018 - the property loads it
        index.entity_titles()
    except IndexFilesMissingError:
        pass


def _marker_stamp(output_dir: Path) -> tuple[int, int, int] | None:
    """(inode, mtime ns, size) of the build marker, None when absent: a publish renames
    a new file over it, so any publish changes the stamp."""
    try:
        st = os.stat(output_dir / MARKER_FILE)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


class LiveIndex:
    """The current build of one output folder, switched between requests (module doc).

    Args:
        output_dir: the index folder.
        opener: ``() -> IndexHandle`` opening the build the marker names now (e.g.
            ``lambda: IndexHandle.open(output_dir, llm, embedder)``).

    Attributes:
        switches: builds opened after the first (a count, for the health endpoint).
        last_error: the message of the last failed open of a new build, or None.

    Raises (on construction): what ``opener`` raises: the server does not start on an
    index it cannot open.
    """

    def __init__(self, output_dir: str | Path, opener: Callable[[], IndexHandle]) -> None:
        self.output_dir = Path(output_dir)
        self._opener = opener
        self._switch = threading.Lock()
        self._stamp = _marker_stamp(self.output_dir)
        self._handle = opener()
        self.switches = 0
        self.last_error: str | None = None
        self._retry_after = 0.0

    @property
    def handle(self) -> IndexHandle:
        """The handle now in use (no check of the marker)."""
        return self._handle

    def current(self) -> IndexHandle:
        """The handle of the build the marker names, opened when it changed.

        Only one request opens a new build; requests arriving meanwhile get the old
        handle. When opening fails (a damaged or half-written publish), the old handle
        keeps serving, ``last_error`` says why, and the open is tried again after
        :data:`REOPEN_BACKOFF_S`.
        """
        stamp = _marker_stamp(self.output_dir)
        if stamp == self._stamp or time.monotonic() < self._retry_after:
            return self._handle
        if not self._switch.acquire(blocking=False):
            return self._handle  # another request is opening it
        try:
            if _marker_stamp(self.output_dir) != self._stamp:
                self._reopen()
        finally:
            self._switch.release()
        return self._handle

    def _reopen(self) -> None:
        stamp = _marker_stamp(self.output_dir)
        try:
            handle = self._opener()
        except (IndexFilesMissingError, IndexInconsistentError, ValueError, OSError) as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"
            self._retry_after = time.monotonic() + REOPEN_BACKOFF_S
            logger.warning("kept build %s: opening the new one failed: %s",
                           self._handle.build_id, exc)
            return
        if handle.build_id != self._handle.build_id:
            self.switches += 1
            logger.info("switched from build %s to %s", self._handle.build_id, handle.build_id)
        self._handle, self._stamp, self.last_error = handle, stamp, None

    def call(self, fn: Callable[[IndexHandle], T]) -> T:
        """``fn(handle)`` on the current build; when that build was pruned under it
        (:class:`IndexChangedError`), once more on the build published since.

        Raises:
            what ``fn`` raises (IndexChangedError only when it happens twice).
        """
        handle = self.current()
        try:
            return fn(handle)
        except IndexChangedError:
            with self._switch:
                if self._handle is handle:
                    self._reopen()
            if self._handle is handle:
                raise
            return fn(self._handle)
