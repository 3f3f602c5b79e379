"""kgloom.embedding and kgloom.publish.vectors: windowed embeddings (no truncation) and
idempotent LanceDB tables."""

from __future__ import annotations

import functools

import lancedb
import numpy as np
import polars as pl
import pytest

from kgloom.embedding.sentence_embedder import Embedder
from kgloom.publish import tables
from kgloom.publish.vectors import write_lancedb

# Stave One's opening, repeated: well over the 256-token window of all-MiniLM-L6-v2.
LONG_TEXT = " ".join([
    "Marley was dead: to begin with. There is no doubt whatever about that. The register "
    "of his burial was signed by the clergyman, the clerk, the undertaker, and the chief "
    "mourner. Scrooge signed it: and Scrooge's name was good upon 'Change, for anything he "
    "chose to put his hand to. Old Marley was as dead as a door-nail.",
    "Oh! But he was a tight-fisted hand at the grindstone, Scrooge! a squeezing, wrenching, "
    "grasping, scraping, clutching, covetous, old sinner! Hard and sharp as flint, from "
    "which no steel had ever struck out generous fire; secret, and self-contained, and "
    "solitary as an oyster.",
    "Once upon a time -- of all the good days in the year, on Christmas Eve -- old Scrooge "
    "sat busy in his counting-house. It was cold, bleak, biting weather: foggy withal: and "
    "he could hear the people in the court outside, go wheezing up and down.",
] * 3 + ["At the very end, Tiny Tim said: God bless Us, Every One!"])


@pytest.mark.slow
def test_dim_and_unit_vectors(embedder):
    assert embedder.dim == embedder.model.get_embedding_dimension() == 384
    vecs = embedder.embed(["Ebenezer Scrooge", "Tiny Tim", "", LONG_TEXT])
    assert vecs.shape == (4, embedder.dim) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert tables.vectors_valid(vecs, embedder.dim, expected_rows=4)[0]
    assert embedder.embed([]).shape == (0, embedder.dim)


@pytest.mark.slow
def test_short_text_is_embedded_as_is(embedder):
    text = "Scrooge's nephew Fred wishes him a merry Christmas."
    assert embedder.windows_for(text) == [text]
    plain = embedder.model.encode([text], normalize_embeddings=True)
    assert np.allclose(embedder.embed([text]), plain, atol=1e-5)


@pytest.mark.slow
def test_long_text_is_windowed_not_truncated(embedder):
    n_tokens = len(embedder.tokenizer(LONG_TEXT, add_special_tokens=False)["input_ids"])
    assert n_tokens > embedder.window_tokens
    windows = embedder.windows_for(LONG_TEXT)
    assert len(windows) > 1
    sizes = [len(embedder.tokenizer(w, add_special_tokens=False)["input_ids"]) for w in windows]
    assert max(sizes) <= embedder.window_tokens - 2
    assert LONG_TEXT.startswith(windows[0]) and LONG_TEXT.endswith(windows[-1])
    assert "Tiny Tim" in windows[-1]  # the tail past 256 tokens is embedded
    assert sum(sizes) >= n_tokens  # windows overlap, nothing is left out

    whole, first = embedder.embed([LONG_TEXT, windows[0]])
    # plain sentence-transformers keeps only the first 254 tokens (about windows[0])
    truncated = embedder.model.encode([LONG_TEXT], normalize_embeddings=True)[0]
    assert float(truncated @ first) > 0.99
    assert float(whole @ first) < 0.999 and float(whole @ truncated) < 0.999


@pytest.mark.slow
def test_embedder_rejects_window_over_model_limit(embedder):
    with pytest.raises(ValueError, match="window_tokens"):
        Embedder(embedder.model_path, window_tokens=1000)


@pytest.mark.slow
def test_onnx_backend_gives_the_torch_vectors_and_falls_back_with_a_reason(embedder, tmp_path,
                                                                           monkeypatch):
    """The ONNX Runtime export of the model computes sentence-transformers' vectors (short
    text, empty text, a windowed long text); a folder it cannot reproduce keeps torch and
    says why; "onnx" asked for and impossible is an error; a bad backend name too."""
    from kgloom.embedding import onnx_runtime

    monkeypatch.setenv("KGLOOM_CACHE_DIR", str(tmp_path / "cache"))
    onnx = Embedder(embedder.model_path, backend="onnx")
    torch_only = Embedder(embedder.model_path, backend="torch")
    assert onnx.backend.startswith("onnxruntime: ") and str(tmp_path) in onnx.backend
    assert torch_only.backend.startswith("torch")
    texts = ["Scrooge's nephew Fred wishes him a merry Christmas.", "", LONG_TEXT, "Tiny Tim"]
    cos = (onnx.embed(texts) * torch_only.embed(texts)).sum(axis=1)
    assert cos.min() > 0.99999, cos
    assert len(list((tmp_path / "cache" / "onnx").glob("*.onnx"))) == 1  # exported once

    monkeypatch.setattr(onnx_runtime, "fast_path_reason", lambda path: "not a BERT folder")
    auto = Embedder(embedder.model_path, backend="auto")
    assert auto.backend == "torch: not a BERT folder" and auto._onnx is None
    with pytest.raises(RuntimeError, match="not a BERT folder"):
        Embedder(embedder.model_path, backend="onnx")
    with pytest.raises(ValueError, match="backend"):
        Embedder(embedder.model_path, backend="tensorflow")


def test_index_embedder_builds_without_torch_and_gives_the_torch_vectors(embedder, tmp_path,
                                                                         monkeypatch):
    """The index's embedder makes the checked ONNX export in a child process, then runs
    it with no torch in the process (a fresh interpreter proves it), with the torch
    vectors and the same key; an export whose probe disagrees with the saved torch vector
    is refused, and the index then gets the sentence-transformers embedder."""
    import subprocess
    import sys

    from kgloom.embedding import index_embedder
    from kgloom.embedding.onnx_runtime import (
        OnnxEmbedder,
        ensure_export,
        export_file,
        probe_file,
    )

    cache = tmp_path / "cache"
    monkeypatch.setenv("KGLOOM_CACHE_DIR", str(cache))
    with pytest.raises(FileNotFoundError, match="no checked ONNX export"):
        OnnxEmbedder(embedder.model_path)
    assert ensure_export(embedder.model_path) is None
    model_file = export_file(embedder.model_path)
    assert model_file.parent == cache / "onnx" and probe_file(model_file).is_file()

    child = subprocess.run(
        [sys.executable, "-c", "import sys\n"
         "from kgloom.embedding import index_embedder\n"
         "e = index_embedder()\n"
         "v = e.embed(['Tiny Tim', 'Bob Cratchit carried him home.'])\n"
         "print(type(e).__name__, 'torch' in sys.modules, v.shape)"],
        capture_output=True, text=True, check=True)
    assert child.stdout.split()[:2] == ["OnnxEmbedder", "False"], child.stdout + child.stderr

    onnx = index_embedder(embedder.model_path)
    assert isinstance(onnx, OnnxEmbedder) and onnx.key == embedder.key
    texts = ["Scrooge's nephew Fred wishes him a merry Christmas.", "", LONG_TEXT, "Tiny Tim"]
    assert onnx.windows_for(LONG_TEXT) == embedder.windows_for(LONG_TEXT)
    cos = (onnx.embed(texts) * embedder.embed(texts)).sum(axis=1)
    assert cos.min() > 0.99999, cos

    # a long list follows the load as it changes: each block of windows picks its own
    # threads (the pool's 31,287 resolution windows once ran on one thread throughout),
    # with the vectors of a fixed count, bit for bit, and each block counted by its threads
    _picks_per_block_keep_the_vectors(onnx, monkeypatch, exact=True)

    np.save(probe_file(model_file), -np.load(probe_file(model_file)))  # another model's
    with pytest.raises(ValueError, match="probe cosine"):
        OnnxEmbedder(embedder.model_path)
    assert isinstance(index_embedder(embedder.model_path), Embedder)

    model_file.write_bytes(model_file.read_bytes()[:1000])  # a cut (damaged) export
    with pytest.raises(ValueError, match=r"cannot run it.*delete the file"):
        OnnxEmbedder(embedder.model_path)
    assert isinstance(index_embedder(embedder.model_path), Embedder)


def _picks_per_block_keep_the_vectors(emb, monkeypatch, exact: bool) -> None:
    """``emb`` embeds three blocks of windows with its thread picks 2, 1, 2: the vectors
    are those of one thread throughout (bit for bit when ``exact``, else to a cosine of
    1 - 1e-6) and :meth:`passes` counts each block by the threads it ran on."""
    import itertools

    from kgloom.embedding.windows import PROGRESS_WINDOWS

    texts = [f"Stave {i % 5 + 1}: Scrooge met ghost number {i} at the counting house."
             for i in range(2 * PROGRESS_WINDOWS + 7)]
    one = emb.embed(texts, threads=1)
    before = emb.passes()
    monkeypatch.setattr(emb._bursts, "pick", functools.partial(next, itertools.cycle([2, 1])))
    mixed = emb.embed(texts)
    if exact:
        assert np.array_equal(one, mixed)
    else:
        assert float((one * mixed).sum(axis=1).min()) > 1 - 1e-6
    after = emb.passes()
    grew = {t: (after[t][0] - before.get(t, (0, 0, 0))[0],
                after[t][1] - before.get(t, (0, 0, 0))[1]) for t in after}
    # 512 windows on 2 threads, 512 on 1, 7 on 2
    assert grew == {1: (1, PROGRESS_WINDOWS), 2: (2, len(texts) - PROGRESS_WINDOWS)}


@pytest.mark.slow
def test_torch_backend_picks_threads_per_block(embedder, monkeypatch):
    _picks_per_block_keep_the_vectors(Embedder(embedder.model_path, backend="torch"),
                                      monkeypatch, exact=False)


def _frame_and_vectors(n: int, dim: int = 8, seed: int = 0):
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    df = pl.DataFrame({
        "id": [f"unit-{i:04d}" for i in range(n)],
        "text": [f"Stave {i % 5 + 1}, paragraph {i}" for i in range(n)],
        "kg_node_ids": [[f"e{i}", f"e{i + 1}"] for i in range(n)],
        "community_ids": [[0, i % 3] for i in range(n)],
        "centrality": [i / n for i in range(n)],
    })
    return df, vectors


def test_write_lancedb_is_idempotent_and_versioned(tmp_path):
    df, vectors = _frame_and_vectors(20)
    first = write_lancedb(tmp_path / "lance", "text_units", df, vectors, batch_rows=6)
    second = write_lancedb(tmp_path / "lance", "text_units", df, vectors)
    assert first["rows"] == second["rows"] == 20 and first["dim"] == 8
    assert first["written"] == 20 and not second["indexed"]
    # nothing changed: nothing written, no new version
    assert second["version"] == first["version"] and second["written"] == 0

    table = lancedb.connect(str(tmp_path / "lance")).open_table("text_units")
    assert table.count_rows() == 20
    table.checkout(first["version"])
    assert table.count_rows() == 20  # the previous version stays readable
    table.checkout_latest()

    got = pl.from_arrow(table.to_arrow()).sort("id")
    assert got["kg_node_ids"].to_list() == df["kg_node_ids"].to_list()  # lists survive
    assert got["community_ids"].to_list() == df["community_ids"].to_list()
    assert tables.vectors_valid(table, 8, expected_rows=20)[0]

    # drop two rows and change one: the table mirrors the frame again
    changed = df.slice(2).with_columns(
        pl.when(pl.col("id") == "unit-0005").then(pl.lit("changed")).otherwise(pl.col("text"))
        .alias("text"))
    third = write_lancedb(tmp_path / "lance", "text_units", changed, vectors[2:])
    assert third["rows"] == 18
    table = lancedb.connect(str(tmp_path / "lance")).open_table("text_units")
    got = pl.from_arrow(table.to_arrow())
    assert sorted(got["id"]) == sorted(changed["id"])
    assert got.filter(pl.col("id") == "unit-0005")["text"].item() == "changed"
    assert (third["written"], third["deleted"]) == (1, 2)  # only the changed row is rewritten
    table.checkout(second["version"])
    assert table.count_rows() == 20


def test_write_lancedb_rejects_bad_input(tmp_path):
    df, vectors = _frame_and_vectors(4)
    with pytest.raises(ValueError, match="shape"):
        write_lancedb(tmp_path, "t", df, vectors[:3])
    with pytest.raises(ValueError, match="unique"):
        write_lancedb(tmp_path, "t", pl.concat([df, df]), np.vstack([vectors, vectors]))


def test_write_lancedb_builds_ann_index_over_threshold(tmp_path):
    df, vectors = _frame_and_vectors(600, dim=32)
    result = write_lancedb(tmp_path, "entities", df, vectors, ann_min_rows=500)
    assert result["indexed"]
    table = lancedb.connect(str(tmp_path)).open_table("entities")
    assert table.list_indices()
    hit = table.search(vectors[7]).limit(1).to_list()[0]
    assert hit["id"] == "unit-0007"


def test_only_changed_rows_are_embedded_and_written_in_batches(tmp_path, embedder):
    from kgloom.embedding.store import EMBEDDING_KEY
    from kgloom.publish.vectors import sync_lancedb

    texts = ["Scrooge counted his money.", "Bob Cratchit warmed his hands at the candle.",
             "Tiny Tim said God bless us, every one.", "Marley's ghost rattled its chain.",
             "Fezziwig danced with his wife."]
    df = pl.DataFrame({"id": list("abcde"), "text": texts, "rank": [1, 2, 3, 4, 5]})
    seen = []
    df.write_parquet(tmp_path / "t.parquet")  # read back two rows at a time
    first = sync_lancedb(tmp_path, "t", tmp_path / "t.parquet", pl.col("text"), embedder,
                         batch_rows=2, progress=lambda done, total: seen.append((done, total)))
    assert (first["written"], first["embedded"], first["reused"]) == (5, 5, 0)
    assert seen == [(2, 5), (4, 5), (5, 5)]  # one progress step per batch
    table = lancedb.connect(str(tmp_path)).open_table("t")
    stored = pl.from_arrow(table.to_arrow()).sort("id")
    vecs = np.stack(stored["vector"].to_list())
    assert np.allclose(vecs, embedder.embed(texts), atol=1e-5)

    same = sync_lancedb(tmp_path, "t", df, pl.col("text"), embedder)
    assert (same["written"], same["embedded"], same["version"]) == (0, 0, first["version"])

    # a new text, a changed non-text column (vector reused), a deleted row
    changed = df.filter(pl.col("id") != "e").with_columns(
        pl.when(pl.col("id") == "a").then(pl.lit("Marley was dead, to begin with."))
        .otherwise(pl.col("text")).alias("text"),
        pl.when(pl.col("id") == "b").then(20).otherwise(pl.col("rank")).alias("rank"))
    third = sync_lancedb(tmp_path, "t", changed, pl.col("text"), embedder)
    assert (third["written"], third["embedded"], third["reused"], third["deleted"]) == (2, 1, 1, 1)
    got = pl.from_arrow(lancedb.connect(str(tmp_path)).open_table("t").to_arrow()).sort("id")
    assert got["id"].to_list() == ["a", "b", "c", "d"] and got["rank"].to_list() == [1, 20, 3, 4]
    assert np.allclose(got["vector"][1].to_numpy(), vecs[1])
    assert np.allclose(got["vector"][0].to_numpy(), embedder.embed([changed["text"][0]])[0],
                       atol=1e-5)
    assert got[EMBEDDING_KEY][0] != stored[EMBEDDING_KEY][0]


def test_rows_with_the_same_text_are_embedded_once(tmp_path, embedder, monkeypatch):
    """A community report repeated on several levels is one text: one forward pass,
    within a batch and across batches, and every row gets that vector."""
    from kgloom.publish.vectors import sync_lancedb

    texts = ["Scrooge counted his money.", "Marley's ghost rattled its chain."]
    df = pl.DataFrame({"id": [f"r{i}" for i in range(6)],
                       "text": [texts[0], texts[0], texts[1], texts[0], texts[1], texts[0]]})
    asked: list[str] = []
    real = embedder.embed
    monkeypatch.setattr(embedder, "embed", lambda batch, **kw: (asked.extend(batch),
                                                               real(batch, **kw))[1])
    got = sync_lancedb(tmp_path, "t", df, pl.col("text"), embedder, batch_rows=2)
    assert sorted(asked) == sorted(texts)  # each distinct text once
    assert (got["written"], got["embedded"], got["reused"]) == (6, 2, 4)
    stored = pl.from_arrow(lancedb.connect(str(tmp_path)).open_table("t").to_arrow()).sort("id")
    vecs = np.stack(stored["vector"].to_list())
    want = real(texts)
    for row, text in zip(vecs, df["text"]):
        assert np.allclose(row, want[texts.index(text)], atol=1e-5)


def test_embed_reports_progress_per_block_and_gives_the_same_vectors(embedder, monkeypatch):
    import kgloom.embedding.sentence_embedder as sentence_embedder

    texts = [f"Scrooge counted coin number {i}." for i in range(7)]
    whole = embedder.embed(texts)
    monkeypatch.setattr(sentence_embedder, "PROGRESS_WINDOWS", 3)
    calls: list[tuple[int, int]] = []
    blocks = embedder.embed(texts, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(3, 7), (6, 7), (7, 7)]
    assert np.allclose(whole, blocks, atol=1e-5)


def test_the_embedder_load_is_counted_once(embedder):
    """The process-wide embedder's load (imports and weights) is model time of the one
    stage that claims it first; later claims get 0."""
    from kgloom.embedding.sentence_embedder import Embedder

    fresh = Embedder(embedder.model_path)
    assert fresh.load_seconds > 0 and fresh.seconds == 0.0  # no forward pass yet
    assert fresh.claim_load_seconds() == fresh.load_seconds
    assert fresh.claim_load_seconds() == 0.0
