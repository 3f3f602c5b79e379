"""The commands around Microsoft GraphRAG and foreign graphs: ``kgloom import-graph`` (a
graph kgloom did not extract, as an index), ``graphrag-settings`` (GraphRAG's settings.yaml
for an index) and ``serve-embeddings`` (the index's embedder for GraphRAG's queries)."""

from __future__ import annotations

import json

import typer

from kgloom.apps import graphrag_settings as _grs  # stdlib-only: keeps start-up fast
from kgloom.cli.cli_common import (
    INDEX_EMBEDDER,
    OUTPUT,
    PORT,
    _folder_flags,
    _http_url,
    _load,
    _model_flags,
    app,
)


@app.command("import-graph")
def import_graph(
        nodes: str = typer.Option(..., help="nodes table (.parquet/.csv/.jsonl): id, vector "
                                  "[, title, type, description, any other columns]"),
        edges: str = typer.Option(..., help="edges table: source, target [, weight, "
                                  "description]"),
        output_dir: str = typer.Option(..., help="a new or empty folder (or an earlier "
                                       "import, replaced)"),
) -> None:
    """Import a graph kgloom did not extract (nodes with vectors, edges) as an index.

    Writes the files `kgloom index` writes for the graph (entities, relationships,
    graph-nodes/graph-edges parquet, LanceDB entities table) with no text units; query
    it by vector (Retriever.fused_by_vector / two_step_by_vector). See
    kgloom/apps/graph_import.py for the table formats.
    """
    import time

    from kgloom.apps.graph_import import GraphImportError, read_graph_tables
    from kgloom.apps.graph_import import import_graph as run_import

    start = time.perf_counter()

    def say(line: str) -> None:
        typer.echo(f"[{time.perf_counter() - start:6.1f} s] {line}", err=True)

    try:
        say(f"reading {nodes} and {edges}")
        node_table, edge_table = read_graph_tables(nodes, edges)
        summary = run_import(node_table, edge_table, output_dir,
                             source={"nodes": nodes, "edges": edges}, progress=say)
    except GraphImportError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    typer.echo(json.dumps(summary, indent=2))


@app.command("graphrag-settings")
def graphrag_settings(
        output_dir: str | None = OUTPUT,
        root: str = typer.Option("", help="GraphRAG's root folder for settings.yaml "
                                 "(default OUTPUT_DIR/graphrag); `graphrag query --root` it"),
        chat_url: str = typer.Option("http://127.0.0.1:8000/v1", help="OpenAI-compatible "
                                     "chat endpoint (llama-cpp-python's server; for DRIFT, "
                                     "serve-embeddings --chat-upstream)"),
        chat_model: str = typer.Option(_grs.CHAT_MODEL, help="the chat server's "
                                       "model id (its --model_alias)"),
        embeddings_url: str = typer.Option("http://127.0.0.1:8001/v1", help="`kgloom "
                                           "serve-embeddings`'s endpoint"),
        context_window: int = typer.Option(_grs.DEFAULT_CONTEXT_WINDOW,
                                           help="the chat model's context window "
                                           "(model tokens; the server's --n_ctx)"),
        reply_tokens: int = typer.Option(_grs.DEFAULT_REPLY_TOKENS,
                                         help="max_tokens of each chat call"),
        tokens_ratio: float = typer.Option(_grs.MODEL_TOKENS_PER_GRAPHRAG_TOKEN,
                                           help="the chat model's tokens per cl100k token "
                                           "(GraphRAG counts in cl100k; the default fits "
                                           "SmolLM2 on English)"),
        input_dir: str = typer.Option("", help="the documents folder (GraphRAG's "
                                      "input_storage; default: input next to the index)"),
) -> None:
    """Write a complete Microsoft GraphRAG (3.3) settings.yaml for an index: chat and
    embedding models, context budgets fitted to the chat model's window, the vector-store
    mapping to the index's LanceDB tables and the paths (docs/graphrag.md)."""
    output_dir = _load(None, **_folder_flags(output_dir=output_dir)).paths.output_dir
    try:
        budgets = _grs.fit_budgets(context_window, reply_tokens, tokens_ratio)
        path = _grs.write_settings(output_dir, root or None, chat_url=chat_url,
                              embeddings_url=embeddings_url, chat_model=chat_model,
                              budgets=budgets, input_dir=input_dir or None)
    except _grs.GraphRAGSettingsError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    typer.echo(f"wrote {path} ({budgets.context_tokens}-token contexts for a "
               f"{context_window}-token window); run: graphrag query --root {path.parent} "
               "--method local \"...\"")


@app.command("serve-embeddings")
def serve_embeddings(
        output_dir: str | None = OUTPUT,
        host: str = typer.Option("127.0.0.1", help="address to bind (0.0.0.0 exposes it)"),
        port: int = PORT(8001),
        embedder_path: str = INDEX_EMBEDDER,
        chat_upstream: str = typer.Option("", help="also pass /v1/chat/completions through "
                                          "to this chat server, json_schema replies "
                                          "rewritten for llama-cpp-python (GraphRAG DRIFT)"),
) -> None:
    """Serve the index's embedder as an OpenAI-compatible endpoint (/v1/embeddings,
    /v1/models) for GraphRAG's queries: the same model and normalisation as the index,
    checked against its lancedb/embedder.json. Read-only."""
    import uvicorn

    from kgloom.apps.embeddings_server import create_app
    from kgloom.embedding.store import ExternalVectors
    from kgloom.query.retriever import (
        EmbedderMismatchError,
        IndexFilesMissingError,
        IndexInconsistentError,
        Retriever,
    )

    try:
        settings = _load(None, **_folder_flags(output_dir=output_dir),
                         **_model_flags(embedder_path=embedder_path))
        output_dir = settings.paths.output_dir
        embedder = Retriever(output_dir, settings.embedder.model_path or None).embedder
    except (IndexFilesMissingError, IndexInconsistentError, EmbedderMismatchError,
            ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    if isinstance(embedder, ExternalVectors):
        typer.echo("error: this index's vectors were imported (kgloom import-graph); no "
                   "embedder can embed queries for them", err=True)
        raise typer.Exit(2)
    model_id = _grs.EMBEDDING_MODEL
    typer.echo(f"serving {embedder.name} ({embedder.dim} dims) as {model_id} on "
               f"{_http_url(host, port)}/v1" + (f", chat passed through to {chat_upstream}"
                                             if chat_upstream else ""), err=True)
    uvicorn.run(create_app(embedder, model_id, chat_upstream or None), host=host,
                port=port, log_level="warning")
