"""The one registry of query modes and of the options each mode reads.

Imports nothing beyond the standard library, so ``kgloom query`` checks a mode and its
options before it loads numpy, polars, LanceDB or a model (a bad ``--mode`` used to be
reported after ~35 s of loading). :data:`kgloom.query.retrieval.MODES` maps each name of
:data:`RETRIEVAL_MODES` to its function (one module per mode), and
:mod:`kgloom.query.searcher` takes its mode list from here. The per-query options'
defaults are :class:`kgloom.settings.RetrievalSettings`' fields, not written here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

# Retrieval: ranked text units, no model call (kgloom/query/retrieval/<mode>.py).
RETRIEVAL_MODES: tuple[str, ...] = ("bridge", "vector", "one_hop", "multihop", "fused", "ppr",
                                    "hybrid", "two_step")
# Search: an answer from the model over a cited context (kgloom.query.searcher.Searcher;
# the methods in kgloom/query/structured_search/).
SEARCH_MODES: tuple[str, ...] = ("auto", "local", "global", "direct")
MODES: tuple[str, ...] = RETRIEVAL_MODES + SEARCH_MODES
DEFAULT_MODE = "bridge"
GRAPH_BACKENDS: tuple[str, ...] = ("duckdb", "memory")

# option (the CLI parameter name) -> the modes that read it; an option not listed here is
# read by every mode (question, output_dir, top_k, embedder_path, json).
OPTION_MODES: dict[str, tuple[str, ...]] = {
    "depth": ("multihop", "fused", "two_step"),
    "lam": ("fused",),
    "oversample": ("fused",),
    "damping": ("ppr", "hybrid"),
    "graph_backend": RETRIEVAL_MODES,
    "dynamic": ("global", "auto"),  # auto may route to global search
    "keep_parent": ("global", "auto"),
    "level": ("global", "auto"),
    "answer": SEARCH_MODES,
    "budget": ("local", "direct", "auto"),
    "model_path": SEARCH_MODES,
    "fake_llm": SEARCH_MODES,
    "cache_path": SEARCH_MODES,
}


def one_of(name: str, value: Any, valid: Iterable[str]) -> str:
    """The message for a value outside its valid set, listing every valid value."""
    return f"{name} must be one of {', '.join(valid)}; got {value!r}"


def check_mode(mode: str, valid: tuple[str, ...] = MODES) -> str:
    """Return ``mode`` when it is one of ``valid`` (default: every mode).

    Raises:
        ValueError: naming the bad mode and listing every valid one.
    """
    if mode not in valid:
        raise ValueError(one_of("mode", mode, valid))
    return mode


def ignored_options(mode: str, given: Iterable[str]) -> list[str]:
    """The options in ``given`` (CLI parameter names) that ``mode`` does not read, in
    the order given."""
    return [o for o in given if o in OPTION_MODES and mode not in OPTION_MODES[o]]


def check_question(question: Any, max_chars: int | None = None, name: str = "question") -> str:
    """Return ``question`` when it is text a query can embed and print: a string with a
    character that is not whitespace, no lone surrogate (U+D800..U+DFFF: what Python makes
    of command-line bytes that are not UTF-8, or a JSON escape such as ``\\ud800``), and
    at most ``max_chars`` characters (None: no limit).

    Raises:
        ValueError: naming ``name`` and the problem (the first lone surrogate's position).
    """
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"{name} must be a non-empty string")
    if max_chars is not None and len(question) > max_chars:
        raise ValueError(f"{name} has {len(question)} characters; at most {max_chars}")
    try:
        question.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{name} is not text: character {exc.start + 1} is a lone "
                         f"surrogate (U+{ord(question[exc.start]):04X}), e.g. a byte that is "
                         "not UTF-8; is the terminal's encoding UTF-8?") from exc
    return question


def check_options(mode: str, values: Mapping[str, Any]) -> None:
    """Check ``mode`` and the option values a query would use, before anything loads.

    Args:
        mode: one of :data:`MODES`.
        values: option name -> value (None: not given), any of ``top_k`` (> 0),
            ``depth`` (>= 0), ``lam`` (finite, >= 0), ``oversample`` (> 0), ``damping``
            (in [0, 1)), ``graph_backend`` (one of :data:`GRAPH_BACKENDS`), ``level``
            (>= 0), ``budget`` (> 0); other names are not checked here.

    Raises:
        ValueError: the first bad value, named, with its valid range or values.
    """
    check_mode(mode)
    v = {k: x for k, x in values.items() if x is not None}
    rules = (("top_k", lambda x: x > 0, "> 0"), ("depth", lambda x: x >= 0, ">= 0"),
             ("lam", lambda x: 0 <= x < math.inf, "finite and >= 0"),
             ("oversample", lambda x: x > 0, "> 0"),
             ("damping", lambda x: 0 <= x < 1, "in [0, 1)"),
             ("level", lambda x: x >= 0, ">= 0"), ("budget", lambda x: x > 0, "> 0"))
    for name, ok, rule in rules:
        if name in v and not ok(v[name]):
            shown = "lambda" if name == "lam" else name
            raise ValueError(f"{shown} must be {rule}, got {v[name]}")
    if "graph_backend" in v and v["graph_backend"] not in GRAPH_BACKENDS:
        raise ValueError(one_of("graph_backend", v["graph_backend"], GRAPH_BACKENDS))


# the per-query options of a retrieval (besides top_k); their defaults are the fields of the
# same names of kgloom.settings.RetrievalSettings (written there only)
RETRIEVAL_OPTIONS: tuple[str, ...] = ("depth", "lam", "oversample", "damping")


def mode_options(mode: str) -> tuple[str, ...]:
    """The per-query options of :data:`RETRIEVAL_OPTIONS` that retrieval mode ``mode``
    reads (see :data:`OPTION_MODES`), in that order; () for a mode that reads none."""
    return tuple(k for k in RETRIEVAL_OPTIONS if mode in OPTION_MODES[k])


def retrieval_params(mode: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments of ``Retriever.retrieve(question, mode, **params)`` a request
    gives: ``top_k`` and the options of :func:`mode_options` that ``values`` holds (None or
    absent: not given; the Retriever then uses its settings' value). Values are not
    checked here (see :func:`check_options`)."""
    return {k: values[k] for k in ("top_k", *mode_options(mode))
            if values.get(k) is not None}
