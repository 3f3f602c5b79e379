"""One writer at a time per output folder: an OS file lock plus a note naming its holder
(no Dagster here).

``kgloom index`` / ``kgloom backfill`` hold the lock of their output folder for the whole
command, and every Dagster run takes it for its duration (the ``index`` resource, so
runs launched by the UI, the sensor or the schedule wait too). A second writer waits,
saying who holds the lock: pid, host, command and since when. The lock is ``flock`` on
``<output>/.kgloom.lock`` (the ``filelock`` package), so the kernel releases it when its
process dies, ``kill -9`` included: a crashed writer never leaves the folder locked.
Within one process the lock is re-entrant (the command holds it, its in-process runs
take it again).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from kgloom.core.layout import HOLDER_FILE, LOCK_FILE
from kgloom.core.storage import write_json

INSTANCE_LOCK_FILE = ".kgloom-instance.lock"  # in $DAGSTER_HOME

_LOCKS: dict[str, FileLock] = {}
_GUARD = threading.Lock()


class LockWaitCancelled(InterruptedError):
    """Waiting for the lock was given up because ``should_stop`` said so."""


def holder(output_dir: str | Path) -> dict | None:
    """Return the note of the lock's current (or last) holder: ``pid``, ``host``,
    ``command``, ``since`` (ISO 8601 UTC); None when there is none or it is unreadable."""
    try:
        return json.loads((Path(output_dir) / HOLDER_FILE).read_text())
    except (OSError, ValueError):
        return None


def describe(note: dict | None) -> str:
    """One line naming a lock holder, e.g. ``pid 4242 on host-a (kgloom index) since ...``."""
    if not note:
        return "an unknown process (no holder note)"
    return (f"pid {note.get('pid')} on {note.get('host')} ({note.get('command')}) "
            f"since {note.get('since')}")


def _lock_for(folder: Path) -> FileLock:
    with _GUARD:
        key = str(folder)
        if key not in _LOCKS:
            _LOCKS[key] = FileLock(folder / LOCK_FILE, thread_local=False)
        return _LOCKS[key]


@contextmanager
def writer_lock(output_dir: str | Path, command: str,
                on_wait: Callable[[str], None] | None = None,
                should_stop: Callable[[], bool] | None = None,
                poll_s: float = 0.5) -> Iterator[None]:
    """Hold the writer lock of ``output_dir`` (created if absent) for the ``with`` block.

    Args:
        output_dir: the output folder.
        command: what holds it, for the holder note (e.g. ``kgloom index``).
        on_wait: called once with a message naming the holder when the lock is taken.
        should_stop: polled every ``poll_s`` seconds while waiting; True gives up.
        poll_s: seconds between attempts while waiting.

    Raises:
        LockWaitCancelled: when ``should_stop`` returned True while waiting.
    """
    folder = Path(output_dir).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    lock = _lock_for(folder)
    outermost = not lock.is_locked
    try:
        lock.acquire(timeout=0)
    except Timeout:
        if on_wait:
            on_wait(f"waiting for the output folder {folder}: another writer holds it, "
                    f"{describe(holder(folder))}")
        while True:
            try:
                lock.acquire(timeout=poll_s)
                break
            except Timeout:
                if should_stop is not None and should_stop():
                    raise LockWaitCancelled(f"gave up waiting for the lock of {folder}") from None
    try:
        if outermost:
            note = {"pid": os.getpid(), "host": socket.gethostname(), "command": command,
                    "since": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
            write_json(note, folder / HOLDER_FILE)
        yield
    finally:
        if outermost:  # before the release, so it never removes the next holder's note
            (folder / HOLDER_FILE).unlink(missing_ok=True)
        lock.release()


@contextmanager
def instance_setup_lock(dagster_home: str | Path) -> Iterator[None]:
    """Hold ``<dagster_home>/.kgloom-instance.lock`` while a process opens the Dagster
    instance: opening a fresh SQLite instance creates its tables and stamps their schema
    version, and two processes doing it at once can stamp it twice (``alembic_version``
    then has two heads and the instance no longer opens: "more than one head present").
    Waits as long as another process holds it (opening takes about a second).

    Raises:
        OSError: when the lock file cannot be created in ``dagster_home``.
    """
    with FileLock(Path(dagster_home) / INSTANCE_LOCK_FILE):
        yield
