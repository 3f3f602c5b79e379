"""The LLM reply cache: a SQLite table (``llm_cache.sqlite`` next to the outputs) keyed by
(model digest, prompt template hash, input hash, decoding parameters). No Dagster here.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from kgloom.core.cache_db import open_cache_db
from kgloom.core.ids import content_id
from kgloom.llm.backend import Completion

_CACHE_DDL = """
CREATE TABLE IF NOT EXISTS llm_calls (
  key TEXT PRIMARY KEY, stage TEXT NOT NULL, model_id TEXT NOT NULL,
  template_hash TEXT NOT NULL, input_hash TEXT NOT NULL, params TEXT NOT NULL,
  reply TEXT NOT NULL, prompt_tokens INTEGER, completion_tokens INTEGER, seconds REAL,
  created_at TEXT DEFAULT CURRENT_TIMESTAMP)
"""


from kgloom.core.layout import LLM_CACHE_FILE as CACHE_FILE  # noqa: E402


def cache_rows(output_dir: str | Path) -> dict[str, int]:
    """{stage: rows} of ``<output_dir>/llm_cache.sqlite`` ({} when there is no cache)."""
    path = Path(output_dir) / CACHE_FILE
    return LLMCache(path).rows_per_stage() if path.exists() else {}


def new_rows(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Stages whose row count grew between two :func:`cache_rows` readings, with the
    growth (= model calls made in between)."""
    return {k: n - before.get(k, 0) for k, n in after.items() if n - before.get(k, 0)}


class LLMCache:
    """The LLM-call cache: a SQLite table ``llm_calls`` in ``path``.

    One row per distinct call: key = SHA-256 of (model_id, template_hash, input_hash,
    decoding params), with the reply, tokens and seconds, so it can be queried with any
    SQLite client (``kgloom cache`` summarizes it). Writes commit per call, so a crash
    of the process loses at most the call in flight (a power loss may also take back the
    last commits: :func:`kgloom.core.cache_db.open_cache_db`).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # one connection shared by the threads of CachedLLM.map: one statement at a time
        self._db = open_cache_db(self.path)
        self._lock = threading.Lock()
        self._db.execute(_CACHE_DDL)
        self._db.commit()

    @staticmethod
    def key(model_id: str, template_hash: str, input_hash: str, params: dict) -> str:
        """Return the cache key of one call (hex SHA-256)."""
        return content_id("llm", model_id, template_hash, input_hash,
                          json.dumps(params, sort_keys=True))

    def get(self, key: str) -> Completion | None:
        """Return the stored reply for ``key``, or None."""
        with self._lock:
            row = self._db.execute(
                "SELECT reply, prompt_tokens, completion_tokens, seconds FROM llm_calls"
                " WHERE key=?", (key,)).fetchone()
        return Completion(*row) if row else None

    def put(self, key: str, stage: str, model_id: str, template_hash: str, input_hash: str,
            params: dict, reply: Completion) -> None:
        """Store one reply (replacing any row with the same key)."""
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO llm_calls (key, stage, model_id, template_hash,"
                " input_hash, params, reply, prompt_tokens, completion_tokens, seconds)"
                " VALUES (?,?,?,?,?,?,?,?,?,?)",
                (key, stage, model_id, template_hash, input_hash,
                 json.dumps(params, sort_keys=True), reply.text, reply.prompt_tokens,
                 reply.completion_tokens, reply.seconds))
            self._db.commit()

    def rows_per_stage(self) -> dict[str, int]:
        """Return {stage: cached calls}. Every call that reaches the model stores exactly
        one row, so the difference of two readings counts the model calls in between."""
        return {r["stage"]: r["rows"] for r in self.summary()}

    def summary(self) -> list[dict[str, Any]]:
        """Return one dict per stage: rows, prompt/completion tokens and model seconds."""
        with self._lock:
            rows = self._db.execute(
                "SELECT stage, COUNT(*), SUM(prompt_tokens), SUM(completion_tokens),"
                " SUM(seconds) FROM llm_calls GROUP BY stage ORDER BY stage").fetchall()
        return [{"stage": s, "rows": n, "prompt_tokens": p or 0, "completion_tokens": c or 0,
                 "seconds": round(t or 0.0, 2)} for s, n, p, c, t in rows]

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            self._db.close()
