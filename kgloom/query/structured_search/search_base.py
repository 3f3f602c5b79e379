"""What every structured search shares: the knobs (:class:`SearchSettings`), the result
(:class:`SearchResult`), the model opened on first use (:class:`SearchModel`), the call
log, and the answer: one structured call whose citations are an enum of the context's
ids, grounded by :func:`check_answer` (:class:`BaseSearch`).

Answers are one structured call: ``{"answer": str, "citations": [id, ...]}`` where the
citation items are an enum of the ids present in the context, so an answer cannot cite a
line it was not shown; :func:`check_answer` still grounds every reply (a citation
outside the context, from a backend that ignored the grammar, is dropped and counted;
invented inline citations are removed; a looping answer is cut and flagged; a name the
context does not hold is flagged), and an answer of the bundled demo model carries a
notice (:func:`model_notice`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kgloom.llm import (
    SMOLLM2_SHA256,
    CachedLLM,
    Completion,
    PromptTemplate,
    StageStats,
    open_llm,
    structured_call,
)
from kgloom.names.candidates import is_grounded
from kgloom.names.grounding import cut_repetition, ungrounded_answer_names
from kgloom.query.context_builder.community_context import ReportBatch
from kgloom.query.context_builder.context import (
    Context,
    TokenCounter,
    refs_in,
    token_counter,
)
from kgloom.query.query_index import QueryIndex
from kgloom.settings.search_settings import SearchSettings  # the settings' search section

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
        ungrounded_names: names of the answer its context does not hold
            (:func:`kgloom.names.grounding.ungrounded_answer_names`: every capitalized word
            the context holds in no case or form and the corpus does not write mostly
            in lower case, one-word answers and sentence starts included), flagged, not
            removed.
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
                 context_text: str = "", corpus: Sequence[str] = ()) -> AnswerCheck:
    """Ground one answer in its context.

    - ``citations`` not among ``refs`` (the context's ids) are dropped;
    - citations written in the text that resolve to nothing are removed from it: a
      bracketed ``[...]`` whose parts are not context ids (a bracket naming some ids
      keeps just those), a parenthesized id list, and a report cited by a quoted title
      that ``context_text`` does not hold (case-insensitive);
    - a degenerate answer (:func:`kgloom.names.grounding.find_repetition`) is cut where it
      starts repeating (:func:`kgloom.names.grounding.cut_repetition`);
    - the names it uses that ``context_text`` lacks are listed
      (:func:`kgloom.names.grounding.ungrounded_answer_names`: a capitalized word, a
      hyphenated name, that the context holds in no case or form, wherever it stands,
      a one-word answer included, unless ``corpus`` writes the word mostly in lower
      case: "See", "Nobody"); flagged only: a name may be the question's own.

    Args:
        answer: the model's answer text.
        citations: its cited ids, in order.
        refs: the ids of the context it was shown (``[E12]`` style, without brackets).
        context_text: the context as the model read it (for report titles and names;
            "" checks no name).
        corpus: the texts the context was drawn from (the index's text units), the
            evidence that a capitalized word the context lacks is an ordinary word.

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
                       ungrounded_answer_names(text, context_text, sorted(inline_known),
                                               corpus) if context_text else [])


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
    for the bundled SmolLM2-135M (its SHA-256 as model id, with any ``+<weights>``),
    :data:`FAKE_MODEL_NOTICE` for the fake model, else None."""
    if model_id.split("+")[0] == SMOLLM2_SHA256:
        return DEMO_MODEL_NOTICE
    if model_id == "fake-llm":
        return FAKE_MODEL_NOTICE
    return None




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
            (``llm``), the community selection, the retrieval used, fallbacks, and
            whether anything is relevant to the question (``best_similarity``,
            ``low_relevance``, and ``notice``: a sentence for a person or None; see
            :mod:`kgloom.query.retrieval.relevance`).
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
    map_batches: list[ReportBatch] = field(default_factory=list)
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



class SearchModel:
    """The model search answers with, opened on first use, and its token counter.

    Args:
        llm: an open :class:`CachedLLM`; None opens one on first need with
            :func:`kgloom.llm.open_llm` (``open_args``: ``cache_path``, ``model_path``,
            ``fake``, ``n_ctx``, ``n_threads``).
        open_args: the keyword arguments of :func:`kgloom.llm.open_llm`.
    """

    def __init__(self, llm: CachedLLM | None, open_args: dict[str, Any]) -> None:
        self._llm = llm
        self.open_args = open_args
        self._counter: TokenCounter | None = None

    @property
    def llm(self) -> CachedLLM:
        """The cached model, opened on first use.

        Raises:
            kgloom.llm.ModelFileError: a missing or wrong model file.
        """
        if self._llm is None:
            self._llm = open_llm(**self.open_args)
        return self._llm

    @property
    def counter(self) -> TokenCounter:
        """Token counter of the model (its own tokenizer when it has one)."""
        if self._counter is None:
            self._counter = token_counter(self.llm.backend)
        return self._counter


@dataclass
class BaseSearch:
    """One search method over an index (GraphRAG's ``BaseSearch``): the index, the
    knobs, the model; :meth:`answer` is the answer call every method ends with.

    Attributes:
        index: the index (its search tables loaded).
        config: the search knobs of this call.
        model: the model and its token counter.
        defer_answer: build the answer's context but make no answer call: the caller
            asks the model itself (``kgloom serve`` streams it from a model server;
            :mod:`kgloom.serve.answer_stream`); the ids it may cite go to
            ``info["deferred_answer"]["citable"]``.
    """

    index: QueryIndex
    config: SearchSettings
    model: SearchModel
    defer_answer: bool = False

    @property
    def llm(self) -> CachedLLM:
        """The model (opened on first use)."""
        return self.model.llm

    @property
    def counter(self) -> TokenCounter:
        """The model's token counter."""
        return self.model.counter

    def answered(self, question: str, mode: str, route: str, reason: str, context: Context,
                 sources: dict[str, dict[str, str]], answer: bool, log: CallLog | None,
                 info: dict[str, Any], failures: list[dict]) -> SearchResult:
        """The result of a context-then-answer search (local, basic): the answer to
        ``question`` from ``context`` (citable: all its ids) when ``answer``."""
        text, cites = self.answer(question, context, context.refs, log, failures, info) \
            if answer else (None, [])
        return SearchResult(question, mode, route, reason, text, cites, context, sources,
                            info=info, failures=failures)

    def answer(self, question: str, context: Context, citable: list[str],
               log: CallLog | None, failures: list[dict],
               info: dict[str, Any] | None = None) -> tuple[str | None, list[str]]:
        """One answer call (stage ``search_answer``); (None, []) with no context or a
        failed reply (its row added to ``failures``). The reply is grounded by
        :func:`check_answer` (citations outside ``citable`` dropped, invented inline
        citations removed, a loop cut, names the context lacks flagged, with the index's
        text units as the evidence of ordinary words); what it did goes to
        ``info["answer_check"]``.

        Raises:
            ValueError: the context and prompt do not fit the model's window.
        """
        if not context.items or not citable or log is None:
            return None, []
        schema = answer_schema(citable, self.config.answer_max_chars)
        self.check_fit(ANSWER_TEMPLATE, schema, context.tokens, context.budget,
                       context=context.text, question=question)
        if self.defer_answer:
            if info is not None:
                info["deferred_answer"] = {"citable": list(citable)}
            return None, []
        obj, failure = structured_call(log, ANSWER_TEMPLATE, "search_answer", question[:80],
                                       self.config.seed, schema=schema,
                                       check_schema=loose_answer_schema(schema),
                                       context=context.text, question=question)
        if obj is None:
            assert failure is not None  # structured_call: no object, then a failure row
            failures.append(failure)
            return None, []
        check = check_answer(obj["answer"], obj["citations"], citable, context.text,
                             self.index.units.texts)
        if info is not None:
            info["answer_check"] = check.info()
        return check.answer, check.citations

    def check_question_fits(self, question: str) -> None:
        """Refuse a question that does not fit the model's window in the answer prompt
        even with an empty context (no budget could help it).

        Raises:
            ValueError: naming the question's tokens and the model's window.
        """
        from kgloom.llm import prompt_room, reply_token_bound

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

    def check_fit(self, template: PromptTemplate, schema: dict, tokens: int, budget: int,
                  **inputs: str) -> None:
        """Refuse a prompt of ``template`` with ``inputs`` that, with its reply, does not
        fit the model's window.

        Raises:
            ValueError: naming the context's tokens, its budget and the model's window.
        """
        from kgloom.llm import prompt_room, reply_token_bound

        room = prompt_room(self.llm, template, reply_token_bound(schema) or template.max_tokens,
                           **inputs)
        if room is not None and room < 0:
            raise ValueError(
                f"the context ({tokens} tokens of a budget of {budget}) with "
                f"its prompt and reply needs {-room} tokens more than the model's context "
                f"window (n_ctx {getattr(self.llm.backend, 'n_ctx', '?')}): lower the budget")
