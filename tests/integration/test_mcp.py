"""``kgloom mcp`` (kgloom/serve/mcp_server.py, kgloom/cli/mcp_command.py) through the
official MCP SDK's own client, over both transports: streamable HTTP (the server in
uvicorn on a free loopback port, :class:`kgloom.llm.testing.ASGIService`) and stdio
(``python -m kgloom.cli mcp`` spawned by the SDK). The bundled book indexed with the fake
LLM (reports included): every tool's result, its citations and build id, a tool error for
each bad argument, the API key, and a build published during a client's session.
"""

from __future__ import annotations

import shutil
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from typer.testing import CliRunner

from kgloom.cli import app as cli
from kgloom.core.builds import publish_build, read_marker
from kgloom.llm import open_llm
from kgloom.llm.testing import ASGIService
from kgloom.query.modes import RETRIEVAL_MODES
from kgloom.serve.app import Limits, open_live_index, parse_query, run_query
from kgloom.serve.mcp_server import MCP_PATH, create_mcp_server, http_app
from tests.conftest import index_fake_book, stand_in_llm

pytestmark = pytest.mark.integration  # the whole book indexed (~40 s), then servers

ROOT = Path(__file__).resolve().parents[2]
QUESTION = "Who was Scrooge's business partner?"
LIMITS = Limits(max_question_chars=300, max_top_k=20, max_depth=2)
TOOLS = {"retrieve", "search", "find_entities", "entity", "neighbourhood", "community",
         "list_documents", "text_unit"}
BOOK = "a-christmas-carol"


@pytest.fixture(scope="module")
def book_index(tmp_path_factory) -> Path:
    return index_fake_book(tmp_path_factory, reports=True)


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    return open_llm(tmp_path_factory.mktemp("mcp_cache") / "answers.sqlite", fake=True)


@pytest.fixture(scope="module")
def live(book_index, llm):
    return open_live_index(book_index, llm)


@pytest.fixture(scope="module")
def url(live):
    """The streamable HTTP endpoint of a server over the book index."""
    svc = ASGIService(http_app(create_mcp_server(live, LIMITS))).start()
    yield svc.url + MCP_PATH
    svc.stop()


def session(server: Any, scenario: Callable[[Client], Awaitable[Any]], **kw) -> Any:
    """``scenario(client)`` in one client session with ``server`` (a URL, stdio
    parameters or a transport), at most 120 s."""
    async def main() -> Any:
        with anyio.fail_after(120):
            async with Client(server, **kw) as client:
                return await scenario(client)

    return anyio.run(main)


def calls(server: Any, *requests: tuple[str, dict]) -> list[Any]:
    """The results of the tool calls ``requests`` ((name, arguments), in order) in one
    session."""
    async def scenario(client: Client) -> list[Any]:
        return [await client.call_tool(name, args) for name, args in requests]

    return session(server, scenario)


def ok(result) -> tuple[dict[str, Any], str]:
    """(structured content, text) of a successful tool result."""
    assert not result.is_error, result.content
    assert result.content and result.content[0].type == "text"
    return result.structured_content, result.content[0].text


def stdio(index: Path, cache: Path) -> StdioServerParameters:
    """``python -m kgloom.cli mcp`` on ``index`` with the fake LLM, over stdio."""
    return StdioServerParameters(
        command=sys.executable, cwd=str(ROOT),
        args=["-m", "kgloom.cli", "mcp", "--output-dir", str(index), "--fake-llm",
              "--cache-dir", str(cache), "--max-question-chars", "300"],
        env={"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"})


# --- the tools -----------------------------------------------------------------------------
def test_the_tools_are_listed_with_their_schemas(url):
    tools = session(url, lambda c: c.list_tools()).tools
    assert {t.name for t in tools} == TOOLS
    for t in tools:
        assert t.description and t.annotations.read_only_hint
        assert t.input_schema["additionalProperties"] is False  # unknown arguments refused
        assert {"build_id", "citations"} <= set(t.output_schema["properties"]), t.name
    schema = next(t for t in tools if t.name == "retrieve").input_schema["properties"]
    assert schema["mode"]["enum"] == list(RETRIEVAL_MODES)
    search = next(t for t in tools if t.name == "search").input_schema["properties"]
    assert search["method"]["enum"] == ["auto", "local", "global", "direct"]


def test_retrieve_answers_as_kgloom_serve_in_every_mode(url, live, book_index):
    results = calls(url, *[("retrieve", {"question": QUESTION, "mode": m, "top_k": 4})
                           for m in RETRIEVAL_MODES])
    build = read_marker(book_index)["build_id"]
    for mode, result in zip(RETRIEVAL_MODES, results):
        data, text = ok(result)
        ref = run_query(live.handle, parse_query({"question": QUESTION, "mode": mode,
                                                  "top_k": 4}, LIMITS))
        assert [u["id"] for u in data["text_units"]] == [u["id"] for u in ref["text_units"]]
        assert 0 < len(data["text_units"]) <= 4 and data["build_id"] == build
        assert [c["text_unit_id"] for c in data["citations"]] == \
            [u["id"] for u in data["text_units"]]
        for u, c in zip(data["text_units"], data["citations"]):
            assert c["document_title"] == u["document_title"] == BOOK and u["text"]
            assert c["ref"] == u["ref"] and f"[{u['ref']}] {BOOK}" in text
        assert build in text


@pytest.mark.parametrize("method", ["local", "global", "auto", "direct"])
def test_search_answers_with_citations(url, live, book_index, method):
    data, text = ok(calls(url, ("search", {"question": QUESTION, "method": method}))[0])
    assert data["build_id"] == read_marker(book_index)["build_id"] and data["build_id"] in text
    assert data["answer"] and data["answer"] in text and data["cited"]
    assert data["method"] == method and data["route"] in ("local", "global", "direct")
    assert "Sources:" in text and data["notice"]  # the fake model says so
    for c in data["cited"]:
        assert f"[{c['ref']}]" in text
        assert (c["document_title"] == BOOK) == (c["kind"] == "text_units")
    if method == "local":
        # the answer is the query API's, whose context names the partner (what the fake
        # model cites is chosen by a hash of its prompt: not asserted)
        ref = run_query(live.handle, parse_query({"question": QUESTION, "mode": "local"},
                                                 LIMITS))
        assert ref["answer"] == data["answer"]
        assert any("Jacob Marley" in str(x) for x in ref["context"]["items"]), text
    if data["route"] != "global":  # global's context is reports and points
        assert data["citations"] and all(c["document_title"] == BOOK
                                         for c in data["citations"])


def test_the_graph_tools_on_scrooge(url, book_index):
    found, text = ok(calls(url, ("find_entities", {"name": "scrooge", "limit": 5}))[0])
    assert "Ebenezer Scrooge" in [e["title"] for e in found["entities"]], text
    scrooge = next(e for e in found["entities"] if e["title"] == "Ebenezer Scrooge")
    entity, near, unit = calls(
        url, ("entity", {"entity_id": scrooge["id"]}),
        ("neighbourhood", {"entity_id": scrooge["id"], "depth": 1, "max_nodes": 8}),
        ("text_unit", {"text_unit_id": "placeholder"}))
    data, text = ok(entity)
    e = data["entity"]
    assert e["id"] == scrooge["id"] and e["degree"] > 0 and e["communities"]
    assert [c["text_unit_id"] for c in data["citations"]] == e["text_unit_ids"]
    assert all(c["document_title"] == BOOK for c in data["citations"])
    assert "Ebenezer Scrooge" in text
    data, text = ok(near)
    assert data["nodes"][0]["id"] == scrooge["id"] and data["nodes"][0]["hop"] == 0
    assert len(data["nodes"]) == 8 and data["truncated"] and data["edges"]
    assert {n["hop"] for n in data["nodes"][1:]} == {1}
    ids = {n["id"] for n in data["nodes"]}
    assert all(x["source"] in ids and x["target"] in ids for x in data["edges"])
    assert data["citations"] and "within 1 hop of Ebenezer Scrooge" in text
    assert unit.is_error and "no text unit 'placeholder'" in unit.content[0].text
    cited = data["citations"][0]
    data, text = ok(calls(url, ("text_unit", {"text_unit_id": cited["text_unit_id"]}))[0])
    assert data["ref"] == cited["ref"] and data["document_title"] == BOOK
    assert data["text"] in text and data["build_id"] == read_marker(book_index)["build_id"]


def test_a_community_with_its_report_and_the_documents(url, live):
    number = next(c for c, row in live.handle.graph.communities.items()
                  if c in live.handle.graph.reports and row["size"] > 3)
    community, documents = calls(url, ("community", {"number": number, "max_members": 3}),
                                 ("list_documents", {}))
    data, text = ok(community)
    assert data["community"] == number and data["report"]["summary"]
    assert data["report"]["title"] in text and data["report"]["summary"] in text
    assert len(data["members"]) == 3 < data["members_total"]
    assert {c["text_unit_id"] for c in data["citations"]} == set(data["text_unit_ids"])
    data, text = ok(documents)
    assert [d["title"] for d in data["documents"]] == [BOOK] and data["published_at"]
    assert data["citations"][0]["text_unit_id"] == data["documents"][0]["first_text_unit_id"]
    assert f"- {BOOK} ({BOOK}.txt): " in text


# --- bad arguments ---------------------------------------------------------------------------
@pytest.mark.parametrize("name,args,message", [
    ("retrieve", {"question": QUESTION, "mode": "telepathy"}, "Input should be 'bridge'"),
    ("retrieve", {"question": "x" * 301}, "question has 301 characters; at most 300"),
    ("retrieve", {"question": "   "}, "question must be a non-empty string"),
    ("retrieve", {"question": QUESTION, "top_k": 21}, "top_k must be at most 20"),
    ("retrieve", {"question": QUESTION, "top_k": 0}, "top_k must be > 0"),
    ("retrieve", {"question": QUESTION, "top_k": "5"}, "valid integer"),
    ("retrieve", {"question": QUESTION, "top_k": True}, "valid integer"),
    ("retrieve", {"question": QUESTION, "damping": 1.5}, "damping must be in [0, 1)"),
    ("retrieve", {"question": QUESTION, "mode": "fused", "depth": 3},
     "depth must be at most 2"),
    ("retrieve", {"question": QUESTION, "colour": "red"}, "Extra inputs are not permitted"),
    ("retrieve", {}, "question\n  Field required"),
    ("search", {"question": QUESTION, "method": "bridge"}, "Input should be 'auto'"),
    ("search", {"question": QUESTION, "method": "global", "level": 99}, "level 99"),
    ("search", {"question": QUESTION, "method": "local", "budget": 9000},
     "budget must be at most 8000"),
    ("find_entities", {"name": ""}, "at least 1 character"),
    ("find_entities", {"name": "scrooge", "limit": 0}, "greater than or equal to 1"),
    ("entity", {"entity_id": "no-such-entity"}, "no entity 'no-such-entity' in this build"),
    ("entity", {"entity_id": 12}, "valid string"),
    ("neighbourhood", {"entity_id": "no-such-entity"}, "no entity 'no-such-entity'"),
    ("neighbourhood", {"entity_id": "x", "depth": 3}, "less than or equal to 2"),
    ("neighbourhood", {"entity_id": "x", "max_nodes": 301}, "less than or equal to 300"),
    ("community", {"number": 99999}, "no community 99999 in this build"),
    ("community", {"number": "zero"}, "valid integer"),
    ("text_unit", {"text_unit_id": "nope"}, "no text unit 'nope'"),
    ("telepathy", {}, "Unknown tool: telepathy"),
])
def test_a_bad_argument_is_a_tool_error(url, name, args, message):
    result, after = calls(url, (name, args), ("list_documents", {}))
    assert result.is_error and message in result.content[0].text, result.content
    ok(after)  # the server answers on


# --- the build a call answers from ----------------------------------------------------------
def _switch(server: Any, folder: Path) -> None:
    """Within one client session: a call, a build published, the next call answers from
    the new build and says so."""
    async def scenario(client: Client) -> None:
        first = read_marker(folder)["build_id"]
        data, text = ok(await client.call_tool("retrieve", {"question": QUESTION}))
        assert data["build_id"] == first and first in text
        second = publish_build(folder)["build_id"]
        data, text = ok(await client.call_tool("search", {"question": QUESTION,
                                                          "method": "direct"}))
        assert data["build_id"] == second != first and second in text
        data, _ = ok(await client.call_tool("list_documents", {}))
        assert data["build_id"] == second

    session(server, scenario)


def test_a_build_published_during_an_http_session_answers_the_next_call(book_index, llm,
                                                                      tmp_path):
    folder = tmp_path / "index"
    shutil.copytree(book_index, folder)
    publish_build(folder)
    server = create_mcp_server(open_live_index(folder, llm), LIMITS)
    with ASGIService(http_app(server)) as svc:
        _switch(svc.url + MCP_PATH, folder)


def test_over_stdio_the_scrooge_question_errors_and_a_build_switch(book_index, tmp_path):
    """One spawned `python -m kgloom.cli mcp`: tools listed, the Scrooge question
    answered with citations, bad arguments refused, a new build answering the next call
    (the SDK's stdio transport; stdout carries nothing but the protocol)."""
    folder = tmp_path / "index"
    shutil.copytree(book_index, folder)
    publish_build(folder)

    async def scenario(client: Client) -> None:
        assert {t.name for t in (await client.list_tools()).tools} == TOOLS
        data, text = ok(await client.call_tool("search", {"question": QUESTION,
                                                          "method": "local"}))
        assert data["answer"] and data["cited"] and data["citations"] and "Sources:" in text
        bad = await client.call_tool("retrieve", {"question": QUESTION, "mode": "psychic"})
        assert bad.is_error and "Input should be 'bridge'" in bad.content[0].text
        long = await client.call_tool("search", {"question": "x" * 301})
        assert long.is_error and "at most 300" in long.content[0].text
        assert (await client.call_tool("nope", {})).is_error

    params = stdio(folder, tmp_path / "cache")
    session(params, scenario)
    _switch(params, folder)


# --- the key and the command line ------------------------------------------------------------
def test_an_api_key_is_required_when_set(live):
    server = create_mcp_server(live, LIMITS)
    with ASGIService(http_app(server, api_key="s3cret")) as svc:
        endpoint = svc.url + MCP_PATH
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            r = httpx2.post(endpoint, json={}, headers=headers)
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
            assert "API key is required" in r.json()["error"]["message"]

        async def with_key(client_headers: dict) -> Any:
            async with httpx2.AsyncClient(headers=client_headers) as http, \
                    Client(streamable_http_client(endpoint, http_client=http)) as c:
                return await c.call_tool("list_documents", {})

        result = anyio.run(with_key, {"Authorization": "Bearer s3cret"})
        assert ok(result)[0]["documents"]


def test_the_command_refuses_an_open_address_without_a_key(book_index, monkeypatch):
    monkeypatch.delenv("KGLOOM_API_KEY", raising=False)
    res = CliRunner().invoke(cli, ["mcp", "--output-dir", str(book_index), "--transport",
                                   "http", "--host", "0.0.0.0"])
    assert res.exit_code == 2 and "refusing to listen on 0.0.0.0 without an API key" in \
        res.output
    res = CliRunner().invoke(cli, ["mcp", "--output-dir", str(book_index), "--transport",
                                   "carrier-pigeon"])
    assert res.exit_code == 2 and "--transport must be one of stdio, http" in res.output


def test_the_command_serves_http_with_serve_s_flags(book_index, tmp_path, monkeypatch):
    import uvicorn

    started: list[dict] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: started.append(kw))
    monkeypatch.setenv("KGLOOM_API_KEY", "k")
    res = CliRunner().invoke(cli, ["mcp", "--output-dir", str(book_index), "--transport",
                                   "http", "--host", "0.0.0.0", "--port", "8123",
                                   "--fake-llm", "--cache-dir", str(tmp_path / "cache")])
    assert res.exit_code == 0, res.output
    assert "on http://0.0.0.0:8123/mcp; API key required" in res.output
    assert started == [{"host": "0.0.0.0", "port": 8123, "log_level": "warning"}]


# --- answers streamed from the user's model server --------------------------------------
@pytest.fixture(scope="module")
def stream_url(book_index, stand_in, tmp_path_factory):
    """An MCP server whose answering model is the stand-in model server."""
    llm = stand_in_llm(stand_in, tmp_path_factory.mktemp("mcp_stream"), timeout_s=5.0)
    svc = ASGIService(http_app(create_mcp_server(open_live_index(book_index, llm),
                                                 LIMITS))).start()
    yield svc.url + MCP_PATH
    svc.stop()


def test_search_sends_the_model_server_s_tokens_as_progress_as_they_come(stream_url, stand_in):
    """The stand-in holds after its first token until the client has that token as a
    progress message: the client saw it before the server wrote the rest. The result is
    the whole answer, its citations and build id."""
    stand_in.gate, stand_in.fail_after = threading.Event(), 0
    messages: list[str] = []
    sent_then: list[int] = []  # tokens the server had sent when each message came

    async def progress(value: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")
        sent_then.append(stand_in.sent)
        stand_in.gate.set()  # the first piece is here: let the server go on

    async def scenario(client: Client) -> Any:
        return await client.call_tool("search", {"question": QUESTION, "method": "local"},
                                      progress_callback=progress)

    try:
        data, text = ok(session(stream_url, scenario))
    finally:
        stand_in.gate.set()
        stand_in.gate = None
    assert messages[0] == "Marley" and sent_then[0] == 1 and stand_in.sent == 6
    assert "".join(messages).startswith(data["answer"])
    assert data["answer"].startswith("Marley was his partner [T")
    assert data["citations"] and data["build_id"]
    assert data["answer"] in text


def test_a_model_server_failing_mid_answer_is_a_tool_error(stream_url, stand_in):
    stand_in.fail_after = 3
    try:
        result = calls(stream_url, ("search", {"question": "Who was Fezziwig to Scrooge?",
                                               "method": "local"}))[0]
    finally:
        stand_in.fail_after = 0
    assert result.is_error
    assert "failed in the middle of the answer" in result.content[0].text
