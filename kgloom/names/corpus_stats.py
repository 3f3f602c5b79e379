"""Corpus statistics (:func:`word_counts`): the counts over all of a corpus's text units
that the candidate sources decide with (words as written, mid-sentence capitals, lone
modifiers, offices, class nouns, caseless n-grams, the corpus's multi-word names).
"""

from __future__ import annotations

import itertools
from collections import Counter

import regex

from kgloom.names.acronyms import _expands
from kgloom.names.lexicon import (
    _ATTRIBUTIVE_BEFORE,
    _EXCLAIMED,
    _OF_USE,
    _OFFICE_USE,
    _POSSESSIVE,
    ATTRIBUTIVE_REACH,
    DETERMINERS,
    MODIFIER_MAX_WORDS,
    STOPWORDS,
)
from kgloom.names.normalize import normalize_for_match
from kgloom.names.proper_names import _proper_names, _spans, _to_key
from kgloom.names.scripts import CASELESS_RUN
from kgloom.names.tokens import _sentence_start, _Tok, _tokens, mask_locator_lines

NGRAM_SIZES = range(2, 7)


def word_counts(texts: list[str]) -> Counter:
    """Return the corpus statistics :func:`candidate_names` decides with.

    Keys: each word as written (case kept) -> occurrences; ``("mid", word)`` ->
    occurrences of a capitalized word that does not open a sentence (so most likely a
    name, as "Scrooge" in "said Scrooge"); ``("to", span)`` -> occurrences of each name
    span joined by "to" (``Ghost of Christmas Yet to Come``); ``("ng", gram)`` ->
    occurrences of each character n-gram (sizes :data:`NGRAM_SIZES`) of caseless-script
    runs, and ``("ch", char)`` of each caseless character (for the ``ngram`` source).
    ``("name", key)`` -> text units holding each multi-word proper name (key:
    :func:`normalize_for_match`), so the same name written in lower case or shouted in
    another unit (``acme corp``, ``ACME CORP``) is found there too. ``("acronym", word)``
    -> units where all-caps ``word`` expands a capitalized phrase (evidence that it is a
    name in every unit; :func:`acronym_evidence`). ``("pair", a, b)`` -> occurrences of
    capitalized word ``a`` one space before capitalized word ``b``. ``("excl", word)`` ->
    occurrences of a
    capitalized word directly before "!" or "?" (``("midexcl", word)``: those of them not
    opening a sentence), for :func:`_interjection`. ``("solo", word)`` -> mid-sentence
    occurrences of a capitalized word with no capitalized word one gap
    (:func:`_one_gap`: spaces, at most one line break) before or after it (a one-word
    name or a modifier), or of a run of two (:func:`_count_lone_words`);
    ``("sololow", word)`` -> those followed, one gap on, by a lower-case word that is no
    function word (a head noun: "Dutch merchant", not "Laocoon of", "Founder was");
    ``("solodet", word)`` -> those of them that also follow a determiner
    (:data:`_ATTRIBUTIVE_BEFORE`, maybe across :data:`ATTRIBUTIVE_REACH` lower-case words
    or numbers), for :func:`_attributive`. ``("ofhead", word)`` ->
    occurrences of a capitalized ``word`` before "of" and a capital ("Earl of Cork");
    ``("office", word)`` -> those of them after a name and a comma or after an ordinal
    ("John Boyle, 15th Earl of Cork"), for :func:`_office`. ``("det", word)`` ->
    occurrences of a capitalized word right after a determiner ("the", "The",
    "this") and whitespace ("the Ghost", "the\nSpirit"), for :func:`_class_noun`.
    Counts include the overlap of consecutive text units; locator lines
    (:func:`mask_locator_lines`) are not counted.
    """
    counts: Counter = Counter()
    texts = [mask_locator_lines(t) for t in texts]
    for t in texts:
        _count_unit(t, counts)
    for t in texts:
        counts.update({("name", normalize_for_match(n)) for n, _ in _proper_names(t, counts)
                       if len(n.split()) >= 2})
    return counts


def _count_unit(t: str, counts: Counter) -> None:
    """Add the counts of one text unit ``t`` (locator lines already masked) to
    ``counts``, every key of :func:`word_counts` but ``("name", key)`` (which needs the
    whole corpus's counts first). Keys are added in a fixed order: the statistics'
    insertion order breaks ties downstream (the known-name index, the n-gram source's
    function characters). Mutates ``counts``; returns nothing."""
    toks = _tokens(t)
    counts.update(tok.text for tok in toks)
    mid = [i for i, tok in enumerate(toks)
           if tok.kind in ("cap", "mixed") and not _sentence_start(t, toks, i)]
    counts.update(("mid", toks[i].text) for i in mid)
    # a capitalized word right before "!" or "?": an exclamation ("Hurrah!", "Eh?")
    counts.update(("excl", tok.text) for tok in toks if tok.kind in ("cap", "mixed")
                  and _EXCLAIMED.match(t, tok.end))
    counts.update(("midexcl", toks[i].text) for i in mid if _EXCLAIMED.match(t, toks[i].end))
    _count_lone_words(t, toks, mid, counts)
    # capitalized words side by side ("Great Britain"): is the second ever alone?
    counts.update(("pair", a.text, b.text) for a, b in itertools.pairwise(toks)
                  if a.kind == "cap" and b.kind in ("cap", "mixed")
                  and t[a.end:b.start] == " ")
    counts.update(("to", _to_key(s)) for s in _spans(t, toks, None)
                  if any(x.text == "to" for x in s.toks))
    for run in CASELESS_RUN.findall(t):
        counts.update(("ch", c) for c in run)
        counts.update(("ng", run[a:a + n]) for n in NGRAM_SIZES
                      for a in range(len(run) - n + 1))
    counts.update(("acronym", tok.text) for tok in toks
                  if tok.kind == "upper" and _expands(tok.text, t))
    counts.update(("det", _POSSESSIVE.sub("", b.text)) for a, b in itertools.pairwise(toks)
                  if b.kind == "cap" and a.text.lower() in DETERMINERS
                  and t[a.end:b.start].isspace())
    counts.update(("office", m.group(1)) for m in _OFFICE_USE.finditer(t))
    counts.update(("ofhead", m.group(1)) for m in _OF_USE.finditer(t))


def _count_lone_words(text: str, toks: list[_Tok], mid: list[int], counts: Counter) -> None:
    """Add the ``solo``, ``sololow`` and ``solodet`` counts of :func:`word_counts` for the
    mid-sentence capitalized tokens ``mid`` (indexes into ``toks``) of ``text``, and for
    each run of up to :data:`MODIFIER_MAX_WORDS` capitalized words one gap apart that
    one of them opens ("a South Korean actor": key "South Korean")."""
    def next_to(i: int, j: int, kinds: tuple[str, ...]) -> bool:
        """Is ``toks[j]`` of ``kinds``, one gap (:func:`_one_gap`) from ``toks[i]``?"""
        if not 0 <= j < len(toks) or toks[j].kind not in kinds:
            return False
        a, b = (toks[i], toks[j]) if i < j else (toks[j], toks[i])
        return _one_gap(text, a.end, b.start)

    named = ("cap", "mixed", "upper", "initial")
    for i in mid:
        if toks[i].kind != "cap" or next_to(i, i - 1, named):
            continue
        j = i  # the run of capitalized words one gap apart from i: "South Korean"
        while j + 1 - i < MODIFIER_MAX_WORDS and next_to(j, j + 1, ("cap",)):
            j += 1
        if next_to(j, j + 1, named):
            continue
        word = " ".join(t.text for t in toks[i:j + 1])
        counts[("solo", word)] += 1
        if next_to(j, j + 1, ("lower",)) and toks[j + 1].text not in STOPWORDS:
            counts[("sololow", word)] += 1
            if _determined(text, toks, i):
                counts[("solodet", word)] += 1


_GAP = regex.compile(r"[ \t]*\n?[ \t]*")


def _one_gap(text: str, a: int, b: int) -> bool:
    """Is ``text[a:b]`` the gap between two words of one line or of a hard-wrapped line
    (spaces, at most one line break: "a Gothic\nwindow")?"""
    return a < b and _GAP.fullmatch(text, a, b) is not None


def _determined(text: str, toks: list[_Tok], i: int) -> bool:
    """Does ``toks[i]`` end a noun phrase's opening: a determiner
    (:data:`_ATTRIBUTIVE_BEFORE`) before it, or across at most
    :data:`ATTRIBUTIVE_REACH` lower-case words that are no function words, numbers or
    ordinals, each one gap apart (:func:`_one_gap`) ("an American actor", "a 1957 Mexican film", "a
    famous Mexican singer", "a 17th century Persian architect"; not "is Mexican")?"""
    j = i - 1
    while j >= 0 and i - j <= ATTRIBUTIVE_REACH + 1 and _one_gap(text, toks[j].end,
                                                                  toks[j + 1].start):
        tok = toks[j]
        if tok.kind == "lower" and tok.text in _ATTRIBUTIVE_BEFORE:
            return True
        if not (tok.text.isdigit() or (tok.kind == "lower" and tok.text not in STOPWORDS)):
            return False
        j -= 1
    return False
