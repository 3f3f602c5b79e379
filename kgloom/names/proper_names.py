"""The ``proper_names`` candidate source (cased scripts: Latin, Greek, Cyrillic, Armenian,
...): runs of capitalized, all-caps or mixed-case words joined by name particles, led by
honorifics or initials, followed by numerals, and quoted titles; sentence-opening common
words, modifiers, class nouns, offices and shouting are told apart from names by the
corpus statistics (:mod:`kgloom.names.corpus_stats`).
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass

import regex

from kgloom.names.acronyms import _shouted_word, acronym_evidence
from kgloom.names.lexicon import (
    _ABBREVIATIONS,
    _ADDRESSED,
    _AFTER_OF_ONLY,
    _APPOSITIVE_TITLE,
    _DEFINED,
    _DRAWN_OUT,
    _PARTICLES,
    _POSSESSIVE,
    _QUOTED,
    _TITLE_ARTICLES,
    _TITLE_HEADS,
    ATTRIBUTIVE_DETERMINED,
    ATTRIBUTIVE_SHARE,
    CLASS_NOUN_SHARE,
    HONORIFICS,
    MODIFIER_MAX_WORDS,
    OFFICE_MIN_USES,
    OFFICE_SHARE,
    RANKS,
    ROMAN_NUMERAL,
    STOPWORDS,
)
from kgloom.names.morphology import is_adjective, is_form_of, proper_type
from kgloom.names.normalize import MAX_NAME_CHARS
from kgloom.names.tokens import _kind, _sentence_start, _shouted, _Tok, _tokens

# a common opener stays when at least this share of the next word's uses follow it
# ("Los Angeles": 75 of 77 in the 2Wiki pool; two follow "Monterey- Los")
PAIR_SHARE = 0.9
# a lower-case definite article right before a span: "the City of London"
_THE_BEFORE = regex.compile(
    r"(?<![\p{L}\p{M}])(?:" + "|".join(sorted(
        a.lower() for a in _TITLE_ARTICLES if a not in ("A", "An"))) + r")[ \t]*\n?[ \t]*$")
MAX_NAME_WORDS = 6  # "Ghost of Christmas Yet to Come"; longer spans are run-on headings
TO_SPAN_MIN_COUNT = 3  # corpus occurrences (overlaps count twice) to keep "X to Y" whole


@dataclass(frozen=True)
class _Span:
    toks: tuple[_Tok, ...]
    initial: bool  # the first token opens a sentence

    @property
    def text(self) -> str:
        return " ".join(t.text for t in self.toks)


def _name_token(text: str, toks: list[_Tok], i: int) -> bool:
    t = toks[i]
    if t.kind in ("cap", "mixed"):
        return True
    if t.kind == "upper":
        return not _shouted(text, toks, i)
    return False


def _gap_ok(text: str, a: _Tok, b: _Tok) -> bool:
    """May ``b`` continue a name ending with ``a``? Whitespace (no blank line) between
    them, or a period after an honorific, an abbreviation or an initial, then space."""
    gap = text[a.end:b.start]
    if gap[:1] == "." and (a.text in HONORIFICS or a.text in _ABBREVIATIONS
                           or (a.kind == "initial" and not (len(b.text) > 1
                                                           and b.text.lower() in STOPWORDS))):
        gap = gap[1:]
    return bool(gap) and gap.isspace() and gap.count("\n") < 2


def _spans(text: str, toks: list[_Tok], stats: Counter | None) -> list[_Span]:
    """Maximal name spans of ``text`` (see module doc), before any filtering."""
    out: list[_Span] = []
    i, n = 0, len(toks)

    def starts_name(k: int) -> bool:
        return _name_token(text, toks, k) or (
            toks[k].kind == "initial" and text[toks[k].end:toks[k].end + 1] == "."
            and k + 1 < n and _gap_ok(text, toks[k], toks[k + 1]) and starts_name(k + 1))

    while i < n:
        if not starts_name(i):
            i += 1
            continue
        last, j = i, i + 1
        while j < n and _gap_ok(text, toks[j - 1], toks[j]):
            t = toks[j]
            if starts_name(j):
                last, j = j, j + 1
                continue
            if last == j - 1 and toks[i].text not in HONORIFICS and (
                    t.kind == "num" or (t.kind in ("initial", "upper")
                                        and ROMAN_NUMERAL.fullmatch(t.text))):
                last, j = j, j + 1  # Apollo 11, Harvard Mark I, Theodred II
                continue
            if t.kind == "lower" and t.text in _PARTICLES:
                k = j
                while k < n and toks[k].kind == "lower" and toks[k].text in _PARTICLES \
                        and _gap_ok(text, toks[k - 1], toks[k]):
                    k += 1
                joined = [x.text for x in toks[j:k]]
                ok_seq = k - j <= 2 and all(
                    w not in _AFTER_OF_ONLY or (q > 0 and joined[q - 1] == "of")
                    for q, w in enumerate(joined))
                if ok_seq and k < n and _gap_ok(text, toks[k - 1], toks[k]) \
                        and starts_name(k):
                    last, j = k, k + 1
                    continue
            break
        if last + 1 < n and _lower_head(text, toks, last):
            last += 1  # "Казанском университете", "Karlova univerzita"
        out.append(_Span(tuple(toks[i:last + 1]), _sentence_start(text, toks, i)))
        i = last + 1
    return out


# Head nouns that inflected languages write in lower case after a capitalized adjective
# of a name (Russian, Ukrainian, Czech, Slovak orthography: "Казанский университет",
# "Крымская война", "Karlova univerzita", "Národní muzeum"), as dictionary forms.
_LOWER_HEADS = frozenset("""университет институт академия музей театр собор монастырь церковь
библиотека училище гимназия лицей завод банк вестник газета журнал война битва восстание
революция сражение улица площадь переулок проспект бульвар набережная шоссе река озеро море
океан остров полуостров залив пролив гора хребет область губерния уезд край район вокзал
станция кремль дворец усадьба
univerzita muzeum divadlo knihovna akademie katedrála chrám klášter válka bitva povstání
revoluce ulice náměstí třída nábřeží řeka jezero moře ostrov hora pohoří kraj okres
nádraží palác zámek""".split())
# endings of Czech and Slovak adjectives (Karlova, Národní, Václavské, Krymská, Karlově)
_LATIN_ADJECTIVE = regex.compile(r"(?:ý|á|é|í|ova|ovo|ovy|ově|ův|ou|ém|ého|ých|ní)$")


def _lower_head(text: str, toks: list[_Tok], last: int) -> bool:
    """May the lower-case token after ``toks[last]`` end the name? When it is a form of
    one of :data:`_LOWER_HEADS` and ``toks[last]`` is a capitalized adjective (pymorphy3
    for Cyrillic, Czech/Slovak adjective endings for Latin letters), with only spaces
    between them."""
    a, b = toks[last], toks[last + 1]
    if b.kind != "lower" or a.kind != "cap" or not _gap_ok(text, a, b):
        return False
    if not is_form_of(b.text, _LOWER_HEADS):
        return False
    return is_adjective(a.text) or bool(_LATIN_ADJECTIVE.search(a.text))


def _split_echoes(span: _Span) -> list[_Span]:
    """Split a span where a word follows itself ("Scrooge Scrooge, and sometimes
    Marley"; "New New York" is not a name either): an echo is one name said twice."""
    parts, cur = [], [span.toks[0]]
    for prev, t in itertools.pairwise(span.toks):
        if t.text == prev.text and t.kind != "num":
            parts.append(cur)
            cur = []
        cur.append(t)
    parts.append(cur)
    return [_Span(tuple(p), span.initial and q == 0) for q, p in enumerate(parts)]


def _split_kinds(span: _Span) -> list[_Span]:
    """Split a span where a word the morphology calls a place meets one it calls a
    person (``Москве Толстой`` in "В Москве Толстой купил дом"; see
    :func:`kgloom.names.morphology.proper_type`)."""
    kinds = [proper_type(t.text) for t in span.toks]
    parts, cur = [], [span.toks[0]]
    for t, k0, k1 in zip(span.toks[1:], kinds, kinds[1:]):
        if {k0, k1} == {"LOCATION", "PERSON"}:
            parts.append(cur)
            cur = []
        cur.append(t)
    parts.append(cur)
    return [_Span(tuple(p), span.initial and q == 0) for q, p in enumerate(parts)]


def _common(word: str, stats: Counter | None, local_lower: set[str]) -> bool:
    """A capitalized word that is an ordinary word here: a function word, or written in
    lower case more often than capitalized in the corpus (in the text, without stats)."""
    low = word.lower()
    if low in STOPWORDS:
        return True
    head = regex.split(r"['’]", low, maxsplit=1)[0]
    if head in STOPWORDS and regex.search(r"['’](?:ll|m|d|s|re|ve|t)$", low):
        return True  # a contraction: I'll, It's, We're
    if stats is None:
        return low in local_lower
    return stats[low] > stats[word]


def _unknown_opener(word: str, stats: Counter | None, local_lower: set[str],
                    defined: bool) -> bool:
    """A lone capitalized word that opens a sentence is not taken for a name unless the
    corpus also writes it capitalized mid-sentence, or it is the subject of a definition
    (``defined``: followed by a parenthesis or a form of "to be", as in "Teutberga (died
    875) was a queen", "Empties is a 2007 film"), and it is never mostly lower case."""
    if stats is None:
        return word.lower() in local_lower
    if stats[word.lower()] >= stats[word]:
        return True
    return not (stats[("mid", word)] or defined)


def _interjection(word: str, stats: Counter | None) -> bool:
    """A capitalized word the corpus only ever uses as an exclamation: it opens an
    utterance right before "!" or "?" at least once ("'Hurrah! There's Martha'", "'Eh?'
    said old Joe", "'Thankee!'") and is never capitalized mid-sentence except before "!"
    or "?" ("feebly cried Hurrah!"). A name is written mid-sentence ("said Scrooge"), and
    one only ever called out is called out mid-sentence ("quite a woman, little Fan!").
    Evidence from the corpus's own counts (:func:`word_counts`), so it holds in any
    language that marks exclamations so; without ``stats`` nothing is one."""
    if stats is None or stats[("excl", word)] - stats[("midexcl", word)] <= 0:
        return False  # never an utterance of its own ("quite a woman, little Fan!")
    return stats[("mid", word)] - stats[("midexcl", word)] <= 0


def _attributive(word: str, stats: Counter | None) -> bool:
    """A capitalized word the corpus uses as a modifier, not as a name: of its lone
    mid-sentence uses (no capitalized word beside it), at least
    :data:`ATTRIBUTIVE_SHARE` run straight into a lower-case content word and at least
    :data:`ATTRIBUTIVE_DETERMINED` also follow a determiner, as a noun phrase's adjective
    does ("some Dutch merchant", "an American actor", "his Christian name"). A name is
    written on its own ("said Scrooge.", "to Marley,") or before a verb without a
    determiner ("Beethoven composed"), and one inside a longer name ("American Football
    Conference") is not a lone use. Evidence from the corpus's own counts
    (:func:`word_counts`); without ``stats`` nothing is one."""
    if stats is None:
        return False
    solo = stats[("solo", word)]
    return solo > 0 and stats[("sololow", word)] >= ATTRIBUTIVE_SHARE * solo \
        and stats[("solodet", word)] >= ATTRIBUTIVE_DETERMINED * solo


def _class_noun(word: str, stats: Counter | None) -> bool:
    """Is the capitalized ``word`` a common noun the text capitalizes, not a name: the
    corpus also writes it in lower case, and more than :data:`CLASS_NOUN_SHARE` of its
    capitalized uses follow a determiner ("the Ghost", "this Spirit", "the Future" in a
    book that also writes "a ghost")? A name written after "the" is never written in
    lower case ("the Thames", "the Netherlands"), and a character's name is seldom
    written after a determiner ("Scrooge": 7 of 391 in the book). The plural of a class
    noun is one ("the Spirits"). The share is of its uses as a word of its own, not inside a
    longer name ("the Past, the Present" beside "Ghost of Christmas Present" 10 times).
    Evidence from the corpus's own counts
    (:func:`word_counts`); without ``stats`` nothing is one."""
    if stats is None:
        return False
    if len(word) > 3 and word.endswith("s") and _class_noun(word[:-1], stats):
        return True  # its plural: "the Spirits"
    if not stats[word.lower()]:
        return False
    uses = stats[word] + stats[word + "'s"] + stats[word + "’s"]  # "the Spirit's robe"
    # its uses as a word of its own: at a sentence's start or mid-sentence with no
    # capitalized word beside it ("the Present"), not inside a longer name ("Ghost of
    # Christmas Present", 10 of the book's 12 uses)
    alone = min(uses, uses - stats[("mid", word)] + stats[("solo", word)])
    return stats[("det", word)] > CLASS_NOUN_SHARE * alone


def _office(word: str, stats: Counter | None) -> bool:
    """Is ``word`` the head of a title held in turn, such as "Earl" in "Earl of Cork": a
    common noun (the corpus writes it in lower case too) that the corpus writes before
    "of" after a name and a comma or after an ordinal ("John Boyle, 15th Earl of Cork",
    "William I, Count of Geneva") at least :data:`OFFICE_MIN_USES` times and in at least
    :data:`OFFICE_SHARE` of its "Head of X" uses? "Earl of Cork" alone is then an office
    that several people held, not an entity ("University of Leeds" is never so written;
    "Mary of Teck" after a comma is no common noun). Evidence from the corpus's own
    counts (:func:`word_counts`); without ``stats`` nothing is one."""
    if stats is None or not stats[word.lower()]:
        return False
    uses = stats[("office", word)]
    return uses >= OFFICE_MIN_USES and uses >= OFFICE_SHARE * stats[("ofhead", word)]


def _named_elsewhere(tok: _Tok, stats: Counter | None) -> bool:
    """Does the corpus write ``tok`` capitalized mid-sentence, as a name is written?"""
    return stats is not None and tok.kind in ("cap", "mixed") and stats[("mid", tok.text)] > 0


def _clean(text: str, span: _Span, stats: Counter | None,
           local_lower: set[str]) -> str | None:
    """The name a raw span stands for, as written in ``text``, or None (see module doc).

    Trims the span's common openers and trailing particles
    (:func:`_without_common_opener`) and its shouted edge words
    (:func:`_without_shouting`), rejects what names nothing (:func:`_names_nothing`),
    then writes the rest as in ``text`` (whitespace collapsed, possessive dropped, a
    trailing abbreviation's period kept); None beyond :data:`MAX_NAME_WORDS` words or
    :data:`MAX_NAME_CHARS` characters.
    """
    addressed = bool(_ADDRESSED.match(text, span.toks[-1].end))
    defined = bool(_DEFINED.match(text, span.toks[-1].end)) and not addressed
    headed = bool(_THE_BEFORE.search(text, max(0, span.toks[0].start - 8),
                                     span.toks[0].start))
    toks, initial = _without_common_opener(span, stats, local_lower, defined, headed)
    trimmed = _without_shouting(text, toks, initial, stats)
    if trimmed is None:
        return None
    toks, initial = trimmed
    if len(toks) > 2 and toks[-2].kind == "num" and toks[-1].kind == "cap" \
            and toks[-1].text.lower() in STOPWORDS:
        toks = toks[:-2]  # "born in Vienna 4 February 1950": a date after the name
    if not toks or _names_nothing(toks, initial, stats, local_lower, defined or addressed):
        return None
    end = toks[-1].end
    if toks[-1].text in _ABBREVIATIONS and text[end:end + 1] == ".":
        end += 1  # "John Middleton Murry Jr."
    name = " ".join(text[toks[0].start:end].split())
    name = _POSSESSIVE.sub("", name)
    if len(toks) > MAX_NAME_WORDS or len(name) > MAX_NAME_CHARS:
        return None
    return name


def _without_common_opener(span: _Span, stats: Counter | None, local_lower: set[str],
                           defined: bool, headed: bool = False) -> tuple[list[_Tok], bool]:
    """The span's tokens without the common words in front of its name and without
    trailing particles and honorifics, and whether the first kept token still opens a
    sentence (``span.initial`` until a token is dropped). ``defined``: the span is the
    subject of a definition (:data:`_DEFINED`); ``headed``: a lower-case definite
    article stands right before it (:data:`_THE_BEFORE`)."""
    toks = list(span.toks)
    initial = span.initial
    # the subject of a definition opening a sentence is a title as written: "The Heart
    # of Doreon is a film", "My Little Eye is a 2002 film", "Single Video Theory is ..."
    whole_title = initial and defined and len(toks) >= 3

    def opener_not_name() -> bool:
        """Is ``toks[0]`` a common word in front of a name rather than part of it? Yes,
        unless it opens a definition's subject whose rest the corpus never writes alone
        as a name ("The Merry Gentleman is a film"; but "Old Marley was as dead as a
        door-nail" beside "said Marley" is Marley). A rare opener the corpus never
        capitalizes mid-sentence ("Whereat Scrooge's niece") stays: "Marie Curie" at a
        sentence start has the same evidence. Mid-sentence, a common word stays before a
        word the corpus never writes without it ("Great Britain", "Poor Law"; but "a
        Merry Christmas" is Christmas)."""
        first, rest = toks[0], toks[1]
        if not _common(first.text, stats, local_lower):
            return False
        if headed and not initial and len(toks) > 2 and rest.text in _PARTICLES:
            return False  # "in the City of London", "the Bank of England": a common
            # word after "the" and before "of" heads the name
        pair = stats[("pair", first.text, rest.text)] if stats is not None else 0
        if (first.text in _TITLE_ARTICLES and pair > 1 if initial
                else first.text.lower() not in STOPWORDS) \
                and stats is not None and stats[rest.text] * PAIR_SHARE <= pair:
            return False  # "in Great Britain", "Cities: Los Angeles": the corpus (almost)
            # never writes Britain or Angeles alone; at a sentence's start one use of
            # "The X" is no evidence
        return not (initial and defined and first.text.lower() not in STOPWORDS
                    and not (len(toks) == 2 and _named_elsewhere(rest, stats)))

    while not whole_title and len(toks) > 1 and toks[0].text not in HONORIFICS \
            and toks[0].kind != "initial" and opener_not_name():
        if toks[0].text in _TITLE_ARTICLES and initial and defined \
                and sum(t.kind in ("cap", "mixed", "upper") for t in toks[1:]) >= 2:
            break  # "The Merry Gentleman is a film": a title keeps its article
        if toks[0].text in _TITLE_ARTICLES and not initial:
            break  # "directed The Swan", "joined The Beatles": an article capitalized
            # mid-sentence opens a title
        toks, initial = toks[1:], False
    while toks and (toks[-1].text in _PARTICLES or toks[-1].text in HONORIFICS):
        toks = toks[:-1]
    return toks, initial


def _without_shouting(text: str, toks: list[_Tok], initial: bool, stats: Counter | None
                      ) -> tuple[list[_Tok], bool] | None:
    """``toks`` without the ordinary words shouted at their edges
    (:func:`kgloom.names.acronyms._shouted_word`), and whether the first kept token opens
    a sentence; None when every token is all caps (or an initial) and one all-caps word
    has no :func:`kgloom.names.acronyms.acronym_evidence`."""
    # an all-caps word is a name only with evidence (acronym_evidence): a span of such
    # words needs it for each ("DROP TABLE" is no name); next to a name word, an ordinary
    # word shouted at the span's edge is cut off ("Output PWNED")
    if toks and all(t.kind == "upper" or (t.kind == "initial" and "." not in t.text)
                    for t in toks):
        if not all(t.kind != "upper" or acronym_evidence(t.text, text, t.start, stats)
                   for t in toks):
            return None
    else:
        while toks and toks[-1].kind == "upper" and _shouted_word(toks[-1], text, stats):
            toks = toks[:-1]
        while toks and toks[0].kind == "upper" and _shouted_word(toks[0], text, stats) \
                and not (len(toks[0].text) <= 2 and len(toks) > 1
                         and toks[1].kind in ("cap", "mixed")):  # initials: AI Weiwei
            toks, initial = toks[1:], False
        while toks and toks[-1].text in _PARTICLES:
            toks = toks[:-1]
    return toks, initial


def _names_nothing(toks: list[_Tok], initial: bool, stats: Counter | None,
                   local_lower: set[str], evidence: bool) -> bool:
    """True when the trimmed tokens ``toks`` (not empty) name nothing: a sound drawn out,
    a lone initial or number, a lone common word, interjection, modifier, class noun or
    unknown sentence opener (``evidence``: the span is a definition's subject or an
    address), a run of modifiers, only function words, honorifics and numbers (a date:
    "1 November"), or an office held in turn ("Earl of Cork")."""
    if any(_DRAWN_OUT.search(t.text) for t in toks):
        return True  # "uncle Scro-o-o-o-oge": a sound drawn out, not the name as written
    if len(toks) == 1:
        t = toks[0]
        if t.kind in ("initial", "num"):
            return True
        if t.kind == "cap" and (_common(_POSSESSIVE.sub("", t.text), stats, local_lower)
                                or len(t.text) < 2):
            return True
        if t.kind in ("cap", "mixed") and _interjection(_POSSESSIVE.sub("", t.text), stats):
            return True
        bare = _POSSESSIVE.sub("", t.text)
        if t.kind == "cap" and (_attributive(bare, stats) or _class_noun(bare, stats)):
            return True
        if t.kind == "cap" and initial and _unknown_opener(
                t.text, stats, local_lower, evidence):
            return True
    elif len(toks) <= MODIFIER_MAX_WORDS and all(t.kind == "cap" for t in toks) \
            and _attributive(" ".join(t.text for t in toks), stats) \
            and any(_attributive(t.text, stats) for t in toks):
        return True  # "a South Korean actor", "an Indian Kannada film"; not "an Academy
        # Award nomination", which has no modifier of its own
    if all(t.kind == "num" or (t.kind == "cap" and (t.text.lower() in STOPWORDS
                                                    or t.text in HONORIFICS))
           for t in toks):
        return True  # function words, honorifics, a date ("On 1 November 1956")
    # "Earl of Cork": an office held in turn, named by its holders' names
    return len(toks) > 2 and toks[1].text == "of" and _office(toks[0].text, stats)


def _variants(text: str, span: _Span, name: str, stats: Counter | None,
              local_lower: set[str]) -> list[str]:
    """Other names a kept span also stands for: without a leading article ("The
    Limestone Coast" -> "Limestone Coast") or a rank ("Prince Aleksander Koniecpolski"
    -> "Aleksander Koniecpolski"; gendered honorifics such as "Mr." stay, they tell
    people apart) when a name follows it ("Duke of Burgundy" stays whole), and with the
    rank title that follows after a comma ("Joan II, Countess of Burgundy", the form of
    many encyclopedia titles; the title's head a rank of :data:`_TITLE_HEADS` or an
    office by the corpus's evidence, :func:`_office`)."""
    out = []
    words = name.split()
    first = words[0] if words else ""
    # only before a name: "Duke of Burgundy" without its rank is no name ("of Burgundy")
    if len(words) > 2 and (first in _TITLE_ARTICLES or first in RANKS) \
            and not words[1][:1].islower():
        out.append(name[len(first):].strip())
    m = _APPOSITIVE_TITLE.match(text, span.toks[-1].end)
    if m and len(name.split()) <= 3 and (m.group(1) in _TITLE_HEADS
                                         or _office(m.group(1), stats)):
        out.append(" ".join((name + m.group(0)).split()))
    return out


def _to_key(span: _Span) -> str:
    """Corpus key of a span joined by "to": its words without a leading article ("The
    Ghost of Christmas Yet to Come" counts as "Ghost of Christmas Yet to Come")."""
    words = [t.text for t in span.toks]
    if len(words) > 1 and words[0] in _TITLE_ARTICLES:
        words = words[1:]
    return " ".join(words)


def _split_at(span: _Span, words: frozenset[str]) -> list[_Span]:
    """The parts of a span between its particles in ``words`` (``Christmas to Scrooge``
    -> ``Christmas``, ``Scrooge``)."""
    parts, cur = [], []
    for t in span.toks:
        if t.text in words:
            parts.append(cur)
            cur = []
        else:
            cur.append(t)
    parts.append(cur)
    return [_Span(tuple(p), span.initial and q == 0) for q, p in enumerate(parts) if p]


def _proper_names(text: str, stats: Counter | None) -> list[tuple[str, int]]:
    toks = _tokens(text)
    local_lower = {t.text for t in toks if t.kind == "lower"}
    out: list[tuple[str, int]] = []
    spans = [p for s in _spans(text, toks, stats)
             for q in _split_echoes(s)
             for p in (_split_kinds(q) if len(q.toks) > 1 else [q])]
    for span in spans:
        parts = [span]
        if any(t.text == "to" for t in span.toks):
            keep_whole = stats is None or stats[("to", _to_key(span))] >= TO_SPAN_MIN_COUNT
            parts = [span] if keep_whole else _split_at(span, frozenset({"to"}))
        for p in parts:
            name = _clean(text, p, stats, local_lower)
            if name:
                out.append((name, p.toks[0].start))
                for variant in _variants(text, p, name, stats, local_lower):
                    out.append((variant, p.toks[0].start))
            elif len(p.toks) > MAX_NAME_WORDS:  # too long: its parts between particles
                for q in _split_at(p, _PARTICLES):
                    name = _clean(text, q, stats, local_lower)
                    if name:
                        out.append((name, q.toks[0].start))
    titles: list[tuple[int, int, str]] = []  # (start, end, title) of each quoted title
    for m in _QUOTED.finditer(text):
        g = m.lastindex  # the group of the quote pair that matched (each has one)
        if g is None:
            continue
        inner = " ".join(m.group(g).split())
        words = inner.split()
        first = next((c for c in inner if c.isalpha()), "")
        if not (first.isupper() and len(words) <= MAX_NAME_WORDS) or all(
                w.lower() in STOPWORDS for w in words):
            continue
        if len(words) == 1 and not (_DEFINED.match(text, m.end())
                                    or not _common(inner, stats, local_lower)):
            continue  # a quoted common word ('Humbug'), unless a definition's subject
        if all(_kind(w) == "upper" for w in words) and not all(
                acronym_evidence(w, text, m.start(g), stats) for w in words):
            continue  # a quoted shout or command ("PWNED", "DROP TABLE")
        out.append((inner, m.start(g)))
        titles.append((m.start(g), m.end(g), inner))
    out = _join_ampersands(text, _join_nicknames(text, out, titles))
    quoted = {t for _, _, t in titles}
    index_at = {t.start: i for i, t in enumerate(toks)}
    return [(name, at) for name, at in out
            if name in quoted or not (_inside_title(name, at, titles)
                                      or _epithet(text, toks, index_at, at, titles))]


_NICKNAME_MAX_WORDS = 3
_OPEN_GAP = regex.compile(r"[ \t]+[\"“]\s?")  # from a name to its quoted nickname
_CLOSE_GAP = regex.compile(r"\s?[\"”][ \t]+")  # from the nickname to the rest


def _join_nicknames(text: str, out: list[tuple[str, int]],
                    titles: list[tuple[int, int, str]]) -> list[tuple[str, int]]:
    """``out`` (candidates, offsets) with each name written around a quoted nickname
    made whole: ``Tom "Kid Harpoon" Hull``, ``Margaret Mary "Madge" Bishop`` gave the
    cut names `Hull` and `Margaret Mary` (a pool and a HotpotQA reject). A quoted title
    of at most three words (``titles``: start, end, title) standing between a candidate
    that ends one space before its opening quote and one that starts one space after
    its closing quote joins the three as written; the parts and the nickname are then no
    candidates at that place."""
    starts = {at: name for name, at in out}
    links = []
    for a, b, title in titles:
        close = _CLOSE_GAP.match(text, b)
        if len(title.split()) > _NICKNAME_MAX_WORDS or close is None \
                or close.end() not in starts:
            continue
        left = next(((n, at) for n, at in out if at < a and text[at:at + len(n)] == n
                     and (gap := _OPEN_GAP.match(text, at + len(n))) and gap.end() == a),
                    None)
        if left is not None:
            links.append((left, (starts[close.end()], close.end()), (title, a)))
    return _joined(text, out, links)


_AMPERSAND = regex.compile(r"[ \t]*&[ \t]*")


def _join_ampersands(text: str, out: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """``out`` (candidates, offsets) with two names joined by "&" made one name as
    written: "Powell & Pressburger", "Marks & Spencer" (the cut `Powell` was a HotpotQA
    reject). "&" joins a firm, a duo or a work's pair of names, not two separate names as
    "and" may; the parts are then no candidates at that place."""
    starts = {at: name for name, at in out}
    links = []
    for name, at in out:
        gap = _AMPERSAND.match(text, at + len(name))
        if text[at:at + len(name)] == name and gap is not None and gap.end() in starts:
            links.append(((name, at), (starts[gap.end()], gap.end()), None))
    return _joined(text, out, links)


def _joined(text: str, out: list[tuple[str, int]],
            links: list[tuple[tuple[str, int], tuple[str, int], tuple[str, int] | None]],
            ) -> list[tuple[str, int]]:
    """``out`` (candidates, offsets) with each link's left and right candidates (and its
    third, if any: a nickname between them) replaced by the text from the left one's start
    to the right one's end, whitespace collapsed; a candidate joins at most once."""
    drop: set[tuple[str, int]] = set()
    joined: list[tuple[str, int]] = []
    for left, right, between in links:
        if left in drop or right in drop:
            continue
        joined.append((" ".join(text[left[1]:right[1] + len(right[0])].split()), left[1]))
        drop |= {left, right} | ({between} if between else set())
    return [c for c in out if c not in drop] + joined


def _inside_title(name: str, at: int, titles: list[tuple[int, int, str]]) -> bool:
    """Is the candidate ``name`` found at offset ``at`` a part of a quoted title,
    ``titles`` being the (start, end, title) of each in the text? A run of capitals
    inside ``"Scenes of a Sexual Nature"``, ``"I Am Weasel"`` or ``"Contes des quatre
    saisons"`` is a piece of the work's name, not a name of its own ("Sexual Nature",
    "Weasel", "Contes" were entities); the whole title is the candidate, and so is the
    title without its leading article ("Addams Family" of "The Addams Family"). The same
    words written outside the quotes are judged there as anywhere."""
    return any(a <= at < b and len(name) < len(title)
               and not (title.endswith(" " + name)
                        and title[:-len(name)].strip() in _TITLE_ARTICLES)
               for a, b, title in titles)


# a capitalized word, "the", then the candidate: "Ivan the Terrible", "Nosferatu the Vampyre"
_BEFORE_THE = regex.compile(r"(\p{Lu}[\p{L}\p{M}'’\-]*)[ \t]+the[ \t]+$")


def _epithet(text: str, toks: list[_Tok], index_at: dict[int, int], at: int,
             titles: list[tuple[int, int, str]]) -> bool:
    """Is the candidate starting at ``at`` an epithet or a title's object: right after a
    lower-case "the" that follows a capitalized word, which stands mid-sentence or inside
    a quoted title? "Ivan the Terrible", "Scrooge the Baleful", "Bert the Turtle",
    "Nosferatu the Vampyre", "Ride the Lightning": the part after "the" belongs to the
    whole and names nothing of its own ("Terrible", "Vampyre", "Lightning" were
    entities). A sentence-opening word before "the" ("In the United States", "And the
    Union") is no name, so the candidate after it stays. ``index_at``: token start ->
    its index in ``toks``."""
    m = _BEFORE_THE.search(text, max(0, at - 80), at)
    if m is None:
        return False
    if any(a <= m.start(1) < b for a, b, _ in titles):
        return True
    i = index_at.get(m.start(1))
    return i is not None and not _sentence_start(text, toks, i)
