"""Chat answers of ``kgloom serve`` streamed from a model server, and its Ollama API
(kgloom/serve/answer_stream.py, chat_routes.py, ollama_api.py).

A scripted stand-in for the user's OpenAI-compatible chat server
(:class:`kgloom.llm.testing.StandInChatServer`, a small Starlette app run by
:class:`kgloom.llm.testing.ASGIService`) streams its answer token
by token and can hold after the first token until the test lets it go, be slow, or fail
in the middle. Clients: the ``openai`` and ``ollama`` Python clients, and plain HTTP
where the shape itself is checked. The index is the bundled book, indexed with the fake
LLM once for the module.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest

from kgloom.core.builds import read_marker
from kgloom.llm import CachedLLM, open_llm
from kgloom.llm.testing import ASGIService
from kgloom.serve.app import Limits, open_app
from kgloom.serve.ollama_api import PATHS as OLLAMA_PATHS
from tests.conftest import index_fake_book, stand_in_llm

pytestmark = pytest.mark.integration  # a server over the whole book indexed (~40 s)

QUESTION = "Who was Scrooge's business partner?"
FOLLOW_UP = "What did his ghost carry?"
LIMITS = Limits(max_question_chars=300, max_body_bytes=8192)


@pytest.fixture(scope="module")
def book_index(tmp_path_factory):
    return index_fake_book(tmp_path_factory, reports=True)


@pytest.fixture(scope="module")
def stream_llm(stand_in, tmp_path_factory):
    """The stand-in as kgloom's model (1 s per wait for a piece: a slow server must
    still stream within it)."""
    return stand_in_llm(stand_in, tmp_path_factory.mktemp("answers"), timeout_s=1.0)


@pytest.fixture(scope="module")
def server(book_index, stream_llm):
    svc = ASGIService(open_app(book_index, stream_llm, limits=LIMITS)).start()
    yield svc
    svc.stop()


@pytest.fixture(scope="module")
def fake_server(book_index, tmp_path_factory):
    """kgloom serve with the in-process fake model (answers known whole)."""
    llm = open_llm(tmp_path_factory.mktemp("fake") / "c.sqlite", fake=True)
    svc = ASGIService(open_app(book_index, llm, limits=LIMITS, api_key="k3y")).start()
    yield svc
    svc.stop()


@pytest.fixture(autouse=True)
def _reset(stand_in):
    stand_in.gate, stand_in.delay_s, stand_in.fail_after = None, 0.0, 0
    yield


def post(url: str, path: str, body: dict, key: str | None = None) -> tuple[int, str]:
    headers = {"Content-Type": "application/json",
               **({"Authorization": f"Bearer {key}"} if key else {})}
    req = urllib.request.Request(url + path, json.dumps(body).encode(), headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def answers(llm: CachedLLM) -> int:
    return llm.cache.rows_per_stage().get("chat_answer", 0)


# --- streamed from the model server ------------------------------------------------------
def test_openai_client_sees_tokens_as_the_server_writes_them(server, stand_in, book_index):
    import openai

    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
    stand_in.gate = threading.Event()
    stream = client.chat.completions.create(
        model="kgloom-local", stream=True,
        messages=[{"role": "user", "content": QUESTION + " (incremental)"}])
    chunks = iter(stream)
    first = next(c for c in chunks if c.choices[0].delta.content)
    assert first.choices[0].delta.content == "Marley"
    assert stand_in.sent == 1  # the stand-in holds its second token until the gate opens
    stand_in.gate.set()
    rest = list(chunks)
    text = "Marley" + "".join(c.choices[0].delta.content or "" for c in rest)
    assert text.startswith("Marley was his partner [T")
    assert "\n\nSources:\n[T" in text
    last = rest[-1]
    assert last.choices[0].finish_reason == "stop"
    extra = last.model_extra["kgloom"]
    build = read_marker(book_index)["build_id"]
    assert extra["build_id"] == build and last.system_fingerprint == f"kgloom-build-{build}"
    assert extra["streamed"] and not extra["cached"]
    cited = extra["cited"][0]
    assert cited["kind"] == "text_units" and f"[{cited['ref']}]" in text
    units = {u["id"]: u["document_title"] for u in extra["context_units"]}
    assert units[cited["id"]] == "a-christmas-carol"


@pytest.mark.parametrize("model,route", [("kgloom", None), ("kgloom-global", "global"),
                                         ("kgloom-direct", "direct")])
def test_every_chat_model_streams_from_the_server(server, stand_in, model, route):
    """Routing (auto) and global search's map calls go to the server as structured
    calls; the answer is streamed, and cites what the context holds."""
    import openai

    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
    calls = len(stand_in.requests)
    reply = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": f"What is the story about? "
                                                           f"({model})"}])
    extra = reply.model_extra["kgloom"]
    assert reply.choices[0].message.content.startswith("Marley was his partner")
    assert extra["streamed"] and len(stand_in.requests) == calls + 1
    assert route is None or extra["route"] == route
    assert extra["citations"] and "\n\nSources:\n" in reply.choices[0].message.content


def test_a_complete_answer_is_cached_and_replayed(server, stand_in, stream_llm):
    import openai

    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
    messages = [{"role": "user", "content": QUESTION + " (cached)"}]
    before, calls = answers(stream_llm), len(stand_in.requests)
    one = client.chat.completions.create(model="kgloom-local", messages=messages)
    two = client.chat.completions.create(model="kgloom-local", messages=messages)
    assert answers(stream_llm) == before + 1 and len(stand_in.requests) == calls + 1
    assert one.choices[0].message.content == two.choices[0].message.content
    assert two.model_extra["kgloom"]["cached"] and not one.model_extra["kgloom"]["cached"]


def test_a_slow_server_still_streams(server, stand_in):
    """0.4 s before each of 6 tokens is longer than the 1 s timeout in all, not per
    piece."""
    import openai

    stand_in.delay_s = 0.4
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
    stream = client.chat.completions.create(
        model="kgloom-local", stream=True,
        messages=[{"role": "user", "content": QUESTION + " (slow)"}])
    text = "".join(c.choices[0].delta.content or "" for c in stream)
    assert text.startswith("Marley was his partner [T")


def test_a_failure_mid_stream_is_an_error_event_and_nothing_is_cached(server, stand_in,
                                                                      stream_llm):
    import ollama
    import openai

    stand_in.fail_after = 2
    before = answers(stream_llm)
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
    stream = client.chat.completions.create(
        model="kgloom-local", stream=True,
        messages=[{"role": "user", "content": QUESTION + " (fails)"}])
    seen = []
    with pytest.raises(openai.APIError, match="failed in the middle of the answer"):
        for c in stream:
            seen.append(c.choices[0].delta.content or "")
    assert "".join(seen) == "Marley was"
    with pytest.raises(ollama.ResponseError, match="failed in the middle of the answer"):
        list(ollama.Client(host=server.url).chat(
            model="kgloom-local", stream=True,
            messages=[{"role": "user", "content": QUESTION + " (fails)"}]))
    status, out = post(server.url, "/v1/chat/completions", {
        "model": "kgloom-local", "messages": [{"role": "user",
                                               "content": QUESTION + " (fails)"}]})
    assert status == 502 and "failed in the middle" in json.loads(out)["error"]["message"]
    assert answers(stream_llm) == before  # nothing half-written was kept
    stand_in.fail_after = 0  # the same question again: answered whole, then kept
    reply = openai.OpenAI(base_url=server.url + "/v1", api_key="unused").chat.completions.create(
        model="kgloom-local", messages=[{"role": "user", "content": QUESTION + " (fails)"}])
    assert not reply.model_extra["kgloom"]["cached"] and answers(stream_llm) == before + 1


def test_earlier_turns_join_the_retrieval_query(server, stand_in):
    import openai

    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
    first = client.chat.completions.create(
        model="kgloom-local", messages=[{"role": "user", "content": QUESTION}])
    said = first.choices[0].message.content
    alone = client.chat.completions.create(
        model="kgloom-local", messages=[{"role": "user", "content": FOLLOW_UP}])
    turns = [{"role": "system", "content": "be brief"},
             {"role": "user", "content": QUESTION},
             {"role": "assistant", "content": said},
             {"role": "user", "content": FOLLOW_UP}]
    reply = client.chat.completions.create(model="kgloom-local", messages=turns)
    extra = reply.model_extra["kgloom"]
    assert extra["retrieval_query"] == f"{QUESTION}\n{FOLLOW_UP}"
    assert alone.model_extra["kgloom"]["retrieval_query"] == FOLLOW_UP
    sent = stand_in.requests[-1]["messages"]  # what the model server was asked
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
    assert sent[1]["content"] == QUESTION
    assert sent[2]["content"] == said.split("\n\nSources:\n")[0]  # without the sources
    assert sent[3]["content"].endswith(f"Question: {FOLLOW_UP}")
    with_turns = {u["id"] for u in extra["context_units"]}
    assert with_turns != {u["id"] for u in alone.model_extra["kgloom"]["context_units"]}
    assert "Marley" in sent[3]["content"]  # the context found with the first question


def test_ollama_client_streams_chat_and_generate(server, stand_in, book_index):
    import ollama

    client = ollama.Client(host=server.url)
    assert "kgloom-local" in [m.model for m in client.list().models]
    stand_in.gate = threading.Event()
    parts = iter(client.chat(model="kgloom-local", stream=True,
                             messages=[{"role": "user", "content": QUESTION + " (ollama)"}]))
    first = next(parts)
    assert first.message.content == "Marley" and not first.done and stand_in.sent == 1
    stand_in.gate.set()
    rest = list(parts)
    assert rest[-1].done and rest[-1].done_reason == "stop"
    assert all(not p.done for p in rest[:-1])
    text = "Marley" + "".join(p.message.content for p in rest)
    assert text.startswith("Marley was his partner [T") and "Sources:" in text
    gen = list(client.generate(model="kgloom-local:latest", prompt=QUESTION + " (gen)",
                               stream=True))
    assert "".join(g.response for g in gen).startswith("Marley was")
    assert gen[-1].done
    # the last line, as sent: the citations and the build
    status, out = post(server.url, "/api/chat", {"model": "kgloom-local", "messages": [
        {"role": "user", "content": QUESTION + " (ollama)"}]})
    lines = [json.loads(x) for x in out.splitlines()]
    assert status == 200 and lines[-1]["done"] is True
    assert lines[-1]["kgloom"]["build_id"] == read_marker(book_index)["build_id"]
    assert lines[-1]["kgloom"]["cited"][0]["kind"] == "text_units"


# --- the Ollama API with the in-process model; guards ------------------------------------
def test_ollama_tags_version_show_and_unstreamed_answers(fake_server, book_index):
    import ollama

    client = ollama.Client(host=fake_server.url, headers={"Authorization": "Bearer k3y"})
    names = [m.model for m in client.list().models]
    assert names[0] == "kgloom" and "kgloom-global-dynamic" in names
    assert client.show("kgloom").details.family == "kgloom"
    chat = client.chat(model="kgloom-direct", stream=False,
                       messages=[{"role": "user", "content": QUESTION}])
    assert chat.done and "Sources:" in chat.message.content
    gen = client.generate(model="kgloom-direct", prompt=QUESTION, stream=False)
    assert gen.done and gen.response == chat.message.content
    status, out = post(fake_server.url, "/api/generate", {"model": "kgloom-direct",
                                                          "prompt": QUESTION,
                                                          "stream": False}, key="k3y")
    body = json.loads(out)
    assert status == 200
    assert body["kgloom"]["build_id"] == read_marker(book_index)["build_id"]
    assert body["kgloom"]["streamed"] is False and body["total_duration"] > 0
    req = urllib.request.Request(fake_server.url + "/api/version",
                                 headers={"X-API-Key": "k3y"})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert json.loads(r.read())["version"]


@pytest.mark.parametrize("path,body,status,message", [
    ("/api/chat", {"model": "llama3", "messages": [{"role": "user", "content": "q"}]}, 404,
     "does not exist"),
    ("/api/chat", {"model": "kgloom", "messages": []}, 400, "messages"),
    ("/api/chat", {"model": "kgloom", "messages": [{"role": "user", "content": "q" * 301}]},
     400, "at most 300"),
    ("/api/chat", {"model": "kgloom", "stream": "yes",
                   "messages": [{"role": "user", "content": "q"}]}, 400, "stream"),
    ("/api/generate", {"model": "kgloom"}, 400, "prompt"),
    ("/api/generate", {"prompt": "q"}, 400, "model"),
    ("/api/show", {"model": "nope"}, 404, "does not exist"),
])
def test_bad_ollama_requests_get_a_4xx_an_ollama_client_shows(fake_server, path, body,
                                                              status, message):
    got, out = post(fake_server.url, path, body, key="k3y")
    assert got == status and message in json.loads(out)["error"], out  # {"error": "..."}


def test_ollama_client_errors_and_the_key(fake_server):
    import ollama

    with pytest.raises(ollama.ResponseError) as err:
        ollama.Client(host=fake_server.url).list()  # no key
    assert err.value.status_code == 401 and "API key" in err.value.error
    client = ollama.Client(host=fake_server.url, headers={"Authorization": "Bearer k3y"})
    with pytest.raises(ollama.ResponseError) as err:
        client.chat(model="gpt-4", messages=[{"role": "user", "content": "q"}])
    assert err.value.status_code == 404 and "does not exist" in err.value.error


def test_ollama_routes_do_not_clash_with_kgloom_api(server):
    paths = [r.path for r in server.app.routes if hasattr(r, "methods")]
    assert len(paths) == len(set(paths))  # one route per path
    assert {"/api/query", "/api/health", "/api/documents", "/api/modes"} & \
        set(OLLAMA_PATHS) == set()
    assert set(OLLAMA_PATHS) <= set(paths)


def test_the_start_line_says_answers_stream_from_the_server(book_index, stand_in, tmp_path,
                                                            monkeypatch):
    import uvicorn
    from typer.testing import CliRunner

    from kgloom.cli import app as cli

    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: None)
    res = CliRunner().invoke(cli, ["serve", "--output-dir", str(book_index), "--llm-url",
                                   stand_in.url, "--cache-dir", str(tmp_path / "cache")])
    assert res.exit_code == 0, res.output
    assert f"answers streamed from {stand_in.url}" in res.output
    assert "Ollama-compatible at /api/chat" in res.output
