"""Which process runs a Dagster run: the run tags that name it, and whether it still lives.

Every run records the process that executes it in its tags (:func:`process_tags`:
``kgloom/pid``, ``kgloom/pid_started``, ``kgloom/host``; the CLI adds ``kgloom/command``):
the CLI passes them for its in-process runs, and the ``index`` resource adds them in any
other run worker. Crash recovery (:mod:`kgloom.pipelines.recovery`) and the run launcher
read them back with :func:`process_alive`. No Dagster here: tags are plain strings.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

import psutil

PID_TAG = "kgloom/pid"
PID_STARTED_TAG = "kgloom/pid_started"  # the process's start time, seconds since the epoch
HOST_TAG = "kgloom/host"
COMMAND_TAG = "kgloom/command"


def process_tags(pid: int | None = None) -> dict[str, str]:
    """Run tags naming the process ``pid`` (default: this one) on this host."""
    proc = psutil.Process(pid or os.getpid())
    return {PID_TAG: str(proc.pid), PID_STARTED_TAG: f"{proc.create_time():.2f}",
            HOST_TAG: socket.gethostname()}


def process_alive(tags: Mapping[str, str]) -> bool | None:
    """Whether the process named by run ``tags`` still runs: True, False (gone, a
    zombie, or its pid reused by a later process), or None when it cannot be told
    (no tags, or another host)."""
    if PID_TAG not in tags or tags.get(HOST_TAG) != socket.gethostname():
        return None
    try:
        proc = psutil.Process(int(tags[PID_TAG]))
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        started = tags.get(PID_STARTED_TAG)
        # psutil's create_time is rounded; a reused pid starts well after the run did
        return started is None or abs(proc.create_time() - float(started)) < 2.0
    except (psutil.NoSuchProcess, ValueError):
        return False
    except psutil.AccessDenied:
        return True
