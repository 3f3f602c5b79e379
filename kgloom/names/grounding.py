"""Checks that what a model wrote comes from what it was given (no Dagster, no files).

Extraction grounds names by construction (the schema's names are the text's own); a
community report or a search answer is free text, so it is checked after the fact:

- :func:`ungrounded_names`: the proper names of a text (the extraction's own candidate
  finder, :func:`kgloom.names.candidates.candidate_names`) that its context does not
  hold: not as a whole (:func:`kgloom.names.candidates.is_grounded`: case and Unicode
  normalized), not word by word (every word of the name other than function words
  and honorifics is a word of the context, so "Mr. Scrooge" is grounded by "SCROOGE"),
  and not by one of its words being a capitalized word of the context ("Scrooge's
  Redemption"). Title-case headings are skipped: their capitals mark no names. A
  community report is checked so (:func:`kgloom.report_writer.check_report`).
- :func:`ungrounded_answer_names`: the same for a search answer, and every capitalized
  word of it the context holds in no case or form (:func:`ungrounded_words`): a
  one-word answer ("Calais-Lille") or a name opening a sentence is all the candidate
  finder's rules leave out (a lone capitalized word opening a sentence is no name to
  them; a bare name looks like a heading).
- :func:`find_repetition`: a degenerate loop, the way a small model fails when it
  cannot stop ("a man named Tiny Tim, a man named Tiny Tim, ..."): a phrase repeated
  back to back, or a long phrase three times.
  :func:`find_reply_loop` finds one in a JSON reply still being written.
- :func:`shared_phrase`: a run of words a text shares with another (a prompt's worked
  example) and not with its context: the model copied the example.

Each is a pure function of strings; the callers decide what a failure means (a report
is replaced by the rule report, an answer is cut and flagged).
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import regex

from kgloom.names.candidates import (
    CASELESS_RUN,
    STOPWORDS,
    candidate_names,
    is_grounded,
    word_counts,
)
from kgloom.names.morphology import lemmas
from kgloom.names.normalize import normalize_for_match

# the words of a text for the word-level checks: letters, marks and digits (any script)
_WORD = regex.compile(r"[\p{L}\p{N}][\p{L}\p{M}\p{N}]*")
# words a name may hold that say nothing of who it is (honorifics; "the", "of" are STOPWORDS)
_TITLE_WORDS = frozenset("""mr mrs ms miss dr st sir lady lord master madame mme mlle mx prof
rev fr sr jr dame old young little""".split())
_POSSESSIVE = regex.compile(r"['’]s$")
# a word as a name is written: letters and digits, with the parts of a hyphenated or
# apostrophized name kept together ("Calais-Lille", "O'Brien", "Weber's")
_NAME_WORD = regex.compile(
    r"[\p{L}\p{N}][\p{L}\p{M}\p{N}]*(?:['’\-‐‑][\p{L}\p{N}][\p{L}\p{M}\p{N}]*)*")
_JOINERS = regex.compile(r"['’\-‐‑]")

TANDEM_MIN_REPEATS = 3  # a phrase of 2+ words said 3 times in a row is a loop
TANDEM_MIN_REPEATS_ONE_WORD = 4  # one word: "very very" is English, 4 in a row is not
SPREAD_MIN_WORDS = 4  # a phrase of 4+ words ...
SPREAD_MIN_REPEATS = 3  # ... said 3 times anywhere in one text is a loop
MAX_PHRASE_WORDS = 16  # the longest loop looked for (words)
HEADING_MIN_SHARE = 0.75  # of a paragraph's words capitalized: a title-case heading
EXAMPLE_MIN_WORDS = 5  # a 5-word run shared with an example, not with the context: a copy


def words(text: str) -> list[str]:
    """The normalized words of ``text`` (NFKC, case-folded), in order."""
    return _WORD.findall(normalize_for_match(text or ""))


def is_heading(text: str) -> bool:
    """True when ``text`` is written in title case (a heading: "Scrooge's Redemption and
    Key Relationships"): it does not end as a sentence does (. ! ?) and at least
    ``HEADING_MIN_SHARE`` of its cased words of 3+ letters other than function words
    start with a capital. Capitals in a heading mark no name."""
    if regex.search(r"[.!?。！？]['\"’”)]*\s*$", text or ""):
        return False
    cased = [w for w in _WORD.findall(text or "") if len(w) >= 3 and w[0].isalpha()
             and (w[0].isupper() or w[0].islower()) and w.lower() not in STOPWORDS]
    return bool(cased) and sum(w[0].isupper() for w in cased) >= HEADING_MIN_SHARE * len(cased)


def ungrounded_names(text: str, context: str, known: tuple[str, ...] | list[str] = ()
                     ) -> list[str]:
    """The proper names of ``text`` that ``context`` (and the names ``known``) do not hold.

    ``text`` is read paragraph by paragraph (blank-line separated); a heading paragraph
    (:func:`is_heading`) is skipped, since title case capitalizes common words. Names are
    found as extraction finds them (:func:`kgloom.names.candidates.candidate_names`,
    with the statistics of ``context`` and ``text``: a capitalized word seen only opening
    a sentence is no name, so a sentence-initial name the text never repeats is missed;
    :func:`ungrounded_answer_names` checks those words too, for a search answer).
    A name is grounded when the context
    holds it whole (case and Unicode normalized), or holds each of its words (less a
    possessive "'s", function words and honorifics), or holds one of them capitalized
    (a name of the context: "Scrooge's Redemption" is about Scrooge).

    Args:
        text: what the model wrote (any language; names found as extraction finds them).
        context: what it was given.
        known: more names it may use (e.g. a community's member titles).

    Returns:
        the ungrounded names of ``text``, as written there, each once, in order of first
        use; [] when every name is grounded.
    """
    # a known name that shares no word with the text (function words aside) grounds
    # none of its names and counts none of their words; one holding a caseless script's
    # run is kept (the n-gram source counts those runs: CASELESS_RUN). A community's
    # thousands of member titles made these statistics the pool's slowest report step
    text_words = set(words(text)) - STOPWORDS
    known = [k for k in known if CASELESS_RUN.search(k) or not text_words.isdisjoint(words(k))]
    pool = "\n".join([context or "", *known])
    pool_words = set(words(pool))
    capitalized = {normalize_for_match(w) for w in _WORD.findall(pool) if w[:1].isupper()}
    # the context's and the text's statistics: a capitalized word only ever seen opening
    # a sentence ("Despite", "Built") is no name, as in extraction
    vocabulary = word_counts([pool, text or ""])
    out: list[str] = []
    for para in regex.split(r"\n\s*\n", text or ""):
        if is_heading(para):
            continue
        names = candidate_names(para, limit=10_000, vocabulary=vocabulary)
        names.sort(key=para.find)
        for name in names:
            if name in out or is_grounded(name, pool):
                continue
            own = [_POSSESSIVE.sub("", w) for w in words(name)]
            own = [w for w in own if w and w not in STOPWORDS and w not in _TITLE_WORDS]
            if not own or all(w in pool_words for w in own) or any(
                    w in capitalized for w in own):
                continue
            out.append(name)
    return out


@functools.lru_cache(maxsize=4096)
def _base_letter(char: str) -> str:
    """A Latin letter Unicode does not decompose ("ø", "ł", "đ") as its base letter, read
    from its Unicode name ("LATIN SMALL LETTER O WITH STROKE" -> "o"); any other
    character as it is."""
    m = regex.fullmatch(r"LATIN (?:SMALL|CAPITAL) LETTER (\w) WITH .+", unicodedata.name(char, ""))
    return m.group(1).lower() if m else char


def _fold(word: str) -> str:
    """``word`` NFKC-normalized, case-folded and without accents or strokes ("Anaïs" and
    "Tromsø" match "Anais" and "Tromso": one name with or without its diacritics)."""
    decomposed = unicodedata.normalize("NFKD", normalize_for_match(word))
    return "".join(c if c.isascii() else _base_letter(c) for c in decomposed
                   if not unicodedata.combining(c))


def _forms(word: str) -> set[str]:
    """The forms ``word`` is matched by (:func:`_fold`): as written, without a possessive
    ("Brandt's", "Oltmanns'"), with its hyphens and apostrophes dropped ("Auwald-Stadium"
    as "auwaldstadium"), and without a plural or genitive "-s" / "-es" ("Cratchits",
    "Kiels"; words of 4+ letters), and a Cyrillic word's dictionary forms
    (:func:`kgloom.names.morphology.lemmas`: "Москве" as "москва"). The simple
    inflection of names, applied to both sides of a comparison."""
    w = _POSSESSIVE.sub("", _fold(word)).rstrip("'’")
    out = {w, _JOINERS.sub("", w), *(_fold(x) for x in lemmas(w) if x != w)}
    for x in list(out):
        if len(x) >= 4 and x.endswith("s"):
            out.add(x[:-1])
            if x.endswith("es"):
                out.add(x[:-2])
    return out


def _common_word(word: str) -> bool:
    """A function word or an honorific (:data:`kgloom.names.candidates.STOPWORDS`,
    ``_TITLE_WORDS``): "The", "He", "In", "Who", "Yes" open a sentence, they name
    nothing."""
    w = _POSSESSIVE.sub("", _fold(word))
    return w in STOPWORDS or w in _TITLE_WORDS


class _ContextWords:
    """What a context holds, word by word, for :func:`ungrounded_words`: the
    :func:`_forms` of its words, of each part of its hyphenated words, and of each two
    words written side by side ("Nord Licht" grounds "Nordlicht"), and the first letters
    of its capitalized words (an initial "B." is grounded by "Brandt")."""

    def __init__(self, text: str) -> None:
        self.forms: set[str] = set()
        self.initials: set[str] = set()
        prev: regex.Match | None = None
        for m in _NAME_WORD.finditer(text):
            word = m.group(0)
            self.forms |= _forms(word)
            for part in _JOINERS.split(word):
                self.forms |= _forms(part)
            if word[:1].isupper():
                self.initials.add(_fold(word)[:1])
            if prev is not None and text[prev.end():m.start()] in (" ", "-"):
                self.forms |= _forms(prev.group(0) + word)
            prev = m

    def holds(self, word: str) -> bool:
        """Does the context hold ``word`` in any case, form or hyphenation? A hyphenated
        word is held whole, or part by part (each part held or a function word, one
        part at least held)."""
        if _forms(word) & self.forms:
            return True
        parts = [p for p in _JOINERS.split(word) if p]
        if len(parts) == 1 and len(parts[0]) == 1 and parts[0].isalpha():
            return _fold(parts[0]) in self.initials  # an initial: "B." of "Brandt"
        if len(parts) > 1:
            held = [bool(_forms(p) & self.forms) for p in parts]
            return any(held) and all(h or _common_word(p) for h, p in zip(held, parts))
        return False


def _capitalized(word: str) -> bool:
    """Is ``word``, or a part of it between hyphens, written with a capital first letter
    (cased scripts only: "Weber", "NASA", "al-Rashid"; not "iPhone", not "1998")?"""
    return any(p[:1].isupper() for p in _JOINERS.split(word))


def ungrounded_words(text: str, context: str, known: tuple[str, ...] | list[str] = ()
                     ) -> list[str]:
    """The capitalized words of ``text`` that ``context`` (and ``known``) hold in no case
    or form, as the names they stand in, each once, in order of first use.

    Every word of ``text`` written with a capital (or with a capitalized part between
    hyphens: "Calais-Lille") is checked, wherever it stands (a one-word text, a word
    opening a sentence, a title-case line), since the capital of a name that opens a
    sentence cannot be told from the sentence's own. It is grounded when the context
    holds it in any case, with or without a possessive, a plural or genitive "-s",
    accents, hyphens (:class:`_ContextWords`). The evidence that a capitalized word names
    nothing is the context's own: it holds the word (in any case: "Today" opening an
    answer is grounded by "today" in the text), or ``text`` writes the word in lower case
    too; beyond that, the function words and honorifics of
    :data:`kgloom.names.candidates.STOPWORDS` ("The", "He", "In", "Who") are never
    flagged. An ordinary word that neither the context nor ``text`` writes
    ("Unfortunately, ...", "Nobody") is flagged: the context holds no evidence that tells
    it from a name (:func:`ungrounded_answer_names` asks the corpus too).

    Flagged words written next to each other (one space apart) are reported as one name,
    from the first to the last of them ("Jonas Weber"; "Weber" of "Ilse Weber" when the
    context holds Ilse; "Lyon" of "In Lyon"), less a possessive ("Weber's" -> "Weber").

    Args:
        text: what the model wrote (its citations removed or held by ``known``).
        context: what it was given.
        known: more names and ids it may use (e.g. the context's citation ids).

    Returns:
        the ungrounded names, as written in ``text``; [] when every capitalized word is
        held.
    """
    return _unheld_runs(text or "", _ContextWords("\n".join([context or "", *known])), ())


def mostly_lower_case(word: str, corpus: Sequence[str]) -> bool:
    """Does ``corpus`` write ``word`` (less a possessive) in lower case more often than
    capitalized? Then it is an ordinary word of the corpus's language ("See", "Nobody",
    "None" in the book), not a name: the evidence the candidate finder takes for a
    capitalized word (:func:`kgloom.names.candidates.word_counts`). Whole-word,
    case-insensitive matches in each text; O(total length of ``corpus``)."""
    w = _POSSESSIVE.sub("", word)
    if not w:
        return False
    edge = r"[\p{L}\p{M}\p{N}]"
    pattern = regex.compile(rf"(?<!{edge}){regex.escape(w)}(?!{edge})", regex.IGNORECASE)
    lower = upper = 0
    for t in corpus:
        for m in pattern.finditer(t):
            if m.group(0)[:1].islower():
                lower += 1
            else:
                upper += 1
    return lower > upper


def _unheld_runs(text: str, held: _ContextWords, corpus: Sequence[str]) -> list[str]:
    """:func:`ungrounded_words` of ``text`` against what a context ``held``, less the
    words ``corpus`` writes mostly in lower case (:func:`mostly_lower_case`)."""
    words_of_text = list(_NAME_WORD.finditer(text))
    lower = {_fold(m.group(0)) for m in words_of_text if not _capitalized(m.group(0))}
    runs: list[list[tuple[regex.Match, bool]]] = []
    for m in words_of_text:
        word = m.group(0)
        if not _capitalized(word):
            continue
        bad = not (_common_word(word) or _forms(word) & lower or held.holds(word)
                   or (corpus and mostly_lower_case(word, corpus)))
        if runs and text[runs[-1][-1][0].end():m.start()] == " ":
            runs[-1].append((m, bad))
        else:
            runs.append([(m, bad)])
    out: list[str] = []
    for run in runs:
        bad = [m for m, b in run if b]
        if bad:
            name = _POSSESSIVE.sub("", text[bad[0].start():bad[-1].end()])
            if name not in out:
                out.append(name)
    return out


def ungrounded_answer_names(text: str, context: str,
                            known: tuple[str, ...] | list[str] = (),
                            corpus: Sequence[str] = ()) -> list[str]:
    """The names of a search answer that its context does not hold: the capitalized
    words no evidence grounds (:func:`ungrounded_words`), and the names of
    :func:`ungrounded_names` with no capitalized word (scripts without case: "王明"), in
    order of first use.

    An answer is a few words ("in as few words as the question allows"): a bare name is
    all sentence start and looks like a title-case heading, the two places where
    :func:`ungrounded_names` reads no name, so every capitalized word is checked here.
    Community reports keep :func:`ungrounded_names` alone: long prose opens its
    sentences with ordinary words a context need not hold ("Overall", "Notably"), and a
    report failing its check is not published (:func:`kgloom.report_writer.check_report`).

    A capitalized word the context lacks is still no name when ``corpus`` (the texts the
    context was drawn from: the index's text units) writes it mostly in lower case
    (:func:`mostly_lower_case`): "See the report ..." opens with an ordinary word the
    book writes 47 times as "see". A made-up name is in no text of the corpus; a name of
    the corpus that the context lacks is written capitalized there, and stays flagged.

    Args:
        text: the answer (its citations removed or held by ``known``).
        context: the context it was answered from.
        known: more names and ids it may use (e.g. the context's citation ids).
        corpus: the texts the context was drawn from (() : the context alone decides).

    Returns:
        the ungrounded names as written in ``text``, each once; [] when none.
    """
    text = text or ""
    held = _ContextWords("\n".join([context or "", *known]))
    words_found = _unheld_runs(text, held, corpus)
    # a name with a capitalized word was judged word by word above
    names = [n for n in ungrounded_names(text, context, known)
             if not any(_capitalized(w) for w in _NAME_WORD.findall(n))
             and not all(held.holds(w) for w in _NAME_WORD.findall(n))]
    return sorted(dict.fromkeys([*words_found, *names]), key=text.find)


@dataclass(frozen=True)
class Repetition:
    """A loop found by :func:`find_repetition`.

    Attributes:
        phrase: the repeated words as first written in the text.
        count: how many times it occurs (back to back for a tandem repeat).
        cut_at: the character offset to cut the text at, keeping the phrase once (the
            end of its first copy for a tandem repeat, else the start of its second
            occurrence).
    """

    phrase: str
    count: int
    cut_at: int


def find_repetition(text: str, max_words: int = MAX_PHRASE_WORDS) -> Repetition | None:
    """The first degenerate repetition of ``text``, or None.

    A loop is a phrase of n words said back to back ``TANDEM_MIN_REPEATS`` times (n >= 2;
    ``TANDEM_MIN_REPEATS_ONE_WORD`` times for one word), or a phrase of at least
    ``SPREAD_MIN_WORDS`` words occurring ``SPREAD_MIN_REPEATS`` times anywhere in the
    text (not overlapping). Words are compared normalized (case, punctuation ignored).
    The earliest loop wins; at one start, a back-to-back repeat of the shortest
    phrase, else the longest phrase. O(len(words) x max_words) for
    tandem repeats, O(len(words) x max_words) n-gram counts for the spread ones.
    """
    spans = [(m.start(), m.end()) for m in _WORD.finditer(text or "")]
    toks = [normalize_for_match(text[a:b]) for a, b in spans]
    # (start word, kind, length key, repetition): the earliest loop; at one start a tandem
    # repeat of the shortest period, else the longest spread phrase
    best: tuple[int, int, int, Repetition] | None = None
    n_tok = len(toks)
    for n in range(1, min(max_words, n_tok // 2) + 1):
        need = TANDEM_MIN_REPEATS_ONE_WORD if n == 1 else TANDEM_MIN_REPEATS
        i = 0
        while i + n * need <= n_tok:
            k = 1
            while toks[i + k * n:i + (k + 1) * n] == toks[i:i + n]:
                k += 1
            if k >= need:
                rep = Repetition(text[spans[i][0]:spans[i + n - 1][1]], k, spans[i + n - 1][1])
                if best is None or (i, 0, n) < best[:3]:
                    best = (i, 0, n, rep)
                break
            i += 1
    for n in range(SPREAD_MIN_WORDS, min(max_words, n_tok // SPREAD_MIN_REPEATS) + 1):
        seen: dict[tuple[str, ...], list[int]] = {}
        for i in range(n_tok - n + 1):
            gram = tuple(toks[i:i + n])
            starts = seen.setdefault(gram, [])
            if not starts or i >= starts[-1] + n:  # occurrences that do not overlap
                starts.append(i)
        for starts in seen.values():
            if len(starts) >= SPREAD_MIN_REPEATS:
                i = starts[0]
                rep = Repetition(text[spans[i][0]:spans[i + n - 1][1]], len(starts),
                                 spans[starts[1]][0])
                if best is None or (i, 1, -n) < best[:3]:
                    best = (i, 1, -n, rep)
    return best[3] if best else None


def _string_values(value: Any) -> list[str]:
    """The string values of a parsed JSON value, in document order (keys excluded)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _string_values(v)]
    if isinstance(value, list):
        return [s for v in value for s in _string_values(v)]
    return []


def _complete_words(text: str) -> str:
    """``text`` without a last word that touches its end (the next characters written may
    continue it), so that its words are the first words of any longer text it begins."""
    spans = [m.span() for m in _WORD.finditer(text)]
    return text[:spans[-1][0]] if spans and spans[-1][1] == len(text) else text


def find_reply_loop(partial: str, checked: int = 0) -> tuple[Repetition | None, int]:
    """A loop (:func:`find_repetition`) in a string value of a JSON reply still being
    written, so that decoding can stop there (:class:`kgloom.llm.llamacpp.LlamaCppBackend`
    with ``stop_on_loop``).

    ``partial`` is parsed as a prefix of a JSON document (pydantic-core's ``from_json``,
    ``allow_partial="trailing-strings"``: the string being written is kept, a key being
    written is dropped). Every string value but the last is complete; the last may not
    be, so its last word is left out when it touches the end. Hence a loop found here is
    also found by :func:`find_repetition` in the same field of every reply that begins
    with ``partial``: its words are a prefix of that field's words, and both kinds of
    loop (back to back, spread) only gain occurrences as words are added.

    Args:
        partial: the reply so far (text; an incomplete escape at its end is dropped).
        checked: how many leading string values an earlier call on a shorter prefix
            found complete and free of loops (skipped here).

    Returns:
        (the first loop found, or None; the ``checked`` to pass with a longer prefix).
        Text that is not the start of a JSON value gives (None, ``checked``).
    """
    from pydantic_core import from_json

    try:
        values = _string_values(from_json(partial, allow_partial="trailing-strings"))
    except ValueError:
        return None, checked
    for text in values[checked:-1]:
        rep = find_repetition(text)
        if rep is not None:
            return rep, checked
    checked = max(checked, len(values) - 1)
    return (find_repetition(_complete_words(values[-1])) if values else None), checked


def cut_repetition(text: str) -> tuple[str, Repetition | None]:
    """``text`` cut where its loop (:func:`find_repetition`) starts repeating, with "…"
    added and trailing punctuation dropped; (text, None) when it has none."""
    rep = find_repetition(text)
    if rep is None:
        return text, None
    return text[:rep.cut_at].rstrip(" \t\n,;:-–—") + "…", rep


def shared_phrase(text: str, other: str, context: str = "",
                  min_words: int = EXAMPLE_MIN_WORDS) -> str | None:
    """The first run of ``min_words`` words of ``text`` that ``other`` also holds and
    ``context`` does not (normalized words), or None: how a copy of a prompt's worked
    example is told from a report that merely says the same common words."""
    mine, theirs, ctx = words(text), words(other), words(context)

    def grams(ws: list[str]) -> set[tuple[str, ...]]:
        return {tuple(ws[i:i + min_words]) for i in range(len(ws) - min_words + 1)}

    shared = grams(theirs) - grams(ctx)
    for i in range(len(mine) - min_words + 1):
        gram = tuple(mine[i:i + min_words])
        if gram in shared:
            return " ".join(gram)
    return None
