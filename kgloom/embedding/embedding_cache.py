"""The index's embedding cache: every vector the index embeds, keyed by its embedder and
text, in a SQLite table next to the outputs (``embedding_cache.sqlite``). No Dagster here.

Why: the entities stage embeds each entity group's ``"title: description"`` for
resolution, and the vector stage embeds each entity's ``title + ": " + description``.
For an entity met in one text unit (82 % of the 10,577 entities of the 2,000-passage
2Wiki pool) the two texts are the same, so the vector stage would embed it a second
time. A scheduled run on a grown corpus likewise embedded every group again for
resolution, and every description sentence of the long entities for their extractive
summaries, although all but the new ones were embedded by the run before.
:meth:`EmbeddingCache.embed` embeds only the texts it has not stored; the vectors it
returns are the ones the embedder made for the same text (float32 bytes, stored as
they were returned), so a cached run's outputs equal an uncached run's.

Key: SHA-256 of the embedder's model folder, its window key
(:attr:`kgloom.embedding.windows.WindowedEmbedder.key`) and the text, so another
model, window or stride never meets a stored vector.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from kgloom.core.cache_db import open_cache_db
from kgloom.core.ids import content_id
from kgloom.core.layout import EMBEDDING_CACHE_FILE
from kgloom.embedding.windows import WindowedEmbedder

# keys per SELECT: under SQLite's default limit of host parameters (32,766 since 3.32)
LOOKUP_CHUNK = 900

_DDL = "CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, vector BLOB NOT NULL)"


def cache_key(embedder: WindowedEmbedder, text: str) -> str:
    """The cache key of ``text`` embedded by ``embedder`` (hex SHA-256 of its model
    folder, window key and the text)."""
    return content_id("embedding-cache", embedder.model_path, embedder.key, text)


class EmbeddingCache:
    """Vectors by :func:`cache_key` in the SQLite table ``vectors`` of ``path``.

    Writes commit once per :meth:`store` call, so a crash loses at most the vectors of
    the pass in flight; a stored vector is never changed (its key says what it is).
    Threads may share one object (one statement at a time).

    Args:
        path: the SQLite file (created with its folder when absent).

    Raises:
        sqlite3.DatabaseError: ``path`` is not a SQLite database.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        db: sqlite3.Connection | None = None
        try:
            db = open_cache_db(self.path)
            db.execute(_DDL)
            db.commit()
        except sqlite3.DatabaseError as exc:
            if db is not None:
                db.close()
            raise sqlite3.DatabaseError(
                f"{self.path} is not a usable embedding cache ({exc}); delete it: it holds "
                "only vectors the index embeds again") from exc
        self._db = db
        self.hits = 0  # texts served from the table, over this object's life
        self.misses = 0  # texts embedded

    def lookup(self, keys: list[str], dim: int) -> dict[str, np.ndarray]:
        """The stored vectors among ``keys``: {key: float32 array of shape (dim,)}. A row
        of another size (a damaged file) is left out, so its text is embedded again."""
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for start in range(0, len(keys), LOOKUP_CHUNK):
                chunk = keys[start:start + LOOKUP_CHUNK]
                rows = self._db.execute(
                    f"SELECT key, vector FROM vectors WHERE key IN ({','.join('?' * len(chunk))})",
                    chunk).fetchall()
                for key, blob in rows:
                    if len(blob) == 4 * dim:
                        found[key] = np.frombuffer(blob, dtype=np.float32)
        return found

    def store(self, items: Iterable[tuple[str, np.ndarray]]) -> None:
        """Store (key, vector) pairs, float32, in one transaction (streamed: no copy of
        all the rows is made first)."""
        rows = ((k, np.ascontiguousarray(v, dtype=np.float32).tobytes()) for k, v in items)
        with self._lock:
            self._db.executemany("INSERT OR REPLACE INTO vectors (key, vector) VALUES (?, ?)",
                                 rows)
            self._db.commit()

    def rows(self) -> int:
        """Vectors stored."""
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0])

    def embed(self, embedder: WindowedEmbedder, texts: list[str],
              progress: Callable[[int, int], None] | None = None) -> np.ndarray:
        """``embedder.embed(texts)`` through the cache: float32 (len(texts), dim), unit
        rows. Texts stored before are read; the others are embedded once each (a text
        repeated in ``texts`` is encoded once), in one ``embedder.embed`` call with
        ``progress``, and stored. :attr:`hits` and :attr:`misses` count the texts."""
        dim = embedder.dim
        out = np.zeros((len(texts), dim), dtype=np.float32)
        if not texts:
            return out
        keys = [cache_key(embedder, t) for t in texts]
        found = self.lookup(list(dict.fromkeys(keys)), dim)
        todo: dict[str, list[int]] = {}
        for row, key in enumerate(keys):
            if key in found:
                out[row] = found[key]
            else:
                todo.setdefault(key, []).append(row)
        self.hits += len(texts) - sum(map(len, todo.values()))
        if todo:
            vectors = embedder.embed([texts[rows[0]] for rows in todo.values()],
                                     progress=progress)
            for rows, vector in zip(todo.values(), vectors):
                out[rows] = vector
            self.store(zip(todo, vectors))
            self.misses += len(todo)
        return out

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            self._db.close()


def open_embedding_cache(output_dir: str | Path) -> EmbeddingCache:
    """The cache of the index in ``output_dir`` (``<output_dir>/embedding_cache.sqlite``).

    Raises:
        sqlite3.DatabaseError: the file is not a SQLite database.
    """
    return EmbeddingCache(Path(output_dir) / EMBEDDING_CACHE_FILE)
