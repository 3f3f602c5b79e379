"""The retrieval knobs: the per-call defaults, and :class:`RetrievalConfig` (scoring),
defined with the settings (:class:`kgloom.settings.RetrievalConfig`).

Every name and default here is a knob the settings expose; change one only with the
measurement that chose it (bench/eval_qa.py).
"""

from __future__ import annotations

from kgloom.query.modes import RETRIEVAL_DEFAULTS
from kgloom.settings import RetrievalConfig  # the one definition, with the settings

# the per-call defaults, named (kgloom.query.modes.RETRIEVAL_DEFAULTS is their one list)
DEFAULT_TOP_K: int = RETRIEVAL_DEFAULTS["top_k"]
DEFAULT_DEPTH: int = RETRIEVAL_DEFAULTS["depth"]
DEFAULT_OVERSAMPLE: int = RETRIEVAL_DEFAULTS["oversample"]  # fused: entity candidates x top_k
DEFAULT_LAMBDA: float = RETRIEVAL_DEFAULTS["lam"]  # fused: overlap penalty
DEFAULT_DAMPING: float = RETRIEVAL_DEFAULTS["damping"]  # ppr: P(follow an edge), HippoRAG's 0.5

__all__ = ["DEFAULT_DAMPING", "DEFAULT_DEPTH", "DEFAULT_LAMBDA", "DEFAULT_OVERSAMPLE",
           "DEFAULT_TOP_K", "RetrievalConfig"]
