"""Query routing for ``mode=auto``: direct (plain vector RAG), local (entity-centric,
multi-hop) or global (thematic, corpus-wide).

Rules first, on the question's words and its linked entities
(:func:`kgloom.query.retrieval.steps.link_question`); a question no rule settles goes to
one grammar-bounded classifier call (the reply is an enum of the three routes and a short
reason). The split follows the routing advice of
"RAG vs. GraphRAG: A Systematic Evaluation" (Han et al., arXiv 2502.11371): fact lookups
to plain RAG, multi-hop and relational questions to the graph, corpus-wide sensemaking
to community summaries (Edge et al., arXiv 2404.16130).

Rules, in order (the first that fires decides):

1. ``thematic``: a corpus-wide cue (themes, overall, summarize the book, what kinds of,
   across all the documents, ...) and no linked entity -> global.
2. ``relation``: a relation or comparison cue (how are X and Y related, between, which
   ... first, both, same, older) -> local.
3. ``entities``: two or more linked entities -> local.
4. ``chain``: a chain of relations around a linked entity (the mother of the director
   of X, X's father's ..., when did X's mother die: the relation is one hop, the asked
   fact another) -> local.
5. ``profile``: who is / tell me about / describe + one linked entity -> local.
6. ``lookup``: one linked entity and a plain wh-question with one relation -> direct.

Otherwise (no entity and no cue, a thematic cue about a named entity, a question in a
language the cues do not cover) the classifier decides.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kgloom.llm import LLMCaller, PromptTemplate, structured_call
from kgloom.query.question_cues import thematic_cue

ROUTES = ("direct", "local", "global")

_RELATION = re.compile(r"""(?ix)
  \bhow\s+(is|are|was|were|did|do)\b.*\b(related|connected|linked|know|meet)\b
  | \b(relationship|connection|link)\s+(between|of)\b | \bbetween\b.+\band\b
  | \b(which|who|what)\b.*\b(first|earlier|later|older|younger|longer|shorter|bigger|
       larger|smaller|more|fewer|less|higher|lower|born\s+first|died\s+first)\b.*\bor\b
  | \b(both|same|either)\b.*\b(and|or)\b | \bin\s+common\b
""")
_CHAIN = re.compile(r"""(?ix)
  \bthe\s+\w+(\s+\w+)?\s+of\s+(the\s+)?\w+(\s+\w+)?\s+of\b
  | \w+['’]s\s+\w+(\s+\w+)?['’]s\b
  | \bthe\s+\w+(\s+\w+)?\s+of\s+(the\s+)?(\w+\s+)?\w+['’]s\b
  | \w+['’]s\s+(\w+\s+)?(father|mother|son|daughter|wife|husband|brother|sister|parent|
       child|spouse|uncle|aunt|nephew|niece|director|performer|author|founder|employer|
       clerk|partner|friend)\b
  | \b(father|mother|son|daughter|wife|husband|spouse|director|performer|author|composer|
       producer|founder)\s+of\s+(the\s+)?(film|song|album|book|novel|company|band)\b
""")
_PROFILE = re.compile(r"""(?ix)
  ^\s*(who\s+(is|was|are|were)\b(?!.*\b(born|died|married)\b)|tell\s+me\s+(about|more)|
      describe\b|what\s+do\s+(we|you)\s+know\s+about|what\s+(role|part)\s+does\b)
""")
_LOOKUP = re.compile(r"""(?ix)
  ^\s*(when|where|what|which|who|whom|whose|how\s+(old|long|many|much)|in\s+what|on\s+what|
      at\s+what|is|was|did|does|do|are|were)\b
""")


@dataclass(frozen=True)
class Route:
    """A routing decision.

    Attributes:
        route: ``direct``, ``local`` or ``global``.
        reason: why, in words (the rule and what it saw, or the classifier's reason).
        decided_by: ``rules``, ``classifier``, ``classifier_failed`` (the call failed
            twice: local) or ``no_model`` (context-only runs: local).
        rule: the rule's name (empty when not a rule).
    """

    route: str
    reason: str
    decided_by: str
    rule: str = ""


def route_by_rules(question: str, linked_titles: list[str]) -> Route | None:
    """The rules of the module doc; None when none fires.

    Args:
        question: the question (non-empty).
        linked_titles: titles of the entities linked in it (distinct entities).
    """
    n = len(dict.fromkeys(linked_titles))
    names = ", ".join(linked_titles[:3]) + (" ..." if n > 3 else "")
    thematic = thematic_cue(question)
    if thematic and n == 0:
        return Route("global", f"corpus-wide cue {thematic!r} and no named entity", "rules",
                     "thematic")
    if thematic:
        return None  # a theme of a named entity: the classifier weighs it
    relation = _RELATION.search(question)
    if relation:
        return Route("local", f"relation or comparison cue {relation.group(0).strip()[:40]!r}"
                     + (f" about {names}" if n else ""), "rules", "relation")
    if n >= 2:
        return Route("local", f"names {n} entities ({names}): their neighbourhoods and the "
                     "edges between them", "rules", "entities")
    chain = _CHAIN.search(question)
    if chain:
        return Route("local", f"chain of relations {chain.group(0).strip()[:40]!r}"
                     + (f" from {names}" if n else ""), "rules", "chain")
    if n == 1 and _PROFILE.search(question):
        return Route("local", f"asks about the entity {names} as a whole", "rules", "profile")
    if n == 1 and _LOOKUP.search(question):
        return Route("direct", f"a single fact about {names}: plain vector retrieval",
                     "rules", "lookup")
    return None


CLASSIFY_TEMPLATE = PromptTemplate(
    name="search_route",
    system=("You decide how to search a knowledge base for a question. Answer with JSON "
            "only."),
    user=("Question: {question}\nNamed entities found in the index: {entities}\n\n"
          "Choose one route:\n"
          "direct: one fact that a single passage states.\n"
          "local: facts about specific named things and how they are connected, "
          "possibly over several steps.\n"
          "global: themes or patterns of the whole collection, no single named thing.\n"
          "Give the route and a short reason."),
    schema={"type": "object", "properties": {
        "route": {"type": "string", "enum": list(ROUTES)},
        "reason": {"type": "string", "minLength": 1, "maxLength": 80}},
        "required": ["route", "reason"]},
    max_tokens=60,
)


def classify(question: str, linked_titles: list[str], llm: LLMCaller,
             seed: int) -> tuple[Route, dict | None]:
    """One classifier call (stage ``search_route``).

    Returns:
        (route, None), or (local route with decided_by ``classifier_failed``, the
        failure row) when the reply failed twice.
    """
    obj, failure = structured_call(llm, CLASSIFY_TEMPLATE, "search_route", question[:80], seed,
                                   question=question,
                                   entities=", ".join(linked_titles[:8]) or "none")
    if obj is None:
        return Route("local", "the classifier's reply failed twice; local search answers "
                     "from whatever the question links to", "classifier_failed"), failure
    return Route(obj["route"], "classifier: " + " ".join(obj["reason"].split()),
                 "classifier"), None


def route_question(question: str, linked_titles: list[str], llm: LLMCaller | None,
                   seed: int) -> tuple[Route, dict | None]:
    """Rules, then the classifier when no rule fires; with ``llm`` None (context-only
    runs) an undecided question goes to local search (it degrades to vector retrieval
    when nothing links). Returns (route, failure row or None)."""
    by_rules = route_by_rules(question, linked_titles)
    if by_rules is not None:
        return by_rules, None
    if llm is None:
        return Route("local", "no rule fired and no model is loaded (context only): local "
                     "search", "no_model"), None
    return classify(question, linked_titles, llm, seed)
