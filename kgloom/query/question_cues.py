"""The corpus-wide cue of a question: the words that ask about a whole collection rather
than about something in it (themes, summarize, what kinds of, most common, across the
documents, ...). Read by the routing (:mod:`kgloom.query.routing`, rule ``thematic``) and
by the relevance judgement (:mod:`kgloom.query.retrieval.relevance`). Standard library
only, so retrieval imports no model code.
"""

from __future__ import annotations

import re

THEMATIC = re.compile(r"""(?ix)
  \b(main|major|key|common|recurring|central|overall|dominant|principal)\s+
      (themes?|topics?|ideas?|messages?|motifs?|patterns?|trends?|subjects?|lessons?)\b
  | \bthemes?\b | \bmotifs?\b | \boverview\b | \bin\ general\b
  | \bsummari[sz]e\b | \bsummary\s+of\s+(the|this|these|all)\b
  | \b(across|throughout|in)\s+(the\ whole\ |the\ entire\ |all\ (of\ )?|these\ |this\ |the\ )?
      (book|story|novel|corpus|collection|documents?|dataset|passages|texts|articles|
       archive|index)\b
  | \bwhat\s+(kinds?|types?|sorts?|categories)\s+of\b
  | \bwhat\s+is\s+(the|this)\s+(book|story|novel|corpus|collection)\s+about\b
  | \bwhat\s+do\s+(these|the|all)\s+(passages|documents|texts|articles)\b
  | \b(most|least)\s+(common|frequent|often|prominent)\b
  | \bhow\s+many\s+(different\s+)?(people|persons|films|countries|places|characters)\b
""")


def thematic_cue(question: str) -> str | None:
    """The first corpus-wide cue of ``question`` (:data:`THEMATIC`), stripped, or None."""
    m = THEMATIC.search(question)
    return m.group(0).strip() if m else None
