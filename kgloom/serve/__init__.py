"""``kgloom serve``: a read-only HTTP server over one index (docs/serve.md).

- :mod:`kgloom.serve.live_index`: the open build, switched between requests when a new
  one is published.
- :mod:`kgloom.serve.graph_view`: the graph endpoints' queries over one build.
- :mod:`kgloom.serve.openai_chat`: OpenAI's chat-completions shapes.
- :mod:`kgloom.serve.app`: the FastAPI application (:func:`kgloom.serve.app.open_app`).
- ``static/``: the explorer page (``explorer.html``, ``explorer.js``) and the vendored
  Cytoscape.js (``static/vendor/cytoscape/``, MIT, with its licence).

No Dagster anywhere in this package.
"""
