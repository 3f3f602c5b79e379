"""The bundled GGUF loaded with converted weights (``llm.weights``): the conversion is
made once and reused, the converted model predicts what the file predicts, the model's
identity says how it was loaded (the index fingerprint and the LLM cache agree on it),
and a conversion that cannot be made fails with a clear error and leaves no file."""

from __future__ import annotations

import numpy as np
import pytest

from kgloom.llm import SMOLLM2_SHA256, ModelFileError, default_gguf_path, open_llm
from kgloom.llm.model_files import (
    converted_gguf,
    model_identity,
    resolve_weights,
)
from kgloom.resources.model import LLMResource

PROMPT = ("Marley was dead: to begin with. There is no doubt whatever about that. The "
          "register of his burial was signed by the clergyman, the clerk, the undertaker, "
          "and the chief mourner. Scrooge signed it.")


def _next_token_probs(path) -> np.ndarray:
    from llama_cpp import Llama

    from kgloom.llm.llamacpp import plain_cpu_buffers

    with plain_cpu_buffers():  # no AMX kernels, which crashed on the Q4_1 file
        llm = Llama(model_path=str(path), n_ctx=256, n_threads=1, verbose=False)
    llm.eval(llm.tokenize(PROMPT.encode()))
    logits = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1),
                                   shape=(llm.n_vocab(),)).astype(np.float64)
    p = np.exp(logits - logits.max())
    return p / p.sum()


def test_weights_resolve_to_a_known_kind():
    assert resolve_weights("auto", bundled=False) == "file"
    assert resolve_weights("auto", bundled=True) in ("bf16", "f16")
    assert resolve_weights("q8_0", bundled=False) == "q8_0"
    with pytest.raises(ValueError, match=r"llm\.weights"):
        resolve_weights("q3_k", bundled=True)
    assert model_identity("abc", "file") == "abc"
    assert model_identity("abc", "bf16") == "abc+bf16"


@pytest.mark.slow
def test_converted_weights_predict_what_the_file_predicts(tmp_path):
    src = default_gguf_path()
    out = converted_gguf(src, SMOLLM2_SHA256, "f16", tmp_path)
    assert out.read_bytes()[:4] == b"GGUF" and out.stat().st_size > src.stat().st_size
    mtime = out.stat().st_mtime_ns
    assert converted_gguf(src, SMOLLM2_SHA256, "f16", tmp_path) == out  # reused, not redone
    assert out.stat().st_mtime_ns == mtime
    assert [p.name for p in tmp_path.iterdir()] == [out.name]  # no temporary file left
    p_file, p_f16 = _next_token_probs(src), _next_token_probs(out)
    top_file, top_f16 = np.argsort(-p_file)[:5], np.argsort(-p_f16)[:5]
    assert set(top_file[:2]) == set(top_f16[:2])  # near-ties may swap
    assert len(set(top_file) & set(top_f16)) >= 4
    kl = float(np.sum(p_file * np.log(p_file / p_f16)))
    assert kl < 0.05, kl  # Q4_1's own activation rounding differs from F16's


@pytest.mark.slow
def test_the_opened_model_and_the_resource_name_the_same_identity(tmp_path, monkeypatch):
    monkeypatch.setenv("KGLOOM_MODEL_CACHE", str(tmp_path / "models"))
    llm = open_llm(tmp_path / "cache.sqlite", weights="auto")
    kind = resolve_weights("auto", bundled=True)
    assert llm.model_id == f"{SMOLLM2_SHA256}+{kind}"
    assert llm.backend.model_path.parent == tmp_path / "models"  # type: ignore[union-attr]
    assert LLMResource().verify() == llm.model_id
    assert LLMResource(weights="file").verify() == SMOLLM2_SHA256
    as_is = open_llm(tmp_path / "cache2.sqlite", weights="file")
    assert as_is.model_id == SMOLLM2_SHA256
    assert as_is.backend.model_path == default_gguf_path()  # type: ignore[union-attr]


def test_a_conversion_that_fails_says_so_and_leaves_nothing(tmp_path):
    not_gguf = tmp_path / "broken.gguf"
    not_gguf.write_bytes(b"GGUF" + b"\0" * 64)
    folder = tmp_path / "models"
    with pytest.raises(ModelFileError, match="could not convert"):
        converted_gguf(not_gguf, "0" * 64, "f16", folder)
    assert list(folder.iterdir()) == []
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("x")
    with pytest.raises(ModelFileError, match="KGLOOM_MODEL_CACHE"):
        converted_gguf(default_gguf_path(), SMOLLM2_SHA256, "f16", blocked / "models")
    with pytest.raises(ValueError, match=r"llm\.weights"):
        converted_gguf(default_gguf_path(), SMOLLM2_SHA256, "int3", folder)


@pytest.mark.slow
def test_the_model_loads_at_its_first_call_and_a_released_one_loads_again(tmp_path,
                                                                         monkeypatch):
    """Opening a model loads no weights; counting tokens reads the vocabulary alone (the
    same counts); the first call loads them; release frees them and keeps the figures;
    the next call loads them again and replies as before."""
    from kgloom.llm import PromptTemplate, structured_call

    monkeypatch.setenv("KGLOOM_MODEL_CACHE", str(tmp_path / "models"))
    llm = open_llm(tmp_path / "cache.sqlite")
    backend = llm.backend
    assert backend._model is None  # type: ignore[union-attr]
    text = "Fezziwig said: Christmas Eve, Dick! Yo ho, my boys!"
    vocab_count = backend.count_tokens(text)  # type: ignore[union-attr]
    assert backend._model is None and vocab_count > 5  # type: ignore[union-attr]
    template = PromptTemplate(name="t", system="Answer in JSON.", user="Is {q} a person?",
                              schema={"type": "object", "properties": {
                                  "answer": {"type": "boolean"}}, "required": ["answer"]},
                              max_tokens=10)
    first, _ = structured_call(llm, template, "s", "Fezziwig", 1, q="Fezziwig")
    assert backend._model is not None  # type: ignore[union-attr]
    assert backend.count_tokens(text) == vocab_count  # type: ignore[union-attr]
    settings = llm.backend_settings()
    llm.release()
    assert backend._model is None and llm.backend_settings() == settings  # type: ignore[union-attr]
    again, _ = structured_call(llm, template, "s", "Fezziwig", 2, q="Fezziwig")  # a miss
    assert again == first and backend._model is not None  # type: ignore[union-attr]
    assert llm.stats["s"].calls == 2
