"""What entity resolution compares names by: each title's key (its words, core and
honorific gender and life stage), whole-token containment, class nouns of the corpus,
type votes, and the union-find its passes merge into.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from kgloom.names.candidates import DETERMINERS
from kgloom.names.normalize import normalize_title

# Honorifics are evidence: "Mr. Fezziwig" and "Mrs. Fezziwig" are two people.
MALE_HONORIFICS = frozenset({"mr", "mister", "master", "sir", "lord"})
FEMALE_HONORIFICS = frozenset({"mrs", "miss", "ms", "madam", "madame", "mistress", "lady", "dame"})
_HONORIFICS = MALE_HONORIFICS | FEMALE_HONORIFICS
# Honorifics that also tell a stage of life, after English forms of address: "Master"
# is the title of a boy too young to be called "Mr."; "Miss" of a girl or unmarried
# woman, "Mrs." of a married woman. One person can carry both over a story (the
# schoolboy "Master Scrooge" is "Mr. Scrooge" later), so a stage mismatch never vetoes
# a merge; it only rules a candidate out of a name_context contest ("Mr. Cratchit" is
# the father Bob, not "Master Peter Cratchit", his son).
_LIFE_STAGE = {"master": "boy", "mr": "man", "mister": "man", "miss": "unmarried",
               "mrs": "married"}

def _gender(tokens: list[str]) -> str:
    """"f" for a leading female honorific, "m" for a male one, "" otherwise."""
    if tokens and tokens[0] in FEMALE_HONORIFICS:
        return "f"
    if tokens and tokens[0] in MALE_HONORIFICS:
        return "m"
    return ""


def _core(tokens: list[str]) -> tuple[str, ...]:
    """Tokens without leading honorifics."""
    i = 0
    while i < len(tokens) - 1 and tokens[i] in _HONORIFICS:
        i += 1
    return tuple(tokens[i:])


# Words that join a head to its complement inside a name ("Ghost of Jacob Marley", "Bank
# of England", "Spirit of Tiny Tim"): what follows one names another thing. Only words
# that are no surname particle ("de", "van", "von" are: "Charles de Gaulle" is de Gaulle).
_COMPLEMENT_WORDS = frozenset({"of"})
# English function words inside a name: what follows one is another thing than the whole
# ("Late Night with Conan O'Brien", "Addicted to Money", "Death in Venice"), the words
# before it may still lead ("Eddie the Eagle" is Eddie, not the eagle). No articles "a" and
# "an": an initial "A." keys as "a".
_FUNCTION_WORDS = _COMPLEMENT_WORDS | frozenset(
    {"the", "to", "with", "from", "for", "in", "on", "at", "by", "than"})


def _contains(longer: tuple[str, ...], shorter: tuple[str, ...]) -> bool:
    """Does ``longer`` hold ``shorter`` as whole tokens, in its head (before any
    :data:`_FUNCTION_WORDS`) or as leading tokens reaching past it? "Scrooge" is in
    "Ebenezer Scrooge", "Ghost of Christmas" in "Ghost of Christmas Past", "Eddie" in
    "Eddie the Eagle"; "Tiny Tim" is not in "Spirit of Tiny Tim", nor "England" in "Bank
    of England", nor "Conan O'Brien" in "Late Night with Conan O'Brien" (what follows a
    function word is another entity than the whole), nor is the head noun before "of"
    ("Spirit", "Bank": the class the complement picks one of, the last word(s) before
    "of"); "Kestrel" is in "Kestrel Bank of Wessex"."""
    n = len(shorter)
    head = next((i for i, t in enumerate(longer) if t in _FUNCTION_WORDS), len(longer))
    if head < len(longer) and longer[head] in _COMPLEMENT_WORDS and n <= head \
            and shorter == longer[head - n:head]:
        # the head noun alone is the class the complement picks from: "Spirit" (88 times
        # in the book, for every spirit) is not the "Spirit of Tiny Tim"
        return False
    if longer[:n] == shorter:
        return True  # a leading part past the head: "Ghost of Christmas Yet"
    return any(longer[i:i + n] == shorter for i in range(head - n + 1))


# a shorter name joins a longer one only when more than this share of the documents that
# write it also write the longer one (_merge_name_extensions)
SHARED_DOCUMENTS = 0.5
_APPOSITION = re.compile(r"[,:;(]")  # "Leland, North Carolina", "Atlantis: The Lost Empire"
_NAME_LOWER_WORDS = _FUNCTION_WORDS | frozenset(
    "de del della dei di da das dos do du des van von der den ter ten la le al el bin ibn "
    "y e ap ab uab ferch verch".split())


def _adds_common(longer: tuple[str, ...], shorter: tuple[str, ...],
                 common_words: frozenset[str] | None,
                 bound: frozenset[str] = frozenset()) -> bool:
    """Does ``longer`` add to ``shorter`` a token with a digit or one of
    ``common_words`` (particles, function words and ``bound`` tokens aside)? False
    without ``common_words``."""
    if common_words is None:
        return False
    mine = set(shorter) | bound
    return any(t not in mine and t not in _NAME_LOWER_WORDS
               and (t in common_words or any(ch.isdigit() for ch in t)) for t in longer)


_WORD_RE = re.compile(r"[^\W\d_]+")
# a written word with its hyphenated or possessive parts: "Christmas-time", "Marley's"
_BOUND_WORD_RE = re.compile(r"[^\W\d_]+(?:['’\u2010\u2011-][^\W\d_]+)*")


# the share of a word's capitalized occurrences after a determiner above which it is a
# class noun (_merge_name_extensions); on the bundled book "Ghost" 0.90, "Spirit" 0.74,
# the characters' names at most 0.07 ("Scrooge" 7 of 455)
DETERMINED_SHARE = 0.5


def common_words_of(texts: Iterable[str], words: Iterable[str],
                    singles: Iterable[str] = ()) -> tuple[frozenset[str], frozenset[str]]:
    """Which words a corpus writes as common words, read in one pass over its texts.

    Args:
        texts: the corpus's text units (read once, in order).
        words: candidate words (casefolded tokens of entity keys).
        singles: candidate class nouns (casefolded one-word entity keys).

    Returns:
        ``(common, determined)``, casefolded. ``common``: the ``words`` the texts write
        starting with a lower-case letter more often than with a capital one ("air",
        "airport", "world"; not "kubrick", nor "tiny" in a book that names Tiny Tim 50
        times): the evidence of :func:`_merge_name_extensions` that a word added to a name
        is a common word. ``determined``: the ``singles`` more than
        :data:`DETERMINED_SHARE` of whose capitalized occurrences follow a determiner
        (:data:`kgloom.names.candidates.DETERMINERS`: "the Ghost", "a Spirit"): class
        nouns, which a longer name ending in them ("Marley's Ghost", "Evil Spirit") does
        not take in. A word the
        texts never write is neither.
    """
    wanted, classes = set(words), set(singles)
    lower: Counter = Counter()
    upper: Counter = Counter()
    capital: Counter = Counter()  # of the singles
    after_det: Counter = Counter()
    for text in texts:
        prev = ""
        for w in _WORD_RE.findall(text):
            key = w.casefold()
            if key in wanted:
                (lower if w[0].islower() else upper)[key] += 1
            if key in classes and not w[0].islower():
                capital[key] += 1
                after_det[key] += prev in DETERMINERS
            prev = key
    return (frozenset(w for w in wanted if lower[w] > upper[w]),
            frozenset(w for w in classes
                      if after_det[w] > DETERMINED_SHARE * capital[w] > 0))


def _name_scope(key: _Key) -> tuple[tuple[str, ...], frozenset[str]] | None:
    """``(scope, bound)`` of ``key`` for :func:`_merge_name_extensions`, read from its
    most frequent surface form. ``scope``: the tokens of its core a shorter name may be
    found in: the whole core, or only the part before an apposition ("Leland, North
    Carolina" is a town, not the state after its comma; "Henry Stafford, 1st Baron
    Stafford" is still Stafford). ``bound``: tokens of words written with a hyphen or an
    apostrophe ("Christmas-time", "Marley's"), which :func:`_adds_common` does not judge.
    None when the surface holds a lower-case word (hyphenated parts aside) that is no
    particle or function word: such a title describes a thing about a name ("Nichole
    Nordeman discography", "2001 Lakers season") and is never a longer form of it; and
    when it joins names with "&" ("Itchy & Scratchy", as :data:`_CONJUNCTIONS`)."""
    surface = min(key.surfaces, key=lambda t: (-key.surfaces[t], t)) if key.surfaces else ""
    if "&" in surface:
        return None  # names joined ("Itchy & Scratchy"), as _CONJUNCTIONS
    words = _BOUND_WORD_RE.findall(surface)
    if any(w[0].islower() and w.casefold() not in _NAME_LOWER_WORDS for w in words):
        return None
    bound = frozenset(t for w in words if len(_WORD_RE.findall(w)) > 1
                      for t in normalize_title(w).split())
    core = key.core
    cut = _APPOSITION.search(surface)
    if cut:
        head = _core(normalize_title(surface[:cut.start()]).split())
        if head and core[:len(head)] == head:
            return head, bound
    return core, bound


def _compatible(genders_a: set[str], genders_b: set[str]) -> bool:
    """False when joining would mix a female honorific with a male or bare name."""
    both = genders_a | genders_b
    return not ("f" in both and both & {"m", ""})


# the type of a mention nothing typed (the fast method's uncued names; extraction's
# NOT_AN_ENTITY): no evidence of a type, so it never outvotes one
UNTYPED = "OTHER"


def _vote(values: Iterable[str]) -> str:
    """Most common value, ties broken alphabetically; :data:`UNTYPED` only when no other
    value is given ("Jacob Marley" named 3 times with no cue and "Marley" twice after
    "said" is a PERSON)."""
    counts = Counter(values)
    typed = Counter({v: n for v, n in counts.items() if v != UNTYPED}) or counts
    return min(typed, key=lambda v: (-typed[v], v)) if typed else ""


class _UnionFind:
    def __init__(self, items: Iterable[str]):
        self.parent = {x: x for x in items}

    def find(self, x: str) -> str:
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:  # the smaller key is the root, so the result does not depend on order
            self.parent[max(ra, rb)] = min(ra, rb)


@dataclass
class _Key:
    """Everything known about one normalization key."""
    tokens: list[str]
    surfaces: Counter = field(default_factory=Counter)  # surface title -> mention count
    types: list[str] = field(default_factory=list)
    descriptions: list[tuple[int, str]] = field(default_factory=list)  # (mention row, text)

    @property
    def core(self) -> tuple[str, ...]:
        return _core(self.tokens)

    @property
    def gender(self) -> str:
        return _gender(self.tokens)

    @property
    def stage(self) -> str:
        """Life stage of the leading honorific (see ``_LIFE_STAGE``), "" for none."""
        return _LIFE_STAGE.get(self.tokens[0], "") if self.tokens else ""

    @property
    def specificity(self) -> tuple[int, int]:
        # "Ebenezer Scrooge" > "Mr. Scrooge" > "Scrooge"
        return len(self.core), int(self.gender != "")


def _canonical_title(keys: dict[str, _Key], members: list[str]) -> tuple[str, str]:
    """(key, title) of a group: the most frequent surface form among the members with
    the longest core (honorifics not counted), ties broken alphabetically."""
    longest = max(len(keys[k].core) for k in members)
    counts: Counter = Counter()
    owner: dict[str, str] = {}
    for k in members:
        if len(keys[k].core) == longest:
            for surface, n in keys[k].surfaces.items():
                counts[surface] += n
                owner[surface] = k
    title = min(counts, key=lambda s: (-counts[s], s))
    return owner[title], title


def _descriptions(keys: dict[str, _Key], members: list[str]) -> list[str]:
    """Distinct descriptions of a group, in input (mention row) order."""
    return _distinct(d for _, d in sorted(x for m in members for x in keys[m].descriptions))


def _distinct(values: Iterable[str | None]) -> list[str]:
    """Non-empty values, first occurrence order."""
    return list(dict.fromkeys(v for v in values if v))


def _merge_places(a: dict[str, tuple[int, set[str]]], b: dict[str, tuple[int, set[str]]]
                  ) -> dict[str, tuple[int, set[str]]]:
    """Two :func:`_places` maps as one: per document the earlier first position and the
    units of both (new sets; the inputs are not changed)."""
    out = dict(a)
    for d, (i, us) in b.items():
        j, them = out.get(d, (i, set()))
        out[d] = (min(i, j), us | them)
    return out
