"""The Dagster code location: assets, checks, jobs, schedule, sensor and resources.

Load with ``dagster dev -m kgloom.definitions`` or ``dagster definitions validate -m
kgloom.definitions``. Resource config comes from env vars so the UI and the CLI agree:
KGLOOM_INPUT_DIR, KGLOOM_OUTPUT_DIR, KGLOOM_MODEL_PATH, KGLOOM_EMBEDDER_PATH,
KGLOOM_FAKE_LLM=1 (no model).
"""

from __future__ import annotations

import os

import dagster as dg

from kgloom.assets import ALL_ASSETS
from kgloom.pipelines.jobs import (embed_job, graph_job, index_job, ingest_job,
                                   input_folder_sensor, nightly_index_schedule, reports_job)
from kgloom.resources import EmbedderResource, IndexConfigResource, LLMResource


def build_resources(input_dir: str | None = None, output_dir: str | None = None,
                    model_path: str | None = None, fake_llm: bool | None = None,
                    embedder_path: str | None = None, **settings) -> dict:
    """Return the resource dict; unset arguments come from the KGLOOM_* env vars
    (``KGLOOM_EMBEDDER_PATH``: a sentence-transformers model folder for this corpus,
    e.g. a multilingual one; default the bundled all-MiniLM-L6-v2)."""
    env = os.environ
    fake = fake_llm if fake_llm is not None else env.get("KGLOOM_FAKE_LLM", "") == "1"
    return {
        "index": IndexConfigResource(
            input_dir=input_dir or env.get("KGLOOM_INPUT_DIR", "data/input"),
            output_dir=output_dir or env.get("KGLOOM_OUTPUT_DIR", "data/output"), **settings),
        "llm": LLMResource(model_path=model_path or env.get("KGLOOM_MODEL_PATH", ""),
                           n_gpu_layers=int(env.get("KGLOOM_N_GPU_LAYERS", "0")), fake=fake),
        "embedder": EmbedderResource(
            model_path=embedder_path or env.get("KGLOOM_EMBEDDER_PATH", "")),
    }


defs = dg.Definitions(
    assets=ALL_ASSETS,
    jobs=[index_job, ingest_job, graph_job, reports_job, embed_job],
    schedules=[nightly_index_schedule],
    sensors=[input_folder_sensor],
    resources=build_resources(),
    # One process per run, not per step: on a 2-core machine the per-step re-import of
    # kgloom, torch and llama.cpp (4-5 s each) outweighs any step parallelism, and the
    # LLM steps are serialized by the "llm" pool anyway. Measured with the UI browser
    # test (3 runs, fake LLM): 83 s against 110-118 s with the multiprocess default.
    executor=dg.in_process_executor,
)
