"""Scripts of a text: the script groups that choose a candidate source (:func:`scripts_of`),
the runs of caseless scripts (:data:`CASELESS_RUN`) and of scripts written without
spaces (:func:`unspaced`).
"""

from __future__ import annotations

from collections import Counter

import regex

# Scripts without letter case, as Unicode script property names of the `regex` module.
CASELESS_SCRIPTS = ("Han", "Hiragana", "Katakana", "Hangul", "Thai", "Lao", "Khmer",
                    "Myanmar", "Arabic", "Hebrew", "Devanagari", "Bengali", "Tamil",
                    "Telugu", "Kannada", "Malayalam", "Gujarati", "Gurmukhi", "Sinhala",
                    "Ethiopic", "Tibetan", "Georgian")


_SCRIPT_RES = {s: regex.compile(rf"\p{{Script={s}}}") for s in CASELESS_SCRIPTS}
_CASED_LETTER = regex.compile(r"[\p{Lu}\p{Ll}\p{Lt}]")
_KANA = regex.compile(r"[\p{Script=Hiragana}\p{Script=Katakana}]")
_HAN = regex.compile(r"\p{Script=Han}")


def scripts_of(text: str) -> dict[str, int]:
    """Return the script groups of ``text`` with their letter counts.

    Groups: ``cased`` (letters with case: Latin, Greek, Cyrillic, Armenian, ...), ``ja``
    (Han with any kana: Japanese), ``zh`` (Han, no kana), ``caseless`` (every other
    letter: Hangul, Thai, Arabic, Hebrew, Devanagari, ...). Combining marks are not
    letters; digits and punctuation count nowhere. A text with no letter gives ``{}``.
    """
    out: Counter[str] = Counter()
    kana = len(_KANA.findall(text))
    han = len(_HAN.findall(text))
    cased = len(_CASED_LETTER.findall(text))
    if cased:
        out["cased"] = cased
    if han or kana:
        out["ja" if kana else "zh"] = han + kana
    letters = len(regex.findall(r"\p{L}", text))
    other = letters - cased - han - kana
    if other > 0:
        out["caseless"] = other
    return dict(out)


CASELESS_RUN = regex.compile(r"[\p{Script=Han}\p{Script=Hiragana}\p{Script=Katakana}"
                              r"ー々〆" + "".join(rf"\p{{Script={s}}}" for s in CASELESS_SCRIPTS
                                                  if s not in ("Han", "Hiragana", "Katakana"))
                              + r"\p{M}]+")


# scripts written without spaces between words
_UNSPACED_RUN = regex.compile(r"(?:[\p{Script=Han}\p{Script=Hiragana}\p{Script=Katakana}ー々〆"
                              r"\p{Script=Thai}\p{Script=Lao}\p{Script=Khmer}"
                              r"\p{Script=Myanmar}]\p{M}*)+")


def unspaced(text: str) -> bool:
    """True when ``text`` holds a letter of a script written without spaces (Han, kana,
    Thai, Lao, Khmer, Myanmar): there a word may be one character of a longer run."""
    return bool(_UNSPACED_RUN.search(text))
