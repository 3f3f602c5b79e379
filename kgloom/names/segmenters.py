"""The ``segmenter`` candidate source (Chinese: jieba's part-of-speech tags; Japanese:
janome's): runs of nouns holding a proper-noun tag, plus quoted titles; and the words of
any script (:func:`word_spans`), by these segmenters where a script has no spaces.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, cast

import regex

from kgloom.names.lexicon import _WORD
from kgloom.names.scripts import _HAN, _KANA, _UNSPACED_RUN, CASELESS_RUN

if TYPE_CHECKING:
    from janome.tokenizer import Token


_JIEBA_PROPER = {"nr": "PERSON", "nrfg": "PERSON", "nrt": "PERSON", "ns": "LOCATION",
                 "nt": "ORGANIZATION", "nz": ""}
_JANOME_PROPER = {"人名": "PERSON", "地域": "LOCATION", "組織": "ORGANIZATION", "一般": ""}


_CJK_QUOTED = regex.compile(r"[《『「〈【]([^》』」〉】\n。！？]{1,40})[》』」〉】]")


@functools.lru_cache(maxsize=1)
def _jieba():
    import jieba
    import jieba.posseg

    jieba.setLogLevel(logging.WARNING)
    jieba.initialize()
    return jieba.posseg


@functools.lru_cache(maxsize=1)
def _janome():
    from janome.tokenizer import Tokenizer

    return Tokenizer()


def _janome_tokens(text: str) -> Iterator[Token]:
    """janome's tokens of ``text`` (its annotation adds ``str``, what only ``wakati=True``
    yields)."""
    return cast("Iterator[Token]", _janome().tokenize(text))


def segmenter_available(group: str) -> bool:
    """True when the segmenter of script group ``group`` (``zh``: jieba, ``ja``: janome)
    is installed."""
    import importlib.util

    mod = {"zh": "jieba", "ja": "janome"}.get(group)
    return bool(mod) and importlib.util.find_spec(mod) is not None


def _noun_runs(tokens: list[tuple[str, bool, bool, str]]) -> list[tuple[str, str]]:
    """(word, is_noun, is_proper, type hint) tokens -> (name, hint) for each run of nouns
    holding a proper noun, and each proper noun on its own; names of one character are
    dropped."""
    out: list[tuple[str, str]] = []
    run: list[tuple[str, bool, bool, str]] = []

    def flush() -> None:
        if any(p for _, _, p, _ in run):
            hint = next((h for _, _, p, h in run if p and h), "")
            name = "".join(w for w, *_ in run)
            if len(name) >= 2:
                out.append((name, hint))
            for w, _, p, h in run:
                if p and len(w) >= 2 and w != name:
                    out.append((w, h))
        run.clear()

    for tok in tokens:
        if tok[1]:
            run.append(tok)
        else:
            flush()
    flush()
    return out


def _segment_zh(text: str) -> list[tuple[str, str]]:
    toks = []
    for w in _jieba().cut(text):
        flag = w.flag
        proper = flag in _JIEBA_PROPER
        noun = flag.startswith("n") and flag not in ("ng",)
        toks.append((w.word, noun, proper, _JIEBA_PROPER.get(flag, "")))
    return _noun_runs(toks)


def _segment_ja(text: str) -> list[tuple[str, str]]:
    toks = []
    for t in _janome_tokens(text):
        pos = t.part_of_speech.split(",")
        noun = pos[0] == "名詞" and pos[1] not in ("数", "非自立", "代名詞", "副詞可能")
        proper = noun and pos[1] == "固有名詞"
        toks.append((t.surface, noun, proper, _JANOME_PROPER.get(pos[2], "") if proper else ""))
    return _noun_runs(toks)


def _segmenter_names(text: str, group: str) -> list[tuple[str, int, str]]:
    out: list[tuple[str, int, str]] = []
    for m in _CJK_QUOTED.finditer(text):
        out.append((m.group(1), m.start(), ""))
    seg = _segment_zh if group == "zh" else _segment_ja
    for m in CASELESS_RUN.finditer(text):  # runs of the script, so Latin text is left out
        for name, hint in seg(m.group(0)):
            out.append((name, m.start() + m.group(0).find(name), hint))
    return out


def word_spans(text: str) -> list[tuple[int, int]]:
    """Return the (start, end) character offsets of the words of ``text``, in order, for
    any script: runs of letters, marks and digits (with inner ' ’ - joints) in scripts
    written with spaces; in the runs of scripts written without them (Han, kana, Thai,
    Lao, Khmer, Myanmar), the words of the segmenter extraction uses (jieba for Chinese,
    janome for Japanese, when installed), else one word per character (a name is then
    any run of them). Punctuation and spaces are in no word.
    """
    group = "ja" if _KANA.search(text) else "zh"
    out: list[tuple[int, int]] = []
    pos = 0
    for m in _UNSPACED_RUN.finditer(text):
        out += [(pos + a.start(), pos + a.end()) for a in _WORD.finditer(text[pos:m.start()])]
        run = m.group(0)
        words: list[str] = []
        if (_HAN.search(run) or _KANA.search(run)) and segmenter_available(group):
            words = ([w.word for w in _jieba().cut(run)] if group == "zh"
                     else [t.surface for t in _janome_tokens(run)])
        if "".join(words) != run:  # no segmenter (or it changed the text): characters
            words = regex.findall(r"\X", run)
        a = m.start()
        for w in words:
            out.append((a, a + len(w)))
            a += len(w)
        pos = m.end()
    out += [(pos + a.start(), pos + a.end()) for a in _WORD.finditer(text[pos:])]
    return out
