"""``kgloom serve``: a read-only HTTP server over one index (docs/serve.md), and
``kgloom mcp``: the same index for MCP clients (docs/mcp.md).

- :mod:`kgloom.serve.live_index`: the open build, switched between requests when a new
  one is published.
- :mod:`kgloom.serve.graph_view`: the graph endpoints' queries over one build.
- :mod:`kgloom.serve.answer_stream`: a chat answer as text pieces (streamed from a model
  server), then its citations record (:class:`~kgloom.serve.answer_stream.ChatAnswer`).
- :mod:`kgloom.serve.openai_chat` / :mod:`kgloom.serve.ollama_api`: OpenAI's and Ollama's
  chat shapes; :mod:`kgloom.serve.chat_routes`: their routes.
- :mod:`kgloom.serve.app`: the FastAPI application (:func:`kgloom.serve.app.open_app`),
  assembled from a router per route group: :mod:`kgloom.serve.health_routes`,
  :mod:`kgloom.serve.query_routes`, :mod:`kgloom.serve.graph_routes` (and the explorer),
  :mod:`kgloom.serve.chat_routes`; :mod:`kgloom.serve.route_kit`: what they share (JSON
  and error responses, the API key, the bounded body, calls on the current build);
  :mod:`kgloom.serve.guards`: the limits, errors and question check.
- :mod:`kgloom.serve.mcp_server`: ``kgloom mcp``, the MCP server's tools over the same
  live index and functions; :mod:`kgloom.serve.mcp_results`: what each tool returns.
- ``static/``: the explorer page (``explorer.html``, ``explorer.js``) and the vendored
  Cytoscape.js (``static/vendor/cytoscape/``, MIT, with its licence).

No Dagster anywhere in this package.
"""
