"""The retrieval-mode registry's options: every option kgloom.query.modes says a mode reads
is a parameter of its function in kgloom.query.retrieval.MODES, and no other mode's
function takes it (that the two name lists agree: tests/unit/test_settings.py)."""

from __future__ import annotations

import inspect

from kgloom.query import modes
from kgloom.query.retrieval import MODES, mode_function

# options that are settings of the call, not parameters of a mode's function
CALL_SETTINGS = {"graph_backend"}


def test_every_option_of_a_mode_is_a_parameter_of_its_function():
    missing = []
    for option, readers in modes.OPTION_MODES.items():
        if option in CALL_SETTINGS:
            continue
        for mode in readers:
            if mode in MODES and option not in inspect.signature(MODES[mode]).parameters:
                missing.append(f"{mode}: {option}")
    assert missing == []


def test_a_mode_not_said_to_read_an_option_does_not_take_it():
    taken = []
    for mode, fn in MODES.items():
        params = set(inspect.signature(fn).parameters)
        for option, readers in modes.OPTION_MODES.items():
            if option in params and mode not in readers:
                taken.append(f"{mode}: {option}")
    assert taken == []


def test_an_unknown_mode_names_every_retrieval_mode():
    try:
        mode_function("pagerank")
    except ValueError as exc:
        assert all(m in str(exc) for m in modes.RETRIEVAL_MODES)
    else:
        raise AssertionError("an unknown mode was accepted")


def test_the_module_door_fills_a_modes_options_from_the_settings(monkeypatch):
    """kgloom.query.retrieval.retrieve (local search's door) runs a mode as
    Retriever.retrieve does: top_k and the options the mode reads, when not given, are
    the settings' (local search's multihop ignored a settings file's depth before)."""
    from kgloom.query import retrieval
    from kgloom.settings import RetrievalSettings

    calls = []

    def record(index, question, top_k, settings, **options):
        calls.append((top_k, options))

    for mode in ("multihop", "bridge"):
        monkeypatch.setitem(retrieval.MODES, mode, record)
    settings = RetrievalSettings(top_k=7, depth=3, lam=0.4)
    retrieval.retrieve(None, "q", "multihop", settings=settings)  # type: ignore[arg-type]
    retrieval.retrieve(None, "q", "multihop", 2, settings, depth=1)  # type: ignore[arg-type]
    retrieval.retrieve(None, "q", "bridge", settings=settings)  # type: ignore[arg-type]
    assert calls == [(7, {"depth": 3}), (2, {"depth": 1}), (7, {})]
