"""The embedder's forward pass on ONNX Runtime: the same model, the same vectors, faster.

:class:`kgloom.embedding.sentence_embedder.Embedder` encodes windows with sentence-transformers
(torch). For a folder of the all-MiniLM-L6-v2 kind (BERT, mean pooling, unit length:
:func:`kgloom.embedding.fast.fast_path_reason`) this module exports the
transformer once to ONNX (``torch.onnx.export``, opset 17) into a cache folder, keyed by
the weights' SHA-256, and runs it with ONNX Runtime's CPU provider. On the 2-core machine
the same 600 entity texts and 300 text units took 1.4-3.4x less time than
sentence-transformers at the same batch size, with every vector's cosine to the torch one
above 0.999999 (``bench/bench_embedder.py``). A session is checked against the torch
model on a probe sentence before use; any failure (no ``onnx`` / ``onnxruntime``, an
export error, a mismatch) leaves the torch path in place, with the reason.

Sources: PyTorch docs, "torch.onnx.export" (TorchScript-based exporter, dynamic axes);
ONNX Runtime docs, "Thread management" (intra-op threads per session; spinning off so an
idle pool does not burn a shared machine's CPU). No Dagster here.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from kgloom.embedding.fast import TokenizersEmbedder, fast_path_reason
from kgloom.embedding.windows import PROGRESS_WINDOWS

if TYPE_CHECKING:  # imported where a session is made: onnxruntime is optional
    import onnxruntime

OPSET = 17
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
PROBE = "Ebenezer Scrooge kept Marley's name above the warehouse door for years."
MIN_PROBE_COSINE = 0.9999  # an exported graph that computes something else is not used


def cache_dir() -> Path:
    """Where exported models live: ``$KGLOOM_CACHE_DIR/onnx``, default
    ``~/.cache/kgloom/onnx`` (``$XDG_CACHE_HOME`` honoured)."""
    root = os.environ.get("KGLOOM_CACHE_DIR") or Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kgloom"
    return Path(root) / "onnx"


def weights_digest(model_path: str | Path) -> str:
    """SHA-256 (hex, first 24 characters) of the folder's ``model.safetensors``: the
    exported file's name, so new weights never meet an old export."""
    h = hashlib.sha256()
    with open(Path(model_path) / "model.safetensors", "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:24]


def export(transformer, path: Path) -> Path:
    """Write ``transformer`` (a ``transformers`` BERT model, inputs ``INPUTS``, output
    ``last_hidden_state`` of shape (batch, tokens, dim)) to ``path`` as ONNX with dynamic
    batch and length, atomically (a temporary file in the same folder, then renamed).

    Raises:
        ImportError: without the ``onnx`` package (the exporter needs it).
        Exception: whatever ``torch.onnx.export`` raises for the model.
    """
    import torch

    class _Hidden(torch.nn.Module):  # keyword inputs in, last_hidden_state out
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.model(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    import onnx  # noqa: F401  (torch's exporter imports it; fail early and clearly)

    ids = torch.tensor([[101, 7592, 2088, 102], [101, 7592, 102, 0]])
    sample = (ids, (ids != 0).long(), torch.zeros_like(ids))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".onnx.tmp")
    os.close(fd)
    try:
        with torch.no_grad():
            torch.onnx.export(_Hidden(transformer.eval()), sample, tmp, input_names=list(INPUTS),
                              output_names=["last_hidden_state"], opset_version=OPSET,
                              dynamic_axes={k: {0: "batch", 1: "tokens"}
                                            for k in (*INPUTS, "last_hidden_state")},
                              dynamo=False)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


class OnnxEncoder:
    """Unit-length mean-pooled vectors of windows from an ONNX export of the model.

    Args:
        model_file: the exported ``.onnx`` file.
        ids_of: the token ids, special tokens included, of each of a list of windows
            (the model's own tokenizer: ``transformers``' or the ``tokenizers`` library's).
        pad_id: the tokenizer's padding id.
        batch_size: windows per run, after sorting all windows by length (padding
            stays small); 8 was the fastest of 8 and 32 on the 2-core machine.

    Raises:
        ImportError: without ``onnxruntime``.
    """

    def __init__(self, model_file: Path, ids_of: Callable[[list[str]], list[list[int]]],
                 pad_id: int = 0, batch_size: int = 8) -> None:
        import onnxruntime  # noqa: F401

        self.model_file = Path(model_file)
        self.ids_of = ids_of
        self.pad_id = pad_id
        self.batch_size = batch_size
        self._session: tuple[int, onnxruntime.InferenceSession] | None = None

    def session(self, threads: int) -> onnxruntime.InferenceSession:
        """The ONNX Runtime session with ``threads`` intra-op threads. A session's thread
        pool is fixed when it is made, so another count makes a new one; only the latest
        is kept (each holds the weights and its own memory arena: a second session cost
        about 110 MB resident on the 2-core machine). Memory patterns are off: with them
        a 1,500-passage pass peaked at 389 MB resident, without at 345 MB (the process
        included)."""
        if self._session is None or self._session[0] != threads:
            import onnxruntime as ort

            self._session = None  # the old one's memory goes before the new one's comes
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = threads
            opts.inter_op_num_threads = 1
            opts.enable_mem_pattern = False
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
            self._session = (threads, ort.InferenceSession(
                str(self.model_file), opts, providers=["CPUExecutionProvider"]))
        return self._session[1]

    def release(self) -> None:
        """Drop the session (its weights and memory arena: about 0.3 GB after a pass of
        256-token windows); the next :meth:`encode` makes it again (about 0.3 s)."""
        self._session = None

    def encode(self, windows: list[str], threads: int | Callable[[], int],
               progress: Callable[[int, int], None] | None = None, progress_every: int = 512,
               on_block: Callable[[int, int, float], None] | None = None) -> np.ndarray:
        """float32 (len(windows), dim), unit rows: each window's last hidden states
        averaged over its tokens (special tokens included, padding not:
        sentence-transformers' mean ``Pooling``), then scaled to length 1. Windows are
        run shortest first (little padding) in batches of ``batch_size``, in blocks of
        ``progress_every``; ``progress(done, total)`` after each block.

        ``threads``: intra-op threads, or a function asked before each block (a long
        pass follows the machine's load as it changes; a session's vectors do not depend
        on its thread count: ``tests/unit/test_vectors.py``).
        ``on_block(windows, threads, seconds)`` after each block."""
        import time

        ids = self.ids_of(windows)  # tokenized once
        order = np.argsort([len(i) for i in ids], kind="stable")
        pad = self.pad_id
        out: np.ndarray | None = None
        for block in range(0, len(windows), progress_every):  # a progress step each
            t0 = time.perf_counter()
            n_threads = threads() if callable(threads) else threads
            sess = self.session(n_threads)
            end = min(block + progress_every, len(windows))
            for start in range(block, end, self.batch_size):
                idx = order[start:min(start + self.batch_size, end)]
                width = max(len(ids[i]) for i in idx)
                input_ids = np.full((len(idx), width), pad, dtype=np.int64)
                attention = np.zeros_like(input_ids)
                for row, i in enumerate(idx):  # right padding, as the tokenizer pads
                    input_ids[row, :len(ids[i])] = ids[i]
                    attention[row, :len(ids[i])] = 1
                # the exported graph's first output, a dense float tensor: an ndarray
                # already (asarray copies nothing), typed as one of any ONNX value's types
                hidden = np.asarray(sess.run(None, {
                    "input_ids": input_ids, "attention_mask": attention,
                    "token_type_ids": np.zeros_like(input_ids)})[0])
                mask = attention[..., None].astype(np.float32)
                mean = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1.0)
                mean /= np.maximum(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12)
                if out is None:
                    out = np.zeros((len(windows), mean.shape[1]), dtype=np.float32)
                out[idx] = mean
            if on_block:
                on_block(end - block, n_threads, time.perf_counter() - t0)
            if progress:
                progress(end, len(windows))
        return out if out is not None else np.zeros((0, 0), dtype=np.float32)


def export_file(model_path: str | Path) -> Path:
    """Where the export of ``model_path``'s weights lives (it may not exist yet)."""
    return cache_dir() / f"{weights_digest(model_path)}-opset{OPSET}.onnx"


def probe_file(model_file: Path) -> Path:
    """The torch model's unit vector of :data:`PROBE` (float32 (dim,), ``.npy``), saved
    beside ``model_file`` once the export reproduced it: what a process without torch
    checks the export against (:class:`OnnxEmbedder`)."""
    return model_file.with_suffix(".probe.npy")


def _save_probe(path: Path, vector: np.ndarray) -> None:
    """``vector`` as float32 ``.npy`` at ``path``, atomically (a temporary file in the
    same folder, then renamed)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npy.tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            np.save(fh, vector.astype(np.float32))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def onnx_encoder(model_path: str | Path, st_model, tokenizer,
                 batch_size: int = 8) -> tuple[OnnxEncoder | None, str]:
    """An :class:`OnnxEncoder` for the sentence-transformers model ``st_model`` loaded
    from ``model_path`` (its export made and cached on first use), checked on
    :data:`PROBE` against ``st_model``; or (None, why not) when the folder is not of the
    kind it reproduces, a package is missing, the export fails or the probe's cosine is
    under :data:`MIN_PROBE_COSINE`. The second item says which file serves, or why not.
    A checked export gets its probe vector saved beside it (:func:`probe_file`)."""
    reason = fast_path_reason(model_path)
    if reason:
        return None, f"torch: {reason}"
    try:
        import onnxruntime  # noqa: F401

        path = export_file(model_path)
        if not path.exists():
            export(st_model[0].auto_model, path)
        encoder = OnnxEncoder(path, lambda w: tokenizer(w, verbose=False)["input_ids"],
                              tokenizer.pad_token_id or 0, batch_size)
        got = encoder.encode([PROBE], 1)[0]
        want = st_model.encode([PROBE], normalize_embeddings=True, convert_to_numpy=True)[0]
        cosine = float(np.dot(got, want))
        if cosine < MIN_PROBE_COSINE:
            return None, f"torch: the ONNX export's probe cosine was {cosine:.6f}"
        if not probe_file(path).exists():
            _save_probe(probe_file(path), want)
        return encoder, f"onnxruntime: {path}"
    except Exception as exc:  # noqa: BLE001  (any failure keeps the torch path)
        return None, f"torch: ONNX path unavailable ({type(exc).__name__}: {exc})"


def ensure_export(model_path: str | Path, timeout: float = 900.0) -> str | None:
    """Make the checked export of ``model_path`` (:func:`export_file` and its
    :func:`probe_file`) when it is missing, in a child process (``python -m
    kgloom.embedding.onnx_runtime MODEL_PATH``), so this process never imports torch.
    Return None when both files are there, else why not (one line: the child's last
    line of output, or the timeout)."""
    import subprocess
    import sys

    model_file = export_file(model_path)
    if model_file.is_file() and probe_file(model_file).is_file():
        return None
    try:
        done = subprocess.run([sys.executable, "-m", "kgloom.embedding.onnx_runtime",
                               str(model_path)], capture_output=True, text=True,
                              timeout=timeout, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    except subprocess.TimeoutExpired:
        return f"the ONNX export took over {timeout:.0f} s"
    if model_file.is_file() and probe_file(model_file).is_file():
        return None
    lines = (done.stdout + done.stderr).strip().splitlines()
    return lines[-1] if lines else f"the ONNX export exited {done.returncode}"


class OnnxEmbedder(TokenizersEmbedder):
    """The index embedder without torch: a checked ONNX export (:func:`ensure_export`)
    on ONNX Runtime, the folder's ``tokenizer.json`` on ``tokenizers``. Same vectors as
    :class:`~kgloom.embedding.sentence_embedder.Embedder` (the export is the one its ONNX
    path runs, checked against the torch model's saved probe vector), same windows and
    :attr:`key`, so either may write or read an index. Without torch, transformers and
    sentence-transformers in the process, a process that loaded it and embedded 1,500
    pool passages peaked at 393 MB resident, against 838 MB with sentence-transformers
    loaded and the same ONNX passes, 738 MB with torch's passes; it loaded in 0.5 s
    against 6.1 s (``bench/bench_embedder.py --memory``,
    ``bench/results/embedder_memory.json``).

    Args:
        model_path: a folder :func:`fast_path_reason` accepts; default the bundled one.
        window_tokens, stride: as :class:`~kgloom.embedding.sentence_embedder.Embedder`.
        batch_size: windows per forward pass (:class:`OnnxEncoder`).

    Raises:
        ValueError: a folder of another kind, a bad window or stride, an export ONNX
            Runtime cannot run (a damaged file), or one whose probe vector is off the
            saved one (cosine under :data:`MIN_PROBE_COSINE`).
        FileNotFoundError: no checked export (run :func:`ensure_export` first).
        ImportError: without ``onnxruntime``.
    """

    def __init__(self, model_path: str | Path | None = None, window_tokens: int | None = None,
                 stride: int | None = None, batch_size: int = 8) -> None:
        import time

        from kgloom.llm.cpu import BurstThreads

        t0 = time.perf_counter()
        super().__init__(model_path, window_tokens, stride)
        model_file = export_file(self.model_path)
        probe = probe_file(model_file)
        if not (model_file.is_file() and probe.is_file()):
            raise FileNotFoundError(f"no checked ONNX export of {self.model_path} in "
                                    f"{model_file.parent}")
        self.batch_size = batch_size
        self._onnx = OnnxEncoder(
            model_file, lambda w: [e.ids for e in self.tokenizer.encode_batch(w)],
            int(self.config.get("pad_token_id") or 0), batch_size)
        self._bursts = BurstThreads()  # threads of each block, by others' CPU use
        try:
            got = self._onnx.encode([PROBE], 1)[0]
        except Exception as exc:  # ONNX Runtime's own errors derive from Exception only
            raise ValueError(f"{model_file}: ONNX Runtime cannot run it ({type(exc).__name__}:"
                             f" {exc}); delete the file to export it again") from exc
        cosine = float(np.dot(got, np.load(probe)))
        if cosine < MIN_PROBE_COSINE:
            raise ValueError(f"{model_file}: probe cosine {cosine:.6f} against the torch "
                             f"model's saved vector; delete the file to export it again")
        self.backend = f"onnxruntime, no torch: {model_file}"
        self.load_seconds = time.perf_counter() - t0

    def release(self) -> None:
        """Drop the ONNX Runtime session (:meth:`OnnxEncoder.release`)."""
        self._onnx.release()

    def _encode(self, windows: list[str], threads: int | None,
                progress: Callable[[int, int], None] | None) -> np.ndarray:
        """Unit-length vectors (len(windows), dim) float32 of ``windows``, on ``threads``
        intra-op threads (None: picked before each block of :data:`PROGRESS_WINDOWS`
        windows by others' CPU use, :class:`kgloom.llm.cpu.BurstThreads`), each block
        counted in :meth:`passes`; ``progress(done, total)`` after each block."""
        return self._onnx.encode(windows, threads or self._bursts.pick, progress,
                                 PROGRESS_WINDOWS, self._count_pass)


def _main(argv: list[str]) -> int:
    """``python -m kgloom.embedding.onnx_runtime MODEL_PATH``: make and check the export
    of MODEL_PATH (a sentence-transformers folder) with torch; print where it is, or why
    not; exit 0 when it serves."""
    if len(argv) != 1:
        print("usage: python -m kgloom.embedding.onnx_runtime MODEL_PATH")
        return 2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(argv[0], device="cpu")
    encoder, why = onnx_encoder(argv[0], model, model.tokenizer)
    print(why)
    return 0 if encoder is not None else 1


if __name__ == "__main__":
    import sys

    sys.exit(_main(sys.argv[1:]))
