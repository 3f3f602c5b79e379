"""A numpy BERT encoder for queries: the embedder's vectors without torch.

Importing sentence-transformers loads transformers and torch: seconds at every cold
``kgloom query`` for a question of a few tokens. :class:`FastEmbedder` computes the same
vectors as :class:`kgloom.embedding.sentence_embedder.Embedder` for a sentence-transformers
folder of the all-MiniLM-L6-v2 kind (a BERT encoder, mean pooling, unit length) with the
``tokenizers`` library and numpy alone, reading the folder's ``model.safetensors``
(``safetensors.numpy``); :func:`query_embedder` picks it when the folder is of that kind
and falls back to the sentence-transformers :class:`Embedder` otherwise. No Dagster, no
polars here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from kgloom.embedding import default_embedder_path
from kgloom.embedding.windows import WindowedEmbedder

# sentence-transformers module types of a folder FastEmbedder reproduces, in order
_ST_MODULES = ("sentence_transformers.models.Transformer", "sentence_transformers.models.Pooling",
               "sentence_transformers.models.Normalize")


def _read_json(path: Path) -> object:
    """The JSON value in ``path``; None when it is missing, unreadable or not JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _read_json_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; {} when it is missing, unreadable, not JSON or not
    an object (a config file of the wrong shape then fails the checks as one naming
    nothing)."""
    value = _read_json(path)
    return value if isinstance(value, dict) else {}


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
    pooling = _read_json_object(folder / modules[1]["path"] / "config.json")
    modes = {k for k, v in pooling.items() if k.startswith("pooling_mode") and v}
    if modes != {"pooling_mode_mean_tokens"}:
        return f"pooling is {sorted(modes)}, not mean tokens"
    config = _read_json_object(folder / "config.json")
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


class TokenizersEmbedder(WindowedEmbedder):
    """What the torch-free embedders of a :func:`fast_path_reason` folder share: the
    folder's checks, its window (``sentence_bert_config.json``'s ``max_seq_length``), its
    ``tokenizer.json`` on the ``tokenizers`` library (the same fast tokenizer
    sentence-transformers wraps), :attr:`dim` from ``config.json``. A subclass loads the
    weights and implements ``_encode``.

    Args:
        model_path: a folder :func:`fast_path_reason` accepts; default the bundled one.
        window_tokens, stride: as :class:`~kgloom.embedding.sentence_embedder.Embedder`.

    Raises:
        ValueError: a folder of another kind (the reason named), a bad window or stride.
    """

    def __init__(self, model_path: str | Path | None = None, window_tokens: int | None = None,
                 stride: int | None = None) -> None:
        from tokenizers import Tokenizer

        self.model_path = str(model_path or default_embedder_path())
        folder = Path(self.model_path)
        reason = fast_path_reason(folder)
        if reason:
            raise ValueError(f"{folder}: {reason}; use kgloom.embedding.sentence_embedder.Embedder")
        self.config = _read_json_object(folder / "config.json")
        st_config = _read_json_object(folder / "sentence_bert_config.json")
        max_len = int(st_config.get("max_seq_length")
                      or self.config.get("max_position_embeddings", 512))
        self._set_windows(max_len, window_tokens, stride)
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()

    @property
    def dim(self) -> int:
        """Embedding dimension (the model's hidden size; 384 for all-MiniLM-L6-v2)."""
        return int(self.config["hidden_size"])

    def _tokenize(self, text: str) -> tuple[list[tuple[int, int]], list[int | None]]:
        enc = self.tokenizer.encode(text, add_special_tokens=False)
        return enc.offsets, enc.word_ids

    def _token_counts(self, windows: list[str]) -> list[int]:
        return [len(e.ids) for e in
                self.tokenizer.encode_batch(windows, add_special_tokens=False)]


class FastEmbedder(TokenizersEmbedder):
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
    :class:`~kgloom.embedding.sentence_embedder.Embedder` is queried with the same key.
    Arguments and errors: :class:`TokenizersEmbedder`'s.
    """

    def __init__(self, model_path: str | Path | None = None, window_tokens: int | None = None,
                 stride: int | None = None) -> None:
        t0 = time.perf_counter()
        from safetensors.numpy import load_file

        super().__init__(model_path, window_tokens, stride)
        self.heads = int(self.config["num_attention_heads"])
        self.eps = float(self.config.get("layer_norm_eps", 1e-12))
        raw = load_file(str(Path(self.model_path) / "model.safetensors"))
        w = {k.removeprefix("bert."): v.astype(np.float32, copy=False) for k, v in raw.items()}
        w = {k.replace("LayerNorm.gamma", "LayerNorm.weight")
             .replace("LayerNorm.beta", "LayerNorm.bias"): v for k, v in w.items()}
        self._w = w
        self.layers = int(self.config["num_hidden_layers"])
        self.load_seconds = time.perf_counter() - t0

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

            def dense(h: np.ndarray, name: str, p: str = p) -> np.ndarray:
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
        threads = threads or 1
        try:
            with threadpool_limits(limits=threads, user_api="blas"):
                for i, enc in enumerate(self.tokenizer.encode_batch(windows)):
                    hidden = self._forward(np.asarray(enc.ids), np.asarray(enc.type_ids))
                    mean = hidden.mean(axis=0)
                    out[i] = mean / max(float(np.linalg.norm(mean)), 1e-12)
                    if progress and (i + 1) % 512 == 0:
                        progress(i + 1, len(windows))
        finally:
            self._count_pass(len(windows), threads, time.perf_counter() - t0)
        if progress:
            progress(len(windows), len(windows))
        return out


