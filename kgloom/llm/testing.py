"""Test servers: an OpenAI-compatible fake chat server and llama-cpp-python's server.

:class:`FakeChatServer` serves :class:`~kgloom.llm.fake.FakeBackend`'s replies over HTTP
as an OpenAI-compatible server (``/v1/models``, ``/v1/chat/completions``) on 127.0.0.1,
with switchable faults (slow, non-JSON, schema-breaking, HTTP 500, a body that is no chat
completion), for the tests of :mod:`kgloom.llm.http`. :class:`LlamaCppServer` runs the
real server in a subprocess, for tests and benchmarks. :class:`StandInChatServer` is a
scripted streaming chat server (an ASGI app) for the tests of answers streamed to
``kgloom serve``'s and ``kgloom mcp``'s clients.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING

from kgloom.llm.fake import FakeBackend

if TYPE_CHECKING:
    import uvicorn


FAULTS = ("none", "slow", "not_json", "breaks_schema", "http_500", "not_a_completion")


class _Service:
    """A server started by ``start()`` (returning itself) and stopped by ``stop()``; as a
    context manager, started on entry and stopped on exit."""

    def start(self):  # pragma: no cover - subclasses define it
        raise NotImplementedError

    def stop(self) -> None:  # pragma: no cover - subclasses define it
        raise NotImplementedError

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class HTTPService(_Service):
    """A :class:`_Service` whose ``start`` serves a ``BaseHTTPRequestHandler`` class on a
    free port of 127.0.0.1 from a daemon thread (:meth:`_serve`); ``stop`` frees it."""

    _httpd: ThreadingHTTPServer | None = None

    def _serve(self, handler: type) -> str:
        """Serve ``handler`` (one thread per request; a client that hung up is not an
        error); return ``http://127.0.0.1:<port>``."""

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address) -> None:
                pass  # a client that timed out and hung up: expected in the fault modes

        self._httpd = Server(("127.0.0.1", 0), handler)
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def stop(self) -> None:
        """Stop serving and free the port."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None


class FakeChatServer(HTTPService):
    """An OpenAI-compatible chat server on 127.0.0.1 answering like :class:`FakeBackend`.

    ``GET /v1/models`` lists ``model_id``; ``POST /v1/chat/completions`` answers with
    FakeBackend's reply to the request's messages, seed and ``response_format`` schema
    (either ``json_schema`` or llama-cpp-python's ``json_object`` + ``schema`` form;
    ``json_object_only`` rejects the first with an HTTP 500 naming ``response_format``, as
    llama-cpp-python 0.3's server does). Attributes may be changed while it runs:

    - ``fault``: one of :data:`FAULTS`: ``slow`` sleeps ``delay_s`` seconds first,
      ``not_json`` answers a reply text that is not JSON, ``breaks_schema`` a JSON object
      with none of the schema's properties, ``http_500`` an HTTP 500, and
      ``not_a_completion`` a 200 whose body is not a chat completion.
    - ``model_id``: what ``/v1/models`` lists.
    - ``context_tokens``: when > 0, a request whose ``max_tokens`` exceeds it gets vLLM's
      HTTP 400 "maximum context length" answer.
    - ``window`` and ``count_tokens`` (``text -> int``): when both are set, a request whose
      messages hold ``window`` tokens or more gets what llama-cpp-python's server (0.3.36)
      answers: HTTP 400 "context_length_exceeded", or, streamed, an empty 200 stream (a
      stand-in for a small model).
    - ``plain_text``: a request without ``response_format`` is answered in plain text
      (``fake text N``, a chat answer) instead of FakeBackend's ``{}``.

    Replies with a schema are FakeBackend's schema instance; ``"stream": true`` gets them as
    server-sent events (one chunk, then ``[DONE]``), as OpenAI streams it.

    Counts ``requests`` (chat completions received) and ``max_in_flight`` (most requests
    served at the same time); ``formats`` and ``max_tokens`` list each request's
    ``response_format`` type and ``max_tokens``; ``prompt_tokens`` each request's message
    tokens (with ``count_tokens``) and ``overflows`` the requests refused for the window.
    Use as a context manager, or call :meth:`start` /
    :meth:`stop`. ``url`` is ``http://127.0.0.1:<port>``.
    """

    def __init__(self, model_id: str = "fake-llm", fault: str = "none", delay_s: float = 0.0,
                 json_object_only: bool = False) -> None:
        self.model_id, self.fault, self.delay_s = model_id, fault, delay_s
        self.json_object_only = json_object_only
        self.context_tokens = 0
        self.window, self.count_tokens = 0, None
        self.plain_text = False
        self.prompt_tokens: list[int] = []
        self.overflows = 0
        self.backend = FakeBackend(model_id)
        self.requests = self.max_in_flight = self._in_flight = 0
        self.formats: list[str] = []  # response_format type of each request
        self.max_tokens: list[int] = []  # max_tokens of each request
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (after :meth:`start`)."""
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def start(self) -> FakeChatServer:
        """Serve on a free port in a daemon thread; return self."""
        self._serve(type("Handler", (_FakeChatHandler,), {"fake": self}))
        return self


class _FakeChatHandler(BaseHTTPRequestHandler):
    """The request handler of :class:`FakeChatServer`: ``fake`` is the server whose
    settings it reads and whose counters it fills (set on a subclass per server by
    :meth:`FakeChatServer.start`)."""

    fake: FakeChatServer

    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    def _send(self, code: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self._send(200, json.dumps({"object": "list", "data": [
                {"id": self.fake.model_id, "object": "model", "owned_by": "kgloom"}]
            }).encode())
        else:
            self._send(404, b'{"error": "not found"}')

    def do_POST(self) -> None:
        server = self.fake
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with server._lock:
            server.requests += 1
            server._in_flight += 1
            server.max_in_flight = max(server.max_in_flight, server._in_flight)
        try:
            self._answer(body)
        finally:
            with server._lock:
                server._in_flight -= 1

    def _answer(self, body: dict) -> None:
        """Answer one chat completion request ``body`` (the parsed JSON): a refusal
        (:meth:`_refusal`), a fault, or FakeBackend's reply (:meth:`_completion`)."""
        server = self.fake
        fmt = body.get("response_format") or {}
        server.formats.append(fmt.get("type", ""))
        server.max_tokens.append(body.get("max_tokens", 0))
        schema = (fmt.get("json_schema", {}).get("schema") if fmt.get("type") ==
                  "json_schema" else fmt.get("schema")) or {"type": "object"}
        plain = server.plain_text and (not fmt or fmt.get("type") == "text")
        if plain:
            schema = {"type": "string"}  # a plain-text chat answer
        refusal = self._refusal(body, fmt)
        if refusal is not None:
            return self._send(*refusal)
        fault = server.fault
        if fault == "slow":
            time.sleep(server.delay_s)
        if fault == "http_500":
            return self._send(500, b'{"error": "model crashed"}')
        if fault == "not_a_completion":
            return self._send(200, b"<html>502 bad gateway</html>", "text/html")
        reply = server.backend.complete(body["messages"], schema,
                                        body.get("max_tokens", 0), body.get("seed", 0))
        text = {"not_json": "Sure! Here is the JSON you asked for:",
                "breaks_schema": json.dumps({"unexpected": True})}.get(fault, reply.text)
        if plain and fault == "none":
            text = json.loads(text)  # plain text, not a JSON string
        self._send(*self._completion(text, reply, bool(body.get("stream"))))

    def _refusal(self, body: dict, fmt: dict) -> tuple[int, bytes, str] | None:
        """(status, body, content type) of the error a real server answers ``body``
        with, or None: llama-cpp-python 0.3's 500 for a ``json_schema`` format
        (``json_object_only``), llama-cpp-python 0.3.36's for messages filling the
        ``window`` (their tokens are recorded in ``prompt_tokens``, a refusal counted in
        ``overflows``), vLLM's for ``max_tokens`` over ``context_tokens``."""
        server = self.fake
        if fmt.get("type") == "json_schema" and server.json_object_only:
            # what llama-cpp-python 0.3's server answers (a 500, not a 422)
            return (500, b'{"error": {"message": "1 validation error: '
                         b'body.response_format.type: Input should be '
                         b'\'text\' or \'json_object\'"}}', "application/json")
        if server.count_tokens is not None:
            n = sum(server.count_tokens(c if isinstance(c, str) else json.dumps(c))
                    for c in (m.get("content") or "" for m in body["messages"]))
            server.prompt_tokens.append(n)
            if 0 < server.window <= n:  # llama-cpp-python server's answer
                server.overflows += 1
                if body.get("stream"):  # 0.3.36 streams nothing, with status 200
                    return 200, b"", "text/event-stream"
                return 400, json.dumps({"error": {
                    "message": f"This model's maximum context length is "
                               f"{server.window} tokens. However, you requested "
                               f"{n} tokens ({n} in the messages, "
                               f"{body.get('max_tokens')} in the completion). Please "
                               "reduce the length of the messages or completion.",
                    "type": "invalid_request_error", "param": "messages",
                    "code": "context_length_exceeded"}}).encode(), "application/json"
        wanted = body.get("max_tokens", 0)
        if 0 < server.context_tokens < wanted:  # vLLM's answer
            return 400, json.dumps({"object": "error", "message": (
                f"This model's maximum context length is {server.context_tokens} "
                f"tokens. However, you requested {wanted} tokens in the "
                "completion."), "type": "BadRequestError", "code": 400}).encode(), \
                "application/json"
        return None

    def _completion(self, text: str, reply, stream: bool) -> tuple[int, bytes, str]:
        """(status, body, content type) of a chat completion whose message is ``text``
        (``reply``: the FakeBackend reply, for its token counts): one JSON object, or
        with ``stream`` OpenAI's server-sent events (one chunk, then ``[DONE]``)."""
        model_id = self.fake.model_id
        if stream:
            chunk = {"id": "chatcmpl-fake", "object": "chat.completion.chunk",
                     "created": 0, "model": model_id}
            events = [{**chunk, "choices": [{"index": 0, "finish_reason": None,
                                             "delta": {"role": "assistant",
                                                       "content": text}}]},
                      {**chunk, "choices": [{"index": 0, "finish_reason": "stop",
                                             "delta": {}}]}]
            return 200, "".join(f"data: {json.dumps(e)}\n\n"
                                for e in events).encode() + b"data: [DONE]\n\n", \
                "text/event-stream"
        return 200, json.dumps({
            "id": "chatcmpl-fake", "object": "chat.completion", "created": 0,
            "model": model_id,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": reply.prompt_tokens,
                      "completion_tokens": reply.completion_tokens,
                      "total_tokens": reply.prompt_tokens + reply.completion_tokens},
        }).encode(), "application/json"


class ASGIService(_Service):
    """An ASGI application (e.g. :func:`kgloom.apps.embeddings_server.create_app`) served by
    uvicorn on a free port of 127.0.0.1 from a daemon thread, for tests and benchmarks.

    Attributes (after :meth:`start`): ``url`` (``http://127.0.0.1:PORT``), ``app``.

    Raises (on start): RuntimeError when uvicorn has not started within ``start_timeout_s``.
    """

    def __init__(self, app, start_timeout_s: float = 30.0) -> None:
        self.app, self.start_timeout_s = app, start_timeout_s
        self.url = ""
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> ASGIService:
        """Serve and wait until uvicorn is listening; return self."""
        import uvicorn

        port = free_port()
        self._server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=port,
                                                     log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + self.start_timeout_s
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                self.stop()
                raise RuntimeError(f"uvicorn did not start on 127.0.0.1:{port}")
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{port}"
        return self

    def stop(self) -> None:
        """Ask uvicorn to exit and wait for its thread (10 s at most)."""
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
            self._server = self._thread = None


class StandInChatServer:
    """A scripted OpenAI-compatible chat server (Starlette): ``GET /v1/models`` lists
    ``stand-in``; ``POST /v1/chat/completions`` answers a request with a
    ``response_format`` as :class:`FakeBackend` does, and streams a plain request's
    answer one token per event: ``Marley``, `` was``, ``his``, ``partner``, then the first
    context id of the question (``[T1]``), then ``.``.

    Attributes to set while it runs: ``gate`` (a threading.Event: after the first token
    it waits for it), ``delay_s`` (seconds before each token), ``fail_after`` (tokens
    sent before the connection is dropped; 0: never). It records ``requests`` (bodies)
    and ``sent`` (tokens sent of the last answer).
    """

    def __init__(self) -> None:
        self.gate: threading.Event | None = None
        self.delay_s = 0.0
        self.fail_after = 0
        self.requests: list[dict] = []
        self.sent = 0
        self.fake = FakeBackend("stand-in")

    def tokens(self, body: dict) -> list[str]:
        refs = re.findall(r"\[(T\d+)\]", body["messages"][-1]["content"])
        return ["Marley", " was", " his", " partner", f" [{refs[0] if refs else 'T0'}]", "."]

    def app(self):
        from starlette.applications import Starlette
        from starlette.responses import JSONResponse, StreamingResponse
        from starlette.routing import Route

        async def models(request):
            return JSONResponse({"object": "list", "data": [{"id": "stand-in",
                                                             "object": "model"}]})

        async def completions(request):
            body = await request.json()
            fmt = body.get("response_format")
            if fmt:  # kgloom's structured calls (routing, global search's map)
                schema = fmt.get("json_schema", {}).get("schema") or fmt.get("schema")
                reply = self.fake.complete(body["messages"], schema, 0, body.get("seed", 0))
                return JSONResponse({"id": "x", "object": "chat.completion", "created": 0,
                                     "model": "stand-in", "choices": [{
                                         "index": 0, "finish_reason": "stop", "message": {
                                             "role": "assistant", "content": reply.text}}]})
            self.requests.append(body)
            return StreamingResponse(self.events(self.tokens(body)),
                                     media_type="text/event-stream")

        return Starlette(routes=[Route("/v1/models", models),
                                 Route("/v1/chat/completions", completions,
                                       methods=["POST"])])

    async def events(self, tokens: list[str]):
        self.sent = 0
        for i, token in enumerate(tokens):
            if self.fail_after and i == self.fail_after:
                raise RuntimeError("the stand-in model server crashed")  # drops the link
            if i == 1 and self.gate is not None:
                await asyncio.to_thread(self.gate.wait, 30)
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            chunk = {"id": "s", "object": "chat.completion.chunk", "created": 0,
                     "model": "stand-in", "choices": [{"index": 0, "finish_reason": None,
                                                       "delta": {"content": token}}]}
            yield f"data: {json.dumps(chunk)}\n\n"
            self.sent = i + 1
        yield "data: [DONE]\n\n"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (the OS picks it)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaCppServer(_Service):
    """llama-cpp-python's OpenAI-compatible server (``python -m llama_cpp.server``, run by
    :mod:`kgloom.llm.llama_server` so its model loads as kgloom's in-process one does; the
    ``llama-cpp-python[server]`` extra) in a subprocess on 127.0.0.1, for tests and
    benchmarks.

    Args:
        model_path: the GGUF file.
        model_alias: the model id the server reports (kgloom's cache key part); the
            GGUF's SHA-256 makes its cache keys equal an in-process run's.
        n_threads: CPU threads for decoding.
        n_threads_batch: CPU threads for prompt evaluation (default: ``n_threads``).
        n_ctx: context window in tokens (kgloom's in-process default: 4096).
        log_path: file receiving the server's stdout and stderr (default: discarded).
        start_timeout_s: seconds to wait for ``/v1/models`` to answer.

    Raises (on start):
        RuntimeError: when the server exits or does not answer within
            ``start_timeout_s``; the message holds the end of its log.
    """

    def __init__(self, model_path: str, model_alias: str, n_threads: int = 1,
                 n_threads_batch: int | None = None, n_ctx: int = 4096,
                 log_path: str | None = None, start_timeout_s: float = 120.0) -> None:
        self.model_path, self.model_alias = str(model_path), model_alias
        self.n_threads, self.n_ctx = n_threads, n_ctx
        self.n_threads_batch = n_threads_batch or n_threads
        self.log_path, self.start_timeout_s = log_path, start_timeout_s
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._proc = None

    def start(self) -> LlamaCppServer:
        """Start the server and wait until it lists its model; return self."""
        import subprocess
        import sys
        import tempfile
        import urllib.request

        # no `with`: the server process writes into it for as long as it runs
        log = (open(self.log_path, "ab") if self.log_path  # noqa: SIM115
               else tempfile.TemporaryFile())  # noqa: SIM115
        self._log = log
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "kgloom.llm.llama_server", "--model", self.model_path,
             "--model_alias", self.model_alias, "--host", "127.0.0.1", "--port", str(self.port),
             "--n_ctx", str(self.n_ctx), "--n_threads", str(self.n_threads),
             "--n_threads_batch", str(self.n_threads_batch)],
            stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(self.url + "/v1/models", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.5)
        self.stop()
        if self.log_path:
            tail = Path(self.log_path).read_text(encoding="utf-8", errors="replace")[-2000:]
        else:
            log.seek(0)
            tail = log.read()[-2000:].decode(errors="replace")
        raise RuntimeError(f"llama_cpp.server on {self.url} did not start: {tail}")

    def stop(self) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after 10 s)."""
        import subprocess

        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None



def post_json(url: str, body: dict, timeout: float = 60.0) -> tuple[int, dict]:
    """POST ``body`` as JSON to ``url``; return (HTTP status, the reply parsed as JSON, or
    {} when an error reply is not JSON). Errors of HTTP status >= 400 are returned, not
    raised; a connection failure raises ``urllib.error.URLError``."""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.loads(exc.read())
        except ValueError:
            return exc.code, {}
