"""``kgloom mcp``: the index as a Model Context Protocol server, over stdio (a desktop
client starts it) or streamable HTTP (docs/mcp.md). The server itself is
:mod:`kgloom.serve.mcp_server`; this module is its command line, registered on the
``kgloom`` Typer app, with the model, folder and key rules of ``kgloom serve``.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

import typer

from kgloom.cli.cli_common import (
    API_KEY_ENV,
    CACHE_DIR,
    FAKE,
    HOST,
    INDEX_EMBEDDER,
    LLM_URL,
    LOOPBACK_HOSTS,
    MAX_DEPTH,
    MAX_QUESTION_CHARS,
    MAX_TOP_K,
    MODEL,
    PORT,
    SET,
    SETTINGS_FILE,
    _folder_flags,
    _http_url,
    _load,
    _model_flags,
    app,
)
from kgloom.cli.serve_commands import _open_for_serving

TRANSPORTS = ("stdio", "http")


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Send whatever is written to file descriptor 1 (by Python or by a native library
    loading a model) to stderr meanwhile: on the stdio transport, stdout carries only
    the protocol's messages."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


@app.command()
def mcp(output_dir: str | None = typer.Option(None, help="the index to answer from (read "
                                              "only; default: env KGLOOM_OUTPUT_DIR, the "
                                              "settings' paths.output_dir, or data/output)"),
        transport: str = typer.Option("stdio", help="stdio (the client starts this command "
                                      "and talks over its stdin/stdout) or http (streamable "
                                      "HTTP at http://HOST:PORT/mcp)"),
        host: str = HOST, port: int = PORT(8001), api_key_env: str = API_KEY_ENV,
        model_path: str = MODEL, fake_llm: bool = FAKE, llm_url: list[str] = LLM_URL,
        embedder_path: str = INDEX_EMBEDDER,
        cache_dir: str = CACHE_DIR, max_question_chars: int = MAX_QUESTION_CHARS,
        max_top_k: int = MAX_TOP_K, max_depth: int = MAX_DEPTH,
        set_: list[str] = SET, settings_file: str = SETTINGS_FILE) -> None:
    """Answer MCP clients from the index: tools retrieve, search, find_entities, entity,
    neighbourhood, community, list_documents and text_unit. Read-only; a build published
    while it runs answers the next tool call (docs/mcp.md)."""
    if transport not in TRANSPORTS:
        typer.echo(f"error: --transport must be one of {', '.join(TRANSPORTS)}; got "
                   f"{transport!r}", err=True)
        raise typer.Exit(2)
    api_key = (os.environ.get(api_key_env, "") or None) if transport == "http" else None
    if transport == "http" and host not in LOOPBACK_HOSTS and api_key is None:
        typer.echo(f"error: refusing to listen on {host} without an API key: anyone who can "
                   f"reach it could query the index. Set ${api_key_env} to a secret (clients "
                   "send 'Authorization: Bearer KEY'), or bind 127.0.0.1", err=True)
        raise typer.Exit(2)
    from kgloom.serve.app import Limits
    from kgloom.serve.mcp_server import MCP_PATH, create_mcp_server, http_app, run_stdio

    settings = _load(settings_file, set_, **_folder_flags(output_dir=output_dir),
                     **_model_flags(model_path, fake_llm, llm_url, embedder_path))
    with _stdout_to_stderr() if transport == "stdio" else contextlib.nullcontext():
        _, live = _open_for_serving(settings, cache_dir)
        server = create_mcp_server(live, Limits(max_question_chars=max_question_chars,
                                                max_top_k=max_top_k, max_depth=max_depth))
    where = "stdin/stdout" if transport == "stdio" else f"{_http_url(host, port)}{MCP_PATH}"
    typer.echo(f"kgloom mcp: {settings.paths.output_dir} (build {live.handle.build_id}) on "
               f"{where}" + ("" if transport == "stdio" else "; API key " + (
                   "required" if api_key else "not required (loopback only)")), err=True)
    if transport == "stdio":
        run_stdio(server)
        return
    import uvicorn

    uvicorn.run(http_app(server, host, api_key), host=host, port=port, log_level="warning")
