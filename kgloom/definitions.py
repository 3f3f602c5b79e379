"""The Dagster code location: assets, checks, jobs, schedule, sensor and resources.

The assets are :data:`kgloom.assets.ALL_ASSETS` and the jobs
:data:`kgloom.pipelines.jobs.JOBS`, both derived from the stage registry
(:data:`kgloom.core.layout.STAGES`): a new stage needs no edit here.

Load with ``dagster dev -m kgloom.definitions`` or ``dagster definitions validate -m
kgloom.definitions``. Resource config comes from the ``KGLOOM_*`` environment variables
(listed in :mod:`kgloom.resources`), so the UI and the CLI agree.

KGLOOM_EXECUTOR picks how a run's steps execute: ``in_process`` (default), ``multiprocess``,
``celery`` (dagster-celery; broker and result backend from KGLOOM_CELERY_BROKER /
KGLOOM_CELERY_BACKEND) or ``k8s`` (dagster-k8s ``k8s_job_executor``, one pod per step).
See deploy/README.md.
"""

from __future__ import annotations

import os

import dagster as dg

from kgloom.assets import ALL_ASSETS
from kgloom.pipelines.jobs import JOBS, input_folder_sensor, nightly_index_schedule
from kgloom.resources import build_resources, code_location_resources

__all__ = ["build_executor", "build_resources", "defs"]


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
        # installed in the deployment image only (deploy/), not in the dev environment
        from dagster_k8s import k8s_job_executor  # pyright: ignore[reportMissingImports]

        return k8s_job_executor
    raise ValueError(f"KGLOOM_EXECUTOR must be in_process, multiprocess, celery or k8s, "
                     f"got {kind!r}")


defs = dg.Definitions(
    assets=ALL_ASSETS,
    jobs=list(JOBS),
    schedules=[nightly_index_schedule],
    sensors=[input_folder_sensor],
    resources=code_location_resources(),
    executor=build_executor(),
)
