"""Known names: the corpus's multi-word proper names (``("name", key)`` in
:func:`kgloom.names.corpus_stats.word_counts`) found again in a text unit in any letter
case (``acme corp``, ``ACME CORP``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import regex

_NON_SPACE = regex.compile(r"\S+")
_WORD_CHAR = regex.compile(r"[\p{L}\p{M}\p{N}]")


def _known_index(stats: Counter) -> dict[str, list[tuple[str, ...]]]:
    """The corpus's multi-word names (``("name", key)`` in ``stats``) by their first word:
    {first word: [the names' words, longest name first]}. Built once per corpus and kept
    on its own Counter."""
    index = getattr(stats, "_known_index", None)
    if index is None:
        index = {}
        keys = sorted((k[1] for k in stats if isinstance(k, tuple) and k[0] == "name"),
                      key=len, reverse=True)
        for key in keys:
            words = tuple(key.split())
            if len(words) >= 2:
                index.setdefault(words[0], []).append(words)
        stats._known_index = index  # pyright: ignore[reportAttributeAccessIssue]
    return index


def _word_end(chunk: str, word: str) -> int | None:
    """The end of ``chunk``'s prefix that case-folds to ``word`` and is not followed by a
    letter, mark or digit, or None."""
    fold = chunk.casefold()
    ends = [len(word)] if len(fold) == len(chunk) else range(1, min(len(word), len(chunk)) + 1)
    for k in ends:
        if chunk[:k].casefold() == word and (k == len(chunk)
                                             or not _WORD_CHAR.match(chunk, k)):
            return k
    return None


def _known_matches(text: str, index: dict[str, list[tuple[str, ...]]]
                   ) -> Iterator[tuple[int, int]]:
    """(start, end) of each name of ``index`` in ``text`` in any letter case, leftmost
    first, the longest name at a start, not overlapping: the matches of one
    case-insensitive alternation of the names (words joined by any whitespace, neither
    led nor followed by a letter, mark or digit), found word by word."""
    chunks = [(m.start(), m.group()) for m in _NON_SPACE.finditer(text)]
    i, resume = 0, 0
    while i < len(chunks):
        at, chunk = chunks[i]
        for o in range(resume, len(chunk)):
            if o and _WORD_CHAR.match(chunk, o - 1):
                continue  # a match is not led by a letter, mark or digit
            hit = None
            for words in index.get(chunk[o:].casefold(), ()):
                n = len(words)
                if i + n > len(chunks) or any(chunks[i + k][1].casefold() != words[k]
                                              for k in range(1, n - 1)):
                    continue
                end = _word_end(chunks[i + n - 1][1], words[-1])
                if end is not None:
                    hit = (i + n - 1, end)
                    break
            if hit:
                yield at + o, chunks[hit[0]][0] + hit[1]
                i, resume = hit
                break
        else:
            i, resume = i + 1, 0


def _known_names(text: str, stats: Counter | None) -> list[tuple[str, int]]:
    """Multi-word names of the corpus (``("name", key)`` in ``stats``) found in ``text``
    in any letter case, as written there."""
    if not stats:
        return []
    index = _known_index(stats)
    out = []
    for start, end in _known_matches(text, index) if index else ():
        surface = text[start:end]
        if surface != surface.lower() and surface != surface.upper():
            continue  # mixed case: the proper-name rules see it ("merry Christmas")
        a = text.rfind("\n", 0, start) + 1
        b = text.find("\n", end)
        if surface == surface.upper() and not any(
                c.islower() for c in text[a:b if b >= 0 else len(text)]):
            continue  # a shouted heading line
        out.append((" ".join(surface.split()), start))
    return out
