"""Global search over community reports: a community selection
(:mod:`kgloom.query.context_builder.community_context`: static or dynamic), then map
(each batch of reports -> rated key points) and reduce (ranked points -> one context),
then the answer.

- **Map**: the selected reports, best first, are packed into batches of ``map_budget``
  tokens; one call per batch returns up to 3 key points, each with an importance score
  (0-10) and the ids of the reports it came from (an enum of the batch's report ids, so
  a point cannot cite a report it was not shown). When dynamic selection's reports give
  no point above 0, the relevant communities their children replaced are mapped next
  (broader reports, best rating first): the deepest relevant reports are narrow, and a
  thematic question may need the summary above them (kgloom's own fallback; measured in
  bench/eval_search.py).
- **Reduce**: points with score > 0, by score (ties: batch, then position in the
  batch), packed into ``reduce_budget`` tokens as the answer's context.

On an index built with ``llm_reports: lazy`` (and ``SearchSettings.lazy_reports`` on), the
communities a search reaches get their LLM report before their report is read: each
dynamic step's communities after the shortlist (rated on the LLM report; the shortlist
itself compares the question with the rule report), the static selection, and the map
fallback's broader reports (:mod:`kgloom.query.context_builder.lazy_reports`). Without
the model (``answer=False``) the rule reports are read as published.

Map replies that fail twice become failure rows (GraphRAG's failures schema), never
exceptions: a failed map batch gives no points.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kgloom.llm import LLMCaller, PromptTemplate, structured_call
from kgloom.query.context_builder.community_context import (
    BatchRater,
    CommunityTree,
    Progress,
    Report,
    ReportBatch,
    Selection,
    map_batches,
    select_dynamic,
    select_static,
)
from kgloom.query.context_builder.context import (
    Context,
    ContextItem,
    Section,
    TokenCounter,
    pack_context,
    refs_in,
    verbalize_report,
)
from kgloom.query.context_builder.lazy_reports import LazyReports, awaiting
from kgloom.query.context_builder.local_context import context_sources
from kgloom.query.query_index import QueryIndex
from kgloom.query.structured_search.search_base import (
    BaseSearch,
    CallLog,
    SearchModel,
    SearchResult,
    SearchSettings,
)

POINT_SCALE = 10
MAX_POINTS = 3

MAP_TEMPLATE = PromptTemplate(
    name="search_map",
    system=("You pick the facts in reports that help to answer a question. "
            "Answer with JSON only."),
    user=("Question: {question}\n\nReports:\n{reports}\n\n"
          "List up to 3 key points from these reports that help to answer the question. "
          "Score each from 0 (no help) to 10 (essential) and give the ids of the reports "
          "it comes from. If nothing helps, give one point with score 0."),
    schema={},  # per call: the report ids of the batch are an enum (map_schema)
    max_tokens=400,
)


def map_schema(report_refs: Sequence[str]) -> dict[str, Any]:
    """The map reply schema for one batch: 1-3 points, each a description (<= 200
    characters), a score 0-10 and 1-3 report ids from ``report_refs``."""
    return {"type": "object", "properties": {"points": {
        "type": "array", "minItems": 1, "maxItems": MAX_POINTS,
        "items": {"type": "object", "properties": {
            "description": {"type": "string", "minLength": 1, "maxLength": 200},
            "score": {"type": "integer", "enum": list(range(POINT_SCALE + 1))},
            "reports": {"type": "array", "minItems": 1,
                        "maxItems": min(3, len(report_refs)),
                        "items": {"type": "string", "enum": list(report_refs)}}},
            "required": ["description", "score", "reports"]}}},
        "required": ["points"]}


@dataclass(frozen=True)
class KeyPoint:
    """One map-step point: text, importance 0-10, the report refs it came from, and
    where it was produced (batch index, position in the reply)."""

    description: str
    score: int
    reports: tuple[str, ...]
    batch: int
    position: int


def run_map(question: str, batches: Sequence[ReportBatch], llm: LLMCaller, seed: int,
            progress: Progress | None = None, first_batch: int = 0
            ) -> tuple[list[KeyPoint], list[dict]]:
    """One map call per batch (stage ``search_map``); returns (points in batch order,
    failure rows). A failed batch adds a failure row and no point. ``first_batch``
    numbers the batches (``KeyPoint.batch``) after those of an earlier map."""
    points: list[KeyPoint] = []
    failures: list[dict] = []
    for i, batch in enumerate(batches, first_batch):
        obj, failure = structured_call(llm, MAP_TEMPLATE, "search_map", ",".join(batch.refs),
                                       seed, schema=map_schema(batch.refs), question=question,
                                       reports=batch.text)
        if obj is None:
            assert failure is not None  # structured_call: no object, then a failure row
            failures.append(failure)
        else:
            for j, p in enumerate(obj["points"]):
                points.append(KeyPoint(" ".join(p["description"].split()), int(p["score"]),
                                       tuple(dict.fromkeys(p["reports"])), i, j))
        if progress:
            progress({"phase": "map", "done": i + 1, "total": first_batch + len(batches),
                      "points": len(points)})
    return points, failures


def rank_points(points: Sequence[KeyPoint]) -> list[KeyPoint]:
    """Points with score > 0, highest score first; ties keep map order (batch, then
    position), so the best-rated reports' points lead."""
    return sorted((p for p in points if p.score > 0),
                  key=lambda p: (-p.score, p.batch, p.position))


def reduce_context(points: Sequence[KeyPoint], budget: int, counter: TokenCounter) -> Context:
    """The reduce step's context: :func:`rank_points` as ``[P1] (importance 8; from [C5])
    text`` lines within ``budget`` tokens (a repeated point text is kept once)."""
    items = [ContextItem(f"P{i}", "points", p.description.lower(),
                         f"[P{i}] (importance {p.score}; from "
                         f"{' '.join(f'[{r}]' for r in p.reports)}) {p.description}",
                         float(p.score))
             for i, p in enumerate(rank_points(points), 1)]
    return pack_context([Section("points", items, 1.0)], budget, counter, "reduce budget")


class GlobalSearch(BaseSearch):
    """Global search over one index (GraphRAG's ``GlobalSearch``; module doc).

    Attributes (besides :class:`BaseSearch`'s):
        report_vectors: report key -> its "title: summary" vector, embedded once and
            shared across calls (the dynamic selection's shortlist).
        lazy: writes the LLM reports a lazy index left to search (None: read the
            reports as published).
    """

    def __init__(self, index: QueryIndex, config: SearchSettings, model: SearchModel,
                 report_vectors: dict[str, np.ndarray],
                 lazy: LazyReports | None = None, defer_answer: bool = False) -> None:
        super().__init__(index, config, model, defer_answer)
        self.report_vectors = report_vectors
        self.lazy = lazy

    def search(self, question: str, mode: str, reason: str, dynamic: bool,
               level: int | None, answer: bool, log: CallLog | None, info: dict[str, Any],
               failures: list[dict], progress: Progress | None) -> SearchResult:
        """Global search; returns a result whose route is ``local`` (with its reason)
        when no report is selected, for the caller to run.

        Raises:
            ValueError: a level the hierarchy lacks, a budget too small for one report,
                or a context that does not fit the model's window with its prompt.
        """
        cfg, tree = self.config, self.index.tables.tree
        assert tree is not None
        info["hierarchy"] = {"levels": tree.levels, "reports": len(tree),
                             "missing_reports": tree.missing, "stale_reports": tree.stale}
        reach = self._reach(tree, answer, log, info, failures)
        selection = self._select(question, tree, dynamic, level, log, info, progress, reach)
        failures += selection.failures
        info["selection"] = selection.summary()
        if not selection.selected:
            why = "no community report was rated relevant to the question"
            info["fallback"] = f"global search found nothing: {why}"
            return SearchResult(question, mode, "local", f"{reason}; fell back to local: {why}",
                                None, [], Context([], 0, 0, ""), info=info)
        if reach is not None:
            reach(selection.selected)
        reports = [tree.reports[c] for c in selection.selected]
        batches = map_batches(reports, cfg.map_budget, self.counter, cfg.map_report_max_tokens)
        map_info: dict[str, Any] = {"batches": len(batches), "reports": len(reports),
                                    "max_batch_tokens": max(b.tokens for b in batches)}
        info["map"] = map_info
        report_sources = _report_sources(reports)
        if not answer:
            return SearchResult(question, mode, "global", reason, None, [],
                                self._reports_context(reports, batches), report_sources,
                                batches, info, failures)
        assert log is not None
        points, map_failures = run_map(question, batches, log, cfg.seed, progress)
        failures += map_failures
        if dynamic and cfg.map_fallback and selection.replaced and not rank_points(points):
            extra, more, broader = self._map_broader(question, tree, selection.replaced,
                                                     len(batches), log, progress, reach,
                                                     failures, map_info)
            points += extra
            batches = batches + more
            report_sources.update(_report_sources(broader))
        return self._reduce_and_answer(question, mode, reason, points, batches,
                                       report_sources, log, info, failures, progress)

    def _select(self, question: str, tree: CommunityTree, dynamic: bool, level: int | None,
                log: CallLog | None, info: dict[str, Any], progress: Progress | None,
                reach: Callable[[list[int]], None] | None) -> Selection:
        """The communities to map: dynamic community selection
        (:func:`~kgloom.query.context_builder.community_context.select_dynamic`, rating
        with ``log``, which must then be given; shortlisted when
        ``config.rate_shortlist``), or every report of one level (``level``, else
        ``config.default_level`` when the hierarchy has it, else its deepest level;
        recorded as ``info["level"]``).

        Raises:
            ValueError: a level the hierarchy lacks, or a rate budget too small for one
                report line.
        """
        cfg = self.config
        if dynamic:
            assert log is not None

            rate = BatchRater(log, question, self.counter, cfg.seed, cfg.rate_budget,
                              cfg.rate_batch, cfg.rate_max_tokens)
            return select_dynamic(
                tree, rate, cfg.threshold, level, progress,
                shortlist=self._shortlist(question, tree) if cfg.rate_shortlist else None,
                keep_parent=cfg.keep_parent, reach=reach)
        chosen = level if level is not None else (
            cfg.default_level if cfg.default_level in tree.levels else tree.levels[-1])
        selection = select_static(tree, chosen)
        info["level"] = chosen
        return selection

    def _reports_context(self, reports: list[Report], batches: list[ReportBatch]) -> Context:
        """The context of a search without an answer (``answer=False``): the selected
        community reports, full content, in selection order (no map, no reduce); its
        budget the map budget, its tokens those of the largest map batch."""
        items = [ContextItem(rep.ref, "reports", str(rep.community),
                             verbalize_report(rep.ref, rep.title, rep.full_content),
                             rep.rank) for rep in reports]
        return Context(items, self.config.map_budget, max(b.tokens for b in batches),
                       self.counter.name, {"reports": {"kept": len(items)}})

    def _map_broader(self, question: str, tree: CommunityTree, replaced: list[int],
                     first_batch: int, log: CallLog, progress: Progress | None,
                     reach: Callable[[list[int]], None] | None, failures: list[dict],
                     map_info: dict[str, Any]
                     ) -> tuple[list[KeyPoint], list[ReportBatch], list[Report]]:
        """The map fallback (module doc): the reports of ``replaced`` (the relevant
        communities their children replaced, best rating first; given their LLM reports
        first on a lazy index through ``reach``) mapped, their batches numbered from
        ``first_batch``; failure rows go to ``failures``, the counts to
        ``map_info["fallback"]``.

        Returns:
            (the key points, the map batches, the broader reports mapped).

        Raises:
            ValueError: a map budget too small for one report line.
        """
        cfg = self.config
        if reach is not None:
            reach(replaced)
        broader = [tree.reports[c] for c in replaced]
        more = map_batches(broader, cfg.map_budget, self.counter, cfg.map_report_max_tokens)
        extra, map_failures = run_map(question, more, log, cfg.seed, progress,
                                      first_batch=first_batch)
        failures += map_failures
        map_info["fallback"] = {"reports": len(broader), "batches": len(more),
                                "points": len(extra), "above_zero": len(rank_points(extra))}
        return extra, more, broader

    def _reduce_and_answer(self, question: str, mode: str, reason: str,
                           points: list[KeyPoint], batches: list[ReportBatch],
                           report_sources: dict[str, dict[str, str]], log: CallLog,
                           info: dict[str, Any], failures: list[dict],
                           progress: Progress | None) -> SearchResult:
        """The reduce step (``points`` ranked into the reduce budget,
        :func:`reduce_context`) and the answer from it, citing the community reports
        the kept points name; no answer call when no point scored above 0
        (``info["note"]`` says so).

        Raises:
            ValueError: the reduced context does not fit the model's window with its
                prompt.
        """
        context = reduce_context(points, self.config.reduce_budget, self.counter)
        info["reduce"] = {"points": len(points), "kept": len(context.items),
                          "tokens": context.tokens}
        if progress:
            progress({"phase": "reduce", "points": len(points), "kept": len(context.items)})
        citable = [ref for ref in refs_in(context.text) if ref.startswith("C")]
        sources = {**report_sources, **context_sources(context)}
        if not context.items:
            info["note"] = "no key point scored above 0: nothing to answer from"
            text, cites = None, []
        else:
            text, cites = self.answer(question, context, citable, log, failures, info)
        return SearchResult(question, mode, "global", reason, text, cites, context, sources,
                            batches, info, failures)

    def _reach(self, tree: CommunityTree, answer: bool, log: CallLog | None,
               info: dict[str, Any], failures: list[dict]
               ) -> Callable[[list[int]], None] | None:
        """What global search calls on the communities it reaches: writes the LLM
        report of those awaiting one (:meth:`LazyReports.resolve`, at most
        ``config.lazy_reports_per_search`` calls in this search), counting in
        ``info["lazy_reports"]`` (``awaiting_*``: distinct reports of this handle's
        tree still awaiting theirs); None when nothing awaits one, there is no model
        (``answer=False``) or ``config.lazy_reports`` is off."""
        waiting = awaiting(tree)
        if not waiting:
            return None
        counts = {"awaiting_before": waiting, "written": 0, "rejected": 0, "failed": 0,
                  "reused": 0, "unsaved": 0, "capped": 0, "awaiting_after": waiting}
        info["lazy_reports"] = counts
        if not answer or log is None or self.lazy is None or not self.config.lazy_reports:
            return None
        lazy, model_id, cap = self.lazy, log.model_id, self.config.lazy_reports_per_search

        def reach(communities: list[int]) -> None:
            calls = counts["written"] + counts["rejected"] + counts["failed"] + counts["unsaved"]
            got = lazy.resolve(tree, communities, log, model_id, failures,
                               limit=max(0, cap - calls) if cap else None)
            for k, n in got.items():
                counts[k] += n
            counts["awaiting_after"] = awaiting(tree)

        return reach

    def _shortlist(self, question: str, tree: CommunityTree
                   ) -> Callable[[list[int]], list[int]]:
        """The shortlist of dynamic selection (``config.rate_shortlist``): the
        communities whose report "title: summary" is nearest to ``question`` by cosine
        of the index's embedder (report vectors embedded once per Searcher), in their
        given order; ties by community number."""
        q = self.index.embed([question])[0]
        rvec = self.report_vectors

        def shortlist(communities: list[int]) -> list[int]:
            k = self.config.rate_shortlist
            if len(communities) <= k:
                return communities
            todo = [c for c in communities if tree.reports[c].report_key not in rvec]
            if todo:
                vecs = self.index.embed([f"{tree.reports[c].title}: "
                                         f"{tree.reports[c].summary}" for c in todo])
                rvec.update({tree.reports[c].report_key: v for c, v in zip(todo, vecs)})
            score = {c: float(rvec[tree.reports[c].report_key] @ q) for c in communities}
            best = set(sorted(communities, key=lambda c: (-score[c], c))[:k])
            return [c for c in communities if c in best]

        return shortlist


def _report_sources(reports: list[Report]) -> dict[str, dict[str, str]]:
    """ref -> {kind, id, text (title: summary)} of each report, for citations."""
    return {rep.ref: {"kind": "reports", "id": str(rep.community),
                      "text": f"{rep.title}: {rep.summary}"} for rep in reports}
