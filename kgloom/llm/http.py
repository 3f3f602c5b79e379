"""An LLM backend that calls OpenAI-compatible model servers over HTTP.

:class:`OpenAIChatBackend` sends each call as a chat completion (``POST /v1/chat/completions``)
with the reply's JSON schema as ``response_format``, through the ``openai`` client, to one
of several servers (llama-cpp-python's ``python -m llama_cpp.server``, llama.cpp's
``llama-server``, vLLM's ``vllm serve``). It implements :class:`kgloom.llm.LLMBackend`, so
the cache, validation, retry-with-another-seed and failures rows of
:func:`kgloom.llm.structured_call` are the same as in-process.

- **Model identity.** ``model_id`` is the model the servers report at ``GET /v1/models``
  (llama-cpp-python: ``--model_alias``; vLLM: ``--served-model-name``). It is part of every
  cache key, so a server that now serves another model misses the cache instead of
  returning the old model's replies. All servers of one backend must report the same id.
  Naming the served model by its GGUF's SHA-256 makes the keys equal to an in-process
  run's (whose model id is that digest), so the two share one cache.
- **Schema formats.** ``json_schema`` is OpenAI's form
  (``{"type": "json_schema", "json_schema": {"name": ..., "schema": ...}}``; vLLM,
  llama.cpp's ``llama-server``); ``json_object`` is llama-cpp-python's server form
  (``{"type": "json_object", "schema": ...}``), which builds the same llama.cpp grammar as
  :class:`kgloom.llm.LlamaCppBackend`. ``auto`` starts with ``json_schema`` and switches an
  endpoint to ``json_object`` when it refuses the first form (an HTTP 400, 422 or 500 whose
  message names ``response_format``; llama-cpp-python 0.3 answers 500).
- **Reply bounds.** A server builds its grammar from the schema with strings bounded in
  characters, where the in-process grammar bounds them in bytes
  (:mod:`kgloom.llm.grammar`): ``max_tokens`` is raised to
  :func:`kgloom.llm.server_reply_token_bound` (every character counted at its longest,
  6 bytes), so no schema-valid reply of emoji, CJK or escapes is cut. A server whose
  context has no room for that (vLLM answers HTTP 400 "maximum context length") is asked
  again with the caller's ``max_tokens`` (the in-process bound, exact for ASCII).
- **Decoding.** ``temperature``, ``seed`` and ``max_tokens`` as in-process, and
  ``repeat_penalty`` 1.0 (llama-cpp-python's in-process default; its server defaults to
  1.1, vLLM ignores the field): with temperature 0 both decode greedily under the same
  grammar.
- **Failures.** Every request has a timeout (``timeout_s``, seconds). A connection error,
  timeout, HTTP 5xx/408/429 or a malformed reply body is retried (tenacity, exponential
  backoff) on the next endpoint; an endpoint that failed is skipped for ``cooldown_s``
  while another one is up. Every failed attempt is logged with the endpoint's URL and
  counted in :meth:`OpenAIChatBackend.endpoint_stats`. A call that fails on every attempt
  raises, and :func:`kgloom.llm.structured_call` turns it into a failures row: a dead
  server never hangs a run.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import openai
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from kgloom.llm.backend import Completion
from kgloom.llm.grammar import server_reply_token_bound

SCHEMA_FORMATS = ("auto", "json_schema", "json_object")
PROBE_TIMEOUT_S = 10.0  # GET /v1/models at start: a live server answers at once
_RETRY_STATUS = {408, 409, 429}  # retried like 5xx (OpenAI's client retries these too)

logger = logging.getLogger(__name__)


class LLMServerError(RuntimeError):
    """A model server is unreachable, serves no or another model, or is misconfigured."""


class MalformedReplyError(RuntimeError):
    """A server answered 200 with a body that is not a chat completion."""


def parse_urls(value: str | list[str] | tuple[str, ...]) -> list[str]:
    """Return the server URLs in ``value`` (a list, or one string separated by commas or
    whitespace, as in env ``KGLOOM_LLM_URL``), without duplicates, in order.

    Raises:
        ValueError: naming a URL that is not ``http(s)://host[:port][/path]``.
    """
    items = value.replace(",", " ").split() if isinstance(value, str) else list(value)
    urls = []
    for raw in items:
        url = raw.strip()
        if not url:
            continue
        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"LLM server URL {url!r} is not http(s)://host[:port][/v1]")
        if url not in urls:
            urls.append(url)
    return urls


def api_base(url: str) -> str:
    """The OpenAI API root of a server URL: ``http://h:8000`` -> ``http://h:8000/v1``."""
    url = url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


@dataclass
class EndpointStats:
    """Counters of one server. Seconds are wall-clock of successful calls."""

    calls: int = 0  # replies received
    errors: int = 0  # failed attempts other than timeouts
    timeouts: int = 0
    seconds: float = 0.0
    last_error: str = ""


@dataclass
class _Endpoint:
    url: str
    client: Any  # openai.OpenAI
    schema_format: str
    stats: EndpointStats = field(default_factory=EndpointStats)
    down_until: float = 0.0


def served_model(url: str, api_key: str = "", timeout_s: float = PROBE_TIMEOUT_S,
                 model: str = "") -> str:
    """Ask the server at ``url`` which model it serves (``GET /v1/models``).

    Args:
        url: the server (``http://host:port`` or ``.../v1``).
        api_key: bearer token, if the server wants one.
        timeout_s: seconds to wait for the answer.
        model: the model wanted; "" accepts a server that serves exactly one.

    Returns:
        the model id.

    Raises:
        LLMServerError: naming ``url``, when the server is unreachable, answers with an
            error, lists no model, lists several and ``model`` is "", or does not list
            ``model``.
    """
    client = openai.OpenAI(base_url=api_base(url), api_key=api_key or "none",
                           timeout=timeout_s, max_retries=0)
    try:
        ids = [m.id for m in client.models.list()]
    except openai.APIConnectionError as exc:  # includes timeouts
        raise LLMServerError(
            f"LLM server {url} is unreachable ({type(exc).__name__}: {exc}); start it or fix "
            "KGLOOM_LLM_URL / the llm.urls resource config") from exc
    except openai.OpenAIError as exc:
        raise LLMServerError(f"LLM server {url} did not list its models at "
                             f"{api_base(url)}/models ({type(exc).__name__}: {exc})") from exc
    finally:
        client.close()
    if model:
        if model not in ids:
            raise LLMServerError(f"LLM server {url} does not serve model {model!r} "
                                 f"(it serves {ids})")
        return model
    if len(ids) != 1:
        raise LLMServerError(f"LLM server {url} serves {len(ids)} models {ids}: choose one "
                             "with KGLOOM_LLM_MODEL / the llm.model resource config")
    return ids[0]


def common_model(urls: list[str], api_key: str = "", timeout_s: float = PROBE_TIMEOUT_S,
                 model: str = "") -> str:
    """Return the one model every server in ``urls`` serves (:func:`served_model` each).

    Raises:
        LLMServerError: naming the server, as :func:`served_model`, or listing each
            server's model when they differ (one index needs one model).
    """
    served = {u: served_model(u, api_key, timeout_s, model) for u in urls}
    if len(set(served.values())) > 1:
        raise LLMServerError(f"the LLM servers serve different models {served}: every "
                             "server of one index must serve the same model")
    return next(iter(served.values()))


def _context_too_small(exc: BaseException) -> bool:
    """Whether ``exc`` is a server refusing a request whose prompt plus ``max_tokens``
    exceeds its context (vLLM: HTTP 400 "This model's maximum context length is ...")."""
    text = str(exc).lower()
    return (isinstance(exc, openai.APIStatusError) and exc.status_code == 400
            and ("context length" in text or "context window" in text))


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, (openai.APIConnectionError, openai.APIResponseValidationError,
                        MalformedReplyError)):
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code >= 500 or exc.status_code in _RETRY_STATUS
    return False


class OpenAIChatBackend:
    """Chat completions with a JSON-schema–constrained reply, spread over model servers.

    Args:
        urls: one or more server URLs (``http://host:port`` or ``.../v1``).
        timeout_s: per-request timeout in seconds (connect, prompt and decoding).
        temperature: sampling temperature (0: greedy).
        api_key: bearer token sent to every server ("" when they need none).
        model: the served model to use; "" takes the one model each server lists.
        schema_format: ``auto``, ``json_schema`` or ``json_object`` (see module doc).
        attempts: tries per call, over endpoints in turn (default: one more than the
            number of servers, at least 3).
        cooldown_s: seconds an endpoint that failed is skipped while another one is up.
        log: a logger for warnings about failing endpoints (a Dagster ``context.log``
            works); default: this module's ``logging`` logger.

    Attributes:
        model_id: the model the servers report (part of every cache key).

    Raises:
        ValueError: when ``urls`` is empty or holds a malformed URL, or ``schema_format``
            is unknown.
        LLMServerError: naming the server, when one is unreachable or the servers do
            not serve the same single model (checked here, before any work).
    """

    def __init__(self, urls: list[str] | str, timeout_s: float = 300.0,
                 temperature: float = 0.0, api_key: str = "", model: str = "",
                 schema_format: str = "auto", attempts: int | None = None,
                 cooldown_s: float = 30.0, log: Any = None) -> None:
        self.urls = parse_urls(urls)
        if not self.urls:
            raise ValueError("no LLM server URL given")
        if schema_format not in SCHEMA_FORMATS:
            raise ValueError(f"schema_format must be one of {SCHEMA_FORMATS}, "
                             f"got {schema_format!r}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.model_id = common_model(self.urls, api_key, min(timeout_s, PROBE_TIMEOUT_S),
                                     model)
        self.timeout_s = timeout_s
        self.temperature = temperature
        self.attempts = attempts or max(3, len(self.urls) + 1)
        self.cooldown_s = cooldown_s
        self.log = log or logger
        self._endpoints = [
            _Endpoint(u, openai.OpenAI(base_url=api_base(u), api_key=api_key or "none",
                                       timeout=timeout_s, max_retries=0),
                      "json_schema" if schema_format == "auto" else schema_format)
            for u in self.urls]
        self._auto = schema_format == "auto"
        self._turn = itertools.count()
        self._lock = threading.Lock()

    def endpoint_stats(self) -> dict[str, dict[str, Any]]:
        """Return {url: calls, errors, timeouts, seconds, last_error, schema_format}."""
        with self._lock:
            return {e.url: {**e.stats.__dict__, "seconds": round(e.stats.seconds, 2),
                            "schema_format": e.schema_format} for e in self._endpoints}

    def _order(self) -> list[_Endpoint]:
        """Endpoints for one call: round-robin start, endpoints up before those cooling
        down after a failure."""
        with self._lock:
            start = next(self._turn) % len(self._endpoints)
        ring = self._endpoints[start:] + self._endpoints[:start]
        now = time.monotonic()
        return [e for e in ring if e.down_until <= now] + [e for e in ring if e.down_until > now]

    @staticmethod
    def _response_format(schema_format: str, schema: dict[str, Any]) -> dict[str, Any]:
        if schema_format == "json_object":
            return {"type": "json_object", "schema": schema}
        return {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema}}

    def _request(self, ep: _Endpoint, messages: list[dict[str, str]], schema: dict[str, Any],
                 max_tokens: int, seed: int):
        return ep.client.chat.completions.create(
            model=self.model_id, messages=messages, max_tokens=max_tokens,
            temperature=self.temperature, seed=seed,
            response_format=self._response_format(ep.schema_format, schema),
            extra_body={"repeat_penalty": 1.0})

    def _send(self, ep: _Endpoint, messages: list[dict[str, str]], schema: dict[str, Any],
              max_tokens: int, seed: int) -> Completion:
        t0 = time.perf_counter()
        try:
            try:
                resp = self._request(ep, messages, schema, max_tokens, seed)
            except openai.APIStatusError as exc:
                if not (self._auto and ep.schema_format == "json_schema"
                        and exc.status_code in (400, 422, 500)
                        and "response_format" in str(exc)):
                    raise
                # llama-cpp-python's server takes the schema as {"type": "json_object"};
                # it refuses "json_schema" with an HTTP 500 naming response_format
                ep.schema_format = "json_object"
                self.log.info(f"LLM server {ep.url} rejected response_format json_schema; "
                              "using json_object with a schema")
                resp = self._request(ep, messages, schema, max_tokens, seed)
            try:
                text = resp.choices[0].message.content or ""
            except (AttributeError, IndexError, TypeError) as exc:
                raise MalformedReplyError(f"LLM server {ep.url} sent no choice: "
                                          f"{str(resp)[:200]}") from exc
        except Exception as exc:
            timeout = isinstance(exc, openai.APITimeoutError)
            with self._lock:
                ep.stats.timeouts += timeout
                ep.stats.errors += not timeout
                ep.stats.last_error = f"{type(exc).__name__}: {str(exc)[:200]}"
                if _retryable(exc):
                    ep.down_until = time.monotonic() + self.cooldown_s
            what = f"timed out after {self.timeout_s:g} s" if timeout else \
                f"failed ({type(exc).__name__}: {str(exc)[:200]})"
            self.log.warning(f"LLM server {ep.url} {what}")
            raise
        seconds = time.perf_counter() - t0
        with self._lock:
            ep.stats.calls += 1
            ep.stats.seconds += seconds
        usage = resp.usage
        return Completion(text=text,
                          prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
                          completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
                          seconds=seconds)

    def complete(self, messages: list[dict[str, str]], schema: dict[str, Any],
                 max_tokens: int, seed: int, stop_on_loop: bool = False) -> Completion:
        """Return the reply to ``messages`` constrained to ``schema`` (see class doc).
        ``stop_on_loop`` is ignored: the server decodes the whole reply, and a loop in it
        is found after (:func:`kgloom.report_writer.check_report`).

        ``max_tokens`` is raised to :func:`kgloom.llm.server_reply_token_bound` of
        ``schema`` when that is larger, and sent as given when the server's context has
        no room for the raised one (see the module doc). Thread-safe. Tries
        ``attempts`` times with exponential backoff (tenacity), each
        try on the next endpoint.

        Raises:
            openai.OpenAIError or MalformedReplyError: the last attempt's error, when every
                attempt failed, or at once for a client error (HTTP 4xx other than
                408/409/429) that no retry would mend.
        """
        # the server's grammar counts characters: room for the longest of them
        wide = max(max_tokens, server_reply_token_bound(schema) or 0)
        order = self._order()
        for attempt in Retrying(stop=stop_after_attempt(self.attempts),
                                wait=wait_exponential(multiplier=0.5, max=5),
                                retry=retry_if_exception(_retryable), reraise=True):
            with attempt:
                ep = order[(attempt.retry_state.attempt_number - 1) % len(order)]
                try:
                    return self._send(ep, messages, schema, wide, seed)
                except openai.APIStatusError as exc:
                    if wide == max_tokens or not _context_too_small(exc):
                        raise
                return self._send(ep, messages, schema, max_tokens, seed)
        raise AssertionError("unreachable: tenacity reraises the last error")

    def stream_text(self, messages: list[dict[str, str]], max_tokens: int,
                    seed: int) -> Iterator[str]:
        """The plain-text reply to ``messages`` (no schema), streamed (``stream=True``):
        each piece of text as the server sends it. Not cached here (see
        :mod:`kgloom.serve.answer_stream`).

        The endpoints are tried in :meth:`_order` until one opens the stream (a failure
        that :func:`_retryable` allows moves on to the next, once each); once it is open,
        a failure raises. ``timeout_s`` bounds each wait for the next piece, not the whole
        reply, so a slow server still streams.

        Raises:
            openai.OpenAIError (``APIError`` for an error event in the stream) or an
                ``httpx`` error for a connection that breaks mid-stream.
        """
        last: Exception | None = None
        for ep in self._order():
            try:
                stream = ep.client.chat.completions.create(
                    model=self.model_id, messages=messages, max_tokens=max_tokens,
                    temperature=self.temperature, seed=seed, stream=True)
            except openai.OpenAIError as exc:
                self.log.warning(f"LLM server {ep.url} failed to stream "
                                 f"({type(exc).__name__}: {str(exc)[:200]})")
                if not _retryable(exc):
                    raise
                last = exc
                continue
            with stream:
                for event in stream:
                    for choice in event.choices or ():
                        if choice.delta is not None and choice.delta.content:
                            yield choice.delta.content
            return
        assert last is not None
        raise last

    def close(self) -> None:
        """Close the HTTP connections."""
        for e in self._endpoints:
            e.client.close()
