"""Word forms of inflected languages for name finding and typing (no LLM, no Dagster).

Russian, Polish and Czech write a name in the case its sentence needs: ``в Казанском
университете`` (in Kazan University), ``с Антоном Чеховым`` (with Anton Chekhov),
``w Instytucie Radowym``. Word lists of head nouns (``университет``, ``instytut``) then
miss the name's head word, and the words around a name say less than in English.

- Cyrillic words are analysed by pymorphy3 (Russian dictionary, OpenCorpora): their
  lemmas (``университете`` -> ``университет``) and the proper-name grammemes of their
  parses (``Name``, ``Surn``, ``Patr``: a person's given name, surname, patronymic;
  ``Geox``: a place; ``Orgn``: an organization).
- Latin-script words are matched against the head nouns by stem and a closed list of the
  case endings of Polish, Czech and Slovak nouns (:func:`is_form_of`), so ``Uniwersytecie``
  is a form of ``uniwersytet`` and ``válce`` of ``válka``. A dictionary lemmatizer
  (simplemma 2.0) was measured instead: loading its Polish dictionary alone grew the
  process by about 450 MB and took 11 s (on this project's 2-core machine, under load),
  and it would be loaded for every corpus written in Latin letters; pymorphy3 loads its
  Russian dictionary in 0.25 s.

The forms are used as evidence only: names stay as written in the text.
"""

from __future__ import annotations

import functools
import os

import regex

# summed pymorphy3 parse probability a word's proper-name kind needs (set on the
# multilingual suite: "Ганди" is a surname in every parse but each has 0.08; the surname
# reading of the adjective "Горьким" has 0.11 and that of "Казанском" 0.2)
PROPER_SCORE_MIN = 0.3
_CYRILLIC = regex.compile(r"\p{Script=Cyrillic}")
# pymorphy3 grammemes of proper names -> entity type (OpenCorpora tag set)
_GRAMMEME_TYPE = {"Name": "PERSON", "Surn": "PERSON", "Patr": "PERSON", "Geox": "LOCATION",
                  "Orgn": "ORGANIZATION"}
# Case endings of Polish, Czech and Slovak nouns (singular and plural), after the stem,
# from the declension tables of the three languages' grammars; the last five are
# locative endings after a consonant alternation that replaces the stem's last letter
# (uniwersytet -> uniwersytecie, válka -> válce, rzeka -> rzece, ogród -> ogrodzie).
_SLAVIC_ENDINGS = frozenset("""a e ę ě i í y ý u ú ů o ó ą ie ii ji em ém om ou ów ům ám
ami ach ách ech ích iach iami ce cie dzie rze ze""".split())
_STEM_MIN = 3  # letters a form must share with its head noun (heads of 5+ letters)


@functools.lru_cache(maxsize=1)
def _morph():
    """The Russian pymorphy3 analyser, or None when pymorphy3 is not installed."""
    try:
        import pymorphy3
    except ImportError:  # pragma: no cover - a declared dependency
        return None
    return pymorphy3.MorphAnalyzer(lang="ru")


@functools.lru_cache(maxsize=65536)
def _parses(word: str) -> tuple:
    """pymorphy3 parses of a Cyrillic ``word`` (empty for other words)."""
    if not _CYRILLIC.search(word):
        return ()
    m = _morph()
    return tuple(m.parse(word)) if m is not None else ()


def lemmas(word: str) -> frozenset[str]:
    """Return the lower-case dictionary forms of ``word``: itself, and for a Cyrillic
    word the normal forms of all its pymorphy3 parses (``университете`` ->
    {``университете``, ``университет``}). Non-Cyrillic words give only themselves."""
    low = word.lower()
    return frozenset({low, *(p.normal_form for p in _parses(word))})


def is_form_of(word: str, heads: frozenset[str]) -> bool:
    """True when ``word`` (any case) is one of ``heads`` or an inflected form of one.

    Cyrillic: one of its :func:`lemmas` is in ``heads``. Latin and other scripts: a head
    of at least 5 letters that ``word`` extends by one of
    ``_SLAVIC_ENDINGS``, after the head's own final vowel is dropped or its last letter
    alternates (``instytutem``, ``uniwersytecie``, ``wojny``, ``válce``). English plurals
    and other English suffixes (``-s``, ``-es``, ``-ion``) are not endings, so ``park``
    does not match ``Parker`` nor ``company`` ``companion``.
    """
    low = word.lower()
    if low in heads:
        return True
    if _CYRILLIC.search(word):
        return bool(lemmas(word) & heads)
    return any(_slavic_form(low, h) for h in _heads_by_prefix(heads).get(low[:_STEM_MIN], ()))


@functools.lru_cache(maxsize=32)
def _heads_by_prefix(heads: frozenset[str]) -> dict[str, tuple[str, ...]]:
    out: dict[str, list[str]] = {}
    for h in heads:
        if len(h) >= 5 and not _CYRILLIC.search(h):
            out.setdefault(h[:_STEM_MIN], []).append(h)
    return {k: tuple(v) for k, v in out.items()}


def _slavic_form(low: str, head: str) -> bool:
    common = len(os.path.commonprefix([low, head]))  # noqa: RUF071 - words, not paths
    if common < max(_STEM_MIN, len(head) - 2):
        return False
    # the head keeps its stem: at most its final vowel or last consonant may change
    dropped, rest = head[common:], low[common:]
    if len(dropped) > 1 and not (len(dropped) == 2 and dropped[-1] in "aeoy"
                                 and len(rest) == 2):
        return False  # two letters change only as in válka -> válce, rzeka -> rzece
    return rest in _SLAVIC_ENDINGS or (not rest and len(dropped) == 1 and dropped != "s"
                                       and len(low) >= 5)  # muzeum -> muzeu


def proper_type(word: str) -> str:
    """Return the entity type the morphology gives a Cyrillic ``word``, or "".

    The parses of ``word`` carrying a proper-name grammeme (``Name``/``Surn``/``Patr``
    -> PERSON, ``Geox`` -> LOCATION, ``Orgn`` -> ORGANIZATION) add up their pymorphy3
    probabilities per type; the largest sum wins when it reaches
    :data:`PROPER_SCORE_MIN` (``Москве``: LOCATION 1.0; ``Горьким``: PERSON 0.11, too
    little: the adjective ``горький`` is likelier).
    """
    scores: dict[str, float] = {}
    for p in _parses(word):
        for g, t in _GRAMMEME_TYPE.items():
            if g in p.tag:
                scores[t] = scores.get(t, 0.0) + p.score
                break
    if not scores:
        return ""
    best = max(scores, key=lambda t: scores[t])
    return best if scores[best] >= PROPER_SCORE_MIN else ""


def name_type(words: list[str]) -> str:
    """Return the entity type the morphology gives a multi-word name, or "": the type
    of :func:`proper_type` given by the most of its words (ties: PERSON, LOCATION,
    ORGANIZATION), so ``Максимом Горьким`` (given name + a surname that is also an
    adjective) is a PERSON."""
    votes: dict[str, int] = {}
    for w in words:
        t = proper_type(w)
        if t:
            votes[t] = votes.get(t, 0) + 1
    if not votes:
        return ""
    order = ("PERSON", "LOCATION", "ORGANIZATION")
    return max(votes, key=lambda t: (votes[t], -order.index(t)))


def is_adjective(word: str) -> bool:
    """True when pymorphy3's likeliest parse of a Cyrillic ``word`` is a full adjective
    (``Казанском``, ``Крымской``); False for other words and scripts."""
    ps = _parses(word)
    return bool(ps) and ps[0].tag.POS == "ADJF"



_CASED_POS = frozenset({"NOUN", "ADJF", "PRTF"})
_CYRILLIC_WORD = regex.compile(r"\p{Script=Cyrillic}[\p{Script=Cyrillic}\p{M}]*")


def nominative(title: str) -> str:
    """Return ``title`` with each Russian word put in the nominative case, lower case,
    everything else as it is (``Антоном Чеховым`` -> ``антон чехов``, ``Ясной Поляне``
    -> ``ясная поляна``, ``Москве`` -> ``москва``); used as a merge key, never as a title.

    The words of a name agree in case, so each word takes its likeliest pymorphy3 parse
    in a case that every declinable word of the title can have (``Поляне`` alone reads
    as the plural of ``полянин``; next to ``Ясной`` it is the locative of ``поляна``);
    with no such case, its likeliest parse. Number and gender are kept (``Толстая``
    stays feminine). Words without a declinable parse (indeclinable ``Ганди``, short
    adjectives, unknown words) and titles without Cyrillic letters are only lower-cased.
    """
    words = list(_CYRILLIC_WORD.finditer(title))
    if not words:
        return title.lower()
    parses = [[p for p in _parses(m.group(0)) if p.tag.POS in _CASED_POS and p.tag.case
               and "Fixd" not in p.tag] for m in words]
    declinable = [ps for ps in parses if ps]
    common = set.intersection(*({p.tag.case for p in ps} for ps in declinable)) \
        if declinable else set()
    out, last = [], 0
    for m, ps in zip(words, parses):
        word = m.group(0).lower()
        pick = next((p for p in ps if p.tag.case in common), ps[0] if ps else None)
        if pick is not None:
            form = pick.inflect({"nomn"})
            word = form.word if form is not None else word
        out.append(title[last:m.start()].lower() + word)
        last = m.end()
    return "".join(out) + title[last:].lower()
