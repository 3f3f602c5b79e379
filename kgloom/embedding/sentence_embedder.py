"""The sentence-transformers embedder an index is built with: windowed (no silent
truncation), L2-normalized float32, its forward passes on ONNX Runtime when an export
reproduces the model (:mod:`kgloom.embedding.onnx_runtime`). No Dagster here.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from kgloom.embedding import default_embedder_path
from kgloom.embedding.windows import PROGRESS_WINDOWS, WindowedEmbedder

# how windows are encoded: "auto" (ONNX Runtime when the folder allows it, else torch),
# "onnx" (fail without it), "torch" (sentence-transformers); env KGLOOM_EMBEDDER_BACKEND
BACKENDS = ("auto", "onnx", "torch")


class Embedder(WindowedEmbedder):
    """Sentence embeddings of arbitrary-length texts, L2-normalized float32.

    No silent truncation: sentence-transformers cuts every input at ``max_seq_length``
    tokens (256 for all-MiniLM-L6-v2) without a word. Instead each text is tokenized
    with the model's own tokenizer (with character offsets); a text longer than
    ``window_tokens - 2`` tokens (2 = [CLS] and [SEP]) is split into overlapping windows
    of at most that many tokens, starting every ``stride`` tokens, with both window ends
    moved to word boundaries (so a window's substring re-tokenizes to the same tokens)
    and cut from the text by the tokens' character offsets. All windows of all texts go
    through one batched ``SentenceTransformer.encode`` call; a text's vector is the mean
    of its window vectors weighted by each window's token count, then re-normalized to
    unit length. A text that fits is embedded exactly as sentence-transformers would.

    Source: sentence-transformers docs, "Input Sequence Length" (inputs past
    ``max_seq_length`` are truncated) and ``SentenceTransformer.encode``.

    Args:
        model_path: a sentence-transformers model folder; default the package's.
        window_tokens: tokens per window including the 2 special tokens; default and
            maximum ``model.max_seq_length`` (256).
        stride: tokens between window starts; default 3/4 of a window's content tokens
            (IndexSettings: 192 for 256). Must be in [1, window_tokens - 2].
        batch_size: windows per forward pass. 8 keeps the activations of a pass near
            0.1 GB. Peak resident memory over the loaded model, 256-token windows, 2-core
            machine: 48 book text units +102 MB at 8, +199 MB at 16; 128 units +190 MB at
            4, +330 MB at 16, +590 MB at 64. CPU seconds were the same at 8 and 16 on one
            thread (6.9-7.4 s vs 7.2-7.6 s for 32 units, 3 alternating runs).
            The peak of a 12 MB document's index is in the vector stage, so this bounds it.
        backend: how windows are encoded (:data:`BACKENDS`; default env
            ``KGLOOM_EMBEDDER_BACKEND``, else "auto"): "auto" runs an ONNX export of the
            same model on ONNX Runtime when :func:`kgloom.embedding.onnx_runtime.onnx_encoder`
            can make and verify one (same vectors, 1.4-3.4x faster on 2 cores), else
            sentence-transformers; :attr:`backend` says which, and why.

    Raises:
        ValueError: on a window larger than the model accepts, a bad stride or backend,
            a model that names no max sequence length.
        RuntimeError: backend "onnx" when the ONNX path cannot be used (the reason named).
    """

    def __init__(self, model_path: str | Path | None = None, window_tokens: int | None = None,
                 stride: int | None = None, batch_size: int = 8,
                 backend: str | None = None) -> None:
        t0 = time.perf_counter()
        from sentence_transformers import SentenceTransformer

        self.model_path = str(model_path or default_embedder_path())
        self.model = SentenceTransformer(self.model_path, device="cpu")
        self.tokenizer = self.model.tokenizer
        max_len = self.model.max_seq_length  # None: a model with no tokenizer or length
        if max_len is None:
            raise ValueError(f"{self.model_path}: the model names no max sequence length")
        self._set_windows(int(max_len), window_tokens, stride)
        self.batch_size = batch_size
        backend = backend or os.environ.get("KGLOOM_EMBEDDER_BACKEND", "auto")
        if backend not in BACKENDS:
            raise ValueError(f"embedder backend must be one of {BACKENDS}, got {backend!r}")
        self._onnx = None
        self.backend = "torch: asked for"
        if backend != "torch":
            from kgloom.embedding.onnx_runtime import onnx_encoder

            self._onnx, self.backend = onnx_encoder(self.model_path, self.model,
                                                    self.tokenizer, batch_size)
            if self._onnx is None and backend == "onnx":
                raise RuntimeError(f"embedder backend onnx: {self.backend}")
        from kgloom.llm.cpu import BurstThreads

        self._bursts = BurstThreads()  # threads of each block, by others' CPU use
        # loading: importing sentence-transformers (transformers, torch) and the weights
        self.load_seconds = time.perf_counter() - t0
        self._load_claimed = False

    @property
    def dim(self) -> int:
        """Embedding dimension reported by the model (384 for all-MiniLM-L6-v2).

        Raises:
            ValueError: the model names none (sentence-transformers returns None).
        """
        get_dim = (getattr(self.model, "get_embedding_dimension", None)  # s-t >= 6
                   or self.model.get_sentence_embedding_dimension)
        dim = get_dim()  # None: no module of the model names its output size
        if dim is None:
            raise ValueError(f"{self.model_path}: the model names no embedding dimension")
        return int(dim)

    def _tokenize(self, text: str) -> tuple[list[tuple[int, int]], list[int | None]]:
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True,
                             verbose=False)
        return enc["offset_mapping"], enc.word_ids()

    def _token_counts(self, windows: list[str]) -> list[int]:
        ids = self.tokenizer(windows, add_special_tokens=False, verbose=False)["input_ids"]
        return [len(i) for i in ids]

    def release(self) -> None:
        """Drop the ONNX Runtime session when the passes run on one
        (:meth:`kgloom.embedding.onnx_runtime.OnnxEncoder.release`); torch's model stays."""
        if self._onnx is not None:
            self._onnx.release()

    def _encode(self, windows: list[str], threads: int | None,
                progress: Callable[[int, int], None] | None) -> np.ndarray:
        """Unit-length vectors of ``windows`` by ``SentenceTransformer.encode``.

        ``progress(done, total)``, when given, is called after every
        :data:`PROGRESS_WINDOWS` windows encoded (windows: the model-sized pieces of the
        texts), so a long pass shows it is moving.

        ``threads`` caps torch's intra-op threads for this call (restored after). A query
        of a few words runs ~10x faster on one thread than on two when the other core is
        busy (measured on the 2-core machine: 16 ms vs 166 ms), so query paths pass 1;
        None picks them before each block of :data:`PROGRESS_WINDOWS` windows by other
        processes' CPU use (:class:`kgloom.llm.cpu.BurstThreads`). Each block's seconds
        are counted in :meth:`passes` by its threads (the model time of the index's cost
        table).
        """
        import torch

        pick = (lambda: threads) if threads else self._bursts.pick
        if self._onnx is not None:
            return self._onnx.encode(windows, pick, progress, PROGRESS_WINDOWS,
                                     self._count_pass)
        before = torch.get_num_threads()
        parts = []
        try:
            for start in range(0, len(windows), PROGRESS_WINDOWS):
                t0, n_threads = time.perf_counter(), pick()
                torch.set_num_threads(n_threads)
                block = windows[start:start + PROGRESS_WINDOWS]
                parts.append(self.model.encode(
                    block, batch_size=self.batch_size, convert_to_numpy=True,
                    normalize_embeddings=True, show_progress_bar=False))
                self._count_pass(len(block), n_threads, time.perf_counter() - t0)
                if progress:
                    progress(start + len(block), len(windows))
            return np.concatenate(parts)
        finally:
            torch.set_num_threads(before)


@functools.lru_cache(maxsize=1)
def _malloc_trim():
    """glibc's ``malloc_trim``, or None on another C library."""
    libc = ctypes.util.find_library("c")
    return getattr(ctypes.CDLL(libc), "malloc_trim", None) if libc else None


def release_memory() -> None:
    """Collect garbage and hand freed heap pages back to the OS (glibc ``malloc_trim``;
    a no-op elsewhere). Torch's buffers of each forward pass otherwise stay resident
    between passes, so resident memory would grow with the work done, not its size."""
    gc.collect()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
