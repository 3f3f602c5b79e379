"""A complete Microsoft GraphRAG (3.3) settings file for a kgloom index, its budgets fitted
to the chat model's context window. No Dagster, no graphrag import (graphrag lives in its
own virtualenv; see docs/graphrag.md).

What ``graphrag query --root ROOT`` needs from ``ROOT/settings.yaml`` to run all five
methods (local, global, global with dynamic selection, DRIFT, basic) on kgloom's files:

- **models**: one chat model and one embedding model, both OpenAI-compatible endpoints
  (llama-cpp-python's server for chat; ``kgloom serve-embeddings`` for the index's own
  embedder, since the query must be embedded by the model that embedded the index);
- **vector store**: GraphRAG's three embeddings (``entity_description``,
  ``text_unit_text``, ``community_full_content``) mapped to kgloom's LanceDB tables
  (``entities``, ``text_units``, ``community_reports``), with the index's vector size;
- **paths**: the output folder (parquet tables) and its ``lancedb`` folder, written
  relative to ROOT (GraphRAG's config loader changes into the settings file's folder
  before it resolves them);
- **budgets**: every context GraphRAG builds, plus its prompt template, the question and
  the reply, must fit the model's window. GraphRAG's defaults (12,000-token contexts) do
  not fit an 8,192-token model: llama-cpp-python then refuses the request, GraphRAG's
  local search swallows the error and prints an empty answer with exit status 0, and
  global search answers its canned "unable to answer". :func:`fit_budgets` derives them.

GraphRAG counts context tokens with litellm's tokenizer for ``openai/<model>``, which is
tiktoken's ``cl100k_base`` for a model litellm does not know; the window is in the chat
model's own tokens. :data:`MODEL_TOKENS_PER_GRAPHRAG_TOKEN` converts one into the other.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GRAPHRAG_VERSION = "3.3.0"  # the settings schema written here (graphrag.config.models)

# GraphRAG embedding name -> kgloom LanceDB table (kgloom.embedding.store.VECTOR_TABLES)
VECTOR_STORE_TABLES = {"entity_description": "entities", "text_unit_text": "text_units",
                       "community_full_content": "community_reports"}
# The parquet tables `graphrag query` reads (graphrag.cli.query; covariates is optional).
QUERY_TABLES = ("entities", "communities", "community_reports", "text_units",
                "relationships")

# cl100k_base tokens of GraphRAG 3.3.0's longest query prompt template, rounded up: global
# map 909 (reduce 778, DRIFT local 720, basic 609, local 604, DRIFT reduce 571, DRIFT
# primer 373), counted with litellm's tokenizer on graphrag.prompts.query, 2026-12-02.
PROMPT_TEMPLATE_TOKENS = 1000
# The question and the chat template's role markers (cl100k tokens): a long question.
QUESTION_TOKENS = 200
# SmolLM2 tokens per cl100k_base token on the book's index (text units, entity
# descriptions, community reports, GraphRAG's query prompts), the largest ratio measured,
# rounded up with a margin: see docs/graphrag.md ("Budgets"). Another chat model: pass
# tokens_ratio (the model's tokens per cl100k token on your text).
MODEL_TOKENS_PER_GRAPHRAG_TOKEN = 1.35
# Words per model token, for the reply lengths GraphRAG states in words in its prompts
# (map_max_length, reduce_max_length): English averages ~0.75 words per BPE token.
WORDS_PER_TOKEN = 0.75

# DRIFT's reports primed and follow-ups searched, at most: GraphRAG's default number of
# primer calls (primer_folds 5); each follow-up is a full local search on a local model
DRIFT_MAX_FOLLOWUPS = 5
DEFAULT_CONTEXT_WINDOW = 8192  # the bundled SmolLM2-135M-Instruct's trained context
DEFAULT_REPLY_TOKENS = 1000  # max_tokens of every chat call (call_args)
CHAT_MODEL = "smollm2-135m-instruct"  # the --model_alias docs/graphrag.md serves it under
EMBEDDING_MODEL = "kgloom-index-embedder"  # the id `kgloom serve-embeddings` lists
API_KEY = "local"  # neither local server checks a key; GraphRAG requires one to be set


class GraphRAGSettingsError(ValueError):
    """The output folder is no finished kgloom index, or the window cannot hold a context."""


@dataclass(frozen=True)
class Budgets:
    """Context budgets for a model window, in GraphRAG's tokens unless named otherwise.

    Attributes:
        context_window: the chat model's context window (model tokens).
        reply_tokens: max_tokens of every chat call (model tokens).
        tokens_ratio: model tokens per GraphRAG (cl100k_base) token.
        context_tokens: the data a single prompt may carry: local / basic / DRIFT-local
            context, each global map batch, the global reduce's key points.
        drift_k_followups: DRIFT's reports primed (one per primer call) and follow-up
            queries searched; bounded so the reduce prompt (one answer per action) fits,
            and by :data:`DRIFT_MAX_FOLLOWUPS`.
        reply_words: the reply length GraphRAG's map and reduce prompts ask for (words).
    """

    context_window: int
    reply_tokens: int
    tokens_ratio: float
    context_tokens: int
    drift_k_followups: int
    reply_words: int


def fit_budgets(context_window: int = DEFAULT_CONTEXT_WINDOW,
                reply_tokens: int = DEFAULT_REPLY_TOKENS,
                tokens_ratio: float = MODEL_TOKENS_PER_GRAPHRAG_TOKEN) -> Budgets:
    """The largest budgets whose prompts fit ``context_window``.

    A prompt is a GraphRAG template (<= :data:`PROMPT_TEMPLATE_TOKENS`), a context, the
    question (<= :data:`QUESTION_TOKENS`); the reply (``reply_tokens``) must fit after it:
    ``context_tokens = (context_window - reply_tokens) / tokens_ratio - template - question``.
    DRIFT's reduce prompt holds its template and the answer of the primer and of each
    follow-up action (each at most ``reply_tokens``), so ``drift_k_followups = (window -
    reply - template) / reply - 1``, at most :data:`DRIFT_MAX_FOLLOWUPS` (and n_depth is 1).

    Raises:
        GraphRAGSettingsError: when no context (>= 500 GraphRAG tokens) fits, naming the
            window and reply sizes.
    """
    if context_window <= 0 or reply_tokens <= 0 or tokens_ratio <= 0:
        raise GraphRAGSettingsError("context_window, reply_tokens and tokens_ratio must be "
                                    f"> 0, got {context_window}, {reply_tokens}, {tokens_ratio}")
    overhead = PROMPT_TEMPLATE_TOKENS + QUESTION_TOKENS
    context = math.floor((context_window - reply_tokens) / tokens_ratio) - overhead
    if context < 500:
        raise GraphRAGSettingsError(
            f"a {context_window}-token window with {reply_tokens}-token replies leaves "
            f"{context} GraphRAG tokens of context after the prompt template (at least 500 "
            "are needed): use a larger window or a smaller --reply-tokens")
    template_model = math.ceil(overhead * tokens_ratio)
    k = (context_window - reply_tokens - template_model) // reply_tokens - 1
    return Budgets(context_window=context_window, reply_tokens=reply_tokens,
                   tokens_ratio=tokens_ratio, context_tokens=context,
                   drift_k_followups=max(1, min(DRIFT_MAX_FOLLOWUPS, k)),
                   reply_words=max(50, int(reply_tokens * WORDS_PER_TOKEN)))


def _rel(path: Path, root: Path) -> str:
    """``path`` relative to ``root`` when both are on one drive, else absolute (POSIX)."""
    try:
        return Path(os.path.relpath(path.resolve(), root.resolve())).as_posix()
    except ValueError:
        return path.resolve().as_posix()


def index_vector_size(output_dir: str | Path) -> tuple[int, str]:
    """(vector size, embedder name) of a kgloom index, from ``lancedb/embedder.json``.

    Raises:
        GraphRAGSettingsError: a missing parquet table or LanceDB table (names it and
            the command that writes it), or vectors no kgloom embedder made (an imported
            graph cannot embed GraphRAG's queries).
    """
    from kgloom.core.layout import LANCEDB_DIR
    from kgloom.embedding.store import EXTERNAL_VECTORS_KEY, read_embedder_manifest

    out = Path(output_dir)
    missing = [f"{t}.parquet" for t in QUERY_TABLES if not (out / f"{t}.parquet").exists()]
    missing += [f"{LANCEDB_DIR}/{t}.lance" for t in VECTOR_STORE_TABLES.values()
                if not (out / LANCEDB_DIR / f"{t}.lance").exists()]
    if missing:
        raise GraphRAGSettingsError(f"{out} is not a finished kgloom index (missing: "
                                    f"{', '.join(missing)}): run `kgloom index --output-dir "
                                    f"{out}` first")
    manifest = read_embedder_manifest(out / LANCEDB_DIR)
    if manifest is None:
        raise GraphRAGSettingsError(f"{out / LANCEDB_DIR / 'embedder.json'} is missing: the "
                                    "index does not say which embedder made its vectors; "
                                    "rebuild it with `kgloom index`")
    if manifest.get("key") == EXTERNAL_VECTORS_KEY:
        raise GraphRAGSettingsError(f"{out}'s vectors were imported (kgloom import-graph): "
                                    "no embedder can embed GraphRAG's queries for them")
    return int(manifest["dim"]), str(manifest["model"])


def graphrag_settings(output_dir: str | Path, root_dir: str | Path,
                      chat_url: str = "http://127.0.0.1:8000/v1",
                      embeddings_url: str = "http://127.0.0.1:8001/v1",
                      chat_model: str = CHAT_MODEL, budgets: Budgets | None = None,
                      input_dir: str | Path | None = None) -> dict[str, Any]:
    """GraphRAG 3.3 settings (a dict, as ``settings.yaml`` holds it) for a kgloom index.

    Args:
        output_dir: the kgloom output folder (parquet tables and ``lancedb/``).
        root_dir: the GraphRAG root folder the settings file goes in; paths are written
            relative to it.
        chat_url / embeddings_url: OpenAI-compatible base URLs (ending in ``/v1``).
        chat_model: the model id the chat server answers to.
        budgets: :func:`fit_budgets`'s result (default: the bundled model's window).
        input_dir: the documents folder (GraphRAG's ``input_storage``; not read by
            queries); default ``input`` next to the output folder.

    Returns:
        A dict of plain types (str, int, float, bool, list, dict), YAML-ready.

    Raises:
        GraphRAGSettingsError: see :func:`index_vector_size`.
    """
    from kgloom.core.layout import LANCEDB_DIR

    out, root = Path(output_dir), Path(root_dir)
    dim, _ = index_vector_size(out)
    b = budgets or fit_budgets()
    inp = Path(input_dir) if input_dir else out.resolve().parent / "input"

    return {
        "completion_models": {"default_completion_model": _model(
            chat_model, chat_url, {"max_tokens": b.reply_tokens, "temperature": 0})},
        "embedding_models": {"default_embedding_model": _model(EMBEDDING_MODEL,
                                                               embeddings_url)},
        # a local server decodes one request at a time; more in flight only queue there
        "concurrent_requests": 1,
        "input_storage": {"type": "file", "base_dir": _rel(inp, root)},
        "output_storage": {"type": "file", "base_dir": _rel(out, root)},
        "reporting": {"type": "file", "base_dir": "logs"},
        "cache": {"type": "json", "storage": {"type": "file", "base_dir": "cache"}},
        "vector_store": _vector_store(_rel(out / LANCEDB_DIR, root), dim),
        "embed_text": {"embedding_model_id": "default_embedding_model"},
        **_search_sections(b),
    }


def _model(name: str, url: str, call_args: dict | None = None) -> dict[str, Any]:
    """One GraphRAG model entry: an OpenAI-compatible endpoint at ``url`` (trailing
    ``/`` dropped) serving ``name``, with :data:`API_KEY`, exponential-backoff retries
    (3) and ``call_args`` when given."""
    m = {"model_provider": "openai", "model": name, "api_base": url.rstrip("/"),
         "api_key": API_KEY, "retry": {"type": "exponential_backoff", "max_retries": 3}}
    return {**m, "call_args": call_args} if call_args else m


def _vector_store(db_uri: str, dim: int) -> dict[str, Any]:
    """GraphRAG's ``vector_store`` section: the LanceDB folder ``db_uri`` with each of
    GraphRAG's embeddings mapped to its kgloom table (:data:`VECTOR_STORE_TABLES`),
    vectors of ``dim`` floats in the ``vector`` field, ids in ``id``."""
    return {"type": "lancedb", "db_uri": db_uri, "vector_size": dim,
            "index_schema": {name: {"index_name": table, "id_field": "id",
                                    "vector_field": "vector", "vector_size": dim}
                             for name, table in VECTOR_STORE_TABLES.items()}}


def _search_sections(b: Budgets) -> dict[str, Any]:
    """The four search sections (``local_search``, ``global_search``,
    ``drift_search``, ``basic_search``, in that order), each context within
    ``b.context_tokens``, replies of ``b.reply_words`` words, DRIFT with
    ``b.drift_k_followups`` primer folds and follow-ups, one level deep, one at a
    time."""
    ctx = b.context_tokens
    return {
        "local_search": {"max_context_tokens": ctx},
        "global_search": {"max_context_tokens": ctx, "data_max_tokens": ctx,
                          "map_max_length": b.reply_words, "reduce_max_length": b.reply_words},
        "drift_search": {
            "data_max_tokens": ctx, "local_search_max_data_tokens": ctx,
            "primer_llm_max_tokens": ctx,
            # one report per primer call: a report never shares a prompt with another
            "drift_k_followups": b.drift_k_followups, "primer_folds": b.drift_k_followups,
            "n_depth": 1, "concurrency": 1},
        "basic_search": {"max_context_tokens": ctx},
    }


def settings_yaml(settings: dict[str, Any], budgets: Budgets) -> str:
    """``settings`` as YAML text (PyYAML's ``safe_dump``, keys in the dict's order) after
    a comment saying what wrote it and for which window."""
    import yaml

    head = (f"# Microsoft GraphRAG {GRAPHRAG_VERSION} settings for a kgloom index, written "
            "by `kgloom graphrag-settings`\n# (docs/graphrag.md). Budgets fitted to a "
            f"{budgets.context_window}-token chat model window: {budgets.reply_tokens}-token "
            f"replies, {budgets.tokens_ratio} model tokens per cl100k token, "
            f"{budgets.context_tokens}-token contexts.\n")
    return head + yaml.safe_dump(settings, sort_keys=False, default_flow_style=False)


def write_settings(output_dir: str | Path, root_dir: str | Path | None = None,
                   **kwargs: Any) -> Path:
    """Write ``ROOT/settings.yaml`` (atomically) for the index in ``output_dir``; ROOT
    defaults to ``output_dir/graphrag``. ``kwargs`` go to :func:`graphrag_settings`.
    Returns the file's path. Raises :class:`GraphRAGSettingsError` (nothing written)."""
    from kgloom.core.storage import write_text

    root = Path(root_dir) if root_dir else Path(output_dir) / "graphrag"
    budgets = kwargs.pop("budgets", None) or fit_budgets()
    text = settings_yaml(graphrag_settings(output_dir, root, budgets=budgets, **kwargs),
                         budgets)
    root.mkdir(parents=True, exist_ok=True)
    return write_text(text, root / "settings.yaml")
