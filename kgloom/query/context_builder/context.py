"""Search contexts: graph facts verbalized as short cited lines, packed into a token budget.

Every line of a context starts with an id the answer can cite: ``[E12]`` an entity,
``[R7]`` a relationship, ``[T3]`` a text unit (the number is the row's
``human_readable_id``), ``[C5]`` the report of community 5, ``[P2]`` a key point of
global search's map step. :func:`pack_context` fills named sections (entities,
relationships, community reports, text units, ...) in a fixed packing order, each up to
its share of the budget plus whatever the sections packed before it left unused, so a
short neighbourhood leaves its room to the text units; an item is never cut, an item
that does not fit is skipped for the next smaller one, and each ``source_id`` appears
once (a text unit reached through three entities is listed once). Tokens are counted by
a :class:`TokenCounter`: the loaded GGUF's own tokenizer when there is one (the budget is
then exactly what the model reads), else the bundled all-MiniLM-L6-v2 WordPiece one.

Shares follow GraphRAG's local search defaults (``text_unit_prop`` 0.5,
``community_prop`` 0.15, the rest for entities and relationships; microsoft/graphrag
``config/defaults.py``), split here 0.15 entities / 0.2 relationships.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

HEADINGS = {"reports": "Community reports:", "entities": "Entities:",
            "relationships": "Relationships:", "text_units": "Text units:",
            "points": "Key points:"}
RENDER_ORDER = ("reports", "entities", "relationships", "text_units", "points")
MAX_DESCRIPTION_TOKENS = 80  # an entity or relationship line keeps this much description


@dataclass(frozen=True)
class TokenCounter:
    """Counts tokens of a text; ``name`` says whose tokens they are (recorded in results)."""

    count: Callable[[str], int]
    name: str

    def __call__(self, text: str) -> int:
        return self.count(text)

    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of ``text`` cut at whitespace with at most ``max_tokens``
        tokens (binary search over word counts; "…" marks a cut). Empty when not even
        the first word fits."""
        if self.count(text) <= max_tokens:
            return text
        words = text.split()
        lo, hi = 0, len(words)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.count(" ".join(words[:mid]) + " …") <= max_tokens:
                lo = mid
            else:
                hi = mid - 1
        return " ".join(words[:lo]) + " …" if lo else ""


def token_counter(backend: Any = None) -> TokenCounter:
    """The counter for ``backend``: its ``count_tokens`` (a loaded GGUF:
    :class:`kgloom.llm.LlamaCppBackend`) or, for backends that cannot count (the fake
    model, none), the bundled tokenizer (:func:`kgloom.embedding.tokenizer.default_tokenizer`)."""
    count = getattr(backend, "count_tokens", None)
    if count is not None:
        return TokenCounter(count, f"model ({getattr(backend, 'model_path', 'gguf')})")
    from kgloom.embedding.tokenizer import TOKENIZER_NAME, default_tokenizer

    return TokenCounter(default_tokenizer().count, TOKENIZER_NAME)


@dataclass(frozen=True)
class ContextItem:
    """One citable line.

    Attributes:
        ref: the citation id without brackets (``E12``, ``R7``, ``T3``, ``C5``, ``P2``).
        kind: the section: entities, relationships, reports, text_units or points.
        source_id: what it stands for (entity / relationship / text unit id, community
            number as text, or for a point the refs of the reports it came from).
        text: the verbalized line, starting with ``[ref]``.
        score: the ranking score that ordered it within its section (higher first).
    """

    ref: str
    kind: str
    source_id: str
    text: str
    score: float = 0.0


@dataclass
class Context:
    """A packed context.

    Attributes:
        items: the kept items, in rendering order (see :data:`RENDER_ORDER`).
        budget: the token budget it was packed into.
        tokens: tokens of :attr:`text` (counted whole, by ``counter``), <= budget.
        counter: whose tokens (:attr:`TokenCounter.name`).
        sections: per section: ``share`` (tokens allowed before carry-over), ``used``,
            ``kept`` and ``candidates`` (items offered), ``skipped`` (did not fit).
    """

    items: list[ContextItem]
    budget: int
    tokens: int
    counter: str
    sections: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """The context as the model reads it: a heading per non-empty section, one
        line per item."""
        return render_items(self.items)

    @property
    def refs(self) -> list[str]:
        """The ids an answer may cite, in context order."""
        return [x.ref for x in self.items]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: budget, tokens, counter, sections and the items."""
        return {"budget": self.budget, "tokens": self.tokens, "counter": self.counter,
                "sections": self.sections, "items": [vars(x) for x in self.items]}


def render_items(items: Sequence[ContextItem]) -> str:
    """Items grouped under their section headings, sections in :data:`RENDER_ORDER`."""
    lines: list[str] = []
    for kind in RENDER_ORDER:
        mine = [x.text for x in items if x.kind == kind]
        if mine:
            lines += [HEADINGS[kind]] + mine
    return "\n".join(lines)


def _one_line(text: str | None) -> str:
    return " ".join((text or "").split())


def _description(text: str | None, counter: TokenCounter,
                 max_tokens: int = MAX_DESCRIPTION_TOKENS) -> str:
    # descriptions join evidence sentences with " … " (kgloom.graph.summaries); keep the first few
    return counter.truncate(_one_line(text), max_tokens)


def verbalize_entity(ref: str, title: str, type_: str | None, description: str | None,
                     counter: TokenCounter) -> str:
    """``[E12] Bob Cratchit (person): <description, at most MAX_DESCRIPTION_TOKENS>``."""
    kind = f" ({type_.lower()})" if type_ and type_.upper() != "OTHER" else ""
    desc = _description(description, counter)
    return f"[{ref}] {title}{kind}" + (f": {desc}" if desc else ".")


def verbalize_relationship(ref: str, source: str, target: str, description: str | None,
                           kind: str | None, weight: float | None,
                           counter: TokenCounter) -> str:
    """A triple as a sentence: ``[R7] Scrooge is related to Marley: <evidence>``; a
    co-mention edge (kgloom's ``co_mention`` kind) says so instead of claiming a relation."""
    verb = "is mentioned with" if kind == "co_mention" else "is related to"
    desc = _description(description, counter)
    return f"[{ref}] {source} {verb} {target}" + (f": {desc}" if desc else ".")


def verbalize_text_unit(ref: str, text: str, document_title: str | None) -> str:
    """``[T3] (from <document title>) <the unit's text on one line>``."""
    source = f"(from {document_title}) " if document_title else ""
    return f"[{ref}] {source}{_one_line(text)}"


def verbalize_report(ref: str, title: str, body: str | None) -> str:
    """``[C5] <report title>: <summary or full content, on one line>``."""
    text = _one_line(body)
    return f"[{ref}] {_one_line(title)}" + (f": {text}" if text else "")


@dataclass(frozen=True)
class Section:
    """Candidates for one section, best first, and its share of the budget (0..1)."""

    kind: str
    items: Sequence[ContextItem]
    share: float


def check_budget(budget: Any, name: str = "budget") -> int:
    """Return ``budget`` as a positive int.

    Raises:
        ValueError: naming ``name`` and the value, when it is not a positive integer.
    """
    if isinstance(budget, bool) or not isinstance(budget, int) or budget <= 0:
        raise ValueError(f"{name} must be a positive number of tokens, got {budget!r}")
    return budget


def pack_context(sections: Sequence[Section], budget: int, counter: TokenCounter,
                 budget_name: str = "budget") -> Context:
    """Pack ``sections`` (in the given packing order) into ``budget`` tokens.

    A section may use ``share x budget`` tokens plus what earlier sections left unused;
    its heading costs tokens once it holds an item. Items keep their order; one that
    does not fit is skipped and the next tried. An item whose ``source_id`` (within its
    kind) was already packed is dropped. The rendered text is then counted whole and,
    should the per-line counts have undercounted it, items are dropped from the end of
    the last packed section until it fits, so ``Context.tokens <= budget`` always.

    Args:
        sections: the candidates per section; shares need not sum to 1 (the last
            section gets all that is left).
        budget: tokens for the whole rendered context.
        counter: the token counter.
        budget_name: how errors name the budget (e.g. ``--budget``).

    Returns:
        the :class:`Context`; an empty one when there are no candidates at all.

    Raises:
        ValueError: the budget is not a positive integer, or there are candidates but
            not one of them fits in the budget (the message names the budget and the
            smallest item's size).
    """
    check_budget(budget, budget_name)
    kept, stats, offered, smallest = _fill_sections(sections, budget, counter)
    if offered and not kept:
        raise ValueError(f"{budget_name} of {budget} tokens cannot hold one context item "
                         f"(the smallest needs {smallest} tokens with its heading)")
    ordered = sorted(kept, key=lambda x: RENDER_ORDER.index(x.kind)
                     if x.kind in RENDER_ORDER else len(RENDER_ORDER))
    tokens = _trim_to_budget(ordered, [s.kind for s in sections], stats, budget, counter)
    for kind, s in stats.items():
        s["used"] = counter(render_items([x for x in ordered if x.kind == kind])) \
            if s["kept"] else 0
    return Context(ordered, budget, tokens, counter.name, stats)


def _fill_sections(sections: Sequence[Section], budget: int, counter: TokenCounter
                   ) -> tuple[list[ContextItem], dict[str, dict[str, int]], int, int | None]:
    """The greedy pass of :func:`pack_context`: each section, in packing order, filled
    up to its allowance (``share x budget`` plus what earlier sections left; the last
    section: all that is left), its heading paid once it holds an item, an item that
    does not fit skipped, a ``(kind, source_id)`` already packed dropped.

    Returns:
        (the items kept, in packing order; per section kind {"share", "used", "kept",
        "candidates", "skipped"} in tokens and items; how many distinct items were
        offered; the tokens of the smallest item with its heading, None when none was
        offered).
    """
    kept: list[ContextItem] = []
    stats: dict[str, dict[str, int]] = {}
    carry, offered = 0, 0
    seen: set[tuple[str, str]] = set()
    smallest: int | None = None
    for i, sec in enumerate(sections):
        last = i == len(sections) - 1
        allowance = (budget - sum(s["used"] for s in stats.values())) if last else \
            int(sec.share * budget) + carry
        heading = counter(HEADINGS.get(sec.kind, sec.kind)) + 1
        used, n_kept, skipped = 0, 0, 0
        for item in sec.items:
            key = (item.kind, item.source_id)
            if key in seen:
                continue
            offered += 1
            cost = counter(item.text) + 1
            smallest = cost + heading if smallest is None else min(smallest, cost + heading)
            extra = cost + (heading if n_kept == 0 else 0)
            if used + extra > allowance:
                skipped += 1
                continue
            seen.add(key)
            kept.append(item)
            used += extra
            n_kept += 1
        stats[sec.kind] = {"share": int(sec.share * budget), "used": used, "kept": n_kept,
                           "candidates": n_kept + skipped, "skipped": skipped}
        carry = max(0, allowance - used)
    return kept, stats, offered, smallest


def _trim_to_budget(ordered: list[ContextItem], packing: list[str],
                    stats: dict[str, dict[str, int]], budget: int,
                    counter: TokenCounter) -> int:
    """Count the rendered ``ordered`` items whole and, while they exceed ``budget``
    (per-line counts can undercount the rendered text), drop the last item of the
    section packed last (``packing``: the section kinds in packing order), in place,
    moving it from ``kept`` to ``skipped`` in ``stats``.

    Returns:
        the tokens of the rendered items left (0 when none is left).
    """
    tokens = counter(render_items(ordered)) if ordered else 0
    while tokens > budget and ordered:
        # drop from the section packed last (lowest priority), its last item first
        for kind in reversed(packing):
            mine = [j for j, x in enumerate(ordered) if x.kind == kind]
            if mine:
                ordered.pop(mine[-1])
                stats[kind]["kept"] -= 1
                stats[kind]["skipped"] += 1
                break
        tokens = counter(render_items(ordered)) if ordered else 0
    return tokens


_REF = re.compile(r"\[([ERTCP]\d+)\]")


def refs_in(text: str) -> list[str]:
    """The ``[E12]``-style ids in ``text``, in order of first appearance."""
    return list(dict.fromkeys(_REF.findall(text)))
