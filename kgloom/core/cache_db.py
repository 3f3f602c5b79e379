"""The one way kgloom opens its SQLite caches (standard library only, so the LLM layer
can be used without the table stack)."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def open_cache_db(path: str | Path) -> sqlite3.Connection:
    """Open (creating it when missing) one of the index's SQLite caches (the LLM cache,
    the embedding cache, lazy community reports) the one way they are all opened: a
    60-second busy timeout, usable from any thread (callers hold their own lock), in WAL
    mode with ``synchronous=NORMAL``.

    Why NORMAL: in WAL mode SQLite's default (FULL) syncs the log to disk at every commit,
    and the LLM cache commits once per model call. On this project's 2-core machine a synced
    commit cost 0.18 ms with the disk idle (``bench/bench_cache_commit.py``) and about 10 ms
    while an index was writing beside it; in a 600-passage pool index the extraction's
    seconds outside the model went from 8.5 to 7.3 (about 2 ms a call;
    ``bench/results/eval_pool_s14_600.json`` at 4a3b571 against
    ``eval_pool_s13_600_2000.json`` at c75a7f1, in git history; two runs, not paired). With
    NORMAL a committed row survives the process crashing or being killed (it is in the log,
    which the OS holds); only a power loss or an OS crash can take back the last commits,
    and the database stays consistent (SQLite's documentation, "WAL mode":
    synchronous=NORMAL). A lost cache row only means that call is made again.

    Raises:
        sqlite3.Error: the file cannot be opened, or is not a SQLite database (raised by
            the first statement).
    """
    db = sqlite3.connect(str(path), timeout=60, check_same_thread=False)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
    except sqlite3.Error:
        db.close()
        raise
    return db
