"""All-caps words: acronyms or shouting? An all-caps word is a candidate name only with
evidence (:func:`acronym_evidence`): its shape, a known acronym, an expansion in the text
or corpus, or its use as a name; shouted words, code and prompt injection stay text.
"""

from __future__ import annotations

import functools
from collections import Counter

import regex

from kgloom.names.lexicon import _POSSESSIVE, _WORD, ROMAN_NUMERAL, STOPWORDS
from kgloom.names.tokens import _tokens

# An all-caps word is a name only with evidence (:func:`_acronym_evidence`). These are
# ordinary English words, SQL, programming and markup keywords, data formats and the
# vocabulary of instructions and prompt injection ("IGNORE ALL PREVIOUS INSTRUCTIONS",
# "SYSTEM", "DROP TABLE", "JSON", "PWNED"): shouted, they still name nothing. Collected
# by hand from common English, the SQL-92 reserved words, Python/JavaScript/C keywords
# and the injection strings of the OWASP LLM01 (prompt injection) examples.
_SHOUTED_WORDS = frozenset("""
about above access act action add admin administrator after again against agent ai alert
all allow alter always am analysis and answer any api app apply are as ask assistant at
attention auth authority avoid back backup bad be before begin below best block body bold
boss bot break bug build but by call cancel caps case cast catch change chat check child
class clean clear click close code column command comment commit confidential confirm
constraint content context continue control copy correct count create critical cursor
danger data database debug declare def default delete deny describe dev developer
disable distinct do done dont drop dump echo else enable end error escape eval exact
example except exec execute exit export false fetch field file filter final finally first
fix flag float for force foreign format free from full function get global go goal grant
group hack hacked hacker having header help hidden hide high hint html http https id if
ignore import important in index info inner input insert instruction instructions int
integer into is join json key kill last left let like limit list load lock log login
long low main make mandatory match max message method min mode model must name never
new next no node none not note notice now null number object of off ok okay on only open
operator or order out outer output override owned page pass password path pause payload
permission please plus post previous primary print private process prompt protocol
public pwn pwned pwnd query quote read real reboot record reference remember remove
repeat replace reply report request required reset respond response restart result
return reveal revoke right role rollback root row rule rules run safe save say schema
script secret security select send server session set shell show shutdown simulate
skip sql start state stop string sudo super system table task temp test text then this
to token tool top transaction true truncate trust try type union unique unlock unsafe
until update upload urgent use user value values var varchar verify very view void
warning when where while with write wrong xml yaml yes you your
""".split())
# Acronyms of widely known organisations, agencies, places and bodies: names without
# other evidence (each is the common short form of its English Wikipedia article title).
_KNOWN_ACRONYMS = frozenset("""
ABC ACLU AFL AIDS AMD ANC ASEAN BBC BMW BP CBS CDC CERN CIA CNN CNRS CSIRO DARPA DEA
DC DHS DNA DOJ EPA ESA EU FAO FBI FCC FDA FIFA FSB GCHQ GE GM HBO HIV HP HSBC IAEA IBM ICC ICJ
ICRC IEEE IETF ILO IMF INTERPOL IOC IRA IRS ISO ITU KGB MGM MI5 MI6 MIT MOMA NAACP NAFTA
NASA NATO NBA NBC NFL NHL NHS NIH NOAA NPR NRA NSA NTSB NYPD OECD OPEC OSCE PBS PLO RAF
RNA SEC SNCF SPD TSA TVA UAE UCLA UEFA UK UN UNDP UNESCO UNHCR UNICEF US USA USAF USSR
UPS VW WHO WTO WWF YMCA
""".split())
# the words before an acronym that use it as a name: "the UN", "director of DARPA"
_ACRONYM_BEFORE = regex.compile(r"(?:^|[^\p{L}\p{M}])(?:the|of|at|from|by|for|der|die|das|"
                                r"le|la|les|du|des|de)\s+$", regex.IGNORECASE)
# words an acronym's expansion may skip ("National Aeronautics and Space Administration")
_EXPANSION_SKIP = frozenset("of and for the on in to de des du la le et für und der".split())


def _expands(acronym: str, text: str) -> bool:
    """True when ``text`` holds a phrase of capitalized words whose initials spell
    ``acronym`` (2+ letters), skipping the function words of ``_EXPANSION_SKIP``:
    "United Nations Educational, Scientific and Cultural Organization" for UNESCO.

    The words of ``text`` are split once and each acronym's answer kept
    (:func:`_expansion_index`): a community report's grounding reads one text of
    thousands of member titles, and splitting it again for each of its all-caps words
    took 15 minutes of the 2Wiki pool's report stage."""
    letters = acronym.upper()
    if len(letters) < 2 or not letters.isalpha():
        return False
    words, starts, known = _expansion_index(text)
    if letters not in known:
        known[letters] = any(_spells(words, i, letters) for i in starts.get(letters[0], ()))
    return known[letters]


@functools.lru_cache(maxsize=16)
def _expansion_index(text: str) -> tuple[list[str], dict[str, list[int]], dict[str, bool]]:
    """The words of ``text``; the positions of its words that are not all caps, by
    first character (where an expansion may start); and an empty dict in which
    :func:`_expands` keeps its answers for ``text``. Kept for the last 16 texts."""
    words = [m.group(0) for m in _WORD.finditer(text)]
    starts: dict[str, list[int]] = {}
    for i, w in enumerate(words):
        if not w.isupper():
            starts.setdefault(w[:1], []).append(i)
    return words, starts, {}


def _spells(words: list[str], i: int, letters: str) -> bool:
    """Do the capitalized words from ``words[i]`` on (function words of
    ``_EXPANSION_SKIP`` in lower case skipped) start with ``letters``, one each?"""
    k, j = 1, i + 1
    while k < len(letters) and j < len(words):
        nxt = words[j]
        if nxt.lower() in _EXPANSION_SKIP and nxt[:1].islower():
            j += 1
            continue
        if nxt[:1] != letters[k] or not nxt[:1].isupper() or nxt.isupper():
            break
        k, j = k + 1, j + 1
    return k == len(letters)


def acronym_evidence(word: str, text: str, start: int, stats: Counter | None) -> bool:
    """Is all-caps word ``word`` (at offset ``start`` of ``text``) a name? Only with
    evidence, in order:

    1. its shape: a digit or inner periods (``H5N1``, ``F-16``, ``COVID-19``, ``U.S.``);
    2. it is a widely known acronym (``_KNOWN_ACRONYMS``: NASA, WHO, UNESCO, DARPA ...);
    3. it expands a phrase of capitalized words of the unit or of the corpus
       (:func:`_expands`; ``("acronym", word)`` in ``stats``, see :func:`word_counts`);
    4. it is not an ordinary word (``STOPWORDS``, ``_SHOUTED_WORDS``: English, SQL,
       code, formats, prompt injection; nor written in lower case in the corpus), and
       the corpus writes it capitalized as a name mid-sentence, or it is used as a name
       here: possessive ("KGLM's"), or after "the"/"of"/"at"/"from"/"by"/"for".

    So shouted instructions and code (IGNORE, SYSTEM, DROP TABLE, JSON, PWNED) stay text.
    """
    core = _POSSESSIVE.sub("", word)
    if any(c.isdigit() for c in core) or "." in core.strip("."):
        return True
    if core in _KNOWN_ACRONYMS:
        return True
    if _expands(core, text) or (stats is not None and stats[("acronym", core)]):
        return True
    low = core.lower()
    if low in STOPWORDS or low in _SHOUTED_WORDS or len(core) < 2:
        return False
    if stats is not None and stats[low]:
        return False  # written as an ordinary word elsewhere in the corpus
    if stats is not None and stats[("mid", core.capitalize())]:
        return True
    return core != word or bool(_ACRONYM_BEFORE.search(text, 0, start))


def caps_name_ok(name: str, text: str, stats: Counter | None = None) -> bool:
    """False when ``name`` is made only of all-caps words and one of them has no
    :func:`acronym_evidence` in ``text`` (``PWNED``, ``DROP TABLE``): the same rule for a
    name from any source, e.g. one the model proposes (``candidate_source=open``)."""
    toks = _tokens(name)
    if not toks or any(t.kind not in ("upper", "initial") for t in toks):
        return True
    at = max(text.find(name), 0)
    return all(t.kind != "upper" or acronym_evidence(t.text, text, at + t.start, stats)
               for t in toks)


def _shouted_word(tok, text: str, stats: Counter | None) -> bool:
    """True when all-caps token ``tok`` is an ordinary word shouted (a stop word, one of
    ``_SHOUTED_WORDS``, or written in lower case in the corpus) and no acronym by
    :func:`acronym_evidence`'s first three tests (shape, known acronym, expansion)."""
    core = _POSSESSIVE.sub("", tok.text)
    low = core.lower()
    ordinary = low in STOPWORDS or low in _SHOUTED_WORDS or bool(stats is not None
                                                                and stats[low])
    return ordinary and not (ROMAN_NUMERAL.fullmatch(core) or any(c.isdigit() for c in core)
                             or core in _KNOWN_ACRONYMS or _expands(core, text))
