"""The retrieval knobs: the per-call defaults, and :class:`RetrievalConfig` (scoring),
defined with the settings (:class:`kgloom.settings.RetrievalConfig`).

Every name and default here is a knob the settings expose; change one only with the
measurement that chose it (bench/eval_qa.py).
"""

from __future__ import annotations

from kgloom.settings import RetrievalConfig  # the one definition, with the settings

DEFAULT_TOP_K = 5
DEFAULT_DEPTH = 1
DEFAULT_OVERSAMPLE = 5  # fused: entity candidates = 5 x top_k (the fused-retrieve default)
DEFAULT_LAMBDA = 1.0  # fused: overlap penalty
DEFAULT_DAMPING = 0.5  # ppr: probability of following an edge (HippoRAG uses 0.5)

__all__ = ["DEFAULT_DAMPING", "DEFAULT_DEPTH", "DEFAULT_LAMBDA", "DEFAULT_OVERSAMPLE",
           "DEFAULT_TOP_K", "RetrievalConfig"]
