"""kgloom.embedding.embedding_cache: each text embedded once per index, across stages and runs."""

from __future__ import annotations

import sqlite3

import numpy as np
import polars as pl
import pytest

from kgloom.core import schemas
from kgloom.embedding.embedding_cache import EmbeddingCache, cache_key, open_embedding_cache
from kgloom.embedding.store import VECTOR_TABLES
from kgloom.embedding.tokenizer import default_tokenizer
from kgloom.graph.entities import build_entity_tables
from kgloom.settings.indexing import IndexSettings


class CountingEmbedder:
    """A stand-in embedder: a text's vector is a fixed function of the text; ``asked``
    lists every text it encoded."""

    def __init__(self, model_path: str = "/models/m", window: int = 256, dim: int = 8) -> None:
        self.model_path, self.window, self.dim = model_path, window, dim
        self.asked: list[str] = []

    @property
    def key(self) -> str:
        return f"m|{self.window}|192"

    def embed(self, texts, threads=None, progress=None):
        self.asked.extend(texts)
        rows = [np.random.default_rng(sum(map(ord, t)) + len(t)).normal(size=self.dim)
                for t in texts]
        out = np.asarray(rows, dtype=np.float32).reshape(len(texts), self.dim)
        if progress:
            progress(len(texts), len(texts))
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


def test_each_text_is_embedded_once_and_read_back_the_same(tmp_path):
    emb = CountingEmbedder()
    texts = ["Scrooge counted his money.", "Marley was dead.", "Scrooge counted his money."]
    cache = open_embedding_cache(tmp_path)
    first = cache.embed(emb, texts)
    assert emb.asked == ["Scrooge counted his money.", "Marley was dead."]  # repeat once
    assert (cache.hits, cache.misses) == (0, 2)  # a repeat within a call is no hit
    assert np.array_equal(first, emb.embed(texts))
    cache.close()

    emb.asked.clear()
    again = open_embedding_cache(tmp_path)  # another run on the same output folder
    second = again.embed(emb, ["Marley was dead.", "Bob Cratchit warmed his hands."])
    assert emb.asked == ["Bob Cratchit warmed his hands."]
    assert np.array_equal(second[0], first[1]) and second.dtype == np.float32
    assert (again.hits, again.misses, again.rows()) == (1, 1, 3)


def test_another_model_or_window_never_meets_a_stored_vector(tmp_path):
    cache = EmbeddingCache(tmp_path / "c.sqlite")
    cache.embed(CountingEmbedder(), ["Fezziwig danced."])
    for other in (CountingEmbedder(model_path="/models/other"), CountingEmbedder(window=128)):
        cache.embed(other, ["Fezziwig danced."])
        assert other.asked == ["Fezziwig danced."]
    assert len({cache_key(e, "x") for e in (CountingEmbedder(), CountingEmbedder(window=128),
                                            CountingEmbedder(model_path="/m2"))}) == 3


def test_a_damaged_row_is_embedded_again_and_a_foreign_file_is_refused(tmp_path):
    emb = CountingEmbedder()
    cache = EmbeddingCache(tmp_path / "c.sqlite")
    want = cache.embed(emb, ["Tiny Tim."])
    cache._db.execute("UPDATE vectors SET vector = ?", (b"\x00" * 5,))  # a cut row
    cache._db.commit()
    emb.asked.clear()
    got = cache.embed(emb, ["Tiny Tim."])
    assert emb.asked == ["Tiny Tim."] and np.array_equal(got, want)
    assert len(cache.lookup([cache_key(emb, "Tiny Tim.")], emb.dim)) == 1  # mended

    (tmp_path / "not-sqlite.sqlite").write_bytes(b"this is not a database" * 100)
    with pytest.raises(sqlite3.DatabaseError, match=r"not a usable embedding cache.*delete it"):
        EmbeddingCache(tmp_path / "not-sqlite.sqlite")


def test_the_vector_stage_reads_what_resolution_embedded(tmp_path):
    """An entity met once has the same ``title: description`` text in resolution and in
    the vector stage: the vector stage reads it instead of embedding it again; an entity
    with two short descriptions too (both join them with newlines)."""
    from kgloom.publish.vectors import sync_lancedb

    mentions = [("u1", "Ebenezer Scrooge", "PERSON", "A covetous old sinner."),
                ("u2", "Bob Cratchit", "PERSON", "Scrooge's clerk."),
                ("u3", "Bob Cratchit", "PERSON", "He warmed his hands at the candle."),
                ("u3", "London", "LOCATION", "The city.")]
    em = pl.DataFrame(mentions, schema=schemas.ENTITY_MENTIONS_SCHEMA, orient="row")
    rm = schemas.empty(schemas.RELATIONSHIP_MENTIONS_SCHEMA)
    emb = CountingEmbedder()
    cache = open_embedding_cache(tmp_path)
    settings = IndexSettings()
    assert "embedding" in settings.resolution_methods
    ents, _, _, _ = build_entity_tables(em, rm, None, settings, default_tokenizer(),
                                        embed=lambda texts: cache.embed(emb, texts))
    assert ents.height == 3 and emb.asked  # the embedding pass ran
    emb.asked.clear()
    got = sync_lancedb(tmp_path / "lancedb", "entities", ents, VECTOR_TABLES["entities"][1], emb,
                       cache=cache)
    assert (got["written"], got["embedded"], got["cached"]) == (3, 0, 3)
    assert emb.asked == []
