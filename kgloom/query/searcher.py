"""Search over a kgloom index: local, global (static or dynamic), direct, and routed
(auto), with answers from the local model that cite the context they were given.

:class:`Searcher` opens an output folder once (a :class:`kgloom.query.query_index.QueryIndex`:
text units, entity linking, the entity graph, and the entity, relationship, community
and report tables) and the model lazily, Dagster-free (:func:`kgloom.llm.open_llm`).
Each :meth:`Searcher.search` routes the question and runs one search method of
:mod:`kgloom.query.structured_search`:

- **direct**: :class:`~kgloom.query.structured_search.basic_search.BasicSearch`.
- **local**: :class:`~kgloom.query.structured_search.local_search.LocalSearch`.
- **global**: :class:`~kgloom.query.structured_search.global_search.GlobalSearch`;
  with no community report it says so in ``info["fallback"]`` and runs local search.
- **auto**: :mod:`kgloom.query.routing` picks one.

It returns a :class:`SearchResult`: the route taken and why, the context the model read
(within its token budget), the answer and its citations, and ``info`` with the LLM calls
and prompt tokens of each stage, the community selection and any fallback. LLM calls go
through the cache in ``cache_path`` (default ``<output_dir>/query_cache.sqlite``, a file
of its own: a query never writes the index's ``llm_cache.sqlite``, its tables or any other
file of the index; pass another path for a read-only index). On an index built with
``llm_reports: lazy``, global search keeps the LLM reports it writes in
``lazy_reports.sqlite`` beside that cache
(:mod:`kgloom.query.context_builder.lazy_reports`). No Dagster import.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kgloom.core.builds import OPEN_RETRIES, IndexChangedError, IndexFilesMissingError
from kgloom.embedding.sentence_embedder import Embedder
from kgloom.llm import CachedLLM
from kgloom.query.context_builder.community_context import Progress
from kgloom.query.context_builder.context import TokenCounter, check_budget
from kgloom.query.context_builder.lazy_reports import LAZY_REPORTS_FILE, LazyReports
from kgloom.query.modes import (  # the one registry of modes
    SEARCH_MODES,
    check_mode,
    check_question,
)
from kgloom.query.query_index import QueryIndex
from kgloom.query.retrieval.relevance import judge_relevance, question_relevance
from kgloom.query.retrieval.steps import check_settings, link_question
from kgloom.query.routing import Route, route_question
from kgloom.query.structured_search.basic_search import BasicSearch
from kgloom.query.structured_search.global_search import GlobalSearch
from kgloom.query.structured_search.local_search import LocalSearch
from kgloom.query.structured_search.search_base import (
    QUERY_CACHE_FILE,
    CallLog,
    SearchModel,
    SearchResult,
    model_notice,
)
from kgloom.settings.retrieval_settings import RetrievalSettings
from kgloom.settings.search_settings import SearchSettings

if TYPE_CHECKING:
    from kgloom.settings import Settings

__all__ = ["SEARCH_MODES", "SearchResult", "SearchSettings", "Searcher"]


class Searcher:
    """Search over one output folder (see module doc).

    Args:
        output_dir: the index folder, or an open :class:`QueryIndex` (shared, e.g. with
            a :class:`kgloom.query.retriever.Retriever`).
        llm: an open :class:`CachedLLM`; None opens one on first need with
            :func:`kgloom.llm.open_llm` (``model_path``, ``fake_llm``, ``n_ctx``,
            ``cache_path``).
        config: the search knobs (:class:`SearchSettings`, the settings' ``search``
            section); may be replaced between calls.
        embedder: the index's embedder (see :meth:`QueryIndex.open`); unused with an
            open index.
        graph_backend: the retrieval's graph backend (``memory`` keeps the graph in the
            index handle); None: ``retrieval``'s.
        retrieval: the knobs of the retrieval local and direct search run
            (:class:`RetrievalSettings`; default its defaults, with ``graph_backend``).
        cache_path: the query LLM cache (default: the given ``llm``'s cache file, else
            ``<output_dir>/query_cache.sqlite``); the lazy reports global search writes go
            beside it (``lazy_reports.sqlite``), so a searcher given a model with its own
            cache (the HTTP server's) writes nothing into the index folder.
        model_path / fake_llm / n_ctx / n_threads: how to open the model.

    Attributes:
        index: the :class:`QueryIndex`, its search tables loaded.
        config: the :class:`SearchSettings`.
        retrieval: the :class:`RetrievalSettings` of local and direct search's retrieval.

    Raises:
        ValueError: an unknown graph_backend.
        IndexFilesMissingError / IndexInconsistentError / EmbedderMismatchError: as
            :meth:`QueryIndex.open`.
    """

    def __init__(self, output_dir: str | Path | QueryIndex, llm: CachedLLM | None = None,
                 config: SearchSettings | None = None, embedder: Any = None,
                 graph_backend: str | None = "memory", cache_path: str | Path | None = None,
                 model_path: str | None = None, fake_llm: bool = False, n_ctx: int = 4096,
                 n_threads: int | None = None,
                 retrieval: RetrievalSettings | None = None) -> None:
        retrieval = retrieval or RetrievalSettings()
        if graph_backend is not None:
            retrieval = retrieval.model_copy(update={"graph_backend": graph_backend})
        self.retrieval = check_settings(retrieval)
        if isinstance(output_dir, QueryIndex):
            self.index = output_dir
            self.index.tables  # noqa: B018 - loads them now
        else:
            for attempt in range(OPEN_RETRIES):  # the index's build, whole, or the next one
                self.index = QueryIndex.open(output_dir, embedder)
                if isinstance(self.index.embedder, Embedder):
                    embedder = self.index.embedder  # loaded once across tries
                try:
                    self.index.tables  # noqa: B018 - loads them now
                    break
                except IndexChangedError:
                    if attempt == OPEN_RETRIES - 1:
                        raise
        self._report_vectors: dict[str, np.ndarray] = {}  # report key -> vector
        self.config = config or SearchSettings()
        if cache_path is None and llm is not None:
            cache_path = llm.cache.path  # a given model keeps its answers where it was told
        cache_path = Path(cache_path or self.index.output_dir / QUERY_CACHE_FILE)
        self.lazy_reports = LazyReports(self.index, cache_path.parent / LAZY_REPORTS_FILE)
        self.model = SearchModel(llm, {
            "cache_path": cache_path,
            "model_path": model_path, "fake": fake_llm, "n_ctx": n_ctx, "n_threads": n_threads})

    @classmethod
    def from_settings(cls, output_dir: str | Path | QueryIndex | None, settings: Settings,
                      llm: CachedLLM | None = None, cache_path: str | Path | None = None,
                      embedder: Any = None) -> Searcher:
        """The Searcher the settings describe, as ``kgloom query``, ``kgloom serve`` and
        ``kgloom mcp`` open it: the index ``output_dir`` (None: ``paths.output_dir``),
        the embedder ``embedder`` (None: ``embedder.model_path``, else the index's), the
        ``search`` section as :attr:`config`, the ``retrieval`` section (its
        ``graph_backend`` included) for local and direct search's retrieval, and the
        model ``llm``, else the one the ``llm`` section names
        (:meth:`kgloom.settings.LLMSettings.open_cached`) behind the cache ``cache_path``
        (default ``<output_dir>/query_cache.sqlite``), opened here.

        Raises:
            kgloom.llm.ModelFileError / kgloom.llm.http.LLMServerError / ValueError: as
                :meth:`kgloom.settings.LLMSettings.open_cached` (when ``llm`` is None).
            as the constructor.
        """
        folder = settings.paths.output_dir if output_dir is None else output_dir
        if embedder is None:
            embedder = settings.embedder.model_path or None
        if llm is None:
            base = folder.output_dir if isinstance(folder, QueryIndex) else Path(folder)
            llm = settings.llm.open_cached(cache_path or base / QUERY_CACHE_FILE)
        return cls(folder, llm=llm, config=settings.search, embedder=embedder,
                   graph_backend=None, cache_path=cache_path, retrieval=settings.retrieval)

    @property
    def llm(self) -> CachedLLM:
        """The cached model, opened on first use.

        Raises:
            kgloom.llm.ModelFileError: a missing or wrong model file.
        """
        return self.model.llm

    @property
    def counter(self) -> TokenCounter:
        """Token counter of the model (its own tokenizer when it has one)."""
        return self.model.counter

    def search(self, question: str, mode: str = "auto", dynamic: bool = False,
               level: int | None = None, answer: bool = True, budget: int | None = None,
               progress: Progress | None = None, defer_answer: bool = False) -> SearchResult:
        """Answer ``question`` (or, with ``answer=False``, build its context only, with
        no model call: routing by rules, static selection only).

        Args:
            question: a non-empty string, any language.
            mode: auto | local | global | direct.
            dynamic: global search with dynamic community selection (else static).
            level: static global search: the level whose reports are mapped (default
                ``config.default_level``); dynamic: the deepest level to descend to.
            answer: call the model for the answer (False: context only).
            budget: tokens of a local / direct context (default ``config.budget``).
            progress: called with global search's events (phase rate / map / reduce).
            defer_answer: run everything the answer needs (routing, global search's
                rating and map calls) but not the answer call itself: the result has no
                answer, and ``info["deferred_answer"]["citable"]`` lists the ids an
                answer may cite (:mod:`kgloom.serve.answer_stream` streams the answer
                from a model server).

        Raises:
            ValueError: an empty question or one that is no text
                (:func:`kgloom.query.modes.check_question`), an unknown mode, a budget
                that is not a positive integer or too small for one item (naming the
                budget), a level the hierarchy lacks, ``dynamic`` with ``answer=False``,
                a question too long for the model's window by itself (naming its
                tokens), or a context that does not fit the model's window with its
                prompt.
            IndexFilesMissingError: local, global or auto search on an index missing a
                table it needs (entities, relationships, communities, community reports;
                see :func:`kgloom.query.context_builder.search_tables.missing_tables`), naming
                each file.

        The result's ``info["build_id"]`` names the published build it was read from;
        ``info["best_similarity"]``, ``info["low_relevance"]`` and ``info["notice"]`` say
        whether anything in the index is relevant to the question
        (:func:`kgloom.query.retrieval.relevance.question_relevance`).
        """
        budget = self._checked_budget(question, mode, dynamic, answer, budget)
        local = LocalSearch(self.index, self.config, self.model, defer_answer)
        if answer:
            local.check_question_fits(question)
        start = time.perf_counter()
        log = CallLog(self.llm) if answer else None
        failures: list[dict] = []
        info: dict[str, Any] = {"budget": budget, "fallback": None,
                                "build_id": self.index.build.build_id}
        route = self._route(question, mode, log, failures, info)
        result = self._routed_result(question, mode, route, local, budget, answer, dynamic,
                                     level, log, info, failures, progress, defer_answer)
        return self._finish(result, start, log)

    def _checked_budget(self, question: str, mode: str, dynamic: bool, answer: bool,
                        budget: int | None) -> int:
        """The checked token budget of a local / direct context (``config.budget`` when
        None), after checking the request, in this order.

        Raises:
            ValueError: an empty question or one that is no text, an unknown mode, a
                budget that is not a positive integer (naming the budget), or
                ``dynamic`` with ``answer=False``.
            IndexFilesMissingError: a mode other than direct on an index missing a table
                it needs, naming each file.
        """
        check_question(question)
        check_mode(mode, SEARCH_MODES)
        budget = check_budget(self.config.budget if budget is None else budget, "budget")
        if dynamic and not answer:
            raise ValueError("dynamic community selection asks the model to rate reports, "
                             "so it cannot run context-only; give a static --level instead")
        tables = self.index.tables
        if mode != "direct" and tables.missing:
            raise IndexFilesMissingError(
                f"{mode} search needs {', '.join(tables.missing)}, which this index "
                f"lacks: it is half-written or damaged (run `kgloom index --output-dir "
                f"{self.index.output_dir}` again); --mode direct reads only the text units")
        return budget

    def _route(self, question: str, mode: str, log: CallLog | None, failures: list[dict],
               info: dict[str, Any]) -> Route:
        """The route of ``question``: ``mode`` as asked for, or with ``auto`` the one
        :func:`kgloom.query.routing.route_question` picks from the question and the
        titles of its linked entities (:meth:`link_titles`); auto records
        ``info["routing"]`` (decided_by, rule, linked) and appends a routing call's
        failure to ``failures``."""
        if mode != "auto":
            return Route(mode, "asked for", "user")
        links = self.link_titles(question)
        route, failure = route_question(question, links, log, self.config.seed)
        if failure:
            failures.append(failure)
        info["routing"] = {"decided_by": route.decided_by, "rule": route.rule,
                           "linked": links}
        return route

    def _routed_result(self, question: str, mode: str, route: Route, local: LocalSearch,
                       budget: int, answer: bool, dynamic: bool, level: int | None,
                       log: CallLog | None, info: dict[str, Any], failures: list[dict],
                       progress: Progress | None, defer_answer: bool) -> SearchResult:
        """Run ``route``: global search (:class:`GlobalSearch`) when it routes there and
        the index has community reports, else local search with ``info["fallback"]``
        saying why; local search too when global search selects no report (its result's
        route and reason); direct search (:class:`BasicSearch`) or ``local`` otherwise.

        Raises:
            ValueError: as :meth:`search` (a level the hierarchy lacks, a context too
                long for the model's window).
        """
        ran, reason = route.route, route.reason
        if ran == "global":
            tables = self.index.tables
            if tables.tree is None:
                info["fallback"] = f"global search impossible: {tables.no_reports_reason}"
                ran = "local"
                reason = f"{reason}; fell back to local: {tables.no_reports_reason}"
            else:
                result = GlobalSearch(self.index, self.config, self.model,
                                      self._report_vectors, self.lazy_reports,
                                      defer_answer).search(
                    question, mode, reason, dynamic, level, answer, log, info, failures,
                    progress)
                if result.route == "global":
                    return result
                ran, reason = result.route, result.route_reason
        method = BasicSearch(self.index, self.config, self.model, defer_answer) \
            if ran == "direct" else local
        return method.search(question, mode, reason, budget, answer, log, info, failures,
                             self.retrieval)

    def _finish(self, result: SearchResult, start: float, log: CallLog | None) -> SearchResult:
        # one judgement for every route: the question against its nearest text unit,
        # taken from the route's retrieval when it ran one (local, direct), else searched
        threshold = self.retrieval.low_relevance_similarity
        best = result.info.get("retrieval", {}).get("best_similarity")
        result.info.update(judge_relevance(best, threshold, result.question)
                           if best is not None else
                           question_relevance(self.index, result.question, threshold))
        result.info["llm"] = log.summary() if log else {}
        if result.answer is not None:
            result.notice = model_notice(self.llm.model_id)
        result.info["counter"] = self.counter.name
        result.info["seconds"] = round(time.perf_counter() - start, 3)
        return result

    def link_titles(self, question: str) -> list[str]:
        """The titles of the question's linked entities
        (:func:`kgloom.query.retrieval.steps.link_question`); [] for an index without an
        entity graph."""
        try:
            return [x.title for x in link_question(self.index, self.retrieval,
                                                   question)]
        except IndexFilesMissingError:
            return []
