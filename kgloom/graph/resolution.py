"""Entity resolution: merge the per-unit mentions of one entity into one entity row.

Three deterministic passes, each recorded in the alias table so a merge can be audited
and undone:

1. ``normalized``: titles with the same normalization key (:func:`normalize_title`) are
   one entity ("Mr Scrooge" == "Mr. Scrooge" == "MR.  SCROOGE").
2. ``name_extension``: a shorter name joins the unique longer name that contains it as
   whole tokens ("Scrooge" -> "Ebenezer Scrooge"); in a corpus of several documents, only
   when some document names both.
   ``name_context``: once every unambiguous merge is done, a short name with several
   such candidates ("Tim" with "Tiny Tim" and "Tim Cratchit") joins the candidate whose
   group shares the most text units with its own group, when that one is strictly ahead
   (local-context disambiguation); with no such candidate it stays alone.
3. ``embedding`` (optional): nearest-neighbour search over normalized embeddings of
   "title: description"; pairs of the same type with cosine >= threshold are unioned.

No pass merges across honorific gender: a "Mrs."/"Miss"/"Ms." name never joins a bare or
"Mr." name, and the other way round. Life-stage honorifics ("Master" a boy, "Mr." a
man; "Miss" an unmarried woman or girl, "Mrs." a married woman) only decide between
candidates in ``name_context``: "Mr. Cratchit" prefers "Bob Cratchit" to "Master Peter
Cratchit".
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from kgloom.core import schemas
from kgloom.core.ids import content_id
from kgloom.names.candidates import DETERMINERS
from kgloom.names.normalize import RESOLUTION_METHODS, normalize_title

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


_CONJUNCTIONS = frozenset({"and", "&", "und", "et"})


def _merge_name_extensions(keys: dict[str, _Key], uf: _UnionFind,
                           units_of: dict[str, set[str]] | None = None,
                           documents_of: dict[str, set[str]] | None = None,
                           common_words: frozenset[str] | None = None,
                           places_of: dict[str, dict[str, tuple[int, set[str]]]] | None = None,
                           determined: frozenset[str] | None = None) -> set[str]:
    """Join each shorter name into the unique longer name containing it; with
    ``units_of``, then settle the ambiguous ones by shared text units.

    A longer name is a candidate only where it holds the shorter one in its scope
    (:func:`_name_scope`: before an apposition, and not in a title that describes a thing
    about a name) outside a complement (:func:`_contains`), and, with ``common_words``
    (casefolded words the corpus writes in lower case more often than capitalized:
    :func:`common_words_of`), when what it adds to the shorter name is names only: no
    common word and no number. "Kubrick" joins "Stanley Kubrick" and "Tim" "Tiny Tim"
    (the book writes "Tiny" capitalized), but "Canada" is not "Air Canada", "London" not
    "London Heathrow Airport", "American" not "American Football Conference", "FIFA" not
    "2007 FIFA U-20 World Cup": a common word or a number added to a name makes a
    compound naming another thing (on the HotpotQA sample about half of the merges
    into such longer names joined two different things).

    With ``documents_of`` (key -> documents naming it), a longer name is a candidate of
    a shorter one only when more than :data:`SHARED_DOCUMENTS` of the documents naming
    the shorter name also name a member of the longer name's group. A short name is the
    short form of a long one where the documents that write it introduce the long one
    ("Jacob Marley ... Marley"); a short name most of whose documents never write the
    long one is another thing: on the 2Wiki pool (6,119 one-passage documents) 1,020 of
    6,896 name merges joined names that share no document, such as "Ireland" ->
    "Northern Ireland", "Rome" -> "Tony Rome", "Milan" -> "Duchy of Milan", and on the
    HotpotQA sample a country named by many passages joined the one compound that
    shares a passage with it ("Canada" -> "Air Canada", "London" -> "London Heathrow
    Airport"). A novel in chapter files joins "Scrooge" to "Ebenezer Scrooge" when most
    chapters name him in full; in a one-document corpus every name passes.

    With ``places_of`` (key -> {document: (first text unit's position, the key's units
    there)}), a longer name that adds words to the shorter one's core (not only an
    honorific) is joinable only where it is introduced: in more than
    :data:`SHARED_DOCUMENTS` of the documents naming both, it is written in a text unit
    of the shorter name or before the shorter name's first one. A short form refers to a
    name the reader has met ("Ebenezer Scrooge" in the cast list, then "Scrooge"); a name
    written again and again before a longer one first appears, far from it, is another
    thing: a novel's rag-dealer "Joe" (from its fourth chapter) is not the jest-book "Joe
    Miller" named once in its fifth. A name whose long form comes later but in one of its
    own text units still joins ("Kubrick ... Stanley Kubrick" in one passage).

    With ``determined`` (one-word keys the corpus mostly writes after a determiner:
    :func:`common_words_of`), such a class noun does not join a longer name that ends in
    it: "the Ghost" of a novel is every ghost, not "Marley's Ghost"; "the Spirit" is not
    the "Evil Spirit" of one aside. A name rarely takes an article ("Scrooge": 7 of 455).

    Candidates of a name are the groups holding a more specific name whose core contains
    its core as whole tokens. Types are not compared: a small model's types are too
    noisy to veto "Jacob Marley" (LOCATION in one unit) absorbing "Marley". A longer name
    that joins names with a conjunction ("Scrooge and Marley", a firm) is never a
    candidate. A candidate of another honorific gender still counts toward ambiguity
    (that is what keeps "Cratchit" apart from "Bob Cratchit" when "Mrs. Cratchit"
    exists), except that a bare surname whose only candidates are one "Mr." name and
    "Mrs."/"Miss" names has the "Mr." name alone.

    Pass 1 (``name_extension``) visits names from most to least specific, so by the time
    "Scrooge" is seen, "Mr. Scrooge" already belongs to "Ebenezer Scrooge" and both count
    as one candidate; a name with exactly one candidate joins it when the genders of the
    two groups are compatible, and a name with several is kept for pass 2.

    Pass 2 (``name_context``, only with ``units_of``: key -> text units naming it) visits
    the kept names in the same order, after every unambiguous merge, so a group's text
    units include those of every name already in it ("Bob" is in Bob Cratchit's group
    when "Mr. Cratchit" is decided). Candidates are recomputed (pass-2 merges of more
    specific names can leave one); with several, only those of a compatible gender and
    no conflicting life stage (``_LIFE_STAGE``) compete, and the name joins the one whose
    group shares the most text units with its own group, when that count is positive and
    strictly the highest. A name's own units are pooled with those of the names of the
    same core it could be (the same gender and life stage): "Mr. Scrooge" (9 units of the
    book) shares none with "Ebenezer Scrooge" and one each with one-off names such as
    "Whereat Scrooge", but "Scrooge" (72 units) shares five with Ebenezer Scrooge, so the
    two decide together, and "Scrooge" then follows.

    Returns the keys merged in pass 2.
    """
    units = {k: set((units_of or {}).get(k, set())) for k in keys}  # per group root
    # per group root: document -> (first position, the group's units there)
    places = {k: {d: (i, set(us)) for d, (i, us) in (places_of or {}).get(k, {}).items()}
              for k in keys}
    docs = {k: set((documents_of or {}).get(k, set())) for k in keys}  # per group root
    genders = {k: {v.gender} for k, v in keys.items()}  # per group root
    stages = {k: {v.stage} - {""} for k, v in keys.items()}  # per group root
    # each key's core and specificity once (properties recompute them at every read),
    # and which keys' cores hold each token; names joined by a conjunction and titles
    # with no scope (_name_scope) are never candidates, so they are left out of the token
    # lists
    core = {k: v.core for k, v in keys.items()}
    scope: dict[str, tuple[tuple[str, ...], frozenset[str]]] = {}
    for k, v in keys.items():
        sc = _name_scope(v)
        if sc is not None and not _CONJUNCTIONS & set(core[k]):
            scope[k] = sc
    specificity = {k: v.specificity for k, v in keys.items()}
    same_core: dict[tuple[str, ...], list[str]] = {}
    for k, v in keys.items():
        same_core.setdefault(v.core, []).append(k)
    by_token: dict[str, list[str]] = {}  # core token -> candidate keys whose core holds it
    for k in scope:
        for tok in set(core[k]):
            by_token.setdefault(tok, []).append(k)

    def candidates(k: str) -> tuple[set[str], set[str]]:
        """(contenders, allowed): the groups holding a longer name ``k`` is a part of
        (in its scope, outside a complement, named beside it in some document), and
        those of them it may join (adding no common word or number, named beside it in
        most of its documents). A contender that may not be joined still makes ``k``
        ambiguous: "Christmas" in "Christmas-time" and "Christmas Eve" is decided by
        context, not given to "Christmas Eve" because "time" is a common word."""
        info, mine, spec = keys[k], core[k], specificity[k]
        # a candidate's core contains every token of this core, so the shortest token
        # list holds them all (the rarest token, not the first: "John" or "Film" head
        # thousands of the pool's names, which made this scan grow with their square)
        pool = min((by_token.get(tok, ()) for tok in set(mine)), key=len)
        held = [c for c in pool if c != k and specificity[c] > spec
                and _contains(scope[c][0], mine)]
        mine_docs = (documents_of or {}).get(k) or set()
        # some document writes the short name beside the longer one
        roots = {uf.find(c) for c in held}
        if mine_docs:
            roots = {r for r in roots if mine_docs & docs[r]}
        allowed = {uf.find(c) for c in held
                   if not _adds_common(scope[c][0], mine, common_words, scope[c][1])
                   and not (len(mine) == 1 and mine[0] in (determined or ())
                            and scope[c][0][-1] == mine[0])}
        if mine_docs:
            # most documents that write the short name write the longer one too
            allowed = {r for r in allowed
                       if len(mine_docs & docs[r]) > SHARED_DOCUMENTS * len(mine_docs)}
        if places_of is not None:
            # a longer name that adds words must be introduced; an honorific alone does
            # not make another name ("Mr. Ebenezer Scrooge" is "Ebenezer Scrooge")
            longer = {uf.find(c) for c in held if len(core[c]) > len(mine)}
            allowed = {r for r in allowed if r not in longer or introduced(k, r)}
        if len(roots) > 1 and info.gender == "":
            # a bare surname against exactly one "Mr." name and only "Mrs."/"Miss" names
            # is the man ("Fezziwig" with "Mr. Fezziwig" and "Mrs. Fezziwig"): English
            # usage names a woman by her honorific, not by the bare surname
            male = [r for r in roots if "m" in genders[r] and "f" not in genders[r]]
            if len(male) == 1 and all(genders[r] == {"f"} for r in roots if r != male[0]):
                roots = {male[0]}
        return roots, allowed & roots

    def introduced(k: str, root: str) -> bool:
        """Is group ``root`` written in a unit of ``k`` or before its first one, in more
        than :data:`SHARED_DOCUMENTS` of the documents naming both? ``k`` counts with
        its group and every name of its core ("Marley" with "Mr. Marley")."""
        mine: dict[str, tuple[int, set[str]]] = {}
        for v in [uf.find(k), *same_core[core[k]]]:
            mine = _merge_places(mine, places[v])
        shared = mine.keys() & places[root].keys()
        met = sum(1 for d in shared if places[root][d][0] <= mine[d][0]
                  or places[root][d][1] & mine[d][1])
        return not shared or met > SHARED_DOCUMENTS * len(shared)

    def join(k: str, root: str) -> bool:
        mine = uf.find(k)
        if not _compatible(genders[mine], genders[root]):
            return False
        uf.union(mine, root)
        joined = uf.find(root)
        genders[joined] = genders[mine] | genders[root]
        units[joined] = units[mine] | units[root]
        docs[joined] = docs[mine] | docs[root]
        stages[joined] = stages[mine] | stages[root]
        places[joined] = _merge_places(places[root], places[mine])
        return True

    order = sorted((k for k in keys if keys[k].core),
                   key=lambda k: (tuple(-x for x in keys[k].specificity), k))
    ambiguous: list[str] = []
    for k in order:
        roots, allowed = candidates(k)
        if len(roots) == 1:
            if allowed:
                join(k, roots.pop())
        elif roots:
            ambiguous.append(k)
    if units_of is None:
        return set()

    def pooled(k: str, mine: str) -> set[str]:
        """Units of k's group and of the names with k's core that it could be ("Mr.
        Scrooge" and "Scrooge"): one name with and without an honorific is one contest."""
        out = set(units[mine])
        for v in same_core[keys[k].core]:
            if v != k and _compatible(genders[mine], {keys[v].gender}) \
                    and not _stages_conflict(stages[mine], {keys[v].stage} - {""}):
                out |= units_of.get(v, set())
        return out

    by_context: set[str] = set()
    for k in ambiguous:
        (roots, allowed), mine = candidates(k), uf.find(k)
        if len(roots) > 1:
            # only candidates it could be compete ("Mr. X" is never "Mrs. X", and a
            # "Mr." name does not pick a "Master" group over the others)
            mine_units = pooled(k, mine)
            shared = sorted(((len(mine_units & units[r]), r) for r in roots
                             if _compatible(genders[mine], genders[r])
                             and not _stages_conflict(stages[mine], stages[r])),
                            reverse=True)
            if shared and shared[0][0] > 0 and (len(shared) == 1 or shared[0][0] > shared[1][0]):
                roots = {shared[0][1]}
        if len(roots) == 1 and roots <= allowed and join(k, roots.pop()):
            by_context.add(k)
    return by_context


def _stages_conflict(stages_a: set[str], stages_b: set[str]) -> bool:
    """True when both groups carry life-stage honorifics and share none ({"man"} vs
    {"boy"}); a group that already holds both, or either side without one, is no
    conflict."""
    return bool(stages_a) and bool(stages_b) and not stages_a & stages_b


_FLOAT32_SLACK = 1e-4  # above float32 rounding of a unit-vector cosine (dim x 2^-24: 2.3e-5 at 384)


def _merge_embeddings(keys: dict[str, _Key], uf: _UnionFind,
                      embed: Callable[[list[str]], np.ndarray], threshold: float,
                      k_neighbours: int = 10, block_cells: int = 2_000_000,
                      verify: Callable[[str, str], bool] | None = None,
                      units_of: dict[str, set[str]] | None = None) -> dict[str, float]:
    """Union groups whose "title: description" embeddings have cosine >= threshold.

    Nearest-neighbour search over the normalized embedding matrix, a block of rows at a
    time (top ``k_neighbours`` per row), not an all-pairs Python loop. A block holds at
    most ``block_cells`` similarities (rows x groups; 16 MB of float64 at the default),
    so the search's memory stays flat as the groups grow: a fixed 1,024 rows cost
    1,024 x N x 8 bytes three times over (the similarities, their negation, the
    partition's indices), 0.7 GB at the 2Wiki pool's 28,000 groups. Two groups that
    are both named in one text unit are never merged here (a cannot-link constraint):
    two different names side by side in one passage are almost always two things, and
    evidence-sentence descriptions of such names are near-identical, so their
    embeddings would match. When ``verify`` is
    given, a candidate pair is merged only if ``verify(text_a, text_b)`` says yes (e.g.
    an LLM yes/no question). Returns, for every group root that was merged, the best
    cosine of an accepted pair touching it.
    """
    groups: dict[str, list[str]] = {}
    for k in sorted(keys):
        groups.setdefault(uf.find(k), []).append(k)
    roots = sorted(groups)
    if len(roots) < 2:
        return {}
    texts, types, genders = [], [], []
    for r in roots:
        members = groups[r]
        _, title = _canonical_title(keys, members)
        descs = _descriptions(keys, members)
        texts.append(_resolution_text(title, descs))
        types.append(_vote(t for m in members for t in keys[m].types))
        genders.append({keys[m].gender for m in members})
    vecs = np.asarray(embed(texts), dtype=np.float64)
    if vecs.ndim != 2 or vecs.shape[0] != len(texts):
        raise ValueError(f"embed returned shape {vecs.shape} for {len(texts)} texts")
    vecs = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    # the search in float32 (half the float64 time of an N x N x dim product: 10 s at
    # the 2Wiki pool's 28,000 groups), each candidate's score then taken in float64, so
    # the threshold and the merge order see the same scores as a float64 search
    search = vecs.astype(np.float32)
    near = threshold - _FLOAT32_SLACK

    k_nn = min(k_neighbours + 1, len(roots))
    pairs: list[tuple[float, int, int]] = []
    block = max(1, block_cells // len(roots))
    for start in range(0, len(roots), block):
        sims = search[start:start + block] @ search.T
        nearest = np.argpartition(-sims, k_nn - 1, axis=1)[:, :k_nn]
        for row, cols in enumerate(nearest):
            i = start + row
            for j in map(int, cols):
                if i == j or sims[row, j] < near or types[i] != types[j]:
                    continue
                score = float(vecs[i] @ vecs[j])
                if score >= threshold:
                    pairs.append((score, min(i, j), max(i, j)))
    best: dict[str, float] = {}
    comp_genders = {r: set(g) for r, g in zip(roots, genders)}
    comp_units = {r: set().union(*((units_of or {}).get(m, set()) for m in groups[r]))
                  for r in roots}
    for score, i, j in sorted(set(pairs), key=lambda p: (-p[0], p[1], p[2])):
        a, b = uf.find(roots[i]), uf.find(roots[j])
        if a == b or not _compatible(comp_genders[a], comp_genders[b]):
            continue
        if comp_units[a] & comp_units[b]:
            continue
        if verify is not None and not verify(texts[i], texts[j]):
            continue
        uf.union(a, b)
        comp_genders[uf.find(a)] = comp_genders[a] | comp_genders[b]
        comp_units[uf.find(a)] = comp_units[a] | comp_units[b]
        for r in (roots[i], roots[j]):
            best[r] = max(best.get(r, score), score)
    return best


# characters of "title: descriptions" embedded per group: about one 256-token window of
# all-MiniLM-L6-v2 (~4 characters per token in English). Past it a hub entity of a long
# document (thousands of descriptions) would cost thousands of windows, all to refine a
# vector the first window already places.
RESOLUTION_TEXT_CHARS = 1000


def _resolution_text(title: str, descriptions: list[str],
                     max_chars: int = RESOLUTION_TEXT_CHARS) -> str:
    """``"title: d1<newline>d2 ..."`` with whole descriptions, in order, while the text stays
    within ``max_chars`` (the first one cut to fit when it alone is longer); the title
    alone when there is none.

    The descriptions are joined by newlines, as the entities table joins them, so for a
    group that stays one entity with a short description list this is the text the
    vector stage embeds for it (``title: description``) and the index's embedding cache
    (:mod:`kgloom.embedding.embedding_cache`) serves it there. A WordPiece tokenizer (the
    bundled all-MiniLM-L6-v2's) splits on any whitespace, so the vector is the one a
    space would give."""
    if not descriptions:
        return title
    text = f"{title}: {descriptions[0]}"[:max_chars]
    for d in descriptions[1:]:
        if len(text) + 1 + len(d) > max_chars:
            break
        text += "\n" + d
    return text


def _descriptions(keys: dict[str, _Key], members: list[str]) -> list[str]:
    """Distinct descriptions of a group, in input (mention row) order."""
    return _distinct(d for _, d in sorted(x for m in members for x in keys[m].descriptions))


def _distinct(values: Iterable[str | None]) -> list[str]:
    """Non-empty values, first occurrence order."""
    return list(dict.fromkeys(v for v in values if v))


def resolve_entities(
    entity_mentions: pl.DataFrame,
    relationship_mentions: pl.DataFrame,
    embed: Callable[[list[str]], np.ndarray] | None = None,
    similarity_threshold: float = 0.9,
    methods: frozenset[str] = RESOLUTION_METHODS,
    verify: Callable[[str, str], bool] | None = None,
    unit_documents: Mapping[str, str] | None = None,
    unit_texts: Iterable[str] | None = None,
    unit_positions: Mapping[str, int] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Merge entity and relationship mentions into entities, relationships and aliases.

    Args:
        entity_mentions: ``schemas.ENTITY_MENTIONS_SCHEMA`` rows, one per mention per
            text unit.
        relationship_mentions: ``schemas.RELATIONSHIP_MENTIONS_SCHEMA`` rows; source and
            target are extracted titles. Endpoints that resolve to no entity and
            self-loops (both ends one entity) are dropped. A null strength counts as 1.0.
        embed: texts -> float array of shape (len(texts), dim); used only when given and
            "embedding" is in ``methods``.
        similarity_threshold: minimum cosine similarity for an embedding merge.
        methods: which merge passes run, a subset of {"normalized", "name_extension",
            "name_context", "embedding"} ("name_context" needs "name_extension"). Without
            "normalized" the key is the title as extracted.
        verify: optional yes/no check of each embedding candidate pair, called with the
            two "title: description" texts (see ``summaries.llm_verifier``).
        unit_documents: text unit id -> document id; with it, a shorter name joins a
            longer one only when some document names both
            (:func:`_merge_name_extensions`). None: documents are not compared.
        unit_texts: the corpus's text-unit texts; with them, a longer name that adds a
            common word or a number to a shorter one is no candidate of it
            (:func:`common_words_of`). None: words are not compared.
        unit_positions: text unit id -> its position in its document (``chunk_index``,
            0-based); with ``unit_documents``, a shorter name joins a longer one only
            where the longer one is introduced: written in one of its text units or
            before its first (:func:`_merge_name_extensions`). None: order is not
            compared.

    Returns:
        ``(entities, relationships, entity_aliases)`` conforming to ENTITIES_SCHEMA,
        RELATIONSHIPS_SCHEMA and ENTITY_ALIASES_SCHEMA, each sorted by id (aliases by
        alias). Entity id = ``content_id("entity", canonical key)``; the canonical title
        is the most frequent surface form among the group's names with the longest core
        (honorifics not counted), ties alphabetical; type by majority vote, ties
        alphabetical; description = distinct mention descriptions joined by "\\n" in
        input order; frequency = distinct text units. degree, weighted_degree, pagerank
        and combined_degree are 0 here (see :mod:`kgloom.graph.communities`). Relationship id =
        ``content_id("relationship", a, b)`` of the sorted entity id pair (A->B and B->A
        are one relationship, every description kept); source and target follow the
        text: the majority direction of the extracted mentions, ties to the first one,
        sorted ids for co-mention-only pairs (:func:`_aggregate_relationships`);
        weight = sum of strengths; kind "extracted" when any mention was extracted,
        else "co_mention".

    Raises:
        ValueError: unknown method names, or ``embed`` returning a wrongly shaped array.
        KeyError: an input frame lacking a schema column.
    """
    unknown = set(methods) - RESOLUTION_METHODS
    if unknown:
        raise ValueError(f"unknown resolution methods {sorted(unknown)}; "
                         f"use {sorted(RESOLUTION_METHODS)}")
    ents = schemas.conform(entity_mentions, schemas.ENTITY_MENTIONS_SCHEMA)
    rels = schemas.conform(relationship_mentions, schemas.RELATIONSHIP_MENTIONS_SCHEMA)

    def key_of(title: str) -> str:
        if "normalized" not in methods:
            return title
        return normalize_title(title) or unicodedata.normalize("NFKC", title).casefold().strip()

    keys, units_of = _collect_keys(ents, key_of)
    uf = _UnionFind(keys)
    by_context: set[str] = set()
    if "name_extension" in methods:
        documents_of = None if unit_documents is None else {
            k: {unit_documents[u] for u in units if u in unit_documents}
            for k, units in units_of.items()}
        common, determined = (None, None) if unit_texts is None else common_words_of(
            unit_texts, {t for k in keys.values() if len(k.core) > 1 for t in k.core},
            {k.core[0] for k in keys.values() if len(k.core) == 1})
        places_of = None if unit_documents is None or unit_positions is None else {
            k: _places(units, unit_documents, unit_positions) for k, units in units_of.items()}
        by_context = _merge_name_extensions(
            keys, uf, units_of if "name_context" in methods else None, documents_of, common,
            places_of, determined)
    ne_root = {k: uf.find(k) for k in keys}  # groups after the rule-based passes
    emb_score: dict[str, float] = {}
    if embed is not None and "embedding" in methods:
        emb_score = _merge_embeddings(keys, uf, embed, similarity_threshold, verify=verify,
                                      units_of=units_of)
    groups: dict[str, list[str]] = {}
    for k in sorted(keys):
        groups.setdefault(uf.find(k), []).append(k)
    entities, aliases, entity_of_key, title_of = _entity_tables(
        keys, units_of, groups, ne_root, by_context, emb_score, similarity_threshold)
    relationships = _aggregate_relationships(rels, lambda t: entity_of_key.get(key_of(t)),
                                             title_of)
    return entities, relationships, aliases


def _places(units: set[str], unit_documents: Mapping[str, str],
            unit_positions: Mapping[str, int]) -> dict[str, tuple[int, set[str]]]:
    """{document: (the first position of ``units`` in it, those of ``units`` in it)} for
    the units both mappings know."""
    out: dict[str, tuple[int, set[str]]] = {}
    for u in units:
        if u in unit_documents and u in unit_positions:
            d, i = unit_documents[u], unit_positions[u]
            first, there = out.get(d, (i, set()))
            there.add(u)
            out[d] = (min(first, i), there)
    return out


def _merge_places(a: dict[str, tuple[int, set[str]]], b: dict[str, tuple[int, set[str]]]
                  ) -> dict[str, tuple[int, set[str]]]:
    """Two :func:`_places` maps as one: per document the earlier first position and the
    units of both (new sets; the inputs are not changed)."""
    out = dict(a)
    for d, (i, us) in b.items():
        j, them = out.get(d, (i, set()))
        out[d] = (min(i, j), us | them)
    return out


def _collect_keys(ents: pl.DataFrame, key_of: Callable[[str], str]
                  ) -> tuple[dict[str, _Key], dict[str, set[str]]]:
    """Pass 1: one :class:`_Key` per normalization key (surface counts, types,
    descriptions with their row), and the text units that mention each key."""
    keys: dict[str, _Key] = {}
    units_of: dict[str, set[str]] = {}
    for row, (unit, title, typ, desc) in enumerate(ents.select(
            "text_unit_id", "title", "type", "description").iter_rows()):
        if title is None or not title.strip():
            continue
        k = key_of(title)
        info = keys.setdefault(k, _Key(tokens=normalize_title(k).split()))
        info.surfaces[title] += 1
        info.types.append((typ or "").strip().upper())
        info.descriptions.append((row, (desc or "").strip()))
        units_of.setdefault(k, set()).add(unit)
    return keys, units_of


def _entity_tables(keys: dict[str, _Key], units_of: dict[str, set[str]],
                   groups: dict[str, list[str]], ne_root: dict[str, str],
                   by_context: set[str], emb_score: dict[str, float],
                   similarity_threshold: float
                   ) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, str], dict[str, str]]:
    """Last pass: one entity row per merged group (canonical title, voted type, joined
    descriptions, text units) and one alias row per surface form, saying which pass
    merged it (``ne_root``: the groups after the rule-based passes; ``by_context``: keys
    merged by name context; ``emb_score``: best cosine of embedding merges). Returns
    (entities, aliases, key -> entity id, entity id -> title)."""
    entity_rows, alias_rows = [], []
    entity_of_key: dict[str, str] = {}
    title_of: dict[str, str] = {}
    for members in groups.values():
        canon_key, canon_title = _canonical_title(keys, members)
        eid = content_id("entity", canon_key)
        title_of[eid] = canon_title
        units = sorted(set().union(*(units_of[m] for m in members)))
        entity_rows.append({
            "id": eid, "title": canon_title,
            "type": _vote(t for m in members for t in keys[m].types),
            "description": "\n".join(_descriptions(keys, members)),
            "text_unit_ids": units, "frequency": len(units), "degree": 0,
            "weighted_degree": 0.0, "pagerank": 0.0,
            "aliases": sorted({s for m in members for s in keys[m].surfaces}),
        })
        for m in members:
            entity_of_key[m] = eid
            if ne_root[m] != ne_root[canon_key]:
                method, score = "embedding", emb_score.get(ne_root[m], similarity_threshold)
            elif m in by_context:
                method, score = "name_context", 1.0
            elif m != canon_key:
                method, score = "name_extension", 1.0
            else:
                method, score = None, 1.0
            for surface in keys[m].surfaces:
                how = method or ("exact" if surface == canon_title else "normalized")
                alias_rows.append({"alias": surface, "entity_id": eid, "method": how,
                                   "score": score})
    entities = _with_hrid(pl.DataFrame(entity_rows, schema={
        c: t for c, t in schemas.ENTITIES_SCHEMA.items() if c != "human_readable_id"}),
        schemas.ENTITIES_SCHEMA)
    aliases = (pl.DataFrame(alias_rows, schema=schemas.ENTITY_ALIASES_SCHEMA)
               .sort("alias", "entity_id"))
    return entities, aliases, entity_of_key, title_of


def _aggregate_relationships(rels: pl.DataFrame, resolve: Callable[[str], str | None],
                             title_of: dict[str, str]) -> pl.DataFrame:
    """Group relationship mentions by their undirected entity pair, keeping the direction
    the text gives.

    One relationship per pair (its id hashes the sorted id pair, so A->B and B->A are one
    edge, the choice GraphRAG makes too); every mention's description is kept, whichever
    way it ran. Its ``source``/``target`` are the direction of the pair's extracted
    mentions: the majority direction, a tie going to the direction of the first extracted
    mention in input order. A pair with co-mention edges only takes their majority
    direction the same way (extraction writes each in the order its sentence names the
    two: :func:`kgloom.extraction.evidence.text_direction`). (LightRAG issue #934: sorting
    every pair lost "Yarrow Textiles sells to Alder Retail".)
    """
    agg: dict[tuple[str, str], dict] = {}
    for unit, src, dst, desc, strength, kind in rels.select(
            "text_unit_id", "source", "target", "description", "strength", "kind").iter_rows():
        a = resolve(src) if src else None
        b = resolve(dst) if dst else None
        if a is None or b is None or a == b:
            continue
        pair = (min(a, b), max(a, b))
        row = agg.setdefault(pair, {"descriptions": [], "weight": 0.0, "units": set(),
                                    "extracted": False, "votes": {}, "co_votes": {}})
        row["descriptions"].append((desc or "").strip())
        row["weight"] += 1.0 if strength is None else float(strength)
        row["units"].add(unit)
        row["extracted"] |= kind == "extracted"
        # dict order = first-seen order, which breaks ties
        votes = row["votes"] if kind == "extracted" else row["co_votes"]
        votes[(a, b)] = votes.get((a, b), 0) + 1

    def direction(pair: tuple[str, str], votes: dict) -> tuple[str, str]:
        if not votes:
            return pair
        return max(votes, key=lambda d: votes[d])  # max keeps the first of equal counts

    rows = []
    for pair, r in agg.items():
        a, b = direction(pair, r["votes"] or r["co_votes"])
        rows.append({
            "id": content_id("relationship", *pair), "source": title_of[a],
            "target": title_of[b],
            "description": "\n".join(_distinct(r["descriptions"])), "weight": r["weight"],
            "combined_degree": 0, "text_unit_ids": sorted(r["units"]), "source_id": a,
            "target_id": b, "kind": "extracted" if r["extracted"] else "co_mention"})
    return _with_hrid(pl.DataFrame(rows, schema={
        c: t for c, t in schemas.RELATIONSHIPS_SCHEMA.items() if c != "human_readable_id"}),
        schemas.RELATIONSHIPS_SCHEMA)


def _with_hrid(df: pl.DataFrame, schema: schemas.TableSchema) -> pl.DataFrame:
    """Sort by id and number rows 0..n-1 as human_readable_id."""
    df = df.sort("id").with_row_index("human_readable_id").with_columns(
        pl.col("human_readable_id").cast(pl.Int64))
    return schemas.conform(df, schema)
