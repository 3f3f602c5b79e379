"""A local OpenAI-compatible gateway for the GraphRAG side of the comparison: chat
completions are passed through to llama-cpp-python's server unchanged and logged, and
``/v1/embeddings`` is answered with kgloom's sentence-transformers embedder (the bundled
all-MiniLM-L6-v2, one mean-pooled 384-dim vector per input).

Why: llama.cpp's server returns one vector per token for the SmolLM2 GGUF (no pooling),
which GraphRAG's embedding step cannot use; and the call log is how GraphRAG's LLM calls,
prompt and completion tokens and replies are counted (its own outputs do not hold them).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from kgloom.llm.testing import HTTPService


class Gateway(HTTPService):
    """Serve ``/v1/chat/completions`` (proxied to ``upstream``), ``/v1/embeddings`` and
    ``/v1/models`` on 127.0.0.1 from a daemon thread.

    Args:
        upstream: base URL of the chat server, e.g. ``http://127.0.0.1:8000``.
        log_path: JSON-lines file; one row per chat call: ``seconds`` (float, wall time of
            the upstream request), ``messages`` (int), ``prompt_head`` (the first 200
            characters of the last message), ``status`` (HTTP status), ``prompt_tokens`` and
            ``completion_tokens`` (int, the server's ``usage``), ``response_format``
            (the request's, or None), ``reply`` (str, the first choice's content) and
            ``error`` (str, when the upstream request failed); one row per embeddings
            call: ``kind`` "embeddings", ``inputs`` (int), ``seconds``.
        embed: ``texts -> list of float vectors`` (e.g.
            ``kgloom.embedding.sentence_embedder.Embedder.embed`` turned into lists); None
            answers embeddings with 404.
        chat_timeout_s: seconds one upstream chat request may take.

    Attributes (after :meth:`start`): ``url`` (``http://127.0.0.1:PORT``).
    """

    def __init__(self, upstream: str, log_path: str | Path, embed=None,
                 chat_timeout_s: float = 900.0) -> None:
        self.upstream = upstream.rstrip("/")
        self.log_path = Path(log_path)
        self.embed = embed
        self.chat_timeout_s = chat_timeout_s
        self._lock = threading.Lock()
        self.url = ""

    def _log(self, row: dict) -> None:
        with self._lock, self.log_path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")

    def start(self) -> Gateway:
        """Bind a free port on 127.0.0.1 and serve; return self."""
        gw = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _send(self, code: int, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                try:
                    with urllib.request.urlopen(gw.upstream + "/v1/models", timeout=10) as r:
                        self._send(r.status, r.read())
                except (urllib.error.URLError, OSError) as exc:
                    self._send(502, json.dumps({"error": str(exc)}).encode())

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path.rstrip("/").endswith("/embeddings"):
                    self._embeddings(raw)
                elif self.path.rstrip("/").endswith("/chat/completions"):
                    self._chat(raw)
                else:
                    self._send(404, b'{"error": "not served here"}')

            def _embeddings(self, raw: bytes) -> None:
                if gw.embed is None:
                    self._send(404, b'{"error": "no embedder"}')
                    return
                body = json.loads(raw)
                texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                t0 = time.perf_counter()
                vecs = gw.embed([str(t) for t in texts])
                gw._log({"kind": "embeddings", "inputs": len(texts),
                         "seconds": round(time.perf_counter() - t0, 3)})
                self._send(200, json.dumps({
                    "object": "list", "model": body.get("model", ""),
                    "data": [{"object": "embedding", "index": i, "embedding": v}
                             for i, v in enumerate(vecs)],
                    "usage": {"prompt_tokens": 0, "total_tokens": 0}}).encode())

            def _chat(self, raw: bytes) -> None:
                body = json.loads(raw)
                req = urllib.request.Request(gw.upstream + "/v1/chat/completions", data=raw,
                                             headers={"Content-Type": "application/json"})
                msgs = body.get("messages") or [{}]
                last = msgs[-1].get("content")
                row = {"kind": "chat", "messages": len(msgs),
                       "prompt_head": (last if isinstance(last, str) else json.dumps(last))[:200],
                       "response_format": body.get("response_format"),
                       "max_tokens": body.get("max_tokens") or body.get("max_completion_tokens")}
                t0 = time.perf_counter()
                try:
                    with urllib.request.urlopen(req, timeout=gw.chat_timeout_s) as r:
                        status, out = r.status, r.read()
                except urllib.error.HTTPError as exc:
                    status, out = exc.code, exc.read()
                except OSError as exc:
                    status, out = 502, json.dumps({"error": str(exc)}).encode()
                row["seconds"] = round(time.perf_counter() - t0, 3)
                row["status"] = status
                try:
                    reply = json.loads(out)
                    usage = reply.get("usage") or {}
                    row["prompt_tokens"] = int(usage.get("prompt_tokens", 0))
                    row["completion_tokens"] = int(usage.get("completion_tokens", 0))
                    row["reply"] = (reply.get("choices") or [{}])[0].get(
                        "message", {}).get("content")
                    row["finish_reason"] = (reply.get("choices") or [{}])[0].get(
                        "finish_reason")
                except (ValueError, AttributeError):
                    row["error"] = out[:2000].decode(errors="replace")
                if status != 200:
                    row["error"] = out[:2000].decode(errors="replace")
                gw._log(row)
                self._send(status, out)

        self.url = self._serve(Handler)
        return self


def read_log(log_path: str | Path) -> list[dict]:
    """The rows of a gateway log (empty when the file does not exist)."""
    p = Path(log_path)
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line]
