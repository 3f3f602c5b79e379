"""The one settings model of kgloom and the one function that loads it (no Dagster here).

Sections, one module each (``docs/configuration.md`` lists every key):

- ``paths``: :class:`PathsSettings` (:mod:`kgloom.settings.paths_settings`), the input and output
  folders;
- ``index``: :class:`IndexSettings` (:mod:`kgloom.settings.indexing`), the knobs of an
  index build;
- ``llm``: :class:`LLMSettings` (:mod:`kgloom.settings.llm_settings`), the model (a GGUF file run
  in-process, OpenAI-compatible model servers, or the fake model) that indexing *and*
  search use;
- ``embedder``: :class:`EmbedderSettings` (:mod:`kgloom.settings.embedder_settings`), the
  sentence-transformers folder;
- ``retrieval``: :class:`RetrievalSettings` (:mod:`kgloom.settings.retrieval_settings`), the one
  class of retrieval knobs: the per-query options' defaults, the graph backend and the
  scoring knobs (a :class:`kgloom.query.retriever.Retriever` holds one);
- ``search``: :class:`SearchSettings` (:mod:`kgloom.settings.search_settings`), the one class of
  search knobs (a :class:`kgloom.query.searcher.Searcher` holds one).

This package holds :class:`Settings`, the loader and the re-exports
(``from kgloom.settings import Settings, load_settings, RetrievalSettings, ...``).

:func:`load_settings` reads them, later layers winning: the defaults, one YAML file
(``--config FILE``, else env ``KGLOOM_CONFIG``, else the older ``KGLOOM_SETTINGS``, else
``./kgloom.yaml`` when it exists), the environment (the named variables of
:data:`ENV_VARS`, then ``KGLOOM_<SECTION>__<KEY>`` for any key), then overrides
(``--set section.key=value`` and the CLI's own flags). The CLI, the Dagster code location
(:mod:`kgloom.resources`), ``kgloom query`` and ``kgloom serve`` all call it.

This module imports only pydantic and the standard library (PyYAML when a file is read),
so ``kgloom query`` loads it before it checks its options, without numpy or Dagster.
"""

from __future__ import annotations

import os
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pydantic
from pydantic import BaseModel

from kgloom.settings.embedder_settings import EmbedderSettings
from kgloom.settings.indexing import (
    IndexSettings,
    load_settings_file,
    split_list,
    validation_message,
)
from kgloom.settings.llm_settings import LLMSettings
from kgloom.settings.paths_settings import PathsSettings
from kgloom.settings.retrieval_settings import DEFAULT_RETRIEVAL, QUERY_OPTIONS, RetrievalSettings
from kgloom.settings.search_settings import DEFAULT_THRESHOLD, LOCAL_SHARES, SearchSettings
from kgloom.settings.section import Section

__all__ = ["CONFIG_ENV", "DEFAULT_CONFIG_FILE", "DEFAULT_RETRIEVAL", "DEFAULT_THRESHOLD",
           "ENV_VARS", "LEGACY_SETTINGS_ENV", "LOCAL_SHARES", "PROCESS_ENV_VARS",
           "QUERY_OPTIONS", "SECTIONS", "EmbedderSettings", "IndexSettings", "LLMSettings",
           "PathsSettings", "RetrievalSettings", "SearchSettings", "Section", "Settings",
           "SettingsError", "config_file_path", "load_settings", "parse_set"]

DEFAULT_CONFIG_FILE = "kgloom.yaml"  # read from the working folder when no file is named
CONFIG_ENV, LEGACY_SETTINGS_ENV = "KGLOOM_CONFIG", "KGLOOM_SETTINGS"


class SettingsError(ValueError):
    """A settings file, variable or override kgloom cannot use; the message names the key
    (``section.key``) and where it came from."""


class Settings(Section):
    """Every setting of kgloom, by section (module docstring). Frozen; build one with
    :func:`load_settings`."""

    paths: PathsSettings = PathsSettings()
    index: IndexSettings = IndexSettings()
    llm: LLMSettings = LLMSettings()
    embedder: EmbedderSettings = EmbedderSettings()
    retrieval: RetrievalSettings = RetrievalSettings()
    search: SearchSettings = SearchSettings()


SECTIONS: dict[str, type[BaseModel]] = {
    name: typing.cast(type[BaseModel], info.annotation)
    for name, info in Settings.model_fields.items()}

# the environment variables kgloom has always read, by the setting each sets; any setting
# can also be given as KGLOOM_<SECTION>__<KEY> (e.g. KGLOOM_RETRIEVAL__HOP_DECAY=0.3)
ENV_VARS: dict[str, str] = {
    "KGLOOM_INPUT_DIR": "paths.input_dir",
    "KGLOOM_OUTPUT_DIR": "paths.output_dir",
    "KGLOOM_MODEL_PATH": "llm.model_path",
    "KGLOOM_N_GPU_LAYERS": "llm.n_gpu_layers",
    "KGLOOM_N_THREADS": "llm.n_threads",
    "KGLOOM_FAKE_LLM": "llm.fake",
    "KGLOOM_LLM_URL": "llm.urls",
    "KGLOOM_LLM_MODEL": "llm.model",
    "KGLOOM_LLM_API_KEY": "llm.api_key",
    "KGLOOM_LLM_CONCURRENCY": "llm.llm_concurrency",
    "KGLOOM_LLM_SLOTS": "llm.llm_slots",
    "KGLOOM_LLM_TIMEOUT_S": "llm.request_timeout_s",
    "KGLOOM_LLM_SCHEMA_FORMAT": "llm.schema_format",
    "KGLOOM_LLM_CACHE": "llm.cache_path",
    "KGLOOM_EMBEDDER_PATH": "embedder.model_path",
}


# the process variables: read where they act, not settings (docs/configuration.md has the
# table); variable -> (who reads it, what it does). With ENV_VARS, KGLOOM_<SECTION>__<KEY>,
# KGLOOM_CONFIG and KGLOOM_SETTINGS, these are every variable kgloom reads (a unit test
# reads the code for them).
PROCESS_ENV_VARS: dict[str, tuple[str, str]] = {
    CONFIG_ENV: ("kgloom.settings.load_settings", "the settings file (else ./kgloom.yaml)"),
    LEGACY_SETTINGS_ENV: ("kgloom.settings.load_settings", "KGLOOM_CONFIG's older name"),
    "KGLOOM_API_KEY": ("kgloom serve, kgloom mcp --transport http",
                       "the API key requests must send (--api-key-env names another "
                       "variable); unset: no key"),
    "KGLOOM_EXECUTOR": ("kgloom.definitions (the code location)",
                        "in_process | multiprocess | celery | k8s: the runs' executor"),
    "KGLOOM_CELERY_BROKER": ("kgloom.definitions, as a Dagster EnvVar",
                             "the Celery executor's broker URL (deploy/README.md)"),
    "KGLOOM_CELERY_BACKEND": ("kgloom.definitions, as a Dagster EnvVar",
                              "the Celery executor's result backend URL"),
    "DAGSTER_HOME": ("the CLI (set per command), kgloom.pipelines.instance, kgloom logs",
                     "the Dagster instance folder; unset: <output folder>/.dagster_home"),
    "KGLOOM_MODEL_CACHE": ("kgloom.llm.model_files",
                           "where converted GGUF weights go (default ~/.cache/kgloom/models)"),
    "KGLOOM_CACHE_DIR": ("kgloom.embedding.onnx_runtime",
                         "kgloom's cache folder (the ONNX embedder export); default "
                         "$XDG_CACHE_HOME/kgloom"),
    "XDG_CACHE_HOME": ("kgloom.embedding.onnx_runtime, kgloom serve",
                       "the user's cache folder (default ~/.cache): the ONNX export, "
                       "serve's answer cache"),
    "KGLOOM_EMBEDDER_BACKEND": ("kgloom.embedding",
                                "auto | onnx | torch: how the embedder runs"),
    "KGLOOM_TORCH_EMBEDDER": ("kgloom.embedding", "1: never the fast (ONNX) path"),
    "KGLOOM_FAKE_LLM_DELAY_S": ("kgloom.settings.LLMSettings.open_cached",
                                "seconds each fake-model call sleeps (crash tests, demos)"),
    "HF_HUB_OFFLINE": ("kgloom.embedding (set to 1 unless given)",
                       "Hugging Face libraries never reach the network"),
    "_RJEM_MALLOC_CONF": ("kgloom/__init__.py (set unless given)",
                          "polars' jemalloc: return freed memory at once"),
}


def _key(dotted: str, source: str) -> tuple[str, str]:
    """``section.key`` (a bare ``key`` is an index setting, as ``--set chunk_size=400``
    always was) split and checked.

    Raises:
        SettingsError: naming the unknown section or key, with the known ones.
    """
    section, sep, key = dotted.partition(".")
    if not sep:
        section, key = "index", dotted
    if section not in SECTIONS:
        raise SettingsError(f"unknown settings section {section!r} in {dotted!r} ({source}); "
                            f"known: {', '.join(SECTIONS)}")
    fields = SECTIONS[section].model_fields
    if key not in fields:
        raise SettingsError(f"unknown setting {section}.{key} ({source}); known in "
                            f"{section}: {', '.join(sorted(fields))}")
    return section, key


def _is_sequence(section: str, key: str) -> bool:
    origin = typing.get_origin(SECTIONS[section].model_fields[key].annotation)
    return origin in (list, tuple)


def config_file_path(config_file: str | Path | None = None,
                     env: Mapping[str, str] | None = None) -> Path | None:
    """The settings file to read: ``config_file``, else env ``KGLOOM_CONFIG``, else env
    ``KGLOOM_SETTINGS`` (its older name), else ``./kgloom.yaml`` when it exists, else
    None."""
    env = os.environ if env is None else env
    named = config_file or env.get(CONFIG_ENV) or env.get(LEGACY_SETTINGS_ENV)
    if named:
        return Path(named)
    default = Path(DEFAULT_CONFIG_FILE)
    return default if default.is_file() else None


def _file_layer(path: Path) -> dict[str, dict[str, Any]]:
    """The sections of a settings file. A file whose top-level keys are not section
    names is the older form, a mapping of index settings (optionally under
    ``settings:``): it is the ``index`` section.

    Raises:
        FileNotFoundError: the file does not exist.
        SettingsError: not YAML, not a mapping, a section that is not a mapping, or an
            unknown key (named).
    """
    try:
        data = load_settings_file(path)
    except ValueError as exc:
        raise SettingsError(str(exc)) from None
    if not set(data) & set(SECTIONS):
        # the older form, index settings only; a mapping under an unknown name is more
        # likely a misspelt section than an index setting
        sections = [k for k, v in data.items() if isinstance(v, dict)]
        if sections:
            raise SettingsError(f"unknown settings section {sections[0]!r} in {path}; "
                                f"known: {', '.join(SECTIONS)}")
        data = {"index": data}
    out: dict[str, dict[str, Any]] = {}
    for section, values in data.items():
        if section not in SECTIONS:
            raise SettingsError(f"unknown settings section {section!r} in {path}; known: "
                                f"{', '.join(SECTIONS)}")
        if not isinstance(values, dict):
            raise SettingsError(f"section {section!r} of {path} must be a mapping of "
                                "setting names to values")
        for key in values:
            _key(f"{section}.{key}", str(path))
        out[section] = dict(values)
    return out


def _env_layer(env: Mapping[str, str]) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The settings the environment gives (empty values count as unset), and for each
    ``section.key`` the variable it came from.

    Raises:
        SettingsError: for ``KGLOOM_<SECTION>__<KEY>`` naming an unknown setting.
    """
    out: dict[str, dict[str, Any]] = {}
    origin: dict[str, str] = {}
    items = [(var, dotted) for var, dotted in ENV_VARS.items()]
    for var in sorted(env):
        head, sep, key = var.partition("__")
        if sep and head.startswith("KGLOOM_"):
            items.append((var, f"{head.removeprefix('KGLOOM_').lower()}.{key.lower()}"))
    for var, dotted in items:
        raw = env.get(var, "")
        if raw == "":
            continue
        section, key = _key(dotted, f"env {var}")
        out.setdefault(section, {})[key] = split_list(raw) if _is_sequence(section, key) else raw
        origin[f"{section}.{key}"] = var
    return out, origin


def _env_message(exc: pydantic.ValidationError, origin: dict[str, str]) -> str | None:
    """A message naming the environment variable whose value was refused, in the words
    kgloom always used (``KGLOOM_N_THREADS must be an integer, got 'four'``); None when
    no error comes from a variable."""
    for err in exc.errors():
        dotted = ".".join(str(p) for p in err["loc"][:2])
        if dotted in origin:
            section, key = dotted.split(".")
            tp = SECTIONS[section].model_fields[key].annotation
            kind = {int: "an integer", float: "a number", bool: "true or false"}.get(
                typing.cast(type, tp), "valid")
            return (f"{origin[dotted]} must be {kind}, got {err['input']!r} "
                    f"(setting {dotted}: {err['msg']})")
    return None


def load_settings(config_file: str | Path | None = None,
                  overrides: Mapping[str, Any] | None = None,
                  env: Mapping[str, str] | None = None) -> Settings:
    """The settings: defaults, then the settings file, then the environment, then
    ``overrides``, each later one winning key by key.

    Args:
        config_file: a YAML file (default: :func:`config_file_path`). Top-level keys are
            sections (``paths``, ``index``, ``llm``, ``embedder``, ``retrieval``,
            ``search``); a file of bare index settings (the older ``--settings`` form,
            optionally under ``settings:``) is the ``index`` section.
        overrides: ``section.key`` (or a bare index setting) -> value: the CLI's ``--set``
            pairs and flags. None values are skipped. Strings are converted by the
            field's type (pydantic's lax mode: ``"5"`` -> 5, ``"true"`` -> True); a
            comma-separated string gives a list.
        env: the environment (default ``os.environ``): the variables of :data:`ENV_VARS`
            and ``KGLOOM_<SECTION>__<KEY>``.

    Returns:
        a frozen :class:`Settings`.

    Raises:
        FileNotFoundError: the named settings file does not exist.
        SettingsError (a ValueError): an unknown section or key, or a value its field
            refuses; the message names the key (and the variable or file it came from).
    """
    env = os.environ if env is None else env
    layers: list[dict[str, dict[str, Any]]] = []
    path = config_file_path(config_file, env)
    if path is not None:
        layers.append(_file_layer(path))
    env_values, origin = _env_layer(env)
    layers.append(env_values)
    over: dict[str, dict[str, Any]] = {}
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        section, key = _key(dotted, "override")
        over.setdefault(section, {})[key] = (split_list(value) if _is_sequence(section, key)
                                             else value)
        origin.pop(f"{section}.{key}", None)  # no longer the variable's value
    layers.append(over)
    merged: dict[str, dict[str, Any]] = {}
    for layer in layers:
        for section, values in layer.items():
            merged.setdefault(section, {}).update(values)
    try:
        return Settings.model_validate(merged)
    except pydantic.ValidationError as exc:
        raise SettingsError(_env_message(exc, origin) or validation_message(exc)) from None


def parse_set(pairs: list[str]) -> dict[str, str]:
    """The CLI's ``--set`` items, ``section.key=value`` (or ``key=value`` for an index
    setting), as ``{dotted key: raw string}`` for :func:`load_settings`.

    Raises:
        SettingsError: an item without ``=`` or with an empty key.
    """
    from kgloom.settings.indexing import parse_assignments

    try:
        return parse_assignments(pairs)
    except ValueError as exc:
        raise SettingsError(str(exc)) from None
