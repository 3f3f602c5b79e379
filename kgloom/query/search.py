"""Search over a kgloom index: local, global (static or dynamic), direct, and routed
(auto), with answers from the local model that cite the context they were given.

:class:`Searcher` opens an output folder once (a :class:`Retriever` for text units,
entity linking and the entity graph, plus the entity, relationship, community and report
tables) and the model lazily, Dagster-free (:func:`kgloom.llm.open_llm`). Each
:meth:`Searcher.search` returns a :class:`SearchResult`: the route taken and why, the
context the model read (:class:`kgloom.query.context.Context`, within its token budget),
the answer and its citations, and ``info`` with the LLM calls and prompt tokens of each
stage, the community selection and any fallback.

- **direct**: the ``vector`` retrieval's text units, verbalized, the whole budget theirs.
- **local**: the question's linked entities (or, when none links, the entities of the
  best text units) and their 1-hop neighbours ranked by connection weight to the seeds,
  then PageRank, then degree; the relationships among them (seed-seed first, then by
  weight and combined degree); the reports of the communities holding them (most members
  first); the text units of ``config.retrieval_mode`` (default ``bridge``, the best
  mode of bench/eval_qa.py), then the seeds' own units; all packed by :func:`kgloom.query.context.pack_context` with
  ``config.shares``.
- **global**: :mod:`kgloom.query.global_search`; with no community report it says so in
  ``info["fallback"]`` and runs local search.
- **auto**: :mod:`kgloom.query.routing`.

Answers are one structured call: ``{"answer": str, "citations": [id, ...]}`` where the
citation items are an enum of the ids present in the context, so an answer cannot cite a
line it was not shown; :func:`check_answer` still grounds every reply (a citation
outside the context, from a backend that ignored the grammar, is dropped and counted;
invented inline citations are removed; a looping answer is cut and flagged), and an
answer of the bundled demo model carries a notice (:func:`model_notice`). LLM calls go through the cache in ``cache_path`` (default
``<output_dir>/query_cache.sqlite``, a file of its own: a query never writes the index's
``llm_cache.sqlite`` or any other file of the index; pass another path for a read-only
index). No Dagster import.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kgloom import schemas
from kgloom.builds import OPEN_RETRIES, Build, IndexChangedError
from kgloom.names.candidates import is_grounded
from kgloom.grounding import cut_repetition, ungrounded_names
from kgloom.llm import (SMOLLM2_SHA256, CachedLLM, Completion, PromptTemplate, StageStats,
                        open_llm, structured_call)
from kgloom.embedding.sentence_embedder import Embedder
from kgloom.query import global_search as gs
from kgloom.query.context import (LOCAL_SHARES, Context, ContextItem, Section, TokenCounter,
                                  check_budget, pack_context, refs_in, token_counter,
                                  verbalize_entity, verbalize_relationship, verbalize_report,
                                  verbalize_text_unit)
from kgloom.query.modes import SEARCH_MODES, check_mode  # the one registry of modes
from kgloom.query.retriever import IndexFilesMissingError, RetrievalResult, Retriever
from kgloom.query.routing import Route, route_question

QUERY_CACHE_FILE = "query_cache.sqlite"
SEARCH_STAGES = ("search_route", "search_rate", "search_map", "search_answer")

ANSWER_TEMPLATE = PromptTemplate(
    name="search_answer",
    system=("You answer questions using only the numbered context you are given. Answer "
            "with JSON only."),
    user=("Context:\n{context}\n\nQuestion: {question}\n\n"
          "Answer in as few words as the question allows, using only the context, and "
          "give the ids of the context lines the answer comes from."),
    schema={},  # per call: citations are an enum of the context's ids (answer_schema)
    max_tokens=200,
)
MAX_CITATIONS = 5


def answer_schema(refs: list[str], max_chars: int = 200) -> dict[str, Any]:
    """The answer reply schema: ``answer`` (1-``max_chars`` characters) and 0-5
    ``citations`` drawn from ``refs`` (non-empty). The length bound also bounds the
    reply's max_tokens (:func:`kgloom.llm.reply_token_bound`): a small model that starts
    repeating itself stops there."""
    return {"type": "object", "properties": {
        "answer": {"type": "string", "minLength": 1, "maxLength": max_chars},
        "citations": {"type": "array", "maxItems": min(MAX_CITATIONS, len(refs)),
                      "items": {"type": "string", "enum": list(refs)}}},
        "required": ["answer", "citations"]}


def loose_answer_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` (:func:`answer_schema`) with citations any strings: what a reply is
    validated against, so a citation a backend let through outside the enum is dropped
    by :func:`check_answer` rather than failing the whole answer."""
    props = {**schema["properties"], "citations": {
        "type": "array", "items": {"type": "string"}}}
    return {**schema, "properties": props}


# inline citations an answer may write: "[T3]", "[T3, C5]", "[Data: Reports (5)]",
# "(E12)", and a report cited by its title: 'the report "The Devil and the Devil"'
_BRACKET_CITE = re.compile(r"\s*\[([^\[\]\n]{1,120})\]")
_PAREN_CITE = re.compile(r"\s*\(\s*([ERTCP]\d+(?:\s*[,;]\s*[ERTCP]\d+)*)\s*\)")
_TITLE_CITE = re.compile(r"""\s*\(?\b(?:(?:the|a)\s+)?(?:community\s+)?reports?\s+(?:titled\s+|"""
                         r"""called\s+|named\s+|entitled\s+)?["“'‘]([^"”'’\n]{1,120})["”'’]\)?""",
                         re.IGNORECASE)
_REF_ID = re.compile(r"[ERTCP]\d+")


@dataclass
class AnswerCheck:
    """What :func:`check_answer` did to one answer.

    Attributes:
        answer: the answer as published (invented citations removed, a loop cut).
        citations: the cited ids that are in the context, each once, in order.
        dropped_citations: cited ids that are not in the context (removed).
        removed_inline: citations written in the answer text that resolve to nothing
            in the context (an id, a bracketed source, a report title), removed.
        repetition: the phrase the answer looped on (it is cut after its first time),
            or None.
        ungrounded_names: proper names of the answer its context does not hold
            (:func:`kgloom.grounding.ungrounded_names`), flagged, not removed.
    """

    answer: str
    citations: list[str]
    dropped_citations: list[str]
    removed_inline: list[str]
    repetition: str | None
    ungrounded_names: list[str] = field(default_factory=list)

    def info(self) -> dict[str, Any]:
        """The counts and what was removed, for ``SearchResult.info["answer_check"]``."""
        return {"invented_citations": len(self.dropped_citations) + len(self.removed_inline),
                "dropped_citations": self.dropped_citations,
                "removed_inline": self.removed_inline,
                "degenerate": self.repetition is not None, "repeated": self.repetition,
                "ungrounded_names": self.ungrounded_names}


def check_answer(answer: str, citations: list[str], refs: list[str],
                 context_text: str = "") -> AnswerCheck:
    """Ground one answer in its context.

    - ``citations`` not among ``refs`` (the context's ids) are dropped;
    - citations written in the text that resolve to nothing are removed from it: a
      bracketed ``[...]`` whose parts are not context ids (a bracket naming some ids
      keeps just those), a parenthesized id list, and a report cited by a quoted title
      that ``context_text`` does not hold (case-insensitive);
    - a degenerate answer (:func:`kgloom.grounding.find_repetition`) is cut where it
      starts repeating (:func:`kgloom.grounding.cut_repetition`);
    - the proper names it uses that ``context_text`` lacks are listed (flagged only:
      a name may be the question's own).

    Args:
        answer: the model's answer text.
        citations: its cited ids, in order.
        refs: the ids of the context it was shown (``[E12]`` style, without brackets).
        context_text: the context as the model read it (for report titles).

    Returns:
        an :class:`AnswerCheck` (the answer, whitespace collapsed, is never emptied:
        when nothing is left it says so).
    """
    known = set(refs)
    inline_known = known | set(refs_in(context_text))  # e.g. global search's key points
    cited = list(dict.fromkeys(citations))
    kept = [c for c in cited if c in known]
    dropped = [c for c in cited if c not in known]
    removed: list[str] = []

    def bracket(m: re.Match) -> str:
        if f"[{m.group(1)}]" in context_text:  # quoted from the context ("[Illustration]")
            return m.group(0)
        parts = [p.strip() for p in re.split(r"[,;]", m.group(1)) if p.strip()]
        good = [p for p in parts if p in inline_known]
        removed.extend(p for p in parts if p not in inline_known)
        return f" [{', '.join(good)}]" if good else ""

    def paren(m: re.Match) -> str:
        parts = _REF_ID.findall(m.group(1))
        good = [p for p in parts if p in inline_known]
        removed.extend(p for p in parts if p not in inline_known)
        return f" ({', '.join(good)})" if good else ""

    def title(m: re.Match) -> str:
        if is_grounded(m.group(1), context_text):
            return m.group(0)
        removed.append(m.group(1))
        return ""

    text = _BRACKET_CITE.sub(bracket, answer)
    text = _PAREN_CITE.sub(paren, text)
    text = _TITLE_CITE.sub(title, text)
    text = " ".join(text.split())
    text, rep = cut_repetition(text)
    text = re.sub(r"\s+([.,;:!?])", r"\1", text).strip()
    return AnswerCheck(text or "(no answer left once its invented citations were removed)",
                       kept, dropped, removed, rep.phrase if rep else None,
                       ungrounded_names(text, context_text) if context_text else [])


DEMO_MODEL_NOTICE = (
    "This answer comes from the bundled demo model (SmolLM2-135M): it is often wrong and "
    "may repeat or invent things. The retrieved context and the sources it cites are the "
    "reliable part; point --model-path at a larger GGUF (or KGLOOM_LLM_URL at a model "
    "server) for answers worth reading.")
FAKE_MODEL_NOTICE = (
    "This answer comes from the fake test model (--fake-llm): it is placeholder text. The "
    "retrieved context and the sources it cites are the reliable part.")


def model_notice(model_id: str) -> str | None:
    """What an answer must say about the model that wrote it: :data:`DEMO_MODEL_NOTICE`
    for the bundled SmolLM2-135M (its SHA-256 as model id), :data:`FAKE_MODEL_NOTICE`
    for the fake model, else None."""
    if model_id == SMOLLM2_SHA256:
        return DEMO_MODEL_NOTICE
    if model_id == "fake-llm":
        return FAKE_MODEL_NOTICE
    return None


@dataclass(frozen=True)
class SearchConfig:
    """Search knobs (tokens are the counter's: the model's own when a GGUF is loaded).

    Attributes:
        budget: tokens of a local or direct context.
        shares: local context shares per section, in packing order (GraphRAG's local
            search defaults; see :mod:`kgloom.query.context`).
        retrieval_mode: the Retriever mode that ranks local search's text units.
        top_k: text units asked of the retrieval (local and direct).
        max_neighbors: neighbour entities considered around the seeds.
        seed_units: when no entity links, the entities of this many best units seed.
        threshold: dynamic selection: a report is relevant at rating >= this (0-5).
        rate_shortlist: dynamic selection rates at most this many communities at each
            step (roots, children of the relevant ones, a fallback level): the ones
            whose report title and summary are nearest to the question by the index's
            embedder (cosine); the others are pruned unrated. 0: rate every one
            (GraphRAG's behaviour: one call per root).
        rate_max_tokens: dynamic selection rates each report on one line, ``[C5] title:
            summary`` (the full content when it has no summary), cut to this many
            tokens (per report, title included).
        rate_budget: tokens of the report lines of one rating call (several reports are
            rated per call: kgloom's change to GraphRAG's one report per call); 650
            holds 8 full lines of 80 tokens.
        rate_batch: reports per rating call at most.
        keep_parent: dynamic selection keeps a relevant community beside its relevant
            children (GraphRAG's ``keep_parent``, off by default there too).
        map_fallback: when dynamic selection's reports give no key point above 0, map
            the relevant communities their children replaced (broader reports), once.
        map_budget: tokens of one map batch of reports.
        map_report_max_tokens: a report is cut to this many tokens in a map batch.
        reduce_budget: tokens of the key points the global answer reads.
        answer_max_chars: the longest answer the schema allows (characters).
        default_level: static global search's level when none is given (falls back to
            the deepest level when the index has fewer).
        seed: the LLM sampler's seed.
    """

    budget: int = 2000
    shares: tuple[tuple[str, float], ...] = tuple(LOCAL_SHARES.items())
    retrieval_mode: str = "bridge"
    top_k: int = 10
    max_neighbors: int = 30
    seed_units: int = 3
    threshold: int = gs.DEFAULT_THRESHOLD
    rate_shortlist: int = 8
    rate_max_tokens: int = 80
    rate_budget: int = 650
    rate_batch: int = 8
    keep_parent: bool = False
    map_fallback: bool = True
    map_budget: int = 1500
    map_report_max_tokens: int = 500
    reduce_budget: int = 1500
    answer_max_chars: int = 200
    default_level: int = 1
    seed: int = 0xDEADBEEF


@dataclass
class SearchResult:
    """What :meth:`Searcher.search` returns.

    Attributes:
        question: as given.
        mode: the mode asked for (auto, local, global, direct).
        route: what ran (direct, local, global); differs from ``mode`` on auto and on a
            fallback.
        route_reason: why (the routing rule or classifier, or the fallback).
        answer: the model's answer; None with ``answer=False`` (context only), when the
            context is empty, or when the answer call failed (see ``failures``).
        citations: ids from the context, in the model's order (each once).
        context: the context the answer was asked from (global: the ranked key points).
        sources: every citable id -> {"kind", "id", "text"}: what a citation points to.
        map_batches: global search: each map call's report ids, tokens and text.
        info: timings, token counter, per-stage LLM calls and prompt tokens
            (``llm``), the community selection, the retrieval used, fallbacks.
        failures: failure rows (stage, item_id, reason, detail) of failed LLM replies.
        notice: what the reader must know about the answer's model (the bundled demo
            model's answers are unreliable; :func:`model_notice`), or None.
    """

    question: str
    mode: str
    route: str
    route_reason: str
    answer: str | None
    citations: list[str]
    context: Context
    sources: dict[str, dict[str, str]] = field(default_factory=dict)
    map_batches: list[gs.ReportBatch] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    failures: list[dict] = field(default_factory=list)
    notice: str | None = None

    def cited(self) -> list[dict[str, str]]:
        """The cited sources, in citation order ({"ref", "kind", "id", "text"})."""
        return [{"ref": c, **self.sources[c]} for c in self.citations if c in self.sources]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field (the context with its items)."""
        return {"question": self.question, "mode": self.mode, "route": self.route,
                "route_reason": self.route_reason, "answer": self.answer,
                "citations": self.citations, "cited": self.cited(),
                "context": self.context.to_dict(), "context_text": self.context.text,
                "map_batches": [vars(b) for b in self.map_batches], "info": self.info,
                "failures": self.failures, "notice": self.notice}


class CallLog:
    """A :class:`CachedLLM` seen through a log of every call, cache hits included, so a
    search reports the calls and prompt tokens its algorithm needs however warm the cache
    is (``prompt_tokens`` of a hit are those stored with it). Used where
    :func:`kgloom.llm.structured_call` wants an LLM."""

    def __init__(self, llm: CachedLLM) -> None:
        self.llm = llm
        self.stats = llm.stats
        self.lock = llm.lock
        self.model_id = llm.model_id
        self.backend = llm.backend
        self.rows: list[dict[str, Any]] = []

    def call(self, stage: str, *args: Any, **kwargs: Any) -> Completion:
        """Forward to :meth:`CachedLLM.call` and log (stage, tokens, cached, seconds)."""
        with self.lock:
            hits = self.stats.get(stage, StageStats()).cache_hits
        reply = self.llm.call(stage, *args, **kwargs)
        with self.lock:
            cached = self.stats[stage].cache_hits > hits
        self.rows.append({"stage": stage, "prompt_tokens": int(reply.prompt_tokens or 0),
                          "completion_tokens": int(reply.completion_tokens or 0),
                          "cached": cached,
                          "seconds": float(reply.seconds or 0.0)})
        return reply

    def summary(self) -> dict[str, dict[str, float]]:
        """Per stage and ``total``: calls, cache hits, prompt / completion tokens, model
        seconds (of the calls that reached the model)."""
        out: dict[str, dict[str, float]] = {}
        for r in self.rows:
            for key in (r["stage"], "total"):
                s = out.setdefault(key, {"calls": 0, "cache_hits": 0, "prompt_tokens": 0,
                                         "completion_tokens": 0, "model_seconds": 0.0})
                s["calls"] += 1
                s["cache_hits"] += int(r["cached"])
                s["prompt_tokens"] += r["prompt_tokens"]
                s["completion_tokens"] += r["completion_tokens"]
                s["model_seconds"] = round(s["model_seconds"]
                                           + (0.0 if r["cached"] else r["seconds"]), 3)
        return out


class SearchIndex:
    """The tables search reads besides the Retriever's, loaded once (read-only).

    Attributes:
        entities: entity id -> {human_readable_id, title, type, description, degree,
            pagerank, text_unit_ids} (empty for a vector-only index).
        relationships: relationship id -> {human_readable_id, source, target,
            description, weight, combined_degree, kind}.
        unit_number: text unit id -> human_readable_id (row order when unknown).
        communities_of: entity id -> [community numbers] (all levels).
        tree: the :class:`kgloom.query.global_search.CommunityTree`, or None when the
            index has no community reports or no communities.
        no_reports_reason: why ``tree`` is None.
    """

    def __init__(self, retriever: Retriever) -> None:
        b = retriever.build  # the Retriever's build: every table from the same publish
        self.entities: dict[str, dict[str, Any]] = {}
        self.relationships: dict[str, dict[str, Any]] = {}
        self.missing = _missing_tables(b)
        if b.has(schemas.ENTITIES):
            e = b.read(schemas.ENTITIES, columns=["id", "human_readable_id", "title", "type",
                                                  "description", "degree", "pagerank",
                                                  "text_unit_ids"])
            self.entities = {r["id"]: r for r in e.iter_rows(named=True)}
        if b.has(schemas.RELATIONSHIPS):
            r = b.read(schemas.RELATIONSHIPS, columns=["id", "human_readable_id", "source",
                                                       "target", "description", "weight",
                                                       "combined_degree", "kind"])
            self.relationships = {x["id"]: x for x in r.iter_rows(named=True)}
        if b.has(schemas.TEXT_UNITS):
            u = b.read(schemas.TEXT_UNITS, columns=["id", "human_readable_id"])
            self.unit_number = dict(zip(u["id"].to_list(), u["human_readable_id"].to_list()))
        else:
            self.unit_number = {uid: i for i, uid in enumerate(retriever.col["id"])}
        self.communities_of: dict[str, list[int]] = {}
        self.tree: gs.CommunityTree | None = None
        self.no_reports_reason = ""
        comm_path = b.live_path(schemas.COMMUNITIES)
        rep_path = b.live_path(schemas.COMMUNITY_REPORTS)
        communities = None
        if b.has(schemas.COMMUNITIES):
            communities = b.read(schemas.COMMUNITIES, columns=["community", "level", "parent",
                                                               "children", "entity_ids"])
            for c, ents in zip(communities["community"].to_list(),
                               communities["entity_ids"].to_list()):
                for e in ents or []:
                    self.communities_of.setdefault(e, []).append(c)
        if not b.has(schemas.COMMUNITY_REPORTS):
            self.no_reports_reason = (f"this index has no community reports ({rep_path} is "
                                      "missing; `kgloom index` writes them unless --no-reports)")
        elif communities is None or not communities.height:
            self.no_reports_reason = f"this index has no communities ({comm_path})"
        else:
            reports = b.read(schemas.COMMUNITY_REPORTS)
            tree = gs.CommunityTree(reports, communities)
            if len(tree):
                self.tree = tree
            else:
                self.no_reports_reason = (f"{rep_path} holds no report of a community in "
                                          f"{comm_path}")


# The tables local and global search read besides the text units (module doc).
SEARCH_TABLES = (schemas.ENTITIES, schemas.RELATIONSHIPS, schemas.COMMUNITIES,
                 schemas.COMMUNITY_REPORTS)
# Graph tables: an index with any of them is a graph index, which needs all of
# SEARCH_TABLES but the reports (an index built with --no-reports has none).
_GRAPH_TABLES = (schemas.ENTITIES, schemas.RELATIONSHIPS, schemas.COMMUNITIES,
                 schemas.GRAPH_NODES, schemas.GRAPH_EDGES)


def _missing_tables(build: Build) -> list[str]:
    """The live paths of the tables of :data:`SEARCH_TABLES` a half-written or damaged
    index lacks.

    A published build (with a marker) needs every one its marker lists. A folder
    without a marker (an older kgloom's, or one written by hand): none for a
    vector-only index (no graph table at all); otherwise entities, relationships and
    communities, and the community reports when its ``index-summary.json`` counted
    report rows."""
    if build.marker:
        return build.missing(list(SEARCH_TABLES))
    if not any(build.live_path(n).exists() for n in _GRAPH_TABLES):
        return []
    need = [schemas.ENTITIES, schemas.RELATIONSHIPS, schemas.COMMUNITIES]
    summary = build.read_json("index-summary.json") or {}
    if (summary.get("rows") or {}).get(schemas.COMMUNITY_REPORTS):
        need.append(schemas.COMMUNITY_REPORTS)
    return build.missing(need)


Progress = Callable[[dict[str, Any]], None]


class Searcher:
    """Search over one output folder (see module doc).

    Args:
        output_dir: the index folder.
        llm: an open :class:`CachedLLM`; None opens one on first need with
            :func:`kgloom.llm.open_llm` (``model_path``, ``fake_llm``, ``n_ctx``,
            ``cache_path``).
        config: :class:`SearchConfig`.
        embedder: the index's embedder (see :class:`Retriever`).
        graph_backend: the Retriever's (``memory`` keeps the graph in this handle).
        cache_path: the query LLM cache (default ``<output_dir>/query_cache.sqlite``).
        model_path / fake_llm / n_ctx / n_threads: how to open the model.

    Raises:
        IndexFilesMissingError / IndexInconsistentError / EmbedderMismatchError: as
            :class:`Retriever`.
    """

    def __init__(self, output_dir: str | Path, llm: CachedLLM | None = None,
                 config: SearchConfig | None = None, embedder: Any = None,
                 graph_backend: str = "memory", cache_path: str | Path | None = None,
                 model_path: str | None = None, fake_llm: bool = False, n_ctx: int = 4096,
                 n_threads: int | None = None) -> None:
        for attempt in range(OPEN_RETRIES):  # the Retriever's build, whole, or the next one
            self.retriever = Retriever(output_dir, embedder, graph_backend=graph_backend)
            if isinstance(self.retriever.embedder, Embedder):
                embedder = self.retriever.embedder  # loaded once across tries
            try:
                self.index = SearchIndex(self.retriever)
                break
            except IndexChangedError:
                if attempt == OPEN_RETRIES - 1:
                    raise
        self._rvec: dict[str, np.ndarray] = {}  # report key -> "title: summary" vector
        self.config = config or SearchConfig()
        self._llm = llm
        self._open = {"cache_path": cache_path or Path(output_dir) / QUERY_CACHE_FILE,
                      "model_path": model_path, "fake": fake_llm, "n_ctx": n_ctx,
                      "n_threads": n_threads}
        self._counter: TokenCounter | None = None

    @property
    def llm(self) -> CachedLLM:
        """The cached model, opened on first use.

        Raises:
            kgloom.llm.ModelFileError: a missing or wrong model file.
        """
        if self._llm is None:
            self._llm = open_llm(**self._open)
        return self._llm

    @property
    def counter(self) -> TokenCounter:
        """Token counter of the model (its own tokenizer when it has one)."""
        if self._counter is None:
            self._counter = token_counter(self.llm.backend)
        return self._counter

    # --- search --------------------------------------------------------------------
    def search(self, question: str, mode: str = "auto", dynamic: bool = False,
               level: int | None = None, answer: bool = True, budget: int | None = None,
               progress: Progress | None = None) -> SearchResult:
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

        Raises:
            ValueError: an empty question, an unknown mode, a budget that is not a
                positive integer or too small for one item (naming the budget), a level
                the hierarchy lacks, ``dynamic`` with ``answer=False``, a question too
                long for the model's window by itself (naming its tokens), or a context
                that does not fit the model's window with its prompt.
            IndexFilesMissingError: local, global or auto search on an index missing a
                table it needs (entities, relationships, communities, community reports;
                see :func:`_missing_tables`), naming each file.

        The result's ``info["build_id"]`` names the published build it was read from.
        """
        if not isinstance(question, str) or not question.strip():
            raise ValueError("question must be a non-empty string")
        check_mode(mode, SEARCH_MODES)
        budget = check_budget(self.config.budget if budget is None else budget, "budget")
        if dynamic and not answer:
            raise ValueError("dynamic community selection asks the model to rate reports, "
                             "so it cannot run context-only; give a static --level instead")
        if mode != "direct" and self.index.missing:
            raise IndexFilesMissingError(
                f"{mode} search needs {', '.join(self.index.missing)}, which this index "
                f"lacks: it is half-written or damaged (run `kgloom index --output-dir "
                f"{self.retriever.output_dir}` again); --mode direct reads only the text units")
        if answer:
            self._check_question_fits(question)
        start = time.perf_counter()
        log = CallLog(self.llm) if answer else None
        failures: list[dict] = []
        info: dict[str, Any] = {"budget": budget, "fallback": None,
                                "build_id": self.retriever.build.build_id}
        if mode == "auto":
            links = self._link_titles(question)
            route, failure = route_question(question, links, log, self.config.seed)
            if failure:
                failures.append(failure)
            info["routing"] = {"decided_by": route.decided_by, "rule": route.rule,
                               "linked": links}
        else:
            route = Route(mode, "asked for", "user")
        ran, reason = route.route, route.reason
        result: SearchResult
        if ran == "global":
            if self.index.tree is None:
                info["fallback"] = f"global search impossible: {self.index.no_reports_reason}"
                ran, reason = "local", f"{reason}; fell back to local: " \
                                       f"{self.index.no_reports_reason}"
            else:
                result = self._global(question, mode, reason, dynamic, level, answer, log,
                                      info, failures, progress)
                if result.route == "global":
                    return self._finish(result, start, log)
                ran, reason = result.route, result.route_reason
        if ran == "direct":
            context, sources = self._direct_context(question, budget, info)
        else:
            context, sources = self._local_context(question, budget, info)
        text, cites = self._answer(question, context, context.refs, log, failures, info) \
            if answer else (None, [])
        result = SearchResult(question, mode, ran, reason, text, cites, context, sources,
                              info=info, failures=failures)
        return self._finish(result, start, log)

    def _finish(self, result: SearchResult, start: float, log: CallLog | None) -> SearchResult:
        result.info["llm"] = log.summary() if log else {}
        if result.answer is not None:
            result.notice = model_notice(self.llm.model_id)
        result.info["counter"] = self.counter.name
        result.info["seconds"] = round(time.perf_counter() - start, 3)
        return result

    def _link_titles(self, question: str) -> list[str]:
        try:
            return [x.title for x in self.retriever.link(question)]
        except IndexFilesMissingError:
            return []

    # --- contexts --------------------------------------------------------------------
    def _unit_item(self, row: int, score: float) -> ContextItem:
        col = self.retriever.col
        uid = col["id"][row]
        ref = f"T{self.index.unit_number.get(uid, row)}"
        return ContextItem(ref, "text_units", uid, verbalize_text_unit(
            ref, col["text"][row], col["document_title"][row]), score)

    def _direct_context(self, question: str, budget: int,
                        info: dict[str, Any]) -> tuple[Context, dict]:
        """Plain vector RAG: the ``vector`` mode's top_k units, the whole budget theirs."""
        res = self.retriever.vector(question, top_k=self.config.top_k)
        rows = [self.retriever.unit_row[u] for u in res.text_units["id"].to_list()]
        items = [self._unit_item(r, s) for r, s in zip(rows, res.text_units["score"].to_list())]
        info["retrieval"] = {"mode": "vector", "top_k": self.config.top_k,
                             "units": res.text_units["id"].to_list()}
        context = pack_context([Section("text_units", items, 1.0)], budget, self.counter)
        return context, self._sources(context)

    def _retrieve_units(self, question: str, info: dict[str, Any]) -> RetrievalResult:
        mode = self.config.retrieval_mode
        try:
            res = self.retriever.retrieve(question, mode=mode, top_k=self.config.top_k)
        except IndexFilesMissingError as exc:  # a vector-only index: no graph files
            res = self.retriever.vector(question, top_k=self.config.top_k)
            info["graph"] = f"none: {exc}"
        info["retrieval"] = {"mode": mode, "used_mode": res.info.get("used_mode"),
                             "fallback": res.info.get("fallback"), "top_k": self.config.top_k,
                             "units": res.text_units["id"].to_list()}
        return res

    def _local_context(self, question: str, budget: int,
                       info: dict[str, Any]) -> tuple[Context, dict]:
        """The local context (module doc): seeds, neighbours, relationships, reports,
        text units, packed with ``config.shares``."""
        cfg, r, idx = self.config, self.retriever, self.index
        res = self._retrieve_units(question, info)
        linked = [(e, s) for e, s, m in zip(res.linked["entity_id"].to_list(),
                                            res.linked["score"].to_list(),
                                            res.linked["method"].to_list())
                  if m != "vector_hit"]
        seeds = [e for e, _ in sorted(linked, key=lambda x: -x[1])]
        seed_source = "linked"
        unit_rows = [r.unit_row[u] for u in res.text_units["id"].to_list()]
        if not seeds:  # nothing links (another language, no name): the best units' entities
            seed_source = "best_units"
            for row in unit_rows[:cfg.seed_units]:
                seeds += [e for e in r.col["kg_node_ids"][row] or [] if e not in seeds]
        seeds = [e for e in dict.fromkeys(seeds) if e in idx.entities]
        neighbours, rel_rows = self._neighbourhood(seeds)
        info["local"] = {"seeds": seeds, "seed_source": seed_source,
                         "neighbours": len(neighbours)}
        selected = seeds + neighbours
        entity_items = []
        for rank, e in enumerate(selected):
            row = idx.entities[e]
            ref = f"E{row['human_readable_id']}"
            entity_items.append(ContextItem(ref, "entities", e, verbalize_entity(
                ref, row["title"], row["type"], row["description"], self.counter),
                float(len(selected) - rank)))
        rel_items = []
        for rank, rid in enumerate(rel_rows):
            row = idx.relationships.get(rid)
            if row is None:
                continue
            ref = f"R{row['human_readable_id']}"
            rel_items.append(ContextItem(ref, "relationships", rid, verbalize_relationship(
                ref, row["source"], row["target"], row["description"], row["kind"],
                row["weight"], self.counter), float(len(rel_rows) - rank)))
        report_items = self._local_reports(seeds, neighbours)
        units = [self._unit_item(row, s) for row, s in
                 zip(unit_rows, res.text_units["score"].to_list())]
        units += self._seed_units(seeds, set(selected), set(unit_rows))
        by_kind = {"entities": entity_items, "relationships": rel_items,
                   "reports": report_items, "text_units": units}
        sections = [Section(kind, by_kind[kind], share) for kind, share in cfg.shares]
        context = pack_context(sections, budget, self.counter)
        return context, self._sources(context)

    def _neighbourhood(self, seeds: list[str]) -> tuple[list[str], list[str]]:
        """(neighbour entity ids, ranked; relationship ids among seeds and neighbours,
        ranked). Neighbours: 1-hop, by summed edge weight to the seeds, then PageRank,
        then degree, then title; at most ``config.max_neighbors``. Relationships: both
        ends seeds first, then one end a seed, then the rest; each by weight, then
        combined degree."""
        if not seeds or not self.index.relationships:
            return [], []
        g = self.retriever.graph
        adj, node_of, ids = g["adj"], g["node_of"], g["entity_ids"]
        rel_of_row = g["relationship_ids"]
        seed_nodes = {node_of[e] for e in seeds if e in node_of}
        strength: dict[int, float] = {}
        for s in seed_nodes:
            lo, hi = int(adj.indptr[s]), int(adj.indptr[s + 1])
            for nb, w in zip(adj.indices[lo:hi].tolist(), adj.weights[lo:hi].tolist()):
                if nb not in seed_nodes:
                    strength[nb] = strength.get(nb, 0.0) + w
        ents = self.index.entities

        def key(n: int) -> tuple:
            row = ents.get(ids[n], {})
            return (-strength[n], -(row.get("pagerank") or 0.0), -(row.get("degree") or 0),
                    row.get("title") or "")

        near = sorted(strength, key=key)[:self.config.max_neighbors]
        chosen = seed_nodes | set(near)
        edges: dict[str, tuple] = {}
        for v in chosen:
            lo, hi = int(adj.indptr[v]), int(adj.indptr[v + 1])
            for nb, w, er in zip(adj.indices[lo:hi].tolist(), adj.weights[lo:hi].tolist(),
                                 adj.edge_rows[lo:hi].tolist()):
                if nb in chosen:
                    rid = rel_of_row[er]
                    ends = (v in seed_nodes) + (nb in seed_nodes)
                    row = self.index.relationships.get(rid, {})
                    edges[rid] = (-ends, -w, -(row.get("combined_degree") or 0),
                                  row.get("human_readable_id") or 0)
        return [ids[n] for n in near], sorted(edges, key=lambda r: edges[r])

    def _local_reports(self, seeds: list[str], neighbours: list[str]) -> list[ContextItem]:
        """Reports of the communities holding seeds (weight 1) or neighbours (0.25), by
        summed weight, then finer level, then report rank; a report shared by a
        community and its unchanged copy one level down is listed once."""
        tree = self.index.tree
        if tree is None:
            return []
        weight: dict[int, float] = {}
        for e, w in [(e, 1.0) for e in seeds] + [(e, 0.25) for e in neighbours]:
            for c in self.index.communities_of.get(e, []):
                if c in tree.reports:
                    weight[c] = weight.get(c, 0.0) + w
        order = sorted(weight, key=lambda c: (-weight[c], -tree.reports[c].level,
                                              -tree.reports[c].rank, c))
        items, seen = [], set()
        for c in order:
            rep = tree.reports[c]
            if rep.report_key in seen:
                continue
            seen.add(rep.report_key)
            items.append(ContextItem(rep.ref, "reports", str(c),
                                     verbalize_report(rep.ref, rep.title, rep.summary),
                                     weight[c]))
        return items

    def _seed_units(self, seeds: list[str], selected: set[str],
                    skip: set[int]) -> list[ContextItem]:
        """The seeds' own text units not already retrieved, by the number of selected
        entities they mention (then position)."""
        r = self.retriever
        rows: dict[int, int] = {}
        for e in seeds:
            for row in r.mentions.get(e, []):
                if row not in skip:
                    rows[row] = len(selected & set(r.col["kg_node_ids"][row] or []))
        order = sorted(rows, key=lambda row: (-rows[row], row))
        return [self._unit_item(row, float(rows[row])) for row in order]

    def _sources(self, context: Context) -> dict[str, dict[str, str]]:
        return {x.ref: {"kind": x.kind, "id": x.source_id, "text": x.text}
                for x in context.items}

    # --- global ----------------------------------------------------------------------
    def _shortlist(self, question: str, tree: gs.CommunityTree
                   ) -> Callable[[list[int]], list[int]]:
        """The shortlist of dynamic selection (``config.rate_shortlist``): the
        communities whose report "title: summary" is nearest to ``question`` by cosine
        of the index's embedder (report vectors embedded once per Searcher), in their
        given order; ties by community number."""
        q = self.retriever._embed([question])[0]

        def shortlist(communities: list[int]) -> list[int]:
            k = self.config.rate_shortlist
            if len(communities) <= k:
                return communities
            todo = [c for c in communities if tree.reports[c].report_key not in self._rvec]
            if todo:
                vecs = self.retriever._embed([f"{tree.reports[c].title}: "
                                              f"{tree.reports[c].summary}" for c in todo])
                self._rvec.update({tree.reports[c].report_key: v for c, v in zip(todo, vecs)})
            score = {c: float(self._rvec[tree.reports[c].report_key] @ q) for c in communities}
            best = set(sorted(communities, key=lambda c: (-score[c], c))[:k])
            return [c for c in communities if c in best]

        return shortlist

    def _global(self, question: str, mode: str, reason: str, dynamic: bool,
                level: int | None, answer: bool, log: CallLog | None, info: dict[str, Any],
                failures: list[dict], progress: Progress | None) -> SearchResult:
        """Global search (module doc of global_search); returns a result whose route is
        ``local`` (with its reason) when no report is selected, for the caller to run."""
        cfg, tree = self.config, self.index.tree
        assert tree is not None
        info["hierarchy"] = {"levels": tree.levels, "reports": len(tree),
                             "missing_reports": tree.missing, "stale_reports": tree.stale}
        if dynamic:
            assert log is not None

            rate = gs.BatchRater(log, question, self.counter, cfg.seed, cfg.rate_budget,
                                 cfg.rate_batch, cfg.rate_max_tokens)
            selection = gs.select_dynamic(
                tree, rate, cfg.threshold, level, progress,
                shortlist=self._shortlist(question, tree) if cfg.rate_shortlist else None,
                keep_parent=cfg.keep_parent)
        else:
            chosen = level if level is not None else (
                cfg.default_level if cfg.default_level in tree.levels else tree.levels[-1])
            selection = gs.select_static(tree, chosen)
            info["level"] = chosen
        failures += selection.failures
        info["selection"] = selection.summary()
        if not selection.selected:
            why = "no community report was rated relevant to the question"
            info["fallback"] = f"global search found nothing: {why}"
            return SearchResult(question, mode, "local", f"{reason}; fell back to local: {why}",
                                None, [], Context([], 0, 0, ""), info=info)
        reports = [tree.reports[c] for c in selection.selected]
        batches = gs.map_batches(reports, cfg.map_budget, self.counter, cfg.map_report_max_tokens)
        info["map"] = {"batches": len(batches), "reports": len(reports),
                       "max_batch_tokens": max(b.tokens for b in batches)}
        report_sources = self._report_sources(reports)
        if not answer:
            items = [ContextItem(rep.ref, "reports", str(rep.community),
                                 verbalize_report(rep.ref, rep.title, rep.full_content),
                                 rep.rank) for rep in reports]
            context = Context(items, cfg.map_budget, max(b.tokens for b in batches),
                              self.counter.name, {"reports": {"kept": len(items)}})
            return SearchResult(question, mode, "global", reason, None, [], context,
                                report_sources, batches, info, failures)
        assert log is not None
        points, map_failures = gs.run_map(question, batches, log, cfg.seed, progress)
        failures += map_failures
        if dynamic and cfg.map_fallback and selection.replaced and not gs.rank_points(points):
            broader = [tree.reports[c] for c in selection.replaced]
            more = gs.map_batches(broader, cfg.map_budget, self.counter,
                                  cfg.map_report_max_tokens)
            extra, map_failures = gs.run_map(question, more, log, cfg.seed, progress,
                                             first_batch=len(batches))
            failures += map_failures
            points += extra
            batches = batches + more
            report_sources.update(self._report_sources(broader))
            info["map"]["fallback"] = {"reports": len(broader), "batches": len(more),
                                       "points": len(extra),
                                       "above_zero": len(gs.rank_points(extra))}
        context = gs.reduce_context(points, cfg.reduce_budget, self.counter)
        info["reduce"] = {"points": len(points), "kept": len(context.items),
                          "tokens": context.tokens}
        if progress:
            progress({"phase": "reduce", "points": len(points), "kept": len(context.items)})
        citable = [ref for ref in refs_in(context.text) if ref.startswith("C")]
        sources = {**report_sources, **self._sources(context)}
        if not context.items:
            info["note"] = "no key point scored above 0: nothing to answer from"
            text, cites = None, []
        else:
            text, cites = self._answer(question, context, citable, log, failures, info)
        return SearchResult(question, mode, "global", reason, text, cites, context, sources,
                            batches, info, failures)

    @staticmethod
    def _report_sources(reports: list[gs.Report]) -> dict[str, dict[str, str]]:
        """ref -> {kind, id, text (title: summary)} of each report, for citations."""
        return {rep.ref: {"kind": "reports", "id": str(rep.community),
                          "text": f"{rep.title}: {rep.summary}"} for rep in reports}

    # --- answers -------------------------------------------------------------------
    def _answer(self, question: str, context: Context, citable: list[str],
                log: CallLog | None, failures: list[dict],
                info: dict[str, Any] | None = None) -> tuple[str | None, list[str]]:
        """One answer call (stage ``search_answer``); (None, []) with no context or a
        failed reply (its row added to ``failures``). The reply is grounded by
        :func:`check_answer` (citations outside ``citable`` dropped, invented inline
        citations removed, a loop cut); what it did goes to ``info["answer_check"]``.

        Raises:
            ValueError: the context and prompt do not fit the model's window.
        """
        if not context.items or not citable or log is None:
            return None, []
        schema = answer_schema(citable, self.config.answer_max_chars)
        self._check_fit(ANSWER_TEMPLATE, schema, context.tokens, context.budget,
                        context=context.text, question=question)
        obj, failure = structured_call(log, ANSWER_TEMPLATE, "search_answer", question[:80],
                                       self.config.seed, schema=schema,
                                       check_schema=loose_answer_schema(schema),
                                       context=context.text, question=question)
        if obj is None:
            failures.append(failure)
            return None, []
        check = check_answer(obj["answer"], obj["citations"], citable, context.text)
        if info is not None:
            info["answer_check"] = check.info()
        return check.answer, check.citations

    def _check_question_fits(self, question: str) -> None:
        """Refuse a question that does not fit the model's window in the answer prompt
        even with an empty context (no budget could help it).

        Raises:
            ValueError: naming the question's tokens and the model's window.
        """
        from kgloom.llm import prompt_room
        from kgloom.llm import reply_token_bound

        schema = answer_schema(["T0"], self.config.answer_max_chars)
        reply = reply_token_bound(schema) or ANSWER_TEMPLATE.max_tokens
        room = prompt_room(self.llm, ANSWER_TEMPLATE, reply, context="", question=question)
        # only the question's fault when the prompt without it fits (else the window is
        # too small for any question: the budget check says so)
        if room is not None and room < 0 and (prompt_room(
                self.llm, ANSWER_TEMPLATE, reply, context="", question="?") or 0) >= 0:
            n_ctx = getattr(self.llm.backend, "n_ctx", "?")
            raise ValueError(
                f"the question is too long: {self.counter(question)} tokens, {-room} more "
                f"than the model's context window (n_ctx {n_ctx}) holds with the answer "
                "prompt and reply even with no context; shorten the question")

    def _check_fit(self, template: PromptTemplate, schema: dict, tokens: int, budget: int,
                   **inputs: str) -> None:
        from kgloom.llm import prompt_room
        from kgloom.llm import reply_token_bound

        room = prompt_room(self.llm, template, reply_token_bound(schema) or template.max_tokens,
                           **inputs)
        if room is not None and room < 0:
            raise ValueError(
                f"the context ({tokens} tokens of a budget of {budget}) with "
                f"its prompt and reply needs {-room} tokens more than the model's context "
                f"window (n_ctx {getattr(self.llm.backend, 'n_ctx', '?')}): lower the budget")
