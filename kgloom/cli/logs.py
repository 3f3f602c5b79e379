"""Where Dagster's event log goes when the CLI runs the asset graph.

Every event is stored in the Dagster instance (the UI's run page shows it). Besides, the
runs the CLI launches log through two loggers: the console (stderr), at WARNING unless
``--verbose`` (then DEBUG: RUN_START, STEP_OUTPUT, ...), so progress bars and the final
tables are what a user reads, except the events that say why nothing moves (a step
waiting for the ``llm`` pool), which always show; and a log file,
``$DAGSTER_HOME/logs/kgloom.log``, at DEBUG, appended to by every run (none when
``DAGSTER_HOME`` is unset, e.g. the tests' ephemeral instances).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import dagster as dg

LOG_FILE = Path("logs") / "kgloom.log"  # under $DAGSTER_HOME
_FORMAT = "%(asctime)s %(levelname)s %(message)s"


@dg.logger(config_schema={"path": dg.Field(str, default_value=""),
                          "log_level": dg.Field(str, default_value="DEBUG")},
           description="Appends the run's event log to a file ('' path: off).")
def file_logger(init_context: dg.InitLoggerContext) -> logging.Logger:
    """A Python logger writing the run's events to ``config["path"]`` (appended; the
    folder is created); with an empty path it drops everything."""
    cfg = init_context.logger_config
    logger = logging.Logger("kgloom_run_file", level=cfg["log_level"].upper())
    if cfg["path"]:
        path = Path(cfg["path"])
        path.parent.mkdir(parents=True, exist_ok=True)
        handler: logging.Handler = logging.FileHandler(path, encoding="utf-8")
        handler.setFormatter(logging.Formatter(_FORMAT))
    else:
        handler = logging.NullHandler()
    logger.addHandler(handler)
    return logger


# Dagster logs every event at DEBUG; these say why a run is not moving, so the quiet
# console shows them anyway.
ALWAYS_SHOWN = ("blocked by limit for pool",)


@dg.logger(config_schema={"log_level": dg.Field(str, default_value="WARNING")},
           description="stderr at log_level, plus the events that explain a wait.")
def quiet_console_logger(init_context: dg.InitLoggerContext) -> logging.Logger:
    """A Python logger to stderr showing records at ``config["log_level"]`` and above,
    and any record whose message holds one of :data:`ALWAYS_SHOWN`."""
    level = logging.getLevelNamesMapping()[init_context.logger_config["log_level"].upper()]
    logger = logging.Logger("kgloom_run_console", level=logging.DEBUG)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s - dagster - %(levelname)s - "
                                           "%(message)s"))
    handler.addFilter(lambda r: r.levelno >= level
                      or any(s in r.getMessage() for s in ALWAYS_SHOWN))
    logger.addHandler(handler)
    return logger


LOGGERS = {"console": quiet_console_logger, "file": file_logger}


def log_file_path() -> Path | None:
    """``$DAGSTER_HOME/logs/kgloom.log``, or None when ``DAGSTER_HOME`` is unset."""
    home = os.environ.get("DAGSTER_HOME")
    return Path(home) / LOG_FILE if home else None


def run_config_for_logs(verbose: bool = False) -> dict:
    """Run config of the two loggers: console at DEBUG when ``verbose``, else WARNING;
    the file at DEBUG (:func:`log_file_path`)."""
    path = log_file_path()
    return {"loggers": {
        "console": {"config": {"log_level": "DEBUG" if verbose else "WARNING"}},
        "file": {"config": {"path": str(path) if path else "", "log_level": "DEBUG"}}}}
