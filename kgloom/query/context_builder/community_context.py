"""The global search's context: the community hierarchy with its reports
(:class:`CommunityTree`), static or dynamic community selection, and reports packed into
rating and map batches within a token budget.

- **Static**: every report of one level of the community hierarchy.
- **Dynamic community selection** (Microsoft's "dynamic global search", GraphRAG
  ``DynamicCommunitySelection``; blog "GraphRAG: Improving global search via dynamic
  community selection", 2024): the root reports are rated for relevance to the question
  (0-5), only the children of a relevant community are rated next, and an irrelevant
  community's whole subtree is pruned unrated. A relevant community is replaced in the
  selection by its relevant children (unless ``keep_parent``, GraphRAG's option of the
  same name), and kept when none of them is relevant. When no
  root is relevant, the next level is rated whole (as GraphRAG does) until
  ``max_level``. GraphRAG rates one report per call, on its full content; kgloom's own
  change, to cut prompt tokens, is to rate *several reports per grammar-bounded call*,
  each shown as one short ``[C5] title: summary`` line (:class:`BatchRater`): the reply
  is an object with exactly one 0-5 rating per report of the batch.

The hierarchy comes from communities.parquet (``children``) with each community's report
from community_reports.parquet. A community repeated unchanged one level deeper has the
same report (``report_key``; kgloom writes it once) and is walked through, not rated
twice; a community with no report (a failed or deleted one) is walked through to its
children and listed in ``missing``. Rating replies that fail twice become failure rows
(GraphRAG's failures schema), never exceptions: the reports of a failed rating batch
count as not relevant. The map and reduce steps are
:mod:`kgloom.query.structured_search.global_search`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from kgloom.llm import LLMCaller, PromptTemplate, structured_call
from kgloom.query.context_builder.context import TokenCounter, check_budget, verbalize_report
from kgloom.settings import DEFAULT_THRESHOLD

RATING_SCALE = 5  # GraphRAG's rate_relevancy scale is 0-5 with threshold 1

RATE_TEMPLATE = PromptTemplate(
    name="search_rate",
    system=("You judge whether reports about groups of related entities help to answer "
            "a question. Answer with JSON only."),
    user=("Question: {question}\n\nReports:\n{reports}\n\n"
          "How relevant is each report to the question? Rate every report by its id, "
          "from 0 (unrelated) to 5 (answers it)."),
    schema={},  # per call: one rating per report id of the batch (rate_schema)
    max_tokens=16,
)

def rate_schema(report_refs: Sequence[str]) -> dict[str, Any]:
    """The rating reply schema for one batch: an object whose properties are exactly
    ``report_refs`` (in their order, all required, no other), each an integer 0-5 written
    as an enum, since llama-cpp-python's grammar ignores minimum/maximum. A reply thus
    rates every report of the batch once and cannot rate one it was not shown."""
    rating = {"type": "integer", "enum": list(range(RATING_SCALE + 1))}
    return {"type": "object", "properties": {r: rating for r in report_refs},
            "required": list(report_refs), "additionalProperties": False}


@dataclass(frozen=True)
class Report:
    """One community's report as global search reads it."""

    community: int
    level: int
    title: str
    summary: str
    full_content: str
    rank: float
    report_key: str
    generated_by: str = ""  # llm | rules | lazy (a rule report awaiting its LLM report)

    @property
    def ref(self) -> str:
        """Its citation id, ``C<community>``."""
        return f"C{self.community}"


class CommunityTree:
    """The community hierarchy with a report per community.

    Args:
        reports: community_reports.parquet (GraphRAG columns; ``report_key`` optional).
        communities: communities.parquet (community, level, parent, children), or None
            to take the structure from the reports' own columns.

    Attributes:
        reports: community -> :class:`Report` (only communities that have one); a lazy
            report is replaced here once global search has written its LLM report
            (:mod:`kgloom.query.context_builder.lazy_reports`).
        levels: the hierarchy's levels, ascending (0 = roots).
        missing: communities of the hierarchy without a report.
        stale: reports whose community is not in ``communities`` (ignored).
    """

    def __init__(self, reports: pl.DataFrame, communities: pl.DataFrame | None = None) -> None:
        structure = communities if communities is not None and communities.height else reports
        known = set(structure["community"].to_list())
        self.reports: dict[int, Report] = {}
        self.stale: list[int] = []
        has_key = "report_key" in reports.columns
        has_by = "generated_by" in reports.columns
        for r in reports.iter_rows(named=True):
            if r["community"] not in known:
                self.stale.append(r["community"])
                continue
            self.reports[r["community"]] = Report(
                r["community"], r["level"], r["title"] or "", r["summary"] or "",
                r["full_content"] or "", float(r["rank"] or 0.0),
                (r["report_key"] if has_key else None) or f"community:{r['community']}",
                (r["generated_by"] if has_by else None) or "")
        self.level_of = dict(zip(structure["community"].to_list(), structure["level"].to_list()))
        self.children = {c: [k for k in (kids or []) if k in known] for c, kids in
                         zip(structure["community"].to_list(), structure["children"].to_list())}
        self.levels = sorted(set(self.level_of.values()))
        self.missing = sorted(c for c in known if c not in self.reports)

    def __len__(self) -> int:
        return len(self.reports)

    def _walk_through(self, c: int) -> bool:
        return c not in self.reports

    def effective_children(self, c: int, max_level: int | None = None) -> list[int]:
        """The children of ``c`` that have a report of their own, in community order:
        a child without a report, or with ``c``'s report (the same community repeated one
        level deeper), is replaced by its own effective children. Children deeper than
        ``max_level`` are left out."""
        out: list[int] = []
        key = self.reports[c].report_key if c in self.reports else None
        for k in sorted(self.children.get(c, [])):
            if max_level is not None and self.level_of[k] > max_level:
                continue
            if self._walk_through(k) or (key is not None and self.reports[k].report_key == key):
                out += self.effective_children(k, max_level)
            else:
                out.append(k)
        return out

    def roots(self) -> list[int]:
        """Level-0 communities with a report (those without one replaced by their
        effective children)."""
        out: list[int] = []
        for c in sorted(c for c, lv in self.level_of.items() if lv == self.levels[0]):
            out += self.effective_children(c) if self._walk_through(c) else [c]
        return out

    def at_level(self, level: int) -> list[int]:
        """The communities of ``level`` that have a report, by report rank (descending),
        then community number.

        Raises:
            ValueError: ``level`` is not a level of the hierarchy (names the levels).
        """
        if level not in self.levels:
            raise ValueError(f"level {level} is not a level of this index's community "
                             f"hierarchy (levels: {self.levels})")
        mine = [c for c, lv in self.level_of.items() if lv == level and c in self.reports]
        return sorted(mine, key=lambda c: (-self.reports[c].rank, c))

    def subtree_size(self, c: int) -> int:
        """Distinct reports below ``c`` (each report once, ``c``'s own excluded)."""
        seen: set[str] = set()
        stack = list(self.effective_children(c))
        while stack:
            k = stack.pop()
            if self.reports[k].report_key not in seen:
                seen.add(self.reports[k].report_key)
                stack += self.effective_children(k)
        return len(seen)


@dataclass
class Selection:
    """The communities chosen for the map step.

    Attributes:
        selected: community numbers, best first (dynamic: rating, then report rank;
            static: report rank).
        method: ``static`` or ``dynamic``.
        ratings: community -> rating (None: its rating batch failed), in rating order.
        rated: reports rated (distinct reports, a failed batch's included; 0 for static).
        rating_calls: rating batches asked, one call each (0 for static; a failed
            reply's retry is not counted here, ``info["llm"]`` counts it).
        pruned_subtrees: relevant-rated-no communities whose children were not rated.
        pruned_reports: distinct reports (within ``max_level``) never rated.
        level_fallbacks: levels rated whole because nothing above was relevant.
        failures: failure rows of rating calls (one per failed batch).
        shortlisted_out: communities left unrated by the shortlist (dynamic).
        replaced: relevant communities that left the selection for their relevant
            children (dynamic, ``keep_parent`` off), best rating first: the broader
            reports the map falls back to when the selection's give no point.
    """

    selected: list[int]
    method: str
    ratings: dict[int, int | None] = field(default_factory=dict)
    rated: int = 0
    rating_calls: int = 0
    pruned_subtrees: int = 0
    pruned_reports: int = 0
    level_fallbacks: list[int] = field(default_factory=list)
    failures: list[dict] = field(default_factory=list)
    shortlisted_out: int = 0
    replaced: list[int] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """JSON-ready counts (and the selected communities)."""
        return {"method": self.method, "selected": self.selected, "rated": self.rated,
                "rating_calls": self.rating_calls,
                "relevant": sum(1 for r in self.ratings.values() if r is not None
                                and r >= DEFAULT_THRESHOLD),
                "pruned_subtrees": self.pruned_subtrees, "pruned_reports": self.pruned_reports,
                "level_fallbacks": self.level_fallbacks, "rating_failures": len(self.failures),
                "shortlisted_out": self.shortlisted_out, "replaced": self.replaced,
                "ratings": {str(k): v for k, v in self.ratings.items()}}


def select_static(tree: CommunityTree, level: int) -> Selection:
    """Every report of ``level`` (see :meth:`CommunityTree.at_level`); no LLM call."""
    return Selection(tree.at_level(level), "static")


@dataclass
class ReportBatch:
    """One call's reports (a map or a rating batch): their refs, the packed report lines
    (one a line) and the lines' tokens (``tokens`` <= the batch budget)."""

    refs: list[str]
    text: str
    tokens: int


def report_batches(reports: Sequence[Report], budget: int, counter: TokenCounter,
                   report_max_tokens: int, body: str = "full_content",
                   max_reports: int | None = None,
                   budget_name: str = "map budget") -> list[ReportBatch]:
    """Pack ``reports`` (in order) into consecutive batches of at most ``budget`` tokens
    (the batch's lines joined by newlines, counted whole by ``counter``) and at most
    ``max_reports`` reports.

    Args:
        reports: the reports, in packing order.
        budget: tokens of one batch's report lines.
        counter: the token counter (the model's own when a GGUF is loaded).
        report_max_tokens: each report line ``[C5] title: <body>`` is cut to
            ``min(report_max_tokens, budget)`` tokens, so every report fits a batch.
        body: ``full_content`` (map) or ``summary`` (rating; the full content when the
            summary is empty).
        max_reports: reports per batch at most (None: no limit).
        budget_name: how errors name the budget.

    Returns:
        the batches, in order; every report is in exactly one.

    Raises:
        ValueError: a budget or ``max_reports`` that is not a positive integer, or a
            budget too small for one report line (names the budget).
    """
    check_budget(budget, budget_name)
    if max_reports is not None and (isinstance(max_reports, bool) or
                                    not isinstance(max_reports, int) or max_reports <= 0):
        raise ValueError(f"reports per batch must be a positive integer, got {max_reports!r}")
    batches: list[ReportBatch] = []
    refs: list[str] = []
    text, tokens = "", 0
    for rep in reports:
        content = (rep.summary or rep.full_content) if body == "summary" else rep.full_content
        line = counter.truncate(verbalize_report(rep.ref, rep.title, content),
                                min(report_max_tokens, budget))
        if not line:
            raise ValueError(f"{budget_name} of {budget} tokens cannot hold one report line "
                             f"({rep.ref})")
        if refs and (max_reports is None or len(refs) < max_reports):
            joined = f"{text}\n{line}"
            joined_tokens = counter(joined)
            if joined_tokens <= budget:
                refs.append(rep.ref)
                text, tokens = joined, joined_tokens
                continue
        if refs:
            batches.append(ReportBatch(refs, text, tokens))
        refs, text, tokens = [rep.ref], line, counter(line)
    if refs:
        batches.append(ReportBatch(refs, text, tokens))
    return batches


class BatchRater:
    """Rates reports for relevance to one question, several reports per grammar-bounded
    call (stage ``search_rate``). Rating is Microsoft GraphRAG's dynamic community
    selection step (``rate_relevancy``, 0-5); rating a *batch* per call, on each report's
    title and summary, is kgloom's own change to cut prompt tokens (GraphRAG rates one
    report per call on its full content).

    Args:
        llm: the (logged) cached model; its cache and failure handling are
            :func:`kgloom.llm.structured_call`'s.
        question: the question.
        counter: the token counter of every budget here (the model's own when a GGUF is
            loaded), as elsewhere in search.
        seed: the sampler's seed.
        budget: tokens of one batch's report lines (``SearchSettings.rate_budget``).
        max_reports: reports per call at most (``SearchSettings.rate_batch``).
        report_max_tokens: each ``[C5] title: summary`` line is cut to this many tokens
            (``SearchSettings.rate_max_tokens``).
    """

    def __init__(self, llm: LLMCaller, question: str, counter: TokenCounter, seed: int,
                 budget: int, max_reports: int, report_max_tokens: int) -> None:
        self.llm, self.question, self.counter, self.seed = llm, question, counter, seed
        self.budget, self.max_reports = budget, max_reports
        self.report_max_tokens = report_max_tokens

    def batches(self, reports: Sequence[Report]) -> list[ReportBatch]:
        """``reports`` packed into rating batches (:func:`report_batches` on summaries,
        at most ``budget`` tokens and ``max_reports`` reports each).

        Raises:
            ValueError: as :func:`report_batches`, naming the rate budget.
        """
        return report_batches(reports, self.budget, self.counter, self.report_max_tokens,
                              "summary", self.max_reports, "rate budget")

    def __call__(self, batch: ReportBatch) -> tuple[dict[str, int | None], dict | None]:
        """One rating call for ``batch`` (reply schema :func:`rate_schema`).

        Returns:
            (ref -> rating 0-5 for every ref of the batch, None), or, when the reply
            fails twice, (ref -> None for every ref, one failure row with
            ``item_id`` the batch's refs joined by commas).
        """
        obj, failure = structured_call(self.llm, RATE_TEMPLATE, "search_rate",
                                       ",".join(batch.refs), self.seed,
                                       schema=rate_schema(batch.refs),
                                       question=self.question, reports=batch.text)
        if obj is None:
            return dict.fromkeys(batch.refs), failure
        return {r: int(obj[r]) for r in batch.refs}, None


Progress = Callable[[dict[str, Any]], None]  # an event of the search's progress


def select_dynamic(tree: CommunityTree, rate: BatchRater, threshold: int = DEFAULT_THRESHOLD,
                   max_level: int | None = None, progress: Progress | None = None,
                   shortlist: Callable[[list[int]], list[int]] | None = None,
                   keep_parent: bool = False,
                   reach: Callable[[list[int]], None] | None = None) -> Selection:
    """Dynamic community selection (module doc) over ``tree``.

    At each step (the roots, then the children of the relevant communities, or a
    fallback level) the queue, after the shortlist, is rated in batches: each report not
    rated yet, once however many communities share it, packed by ``rate.batches`` and
    rated by one ``rate(batch)`` call per batch; the queue's communities are then kept or
    pruned exactly as one report per call would have them (same selection, same
    pruning, ``ceil(reports / batch size)`` calls instead of one per report).

    Args:
        tree: the hierarchy.
        rate: a :class:`BatchRater` (or anything with its ``batches`` and call): a
            failed batch rates its reports None (not relevant) with one failure row.
        threshold: a community is relevant at rating >= threshold (GraphRAG: 1).
        max_level: do not descend below this level (None: to the leaves).
        progress: called after each rating batch with {"phase": "rate", "level" (of the
            batch's first report), "rated" (reports so far), "rating_calls", "relevant",
            "pruned_subtrees", "pruned_reports", "queued" (reports of this step not
            rated yet plus children queued for the next)}.
        shortlist: given the communities about to be rated (the roots, the children of
            the relevant ones, or a fallback level), returns those worth rating (e.g.
            the few nearest to the question by embedding); the others are pruned
            unrated with their subtrees (``Selection.shortlisted_out``). None rates
            every one, as GraphRAG does.
        keep_parent: keep a relevant community in the selection beside its relevant
            children (GraphRAG's ``keep_parent``); off: the children replace it, and it
            is listed in ``Selection.replaced``.
        reach: called with each step's communities about to be rated (after the
            shortlist), before their reports are read: global search writes the LLM
            reports of those awaiting one there
            (:meth:`kgloom.query.context_builder.lazy_reports.LazyReports.resolve`).

    Returns:
        the :class:`Selection`; ``selected`` is empty when nothing was relevant.

    Raises:
        ValueError: from ``rate.batches`` (a rate budget too small for one report line).
    """
    walk = _DynamicWalk(tree, threshold, max_level, keep_parent)
    queue = tree.roots()
    while queue:
        if shortlist is not None:
            kept = shortlist(queue)
            walk.sel.shortlisted_out += len(queue) - len(kept)
            queue = kept
        if reach is not None:
            reach(queue)
        walk.rate_step(queue, rate, progress)
        queue = list(dict.fromkeys(walk.children))
        if not queue and not walk.relevant:
            queue = walk.fallback_level()
    return walk.finish()


class _DynamicWalk:
    """The state of one :func:`select_dynamic` walk down ``tree``: the selection being
    built, the relevant communities (community -> rating), those their relevant
    children replaced, each queued child's parent, the rating of each report key rated
    so far (None: its batch failed), and the next step's queue (``children``)."""

    def __init__(self, tree: CommunityTree, threshold: int, max_level: int | None,
                 keep_parent: bool) -> None:
        self.tree, self.threshold = tree, threshold
        self.max_level, self.keep_parent = max_level, keep_parent
        self.sel = Selection([], "dynamic")
        self.relevant: dict[int, int] = {}
        self.replaced: dict[int, int] = {}
        self.parent_of: dict[int, int] = {}
        self.rated_keys: dict[str, int | None] = {}
        self.children: list[int] = []  # the next step's queue
        self.next_level = 1

    def settle(self, c: int) -> bool:
        """Keep or prune community ``c`` by its report's rating (a relevant one queues
        its effective children; an irrelevant one's subtree is counted as pruned);
        False while its report is not rated."""
        tree, sel = self.tree, self.sel
        key = tree.reports[c].report_key
        if key not in self.rated_keys:
            return False
        rating = sel.ratings[c] = self.rated_keys[key]
        if rating is not None and rating >= self.threshold:
            self.relevant[c] = rating
            parent = self.parent_of.get(c)
            if parent is not None and not self.keep_parent and parent in self.relevant:
                self.replaced[parent] = self.relevant.pop(parent)  # a relevant child replaces it
            for k in tree.effective_children(c, self.max_level):
                self.parent_of[k] = c
                self.children.append(k)
        else:
            below = tree.subtree_size(c)
            if below:
                sel.pruned_subtrees += 1
                sel.pruned_reports += below
        return True

    def unrated_reports(self, queue: list[int]) -> dict[str, Report]:
        """report key -> report of each community of ``queue`` whose report is not
        rated yet, each report once, in queue order."""
        todo: dict[str, Report] = {}
        for c in queue:
            if self.tree.reports[c].report_key not in self.rated_keys:
                todo.setdefault(self.tree.reports[c].report_key, self.tree.reports[c])
        return todo

    def rate_step(self, queue: list[int], rate: BatchRater, progress: Progress | None) -> None:
        """Rate the unrated reports of ``queue`` batch by batch, settling each community
        of ``queue`` as soon as its report is rated (those an earlier step rated at
        the end), and report progress after each batch; fills ``children``.

        Raises:
            ValueError: from ``rate.batches``.
        """
        tree, sel = self.tree, self.sel
        todo = self.unrated_reports(queue)
        by_ref = {rep.ref: rep for rep in todo.values()}
        self.children.clear()
        pending = list(queue)
        for batch in rate.batches(list(todo.values())):
            ratings, failure = rate(batch)
            sel.rated += len(batch.refs)
            sel.rating_calls += 1
            for ref in batch.refs:
                self.rated_keys[by_ref[ref].report_key] = ratings.get(ref)
            if failure is not None:
                sel.failures.append(failure)
            pending = [c for c in pending if not self.settle(c)]
            if progress:
                progress({"phase": "rate", "level": by_ref[batch.refs[0]].level,
                          "rated": sel.rated, "rating_calls": sel.rating_calls,
                          "relevant": len(self.relevant),
                          "pruned_subtrees": sel.pruned_subtrees,
                          "pruned_reports": sel.pruned_reports,
                          "queued": len({tree.reports[c].report_key for c in pending})
                          + len(self.children)})
        for c in pending:  # those whose report an earlier step rated
            self.settle(c)

    def fallback_level(self) -> list[int]:
        """With nothing relevant so far, the next level with communities not rated yet,
        rated whole (GraphRAG does the same; recorded in ``level_fallbacks``), within
        ``max_level``; [] when no level is left."""
        tree, sel = self.tree, self.sel
        while self.next_level in tree.levels and (self.max_level is None
                                                  or self.next_level <= self.max_level):
            level_nodes = [c for c in tree.at_level(self.next_level) if c not in sel.ratings]
            self.next_level += 1
            if level_nodes:
                sel.level_fallbacks.append(self.next_level - 1)
                return level_nodes
        return []

    def finish(self) -> Selection:
        """The selection: the relevant communities and those they replaced, best rating
        first (then report rank, then community number), and the distinct reports within
        ``max_level`` never rated as ``pruned_reports`` (the running count also held
        subtrees that a level fallback rated after all)."""
        tree, sel = self.tree, self.sel

        def best_first(ratings: dict[int, int]) -> list[int]:
            return sorted(ratings, key=lambda c: (-ratings[c], -tree.reports[c].rank, c))

        sel.selected, sel.replaced = best_first(self.relevant), best_first(self.replaced)
        in_scope = {r.report_key for c, r in tree.reports.items()
                    if self.max_level is None or tree.level_of[c] <= self.max_level}
        sel.pruned_reports = len(in_scope - set(self.rated_keys))
        return sel


def map_batches(reports: Sequence[Report], budget: int, counter: TokenCounter,
                report_max_tokens: int) -> list[ReportBatch]:
    """Pack ``reports`` (in order) into map batches of at most ``budget`` tokens; each
    report is verbalized as ``[C5] title: full content`` cut to
    ``min(report_max_tokens, budget)`` tokens (:func:`report_batches`).

    Raises:
        ValueError: a budget that is not a positive integer, or one too small for one
            report line (names the map budget).
    """
    return report_batches(reports, budget, counter, report_max_tokens)
