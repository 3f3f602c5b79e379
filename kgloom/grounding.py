"""Checks that what a model wrote comes from what it was given (no Dagster, no files).

Extraction grounds names by construction (the schema's names are the text's own); a
community report or a search answer is free text, so it is checked after the fact:

- :func:`ungrounded_names`: the proper names of a text (the extraction's own candidate
  finder, :func:`kgloom.names.candidates.candidate_names`) that its context does not
  hold: not as a whole (:func:`kgloom.names.candidates.is_grounded`: case and Unicode
  normalized), not word by word (every word of the name other than function words
  and honorifics is a word of the context, so "Mr. Scrooge" is grounded by "SCROOGE"),
  and not by one of its words being a capitalized word of the context ("Scrooge's
  Redemption"). Title-case headings are skipped: their capitals mark no names.
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

from dataclasses import dataclass
from typing import Any

import regex

from kgloom.names.candidates import STOPWORDS, candidate_names, is_grounded, word_counts
from kgloom.names.normalize import normalize_for_match

# the words of a text for the word-level checks: letters, marks and digits (any script)
_WORD = regex.compile(r"[\p{L}\p{N}][\p{L}\p{M}\p{N}]*")
# words a name may hold that say nothing of who it is (honorifics; "the", "of" are STOPWORDS)
_TITLE_WORDS = frozenset("""mr mrs ms miss dr st sir lady lord master madame mme mlle mx prof
rev fr sr jr dame old young little""".split())
_POSSESSIVE = regex.compile(r"['’]s$")

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
    a sentence is no name, so a sentence-initial name the text never repeats is missed).
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
