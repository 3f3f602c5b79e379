"""Local LLM calls with JSON-schema–constrained decoding, a content-keyed cache table,
and per-stage statistics: a kernel any stage and the query side may use (it imports no
stage). No Dagster here.

One module per concern; this ``__init__`` only re-exports their public names, so
``from kgloom.llm import structured_call`` works:

- :mod:`kgloom.llm.backend`: the backend protocol (:class:`LLMBackend`) and its reply
  (:class:`Completion`).
- :mod:`kgloom.llm.llamacpp`: :class:`LlamaCppBackend`, any GGUF run in-process by
  llama-cpp-python, decoded under a grammar built from the reply's JSON schema, with
  its grammar-first greedy sampler.
- :mod:`kgloom.llm.http`: OpenAI-compatible model servers (vLLM, llama.cpp's server) as
  a backend; :mod:`kgloom.llm.fake`: the deterministic backend ``fake=True`` selects.
- :mod:`kgloom.llm.grammar`: reply grammars bounded in UTF-8 bytes and the reply token
  bounds (:func:`reply_token_bound`: schemas carry ``maxItems`` and ``maxLength``, so a
  small model cannot loop and a reply is never cut).
- :mod:`kgloom.llm.model_files`: the bundled GGUF's path and checksum, and the check
  every model file passes.
- :mod:`kgloom.llm.cache`: :class:`LLMCache`, the SQLite table (``llm_cache.sqlite`` next
  to the outputs) keyed by (model digest, prompt template hash, input hash, decoding
  parameters).
- :mod:`kgloom.llm.stage_stats`: :class:`StageStats`, per-stage call statistics.
- :mod:`kgloom.llm.client`: :class:`CachedLLM` (a backend behind the cache;
  :meth:`CachedLLM.map` sends a stage's independent calls ``concurrency`` at a time)
  and :func:`open_llm`, the one way to open a model.
- :mod:`kgloom.llm.prompts`: :class:`PromptTemplate` and :func:`prompt_room`, the
  model tokens a prompt leaves in the context window.
- :mod:`kgloom.llm.structured`: :func:`structured_call`, the one way every stage asks the
  LLM for JSON (cached call, parse, validation, one retry, a failures row; it never
  raises for a bad reply), and :class:`LLMCaller`, what it needs of an LLM.
- :mod:`kgloom.llm.cpu`: threads per call by the machine's load.
"""

from kgloom.llm.backend import Completion, LLMBackend
from kgloom.llm.cache import CACHE_FILE, LLMCache, cache_rows, new_rows
from kgloom.llm.client import CachedLLM, map_concurrent, open_llm
from kgloom.llm.grammar import reply_token_bound, server_reply_token_bound
from kgloom.llm.llamacpp import LlamaCppBackend
from kgloom.llm.model_files import (
                                    SMOLLM2_FILE,
                                    SMOLLM2_SHA256,
                                    ModelFileError,
                                    default_gguf_path,
                                    verify_model_file,
)
from kgloom.llm.prompts import PromptTemplate, prompt_room
from kgloom.llm.stage_stats import StageStats
from kgloom.llm.structured import LLMCaller, structured_call

__all__ = [
    "CACHE_FILE", "SMOLLM2_FILE", "SMOLLM2_SHA256", "CachedLLM", "Completion", "LLMBackend",
    "LLMCache", "LLMCaller", "LlamaCppBackend", "ModelFileError", "PromptTemplate", "StageStats",
    "cache_rows", "default_gguf_path", "map_concurrent", "new_rows", "open_llm",
    "prompt_room", "reply_token_bound", "server_reply_token_bound", "structured_call",
    "verify_model_file",
]
