"""The ``ngram`` candidate source (any script without letter case): character n-grams
that recur in the corpus, maximal and not led or ended by the corpus's most frequent
characters.
"""

from __future__ import annotations

from collections import Counter

from kgloom.names.corpus_stats import NGRAM_SIZES, word_counts
from kgloom.names.scripts import CASELESS_RUN

NGRAM_MIN_COUNT = 2  # corpus occurrences of a character n-gram to be a candidate


NGRAM_FUNCTION_CHARS = 30  # the corpus's most frequent characters never lead or end a name


def _function_chars(stats: Counter) -> set[str]:
    """The corpus's function characters (particles such as 的, 是, の, は): among the
    :data:`NGRAM_FUNCTION_CHARS` most frequent characters, those seen at least 3 times
    next to many different characters (distinct neighbours >= half their occurrences),
    which a character inside a recurring name is not (李 is always before 白)."""
    chars = Counter({k[1]: v for k, v in stats.items() if isinstance(k, tuple) and k[0] == "ch"})
    out = set()
    for c, v in chars.most_common(NGRAM_FUNCTION_CHARS):
        if v < 3:
            break
        pairs = [k[1] for k in stats if isinstance(k, tuple) and k[0] == "ng"
                 and len(k[1]) == 2 and c in k[1]]
        left = {p[0] for p in pairs if p[1] == c}
        right = {p[1] for p in pairs if p[0] == c}
        if min(len(left), len(right)) >= v / 2:
            out.add(c)
    return out


def _ngram_names(text: str, stats: Counter | None) -> list[tuple[str, int]]:
    local = stats if stats is not None else word_counts([text])
    function = getattr(local, "_function_chars", None)
    if function is None:
        function = _function_chars(local)
        # once per corpus, kept on the corpus's own Counter
        local._function_chars = function  # pyright: ignore[reportAttributeAccessIssue]
    out: list[tuple[str, int]] = []
    for m in CASELESS_RUN.finditer(text):
        run = m.group(0)
        grams = []
        for n in NGRAM_SIZES:
            for a in range(len(run) - n + 1):
                g = run[a:a + n]
                c = local[("ng", g)]
                if c < NGRAM_MIN_COUNT or g[0] in function or g[-1] in function:
                    continue
                # maximal: no one-character extension occurs as often
                ext = [run[a - 1:a + n] if a > 0 else "", run[a:a + n + 1]]
                if any(e and len(e) > n and local[("ng", e)] >= c for e in ext):
                    continue
                grams.append((-c, -n, a, g))
        taken: list[tuple[int, int]] = []
        for _, neg_n, a, g in sorted(grams):  # most frequent, then longest, first
            if any(x < a - neg_n and a < y for x, y in taken):
                continue  # overlaps a kept n-gram
            taken.append((a, a - neg_n))
            out.append((g, m.start() + a))
    return out
