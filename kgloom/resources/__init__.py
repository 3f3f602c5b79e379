"""Dagster resources: each wraps one external thing (the LLM, the embedder, the paths and
settings), and the one place that reads the ``KGLOOM_*`` environment variables.

Environment (the UI, the sensor and the schedule see the code location's resources; the
CLI passes its options instead and falls back to the same variables):

- ``KGLOOM_INPUT_DIR`` / ``KGLOOM_OUTPUT_DIR``: the folders (default ``data/input``,
  ``data/output``); given to the code location as ``dg.EnvVar`` so the launchpad shows
  where a value comes from and it is read when a run starts, not when the code loads.
- ``KGLOOM_SETTINGS``: a YAML file of :class:`kgloom.config.IndexSettings` values (see
  :func:`kgloom.config.load_settings_file`), the resource's defaults.
- ``KGLOOM_MODEL_PATH``, ``KGLOOM_N_GPU_LAYERS``, ``KGLOOM_N_THREADS`` (llama.cpp
  threads in-process; 0 or unset: chosen per call from the machine's load),
  ``KGLOOM_FAKE_LLM=1`` (no model),
  ``KGLOOM_LLM_URL`` (OpenAI-compatible model servers, comma-separated),
  ``KGLOOM_LLM_MODEL``, ``KGLOOM_LLM_API_KEY``, ``KGLOOM_LLM_CONCURRENCY``,
  ``KGLOOM_LLM_SLOTS``, ``KGLOOM_LLM_TIMEOUT_S``, ``KGLOOM_LLM_SCHEMA_FORMAT``,
  ``KGLOOM_LLM_CACHE`` (the LLM cache file): the LLM resource.
- ``KGLOOM_EMBEDDER_PATH``: a sentence-transformers model folder (default the bundled
  all-MiniLM-L6-v2).
"""

from __future__ import annotations

import os

import dagster as dg

from kgloom.config import load_settings_file, settings_fields, settings_from_mapping
from kgloom.llm.http import parse_urls
from kgloom.resources.embedder import EmbedderResource
from kgloom.resources.index import IndexConfigResource
from kgloom.resources.model import LLMResource

__all__ = ["EmbedderResource", "IndexConfigResource", "LLMResource", "build_resources",
           "code_location_resources", "resolve_settings"]

DEFAULT_INPUT_DIR, DEFAULT_OUTPUT_DIR = "data/input", "data/output"


def _env_number(name: str, default: str, kind: type = int):
    """The number in env ``name`` (``default`` when unset).

    Raises:
        ValueError: naming the variable, when its value is not a number of ``kind``.
    """
    raw = os.environ.get(name, default)
    try:
        return kind(raw)
    except ValueError:
        raise ValueError(f"{name} must be {'an integer' if kind is int else 'a number'}, "
                         f"got {raw!r}") from None


def resolve_settings(settings_file: str | None = None, **settings) -> dict:
    """The index settings as resource field values: the defaults, then the YAML file
    ``settings_file`` (default: env ``KGLOOM_SETTINGS``, none when unset), then
    ``settings`` (field names of :class:`kgloom.config.IndexSettings`; None values are
    skipped). Only fields that differ from the defaults are returned.

    Raises:
        ValueError: for an unknown setting or a value its type or range refuses.
        FileNotFoundError: when the settings file does not exist.
    """
    path = settings_file or os.environ.get("KGLOOM_SETTINGS", "")
    values = dict(load_settings_file(path)) if path else {}
    values.update({k: v for k, v in settings.items() if v is not None})
    resolved = settings_from_mapping(values)  # checks names, types and ranges
    fields = settings_fields()
    out = {}
    for name in values:
        value = getattr(resolved, name)
        value = list(value) if isinstance(value, tuple) else value
        if value != fields[name][1]:
            out[name] = value
    return out


def _llm_resource(model_path: str | None, fake_llm: bool | None,
                  llm_urls: list[str] | None, llm_concurrency: int | None) -> LLMResource:
    env = os.environ
    fake = fake_llm if fake_llm is not None else env.get("KGLOOM_FAKE_LLM", "") == "1"
    return LLMResource(
        model_path=model_path or env.get("KGLOOM_MODEL_PATH", ""),
        n_gpu_layers=_env_number("KGLOOM_N_GPU_LAYERS", "0"),
        n_threads=_env_number("KGLOOM_N_THREADS", "0"), fake=fake,
        urls=parse_urls(llm_urls if llm_urls else env.get("KGLOOM_LLM_URL", "")),
        model=env.get("KGLOOM_LLM_MODEL", ""), api_key=env.get("KGLOOM_LLM_API_KEY", ""),
        llm_concurrency=(llm_concurrency if llm_concurrency is not None
                         else _env_number("KGLOOM_LLM_CONCURRENCY", "1")),
        llm_slots=_env_number("KGLOOM_LLM_SLOTS", "0"),
        request_timeout_s=_env_number("KGLOOM_LLM_TIMEOUT_S", "300", float),
        schema_format=env.get("KGLOOM_LLM_SCHEMA_FORMAT", "auto"),
        cache_path=env.get("KGLOOM_LLM_CACHE", ""))


def build_resources(input_dir: str | None = None, output_dir: str | None = None,
                    model_path: str | None = None, fake_llm: bool | None = None,
                    llm_urls: list[str] | None = None, llm_concurrency: int | None = None,
                    embedder_path: str | None = None, settings_file: str | None = None,
                    **settings) -> dict:
    """Return the resource dict ``{"index", "llm", "embedder"}`` with concrete values:
    unset arguments come from the ``KGLOOM_*`` variables (module docstring), settings
    from :func:`resolve_settings`. What the CLI, the tests and the benches use.

    Raises:
        ValueError: when a numeric ``KGLOOM_LLM_*`` variable is not a number, a URL in
            ``KGLOOM_LLM_URL`` is malformed, or a setting is unknown or invalid.
        FileNotFoundError: when the settings file does not exist.
    """
    env = os.environ
    return {
        "index": IndexConfigResource(
            input_dir=input_dir or env.get("KGLOOM_INPUT_DIR", DEFAULT_INPUT_DIR),
            output_dir=output_dir or env.get("KGLOOM_OUTPUT_DIR", DEFAULT_OUTPUT_DIR),
            **resolve_settings(settings_file, **settings)),
        "llm": _llm_resource(model_path, fake_llm, llm_urls, llm_concurrency),
        "embedder": EmbedderResource(
            model_path=embedder_path or env.get("KGLOOM_EMBEDDER_PATH", "")),
    }


def _folder(var: str, default: str):
    """``dg.EnvVar(var)`` when the variable is set (read at run start, shown as such in
    the launchpad), else ``default``."""
    return dg.EnvVar(var) if os.environ.get(var) else default


def code_location_resources() -> dict:
    """The resources of the Dagster code location (``kgloom.definitions``): as
    :func:`build_resources`, with the folders given as ``dg.EnvVar`` when set. The
    sensor and the schedule take these resources as arguments.

    Raises:
        see :func:`build_resources`.
    """
    resources = build_resources()
    resources["index"] = IndexConfigResource(
        input_dir=_folder("KGLOOM_INPUT_DIR", DEFAULT_INPUT_DIR),
        output_dir=_folder("KGLOOM_OUTPUT_DIR", DEFAULT_OUTPUT_DIR),
        **resolve_settings())
    return resources
