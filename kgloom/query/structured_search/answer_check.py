"""Grounding one search answer in its context (:func:`check_answer`): a citation outside
the context, from a backend that ignored the grammar, is dropped and counted; invented
inline citations are removed; a looping answer is cut and flagged; a name the context
does not hold is flagged (:class:`AnswerCheck` says what was done).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kgloom.names.candidates import is_grounded
from kgloom.names.grounding import cut_repetition, ungrounded_answer_names
from kgloom.query.context_builder.context import refs_in

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
    - citations written in the text that resolve to nothing are removed from it
      (:func:`_without_invented_citations`);
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
    text, removed = _without_invented_citations(answer, inline_known, context_text)
    text = " ".join(text.split())
    text, rep = cut_repetition(text)
    text = re.sub(r"\s+([.,;:!?])", r"\1", text).strip()
    return AnswerCheck(text or "(no answer left once its invented citations were removed)",
                       kept, dropped, removed, rep.phrase if rep else None,
                       ungrounded_answer_names(text, context_text, sorted(inline_known),
                                               corpus) if context_text else [])


def _without_invented_citations(answer: str, inline_known: set[str], context_text: str
                                ) -> tuple[str, list[str]]:
    """``answer`` with the inline citations that resolve to nothing removed: a
    bracketed ``[...]`` whose parts are not among ``inline_known`` (a bracket naming some
    known ids keeps just those; one quoted from ``context_text`` as is, e.g.
    "[Illustration]" stays), a parenthesized id list (likewise), and a report cited by a
    quoted title that ``context_text`` does not hold (case-insensitive).

    Returns:
        (the answer text, whitespace not yet collapsed; the removed ids and titles, in
        the order removed).
    """
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
    return text, removed
