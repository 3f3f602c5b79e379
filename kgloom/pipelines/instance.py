"""Which Dagster instance an index uses: the one that lives with it.

Every door into an index (``kgloom index``, ``backfill``, ``partitions``, ``status``,
``ui`` and the runs, schedule and sensor the UI starts) must read and write one Dagster
instance, or the UI shows none of the runs the CLI made and partitions look new or
changed depending on the working folder. The instance folder is:

- ``$DAGSTER_HOME`` when it is exported (a Dagster deployment that chose its instance,
  e.g. ``deploy/celery``); else
- ``<output folder>/.dagster_home``: the index carries its own runs, partitions and
  materialization records, so a second output folder built from the same inputs starts
  empty ("N new"), and an output folder moved or copied elsewhere keeps its state.

A new instance folder gets kgloom's instance settings (:data:`INSTANCE_TEMPLATE`: the
``llm`` pool limit, the run launcher whose workers run monitoring can check).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

INSTANCE_TEMPLATE = Path(__file__).with_name("dagster.yaml")
INSTANCE_DIR = ".dagster_home"  # inside the output folder when DAGSTER_HOME is not exported


def instance_home(output_dir: str | Path, environ: dict[str, str] | None = None) -> Path:
    """The Dagster instance folder of the index at ``output_dir`` (absolute, created, with
    ``dagster.yaml`` copied from :data:`INSTANCE_TEMPLATE` when it has none).

    Args:
        output_dir: the index's output folder (created when missing).
        environ: the environment to read ``DAGSTER_HOME`` from (default ``os.environ``).

    Returns:
        ``$DAGSTER_HOME`` when set and not empty, else ``<output_dir>/.dagster_home``.

    Raises:
        OSError: when the folder cannot be created or the template copied.
    """
    env = os.environ if environ is None else environ
    home = Path(env.get("DAGSTER_HOME") or Path(output_dir) / INSTANCE_DIR).resolve()
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists():
        shutil.copy(INSTANCE_TEMPLATE, home / "dagster.yaml")
    return home
