"""Dagster resources: each wraps one external thing (the LLM, the embedder, the paths and
index settings), built from the one settings model (:func:`kgloom.settings.load_settings`:
``kgloom.yaml`` / ``KGLOOM_CONFIG``, the ``KGLOOM_*`` variables, overrides; see
``docs/configuration.md``).

The code location (the UI, the sensor and the schedule) and the CLI build their resources
here, so both read the same file and variables; the CLI's options are overrides.
``KGLOOM_INPUT_DIR`` / ``KGLOOM_OUTPUT_DIR``, when set, reach the code location as
``dg.EnvVar`` so the launchpad shows where a value comes from and it is read when a run
starts, not when the code loads.
"""

from __future__ import annotations

import os
from typing import Any

import dagster as dg

from kgloom.resources.embedder import EmbedderResource
from kgloom.resources.index import IndexConfigResource, IndexSettingsConfig
from kgloom.resources.model import LLMResource
from kgloom.settings import Settings, load_settings

__all__ = ["EmbedderResource", "IndexConfigResource", "IndexSettingsConfig", "LLMResource",
           "build_resources", "code_location_resources", "resources_from_settings"]


def resources_from_settings(settings: Settings, input_dir: Any = None,
                            output_dir: Any = None) -> dict:
    """The resource dict ``{"index", "llm", "embedder"}`` of ``settings``; ``input_dir`` /
    ``output_dir`` (a path or a ``dg.EnvVar``) replace the ``paths`` section's."""
    return {
        "index": IndexConfigResource(
            input_dir=input_dir or settings.paths.input_dir,
            output_dir=output_dir or settings.paths.output_dir,
            index_settings=IndexSettingsConfig.model_validate(settings.index.model_dump())),
        "llm": LLMResource(**settings.llm.model_dump()),
        "embedder": EmbedderResource(**settings.embedder.model_dump()),
    }


def build_resources(input_dir: str | None = None, output_dir: str | None = None,
                    model_path: str | None = None, fake_llm: bool | None = None,
                    llm_urls: list[str] | None = None, llm_concurrency: int | None = None,
                    embedder_path: str | None = None, settings_file: str | None = None,
                    **settings) -> dict:
    """Return the resource dict ``{"index", "llm", "embedder"}`` of
    :func:`kgloom.settings.load_settings` (the file ``settings_file`` or the default one,
    the ``KGLOOM_*`` variables), with the arguments given (not None) as overrides:
    the folders, the model, and ``settings``, index settings by name (or any setting as
    ``section.key`` in a dict: ``**{"retrieval.top_k": 3}``). What the CLI, the tests and
    the benches use.

    Raises:
        kgloom.settings.SettingsError (a ValueError): an unknown setting or a value its
            field refuses, named (a ``KGLOOM_*`` variable by its name).
        FileNotFoundError: when the settings file does not exist.
    """
    overrides = {"paths.input_dir": input_dir or None, "paths.output_dir": output_dir or None,
                 "llm.model_path": model_path or None, "llm.fake": fake_llm,
                 "llm.urls": llm_urls or None, "llm.llm_concurrency": llm_concurrency,
                 "embedder.model_path": embedder_path or None, **settings}
    return resources_from_settings(load_settings(settings_file, overrides))


def _folder(var: str, default: str):
    """``dg.EnvVar(var)`` when the variable is set (read at run start, shown as such in
    the launchpad), else ``default``."""
    return dg.EnvVar(var) if os.environ.get(var) else default


def code_location_resources() -> dict:
    """The resources of the Dagster code location (``kgloom.definitions``): as
    :func:`build_resources`, with the folders given as ``dg.EnvVar`` when their variable
    is set. The sensor and the schedule take these resources as arguments.

    Raises:
        see :func:`build_resources`.
    """
    settings = load_settings()
    return resources_from_settings(
        settings, _folder("KGLOOM_INPUT_DIR", settings.paths.input_dir),
        _folder("KGLOOM_OUTPUT_DIR", settings.paths.output_dir))
