"""What a member of a community is, in the text's own words: the role a sentence gives a
name right after it ("Mrs. Dilber, a laundress.", "Fred, Scrooge's nephew.", "Orla Venn
(1901-1960) was a Vessian film director."), for a report to say who its members are
instead of only listing them. No model, no Dagster.
"""

from __future__ import annotations

import regex

# a word of a role: letters, marks, digits, apostrophes and hyphens
_W = r"[\p{L}\p{M}\p{N}'’\-]+"
# before a name that starts a statement: a sentence's end (and closing quotes) and a
# space; the line's start (after the same name once more: a passage's title before its
# text, "Orla Venn Orla Venn (1901-1960) was ...") is the other place. Never inside a
# longer name ("Vessel Public School Patiala is") or after a lower-case word ("Maria of
# Vessel was the elder daughter" says nothing of Vessel).
_SENTENCE_END_BEFORE = regex.compile(r"[.!?]['’\"”]?\s+$")
# an optional parenthesis after the name: dates, a birth name ("Orla Venn (1901-1960)")
_PAREN = r"(?:\s*\([^()\n]{0,80}\))?"
# what a role may open with: an article and a word ("a laundress"), a possessive and a
# word ("Scrooge's nephew"), or a relation noun before "of"/"to" ("wife of Bob Cratchit",
# "clerk to Ebenezer Scrooge"): never a verb, an adverb or a conjunction ("and the
# Future", "to be sure", "was also a composer")
_OPENER = (r"(?:(?:an?|the)\s+" + _W + r"|\p{Lu}" + _W + r"['’]s\s+" + _W
           + r"|\p{Ll}" + _W + r"\s+(?:of|to)\s+" + _W + ")")
# the rest of a role: up to the clause's end, a relative clause or a bracket
_REST = r"((?:\s+" + _W + r"){0,14}?)"
_CLAUSE_END = r"(?=\s*[,;:!?)(]|\.(?:\s|['’\"”]|$)|\s+(?:who|which|that|whose|where)\s)"
# where a long role is cut: before its first conjunction or preposition after two words
# ("a Vessian politician and the member for Vessel North" -> "a Vessian politician")
_CUT = regex.compile(r"^(\S+\s+\S+(?:\s+\S+)*?)\s+(?:and|from|in|with|by|for|at|who|since)\s")
# a role's last word is no function word ("the worthy partner of Mr" cut at "Mr.")
_DANGLING = frozenset({"a", "an", "the", "of", "to", "and", "or", "by", "in", "on", "at",
                       "for", "with", "from", "mr", "mrs", "ms", "dr", "st"})
# an adjective's look: a hyphened compound or an adjective ending ("kind-hearted",
# "joyful", "famous")
_ADJECTIVE = regex.compile(r"(?:-\p{L}+|ful|ous|ive|ic|al|ish|less|ing|ed|able|ible)$")
ROLE_MAX_WORDS = 10  # a role a reader takes in beside a name


# what follows the name: an optional parenthesis (dates, a birth name), then an
# appositive after a comma, or "is"/"was" and an article
_APPOSITIVE = regex.compile(_PAREN + r",\s+(" + _OPENER + _REST + ")" + _CLAUSE_END)
_COPULA = regex.compile(_PAREN + r"\s+(?:is|was)\s+(?:also\s+)?((?:an?|the)\s+" + _W + _REST
                        + ")" + _CLAUSE_END)


def _starts(title: str, line: str) -> list[int]:
    """Where ``title`` starts a statement in ``line`` (see :data:`_SENTENCE_END_BEFORE`):
    the offsets just after it, at most the first three (looked for among its first
    :data:`_MAX_OCCURRENCES` occurrences)."""
    out, at, seen = [], line.find(title), 0
    while at >= 0 and len(out) < 3 and seen < _MAX_OCCURRENCES:
        seen += 1
        end = at + len(title)
        whole = end == len(line) or not (line[end].isalnum() or line[end] in "'’-")
        if whole and (at == 0 or line[:at] == title + " "
                      or _SENTENCE_END_BEFORE.search(line[max(0, at - 8):at])):
            out.append(end)
        at = line.find(title, at + 1)
    return out


# a name said more often than this in one line of its description is looked for no further
_MAX_OCCURRENCES = 50


def member_role(title: str, description: str | None) -> str:
    """The role the text gives ``title`` in its description, else "".

    Args:
        title: the entity's title, matched as written.
        description: its description: lines of evidence sentences (the first sentences
            of the text naming it, ``ENTITIES_SCHEMA.description``).

    Returns:
        The words of the first line where a sentence starts with ``title`` (and an
        optional parenthesis) followed by an appositive (", a laundress", ", Scrooge's
        nephew", ", wife of Bob Cratchit") or by "is"/"was" and an article ("was a
        Vessian film director"), up to the clause's end or a relative clause, a longer
        one cut before its first conjunction or preposition after two words; at most
        :data:`ROLE_MAX_WORDS` words, not ending in a function word and holding no
        "--" (a run-on aside). "" when no line has one.
    """
    if not title or not description:
        return ""
    for line in description.split("\n"):
        for pattern in (_APPOSITIVE, _COPULA):
            m = next((m for end in _starts(title, line) if (m := pattern.match(line, end))),
                     None)
            if not m:
                continue
            role = " ".join(m.group(1).split())
            if len(role.split()) > ROLE_MAX_WORDS and (cut := _CUT.match(role)):
                role = cut.group(1)
                if role.endswith("ed") and " " in role:  # "a film directed" [by ...]
                    role = role.rsplit(" ", 1)[0]
            words = role.split()
            # an article and an adjective before a comma open a list of adjectives ("a
            # kind-hearted, jovial old merchant"), not a role ("the ferryman, waited")
            listed = len(words) == 2 and line[m.end():].lstrip().startswith(",") \
                and bool(_ADJECTIVE.search(words[1]))
            if "--" in role or len(words) > ROLE_MAX_WORDS or listed \
                    or words[-1].lower().strip("'’") in _DANGLING \
                    or len(words[-1]) == 1:  # cut at an initial: "produced by J."
                continue
            return role
    return ""
