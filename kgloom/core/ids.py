"""Content-derived ids: the same content always gets the same id, across runs.

Ids are hex SHA-256 digests (hashlib, FIPS 180-4) of the parts joined with a unit
separator, so ("ab", "c") and ("a", "bc") differ.
"""

from __future__ import annotations

import hashlib

_SEP = "\x1f"


def content_id(*parts: object) -> str:
    """Return the 64-char hex SHA-256 of ``parts`` (each turned into ``str``)."""
    return hashlib.sha256(_SEP.join(str(p) for p in parts).encode("utf-8")).hexdigest()


def file_sha256(path: str, chunk_bytes: int = 1 << 20) -> str:
    """Return the hex SHA-256 of the file at ``path``, read in ``chunk_bytes`` pieces.

    Raises:
        OSError: when the file cannot be read.
    """
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(chunk_bytes), b""):
            h.update(block)
    return h.hexdigest()
