"""The Dagster code location: assets, checks, jobs, schedule, sensor and resources.

Load with ``dagster dev -m kgloom.definitions`` or ``dagster definitions validate -m
kgloom.definitions``. Resource config comes from env vars so the UI and the CLI agree:
KGLOOM_INPUT_DIR, KGLOOM_OUTPUT_DIR, KGLOOM_MODEL_PATH, KGLOOM_EMBEDDER_PATH,
KGLOOM_FAKE_LLM=1 (no model), KGLOOM_LLM_URL (OpenAI-compatible model servers,
comma-separated), KGLOOM_LLM_MODEL, KGLOOM_LLM_API_KEY, KGLOOM_LLM_CONCURRENCY,
KGLOOM_LLM_SLOTS, KGLOOM_LLM_TIMEOUT_S, KGLOOM_LLM_SCHEMA_FORMAT, KGLOOM_LLM_CACHE (the LLM
cache file).

KGLOOM_EXECUTOR picks how a run's steps execute: ``in_process`` (default), ``multiprocess``,
``celery`` (dagster-celery; broker and result backend from KGLOOM_CELERY_BROKER /
KGLOOM_CELERY_BACKEND) or ``k8s`` (dagster-k8s ``k8s_job_executor``, one pod per step).
See deploy/README.md.
"""

from __future__ import annotations

import os

import dagster as dg

from kgloom.assets import ALL_ASSETS
from kgloom.llm_http import parse_urls
from kgloom.pipelines.jobs import (embed_job, graph_job, index_job, ingest_job,
                                   input_folder_sensor, nightly_index_schedule, reports_job)
from kgloom.resources import EmbedderResource, IndexConfigResource, LLMResource


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


def build_resources(input_dir: str | None = None, output_dir: str | None = None,
                    model_path: str | None = None, fake_llm: bool | None = None,
                    llm_urls: list[str] | None = None, llm_concurrency: int | None = None,
                    embedder_path: str | None = None, **settings) -> dict:
    """Return the resource dict; unset arguments come from the KGLOOM_* env vars
    (``KGLOOM_EMBEDDER_PATH``: a sentence-transformers model folder for this corpus,
    e.g. a multilingual one; default the bundled all-MiniLM-L6-v2).

    Raises:
        ValueError: when a numeric KGLOOM_LLM_* variable is not a number, or a URL in
            KGLOOM_LLM_URL is malformed.
    """
    env = os.environ
    fake = fake_llm if fake_llm is not None else env.get("KGLOOM_FAKE_LLM", "") == "1"
    return {
        "index": IndexConfigResource(
            input_dir=input_dir or env.get("KGLOOM_INPUT_DIR", "data/input"),
            output_dir=output_dir or env.get("KGLOOM_OUTPUT_DIR", "data/output"), **settings),
        "llm": LLMResource(
            model_path=model_path or env.get("KGLOOM_MODEL_PATH", ""),
            n_gpu_layers=int(env.get("KGLOOM_N_GPU_LAYERS", "0")), fake=fake,
            urls=parse_urls(llm_urls if llm_urls else env.get("KGLOOM_LLM_URL", "")),
            model=env.get("KGLOOM_LLM_MODEL", ""), api_key=env.get("KGLOOM_LLM_API_KEY", ""),
            llm_concurrency=(llm_concurrency if llm_concurrency is not None
                             else _env_number("KGLOOM_LLM_CONCURRENCY", "1")),
            llm_slots=_env_number("KGLOOM_LLM_SLOTS", "0"),
            request_timeout_s=_env_number("KGLOOM_LLM_TIMEOUT_S", "300", float),
            schema_format=env.get("KGLOOM_LLM_SCHEMA_FORMAT", "auto"),
            cache_path=env.get("KGLOOM_LLM_CACHE", "")),
        "embedder": EmbedderResource(
            model_path=embedder_path or env.get("KGLOOM_EMBEDDER_PATH", "")),
    }


def build_executor(kind: str | None = None) -> dg.ExecutorDefinition:
    """Return the executor named by ``kind`` (default: env KGLOOM_EXECUTOR, else
    ``in_process``): ``in_process``, ``multiprocess``, ``celery`` or ``k8s``.

    ``celery`` needs dagster-celery and workers started with the same broker
    (``dagster-celery worker start -A dagster_celery.app -y deploy/celery/celery.yaml``);
    ``k8s`` needs dagster-k8s and runs inside a cluster deployed with Dagster's Helm chart.

    Raises:
        ValueError: for an unknown kind.
    """
    kind = kind or os.environ.get("KGLOOM_EXECUTOR", "in_process")
    if kind == "in_process":
        # One process per run, not per step: on a 2-core machine the per-step re-import of
        # kgloom, torch and llama.cpp (4-5 s each) outweighs any step parallelism, and the
        # LLM steps are serialized by the "llm" pool anyway. Measured with the UI browser
        # test (3 runs, fake LLM): 83 s against 110-118 s with the multiprocess default.
        return dg.in_process_executor
    if kind == "multiprocess":
        return dg.multiprocess_executor
    if kind == "celery":
        from dagster_celery import celery_executor

        return celery_executor.configured(
            {"broker": {"env": "KGLOOM_CELERY_BROKER"},
             "backend": {"env": "KGLOOM_CELERY_BACKEND"}}, name="kgloom_celery")
    if kind == "k8s":
        from dagster_k8s import k8s_job_executor  # installed in the deployment image

        return k8s_job_executor
    raise ValueError(f"KGLOOM_EXECUTOR must be in_process, multiprocess, celery or k8s, "
                     f"got {kind!r}")


defs = dg.Definitions(
    assets=ALL_ASSETS,
    jobs=[index_job, ingest_job, graph_job, reports_job, embed_job],
    schedules=[nightly_index_schedule],
    sensors=[input_folder_sensor],
    resources=build_resources(),
    executor=build_executor(),
)
