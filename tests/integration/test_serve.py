"""``kgloom serve`` (kgloom/serve/): every endpoint on the bundled book indexed with the
fake LLM (reports included), the OpenAI client against the chat endpoint, a 4xx for each
bad input, the API key and CORS, switching builds while serving (also under concurrent
requests), the explorer page in headless Chromium, and nothing written into the index.

The server runs in uvicorn on a free loopback port (:class:`kgloom.llm.testing.ASGIService`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kgloom.cli import app as cli
from kgloom.core.builds import IndexChangedError, publish_build, read_marker
from kgloom.llm import open_llm
from kgloom.llm.testing import ASGIService
from kgloom.query.modes import RETRIEVAL_MODES
from kgloom.serve.app import Limits, open_app
from kgloom.serve.live_index import LiveIndex
from tests.conftest import index_fake_book

pytestmark = pytest.mark.integration  # a server over the whole book indexed (~40 s)

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update"]
QUESTION = "Who was Scrooge's business partner?"
OFF_CORPUS = "Where was the director of film Billy Elliot born?"  # a 2Wiki question
LIMITS = Limits(max_question_chars=300, max_top_k=20, max_depth=2, max_body_bytes=4096)


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``folder`` -> (size, mtime ns)."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def book_index(tmp_path_factory) -> Path:
    return index_fake_book(tmp_path_factory, reports=True)


@pytest.fixture(scope="module")
def index_files(book_index) -> dict[str, tuple[int, int]]:
    """The index's files before any server opened it."""
    return _files(book_index)


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    return open_llm(tmp_path_factory.mktemp("serve_cache") / "answers.sqlite", fake=True)


@pytest.fixture(scope="module")
def server(book_index, index_files, llm):
    svc = ASGIService(open_app(book_index, llm, limits=LIMITS)).start()
    yield svc
    svc.stop()


def call(url: str, path: str, body=None, headers: dict | None = None, raw: bytes | None = None,
         method: str | None = None):
    """(status, parsed JSON or text, headers) of one request."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            status, text, h = r.status, r.read().decode(), r.headers
    except urllib.error.HTTPError as exc:
        status, text, h = exc.code, exc.read().decode(), exc.headers
    try:
        return status, json.loads(text), h
    except ValueError:
        return status, text, h


def ok(url: str, path: str, body=None, **kw):
    status, out, headers = call(url, path, body, **kw)
    assert status == 200, (path, status, out)
    return out, headers


def cli_json(*args: str) -> dict:
    res = CliRunner().invoke(cli, ["query", *args, "--json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


# --- the query API: the shapes of `kgloom query --json` ----------------------------------
@pytest.mark.parametrize("mode", RETRIEVAL_MODES)
def test_every_retrieval_mode_answers_as_kgloom_query_json(server, book_index, mode):
    out, headers = ok(server.url, "/api/query", {"question": QUESTION, "mode": mode,
                                                 "top_k": 4})
    ref = cli_json(QUESTION, "--mode", mode, "--top-k", "4", "--graph-backend", "memory",
                   "--output-dir", str(book_index))
    assert out.keys() == ref.keys()
    assert out["info"].keys() == ref["info"].keys()
    for table in ("text_units", "entities", "relationships", "linked"):
        assert [r.keys() for r in out[table]] == [r.keys() for r in ref[table]], table
    assert [u["id"] for u in out["text_units"]] == [u["id"] for u in ref["text_units"]]
    assert 0 < len(out["text_units"]) <= 4
    build = read_marker(book_index)["build_id"]
    assert out["info"]["build_id"] == build == headers["X-Kgloom-Build"]
    for u in out["text_units"]:  # citations: unit id, document title, entity ids
        assert u["document_title"] == "a-christmas-carol" and u["text"]


@pytest.fixture(scope="module")
def cli_search(book_index, tmp_path_factory) -> dict:
    return cli_json(QUESTION, "--mode", "local", "--fake-llm", "--output-dir", str(book_index),
                    "--cache-path", str(tmp_path_factory.mktemp("cli") / "cache.sqlite"))


@pytest.mark.parametrize("mode,extra", [("local", {}), ("global", {}),
                                        ("global", {"dynamic": True}), ("auto", {}),
                                        ("direct", {}), ("local", {"answer": False})])
def test_every_search_answers_with_citations(server, book_index, cli_search, mode, extra):
    out, _ = ok(server.url, "/api/query", {"question": QUESTION, "mode": mode, **extra})
    assert out.keys() == cli_search.keys()
    if mode == "local" and extra == {}:  # the same answer, citations and context as the CLI
        for key in ("answer", "citations", "cited", "context", "route"):
            assert out[key] == cli_search[key], key
    assert out["info"]["build_id"] == read_marker(book_index)["build_id"]
    if extra.get("answer") is False:
        assert out["answer"] is None and out["context"]["items"]
        return
    assert out["answer"]
    refs = {i["ref"] for i in out["context"]["items"]} if out["route"] != "global" else None
    assert out["citations"] and [c["ref"] for c in out["cited"]] == out["citations"]
    for c in out["cited"]:
        assert c["kind"] in ("text_units", "entities", "relationships", "reports", "points")
        assert refs is None or c["ref"] in refs


def test_cited_sources_resolve_through_the_api(server):
    out, _ = ok(server.url, "/api/query", {"question": QUESTION, "mode": "direct"})
    units = [c for c in out["cited"] if c["kind"] == "text_units"]
    assert units, out["cited"]
    for c in units:
        unit, _ = ok(server.url, f"/api/text_units/{c['id']}")
        assert unit["document_title"] == "a-christmas-carol"
        assert unit["ref"] == c["ref"] and unit["text"].split()[0] in c["text"]
    local, _ = ok(server.url, "/api/query", {"question": QUESTION, "mode": "local"})
    for c in local["cited"]:
        path = {"reports": f"/api/graph/communities/{c['id']}",
                "entities": f"/api/graph/entities/{c['id']}",
                "text_units": f"/api/text_units/{c['id']}"}.get(c["kind"])
        if path:
            ok(server.url, path)


def test_every_option_api_modes_lists_is_accepted(server):
    """/api/modes listed the CLI's own options (graph_backend, model_path, ...), which
    /api/query refuses as unknown fields."""
    modes, _ = ok(server.url, "/api/modes")
    values = {"depth": 1, "lam": 0.5, "oversample": 2, "damping": 0.5, "dynamic": False,
              "keep_parent": False, "level": 0, "answer": False, "budget": 2000}
    for option, readers in modes["options"].items():
        assert option in values, f"/api/modes lists {option}, which /api/query refuses"
        got, out, _ = call(server.url, "/api/query", {"question": QUESTION, "mode": readers[0],
                                                      option: values[option]})
        assert got == 200, (option, out)


def test_ignored_options_are_named(server):
    out, _ = ok(server.url, "/api/query", {"question": QUESTION, "mode": "vector", "depth": 2})
    assert out["info"]["ignored_options"] == ["depth"]


# --- graph endpoints ---------------------------------------------------------------------
def _scrooge(url: str) -> dict:
    found, _ = ok(url, "/api/graph/entities?q=scrooge&limit=5")
    titles = [e["title"] for e in found["entities"]]
    assert "Ebenezer Scrooge" in titles, titles
    assert all("scrooge" in t.lower() for t in titles)
    return next(e for e in found["entities"] if e["title"] == "Ebenezer Scrooge")


def test_entity_search_and_details(server):
    e = _scrooge(server.url)
    node, headers = ok(server.url, f"/api/graph/entities/{e['id']}")
    assert node["build_id"] == headers["X-Kgloom-Build"]
    assert node["degree"] == e["degree"] > 0 and node["pagerank"] > 0
    assert node["communities"] and node["text_unit_ids"] and node["description"]


def test_neighbourhood_to_depth(server):
    e = _scrooge(server.url)
    base = f"/api/graph/entities/{e['id']}/neighbourhood"
    zero, _ = ok(server.url, base + "?depth=0")
    assert [n["id"] for n in zero["nodes"]] == [e["id"]] and zero["edges"] == []
    one, _ = ok(server.url, base + "?depth=1&max_nodes=300")
    two, _ = ok(server.url, base + "?depth=2&max_nodes=300")
    hops1 = {n["id"]: n["hop"] for n in one["nodes"]}
    assert set(hops1.values()) == {0, 1}
    assert len(one["nodes"]) > 1 and len(two["nodes"]) > len(one["nodes"])
    for sub in (one, two):
        ids = {n["id"] for n in sub["nodes"]}
        assert sub["edges"] and all(x["source"] in ids and x["target"] in ids
                                    for x in sub["edges"])
    # every depth-1 node touches the centre by an edge
    touching = {x["source"] for x in one["edges"] if x["target"] == e["id"]} | \
        {x["target"] for x in one["edges"] if x["source"] == e["id"]}
    assert {i for i, h in hops1.items() if h == 1} <= touching
    capped, _ = ok(server.url, base + "?depth=2&max_nodes=3")
    assert len(capped["nodes"]) == 3 and capped["truncated"]


def test_subgraph_of_given_entities(server):
    e = _scrooge(server.url)
    sub, _ = ok(server.url, "/api/graph/subgraph",
                {"entity_ids": [e["id"], "no-such-entity"], "depth": 1})
    assert sub["missing"] == ["no-such-entity"] and len(sub["nodes"]) > 1


def test_community_with_members_report_and_children(server):
    tree, _ = ok(server.url, "/api/graph/communities")
    assert tree["levels"][0] == 0 and tree["communities"]
    parent = next(c for c in tree["communities"] if c["children"])
    c, _ = ok(server.url, f"/api/graph/communities/{parent['community']}")
    assert c["report"]["title"] and c["report"]["full_content"]
    assert c["members"] and c["members_total"] >= len(c["members"])
    assert {k["community"] for k in c["children"]} == set(parent["children"])
    assert all(k["parent"] == parent["community"] for k in c["children"])
    members = {m["id"] for m in c["members"]}
    for m in c["members"]:
        assert m["communities"][str(c["level"])] == c["community"], m
    assert members


def test_overview_takes_the_largest_communities_central_entities_in_turns(server):
    tree, _ = ok(server.url, "/api/graph/communities")
    level = tree["levels"][0]
    at_level = sorted((c for c in tree["communities"] if c["level"] == level),
                      key=lambda c: (-c["size"], c["community"]))
    ov, headers = ok(server.url, "/api/graph/overview?max_nodes=12&max_communities=3")
    assert ov["build_id"] == headers["X-Kgloom-Build"] and ov["levels"] == tree["levels"]
    assert ov["level"] == level and ov["truncated"]
    assert [c["community"] for c in ov["communities"]] == [c["community"] for c in
                                                           at_level[:3]]
    assert len(ov["nodes"]) == 12 == sum(c["shown"] for c in ov["communities"])
    for c in ov["communities"]:  # each community's most central members, by PageRank
        full, _ = ok(server.url, f"/api/graph/communities/{c['community']}")
        drawn = [n["id"] for n in ov["nodes"] if n["community"] == c["community"]]
        assert drawn == [m["id"] for m in full["members"][:len(drawn)]]
        assert len(drawn) == min(4, full["members_total"])  # 12 nodes in turns of 3
    ids = {n["id"] for n in ov["nodes"]}
    assert ov["edges"] and all(e["source"] in ids and e["target"] in ids for e in ov["edges"])
    one, _ = ok(server.url, f"/api/graph/overview?community={at_level[0]['community']}")
    assert {n["community"] for n in one["nodes"]} == {at_level[0]["community"]}
    assert len(one["nodes"]) == min(60, at_level[0]["size"])
    deeper, _ = ok(server.url, f"/api/graph/overview?level={tree['levels'][-1]}")
    assert deeper["level"] == tree["levels"][-1] and deeper["nodes"]


def test_documents_list_the_indexed_files_with_their_units_and_build(server, book_index):
    docs, headers = ok(server.url, "/api/documents")
    marker = read_marker(book_index)
    assert docs["published_at"] == marker["published_at"]
    assert headers["X-Kgloom-Build"] == marker["build_id"]
    assert docs["documents"], docs
    for d in docs["documents"]:
        assert d["source"].endswith(".txt") and d["text_units"] >= 1
        unit, _ = ok(server.url, f"/api/text_units/{d['first_text_unit_id']}")
        assert unit["document_id"] == d["id"] and unit["document_title"] == d["title"]


@pytest.mark.parametrize("mode", ["bridge", "local", "global", "direct"])
def test_a_question_the_book_does_not_cover_is_flagged_in_info(server, mode):
    """The report's question (2WikiMultihopQA's, asked of the book): info says nothing is
    relevant, in a sentence; the book's own question is not flagged."""
    off, _ = ok(server.url, "/api/query", {"question": OFF_CORPUS, "mode": mode})
    on, _ = ok(server.url, "/api/query", {"question": QUESTION, "mode": mode})
    assert off["info"]["low_relevance"] is True and off["info"]["notice"]
    assert on["info"]["low_relevance"] is False and on["info"]["notice"] is None
    assert on["info"]["best_similarity"] > off["info"]["best_similarity"]


def test_a_chat_reply_says_when_nothing_is_relevant(server):
    body = {"model": "kgloom-direct", "messages": [{"role": "user", "content": OFF_CORPUS}]}
    reply, _ = ok(server.url, "/v1/chat/completions", body)
    extra = reply["kgloom"]
    assert extra["low_relevance"] is True
    assert f"Note: {extra['relevance_notice']}" in reply["choices"][0]["message"]["content"]


# --- OpenAI-compatible chat --------------------------------------------------------------
def test_openai_client_lists_models_and_chats(server, book_index):
    import openai

    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
    assert "kgloom" in [m.id for m in client.models.list().data]
    messages = [{"role": "system", "content": "be brief"},
                {"role": "user", "content": "something else first"},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": QUESTION}]
    reply = client.chat.completions.create(model="kgloom-direct", messages=messages)
    text = reply.choices[0].message.content
    build = read_marker(book_index)["build_id"]
    assert reply.system_fingerprint == f"kgloom-build-{build}"
    assert "Sources:" in text and "[T" in text
    extra = reply.model_extra["kgloom"]
    assert extra["build_id"] == build and extra["cited"]
    assert extra["cited"][0]["ref"] in text

    stream = client.chat.completions.create(model="kgloom-direct", messages=messages,
                                            stream=True)
    chunks = list(stream)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert len(chunks) > 3 and streamed == text
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert chunks[-1].model_extra["kgloom"]["build_id"] == build


def test_chat_global_dynamic_model(server):
    import openai

    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
    reply = client.chat.completions.create(
        model="kgloom-global-dynamic",
        messages=[{"role": "user", "content": [{"type": "text", "text": "What are the "
                                                "main themes of the story?"}]}])
    assert reply.model_extra["kgloom"]["route"] == "global"
    assert reply.choices[0].message.content


# --- bad input: a 4xx with a message, never a 5xx ----------------------------------------
BAD_QUERIES = [
    ({"question": ""}, 400, "question"),
    ({"question": "x" * 301}, 400, "at most 300"),
    ({"mode": "bridge"}, 400, "question"),
    ({"question": "q", "mode": "nope"}, 400, "mode must be one of"),
    ({"question": "q", "top_k": 0}, 400, "top_k"),
    ({"question": "q", "top_k": 21}, 400, "top_k must be at most 20"),
    ({"question": "q", "top_k": "5"}, 400, "top_k must be int"),
    ({"question": "q", "top_k": True}, 400, "top_k must be int"),
    ({"question": "q", "mode": "multihop", "depth": 3}, 400, "depth must be at most 2"),
    ({"question": "q", "mode": "multihop", "depth": -1}, 400, "depth"),
    ({"question": "q", "damping": 1.5}, 400, "damping"),
    ({"question": "q", "mode": "local", "budget": 9000}, 400, "budget must be at most"),
    ({"question": "q", "mode": "local", "budget": 1}, 400, "budget"),
    ({"question": "q", "mode": "global", "level": 99}, 400, "level"),
    ({"question": "q", "mode": "global", "dynamic": True, "answer": False}, 400, "dynamic"),
    ({"question": "q", "colour": "red"}, 400, "unknown field"),
    (["not", "an", "object"], 400, "JSON object"),
]


@pytest.mark.parametrize("body,status,message", BAD_QUERIES)
def test_bad_queries_get_a_4xx_with_a_message(server, body, status, message):
    got, out, _ = call(server.url, "/api/query", body)
    assert got == status, out
    assert message in out["error"]["message"], out


@pytest.mark.parametrize("path,raw,status,message", [
    ("/api/query", b"{not json", 400, "not JSON"),
    ("/api/query", b'{"question": "' + b"x" * 5000 + b'"}', 413, "at most 4096"),
    ("/v1/chat/completions", b"[]", 400, "JSON object"),
    ("/api/graph/subgraph", b'{"entity_ids": "abc"}', 400, "entity_ids"),
    ("/api/graph/subgraph", b'{"entity_ids": [], "depth": 3}', 400, "depth"),
    ("/api/graph/subgraph", b'{"entity_ids": [], "extra": 1}', 400, "only"),
    # JSON has no NaN or Infinity (Python's json reads them; lam=Infinity answered 200)
    ("/api/query", b'{"question": "q", "mode": "fused", "lam": Infinity}', 400,
     "Infinity is not a JSON number"),
    ("/api/query", b'{"question": "q", "mode": "ppr", "damping": NaN}', 400, "NaN"),
    # a lone surrogate parses but cannot be embedded or sent back as UTF-8 (it gave a 500)
    ("/api/query", b'{"question": "who \\ud800 is"}', 400, "lone surrogate"),
    ("/api/query", b'{"question": "q", "\\udc00": 1}', 400, "lone surrogate"),
    ("/api/graph/subgraph", b'{"entity_ids": ["a\\ud800"]}', 400, "lone surrogate"),
    ("/v1/chat/completions", b'{"model": "kgloom", "messages": [{"role": "user", '
     b'"content": "who \\ud800"}]}', 400, "lone surrogate"),
])
def test_bad_bodies_get_a_4xx(server, path, raw, status, message):
    got, out, _ = call(server.url, path, raw=raw)
    assert got == status and message in out["error"]["message"], (got, out)


def test_a_chunked_body_over_the_limit_is_refused(server):
    import http.client

    host, port = server.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.putrequest("POST", "/api/query")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.putheader("Content-Type", "application/json")
    conn.endheaders()
    for _ in range(10):
        conn.send(b"400\r\n" + b" " * 0x400 + b"\r\n")
    conn.send(b"0\r\n\r\n")
    r = conn.getresponse()
    assert r.status == 413 and b"over 4096" in r.read()
    conn.close()


@pytest.mark.parametrize("path,status", [
    ("/api/graph/entities/no-such-id", 404),
    ("/api/graph/entities/no-such-id/neighbourhood", 404),
    ("/api/graph/entities?q=", 400),
    ("/api/graph/entities?q=a&limit=0", 400),
    ("/api/graph/communities/999999", 404),
    ("/api/graph/communities/abc", 400),
    ("/api/text_units/no-such-unit", 404),
    ("/api/graph/overview?level=99", 400),
    ("/api/graph/overview?level=-1", 400),
    ("/api/graph/overview?max_nodes=0", 400),
    ("/api/graph/overview?max_nodes=301", 400),  # over Limits.max_nodes
    ("/api/graph/overview?community=999999", 404),
    ("/api/graph/overview?community=0&level=3", 400),  # community 0 is at level 0
    ("/api/nothing-here", 404),
])
def test_bad_graph_requests_get_a_4xx(server, path, status):
    got, out, _ = call(server.url, path)
    assert got == status and out["error"]["message"], out


def test_neighbourhood_depth_over_the_limit(server):
    e = _scrooge(server.url)
    got, out, _ = call(server.url, f"/api/graph/entities/{e['id']}/neighbourhood?depth=3")
    assert got == 400 and "depth" in out["error"]["message"]


@pytest.mark.parametrize("body,status,message", [
    ({"model": "kgloom", "messages": []}, 400, "messages"),
    ({"model": "gpt-4", "messages": [{"role": "user", "content": "q"}]}, 404, "does not exist"),
    ({"messages": [{"role": "user", "content": "q"}]}, 400, "model"),
    ({"model": "kgloom", "messages": [{"role": "system", "content": "q"}]}, 400, "user"),
    ({"model": "kgloom", "messages": [{"role": "user", "content": "  "}]}, 400, "content"),
    ({"model": "kgloom", "messages": [{"role": "user", "content": "q" * 301}]}, 400, "at most"),
    ({"model": "kgloom", "messages": [{"role": "user", "content": "q"}], "stream": "yes"},
     400, "stream"),
])
def test_bad_chat_requests_get_a_4xx(server, body, status, message):
    got, out, _ = call(server.url, "/v1/chat/completions", body)
    assert got == status and message in out["error"]["message"], out


def test_a_server_fault_is_a_json_error(server, monkeypatch):
    """A bug in a handler is a 500 in the documented error shape, not Starlette's text."""
    from kgloom.serve.graph_view import GraphView

    def broken(self):
        raise RuntimeError("boom")

    monkeypatch.setattr(GraphView, "community_tree", broken)
    got, out, _ = call(server.url, "/api/graph/communities")
    assert got == 500, out
    assert out["error"]["type"] == "server_error" and "RuntimeError" in out["error"]["message"]


def test_a_chat_answer_says_when_the_model_server_failed(book_index, tmp_path):
    """With the model server down or answering HTTP 500, the reply said "the model's
    reply failed its checks": there was no reply to check."""
    from kgloom.llm.testing import FakeChatServer
    from kgloom.resources import build_resources

    with FakeChatServer(fault="http_500") as model:
        llm = build_resources(output_dir=str(book_index), llm_urls=[model.url])["llm"].open(
            tmp_path / "cache")
        svc = ASGIService(open_app(book_index, llm)).start()
        try:
            reply, _ = ok(svc.url, "/v1/chat/completions", {
                "model": "kgloom-direct", "messages": [{"role": "user", "content": QUESTION}]})
        finally:
            svc.stop()
    text = reply["choices"][0]["message"]["content"]
    assert text.startswith("No answer: the model could not be asked (LLM call failed: "), text
    assert "failed its checks" not in text


# --- API key, CORS, the host guard -------------------------------------------------------
@pytest.fixture(scope="module")
def keyed_server(book_index, llm):
    app = open_app(book_index, llm, api_key="s3cret",
                   cors_origins=("http://allowed.example",))
    svc = ASGIService(app).start()
    yield svc
    svc.stop()


def test_an_api_key_is_required_when_set(keyed_server):
    url = keyed_server.url
    for headers in ({}, {"X-API-Key": "wrong"}, {"Authorization": "Bearer wrong"}):
        got, out, _ = call(url, "/api/health", headers=headers)
        assert got == 401 and "API key" in out["error"]["message"]
    ok(url, "/api/health", headers={"X-API-Key": "s3cret"})
    ok(url, "/api/query", {"question": QUESTION}, headers={"Authorization": "Bearer s3cret"})
    got, _, _ = call(url, "/v1/models")
    assert got == 401
    got, page, _ = call(url, "/")  # the page holds no data
    assert got == 200 and "kgloom explorer" in page


def test_cors_only_for_the_configured_origin(server, keyed_server):
    def preflight(url: str, origin: str):
        return call(url, "/api/query", method="OPTIONS", headers={
            "Origin": origin, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type"})[2]

    assert preflight(keyed_server.url, "http://allowed.example").get(
        "access-control-allow-origin") == "http://allowed.example"
    assert preflight(keyed_server.url, "http://evil.example").get(
        "access-control-allow-origin") is None
    _, _, h = call(server.url, "/api/health", headers={"Origin": "http://allowed.example"})
    assert h.get("access-control-allow-origin") is None  # CORS off by default


def test_serving_beyond_loopback_without_a_key_is_refused(book_index, monkeypatch):
    monkeypatch.delenv("KGLOOM_API_KEY", raising=False)
    res = CliRunner().invoke(cli, ["serve", "--output-dir", str(book_index), "--host",
                                   "0.0.0.0"])
    assert res.exit_code == 2
    assert "refusing to listen on 0.0.0.0 without an API key" in res.output
    assert "$KGLOOM_API_KEY" in res.output


@pytest.mark.parametrize("command", ["serve", "serve-embeddings"])
def test_a_port_out_of_range_is_refused(book_index, command, monkeypatch):
    """--port 99999 printed "serving ... on :99999" and then hung."""
    import uvicorn

    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: pytest.fail("uvicorn started"))
    res = CliRunner().invoke(cli, [command, "--output-dir", str(book_index), "--port", "99999"])
    assert res.exit_code == 2 and "--port" in res.output, res.output


def test_an_ipv6_address_is_printed_as_a_url(book_index, tmp_path, monkeypatch):
    """--host ::1 printed "serving ... on http://::1:8000/", which is no URL."""
    import uvicorn

    started = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: started.append(kw))
    res = CliRunner().invoke(cli, ["serve", "--output-dir", str(book_index), "--host", "::1",
                                   "--fake-llm", "--cache-dir", str(tmp_path / "cache")])
    assert res.exit_code == 0, res.output
    assert "on http://[::1]:8000/ (explorer" in res.output
    assert started == [{"host": "::1", "port": 8000, "log_level": "warning"}]


def test_the_answer_cache_may_not_lie_in_the_index(book_index):
    res = CliRunner().invoke(cli, ["serve", "--output-dir", str(book_index), "--cache-dir",
                                   str(book_index / "cache"), "--fake-llm"])
    assert res.exit_code == 2 and "never writes" in res.output
    assert not (book_index / "cache").exists()


# --- switching builds --------------------------------------------------------------------
def test_a_new_build_is_served_from_the_next_request(book_index, llm, tmp_path):
    folder = tmp_path / "index"
    shutil.copytree(book_index, folder)
    first = publish_build(folder)["build_id"]  # the copy's own build
    svc = ASGIService(open_app(folder, llm)).start()
    try:
        out, _ = ok(svc.url, "/api/query", {"question": QUESTION})
        assert out["info"]["build_id"] == first
        second = publish_build(folder)["build_id"]
        out, headers = ok(svc.url, "/api/query", {"question": QUESTION, "mode": "vector"})
        assert out["info"]["build_id"] == second == headers["X-Kgloom-Build"] != first
        health, _ = ok(svc.url, "/api/health")
        assert health["build_id"] == second and health["switches"] == 1
        # a broken publish (a marker naming a table that is gone) keeps the old build
        (folder / "communities.parquet").rename(tmp_path / "communities.parquet")
        publish_build(folder)
        (tmp_path / "communities.parquet").rename(folder / "communities.parquet")
        marker = json.loads((folder / "build.json").read_text())
        marker["tables"]["communities"] = {"bytes": 1, "digest": "sha256:0"}
        (folder / "build.json").write_text(json.dumps(marker))
        out, _ = ok(svc.url, "/api/query", {"question": QUESTION, "mode": "vector"})
        assert out["info"]["build_id"] == second
        health, _ = ok(svc.url, "/api/health")
        assert health["last_open_error"]
    finally:
        svc.stop()


def test_health_names_a_new_build_without_another_request(book_index, llm, tmp_path):
    """/api/health kept naming the old build until some other request noticed the new
    one: a monitor polling only health never saw the switch."""
    folder = tmp_path / "index"
    shutil.copytree(book_index, folder)
    first = publish_build(folder)["build_id"]
    svc = ASGIService(open_app(folder, llm)).start()
    try:
        health, headers = ok(svc.url, "/api/health")
        assert health["build_id"] == first
        second = publish_build(folder)["build_id"]
        health, headers = ok(svc.url, "/api/health")
        assert health["build_id"] == second == headers["X-Kgloom-Build"] != first
        assert health["switches"] == 1
    finally:
        svc.stop()


def test_republishing_under_concurrent_requests(book_index, llm, tmp_path):
    """4 clients query while the index is republished every 0.3 s: no error, and every
    response names a build that was published."""
    folder = tmp_path / "index"
    shutil.copytree(book_index, folder)
    published = [publish_build(folder)["build_id"]]
    svc = ASGIService(open_app(folder, llm)).start()
    seen: list[str] = []
    errors: list[str] = []
    stop = threading.Event()

    def client(i: int) -> None:
        modes = ("bridge", "vector")
        n = 0
        while not stop.is_set():
            status, out, headers = call(svc.url, "/api/query",
                                        {"question": QUESTION, "mode": modes[(i + n) % 2]})
            n += 1
            if status != 200:
                errors.append(f"{status} {out}")
            else:
                seen.append(out["info"]["build_id"])
                if headers["X-Kgloom-Build"] != out["info"]["build_id"]:
                    errors.append("header and body name different builds")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    try:
        for _ in range(8):
            time.sleep(0.3)
            published.append(publish_build(folder)["build_id"])
        time.sleep(0.5)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
        svc.stop()
    assert not errors, errors[:3]
    assert seen and set(seen) <= set(published)
    assert len(set(seen)) > 2  # it did switch, more than once


class _Handle:
    def __init__(self, build_id: str) -> None:
        self.build_id = build_id


def test_a_pruned_build_is_reopened_and_the_request_retried(tmp_path):
    (tmp_path / "build.json").write_text("{}")
    opened = iter(["old", "new"])
    live = LiveIndex(tmp_path, lambda: _Handle(next(opened)))
    calls = []

    def fn(handle):
        calls.append(handle.build_id)
        if handle.build_id == "old":
            raise IndexChangedError("pruned")
        return handle.build_id

    assert live.call(fn) == "new" and calls == ["old", "new"]


# --- the explorer page in headless Chromium ----------------------------------------------
@pytest.mark.skipif(not CHROMIUM.exists(),
                    reason=f"{CHROMIUM} is missing (apt-get install chromium)")
@pytest.mark.skipif(importlib.util.find_spec("playwright") is None,
                    reason="the playwright Python package is missing (pip install playwright)")
def test_explorer_asks_draws_the_graph_and_opens_sources(server, tmp_path_factory):
    from playwright.sync_api import expect, sync_playwright

    shots = Path(os.environ.get("KGLOOM_TEST_ARTIFACTS") or tmp_path_factory.mktemp("shots"))
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(30_000)
        console_errors: list[str] = []
        page.on("pageerror", lambda e: console_errors.append(str(e)))
        try:
            page.goto(server.url + "/")
            expect(page.locator("#status")).to_contain_text("build ")
            expect(page.locator("#communities summary").first).to_be_visible()
            # the page opens on the graph's overview; the answer's graph replaces it
            page.wait_for_function("window.kgloomGraph && window.kgloomGraph.nodes().length > 0")
            res = _drawn_after(page, _ask, QUESTION, "direct")
            source = page.locator(".source[data-kind=text_units]").first
            expect(source).to_be_visible()
            nodes = page.evaluate("window.kgloomGraph.nodes().length")
            assert nodes == len(res.json()["nodes"]) > 1
            source.click()
            expect(page.get_by_test_id("unit-text")).to_be_visible()
            unit_text = page.get_by_test_id("unit-text").inner_text()
            assert len(unit_text) > 200
            # click the most central node where Cytoscape drew it
            box = page.locator("#graph").bounding_box()
            pos = page.evaluate("(() => { const n = window.kgloomGraph.nodes().max("
                                "n => n.degree()).ele; const p = n.renderedPosition(); "
                                "return [p.x, p.y, n.data('label')]; })()")
            page.mouse.click(box["x"] + pos[0], box["y"] + pos[1])
            expect(page.get_by_test_id("node-title")).to_have_text(pos[2])
            expect(page.get_by_test_id("node-degree")).not_to_be_empty()
            # the community hierarchy opens a report
            page.locator("#communities summary").first.click()
            expect(page.get_by_test_id("report")).not_to_be_empty()
            page.screenshot(path=str(shots / "explorer.png"), full_page=True)
            print(f"screenshot: {shots / 'explorer.png'}")
            assert not console_errors, console_errors
        except BaseException:
            page.screenshot(path=str(shots / "explorer-failure.png"), full_page=True)
            raise
        finally:
            browser.close()


# twenty draws in a row: (action, *arguments); "ask" draws a question's subgraph,
# "expand" the neighbourhood of the drawn graph's best-connected node, "members" a root
# community's members, "empty" a question whose answer names nothing (the /api/query answer
# is emptied in the browser and flagged low relevance), "fail" a question whose subgraph
# request is answered 500 (the graph stays as it was)
DRAWS = [
    ("ask", QUESTION, "direct"), ("expand",), ("members", 0),
    ("ask", "Who is Tiny Tim?", "local"), ("expand",), ("empty", "bridge"), ("members", 1),
    ("expand",), ("ask", "What did the Ghost of Christmas Past show Scrooge?", "fused"),
    ("expand",), ("fail", "Where did Bob Cratchit work?", "vector"), ("members", 2),
    ("expand",), ("ask", "Who was Fezziwig?", "global"), ("empty", "vector"), ("members", 0),
    ("expand",), ("expand",), ("ask", QUESTION, "auto"), ("members", 1),
]
EMPTY_QUESTION = "Tell me about quantum chromodynamics"
# /api/query answers' info as the test rewrites them in the browser, by question (the
# server may not send these fields yet); "Who is Tiny Tim?" and the rest keep theirs
QUERY_INFO = {EMPTY_QUESTION: {"low_relevance": True, "notice": "No passage is about this."},
              "Who was Fezziwig?": {"low_relevance": False, "notice": "Not shown."},
              "What did the Ghost of Christmas Past show Scrooge?": {"low_relevance": True,
                                                                     "notice": None}}
# what the explorer says for a low-relevance answer with no notice
DEFAULT_NOTICE = "Nothing in the index looks relevant to this question."
# records every graph the page draws (its node ids) as window.kgloomDrawn
RECORD_DRAWS = """
window.kgloomDrawn = [];
let drawnGraph = null;
Object.defineProperty(window, "kgloomGraph", {
  configurable: true, get: () => drawnGraph,
  set: (cy) => { drawnGraph = cy; if (cy) window.kgloomDrawn.push(cy.nodes().map(n => n.id())); },
});
"""


@contextmanager
def _explorer(url: str, shots: Path, name: str):
    """Yield ``(page, errors)``: the explorer at ``url`` open in headless Chromium (its
    page errors and console errors collected in ``errors``, every graph it draws in
    ``window.kgloomDrawn``), the home page's status, communities and graph overview shown
    (the overview is ``window.kgloomDrawn[0]``). On a failure a
    screenshot ``<name>-failure.png`` goes to ``shots``; the browser is closed on exit."""
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(30_000)
        page.add_init_script(RECORD_DRAWS)
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
        page.on("console", lambda m: errors.append(f"console: {m.text} ({m.location['url']})")
                if m.type == "error" else None)
        try:
            page.goto(url + "/")
            expect(page.locator("#status")).to_contain_text("build ")
            expect(page.locator("#communities > details > summary").first).to_be_visible()
            page.wait_for_function("window.kgloomGraph && window.kgloomGraph.nodes().length > 0")
            yield page, errors
        except BaseException:
            page.screenshot(path=str(shots / f"{name}-failure.png"), full_page=True)
            raise
        finally:
            browser.close()


def _drawn_after(page, action, *args):
    """Do ``action(page, *args)``; return the response of the graph request it made
    (subgraph or neighbourhood) once the page drew a graph or showed an error."""
    before = page.evaluate_handle("window.kgloomGraph || null")
    with page.expect_response(lambda r: "/api/graph/subgraph" in r.url
                              or "/neighbourhood" in r.url) as got:
        action(page, *args)
    page.wait_for_function("before => window.kgloomGraph !== before"
                           " || document.querySelector('#detail > .error')", arg=before)
    return got.value


def _ask(page, question: str, mode: str) -> None:
    page.select_option("#mode", mode)
    page.fill("#question", question)
    page.click("#ask")


def _expand_hub(page) -> None:
    """Click the drawn graph's best-connected node, then "expand neighbourhood"."""
    from playwright.sync_api import expect

    box = page.locator("#graph").bounding_box()
    x, y, label = page.evaluate(
        "(() => { const n = window.kgloomGraph.nodes().max(n => n.degree()).ele;"
        " const p = n.renderedPosition(); return [p.x, p.y, n.data('label')]; })()")
    page.mouse.click(box["x"] + x, box["y"] + y)
    expect(page.get_by_test_id("node-title")).to_have_text(label)
    page.get_by_role("button", name="expand neighbourhood").click()


def _draw_members(page, i: int) -> None:
    """Open root community ``i`` (modulo their number), then "draw members"."""
    from playwright.sync_api import expect

    roots = page.locator("#communities > details > summary")
    summary = roots.nth(i % roots.count())
    c = summary.get_attribute("data-community")
    summary.click()
    expect(page.locator("#detail h3")).to_contain_text(f"C{c} (level")
    page.get_by_role("button", name="draw members").click()


def _drawn_nodes(page) -> list[str]:
    return sorted(page.evaluate("window.kgloomGraph.nodes().map(n => n.id())"))


@pytest.mark.skipif(not CHROMIUM.exists(),
                    reason=f"{CHROMIUM} is missing (apt-get install chromium)")
@pytest.mark.skipif(importlib.util.find_spec("playwright") is None,
                    reason="the playwright Python package is missing (pip install playwright)")
def test_explorer_draws_twenty_times_in_a_row(server, tmp_path_factory):
    """Questions, neighbourhood expansions, community members, empty answers and a failed
    draw, one after another: after each the canvas holds the nodes the API returned, the
    placeholder shows exactly when there are none, the notice shows exactly for an answer
    flagged low relevance (info.low_relevance; none when the fields are absent), and the
    page raised no error."""
    from playwright.sync_api import expect

    assert len(DRAWS) == 20 and {d[0] for d in DRAWS} == {"ask", "expand", "members",
                                                          "empty", "fail"}
    shots = Path(os.environ.get("KGLOOM_TEST_ARTIFACTS") or tmp_path_factory.mktemp("shots"))
    shots.mkdir(parents=True, exist_ok=True)
    fail_next_subgraph, answered = [], []

    def answer_query(route):  # QUERY_INFO's fields; the empty answer: no units, no entities
        question = route.request.post_data_json["question"]
        res = route.fetch()
        out = res.json()
        out["info"].update(QUERY_INFO.get(question, {}))
        if question == EMPTY_QUESTION:
            for table in ("text_units", "entities", "relationships", "linked"):
                out[table] = []
        answered.append(out)
        route.fulfill(response=res, json=out)

    def answer_subgraph(route):
        if fail_next_subgraph:
            fail_next_subgraph.clear()
            route.fulfill(status=500, json={"error": {"message": "index unavailable"}})
        else:
            route.continue_()

    with _explorer(server.url, shots, "explorer-twenty-draws") as (page, errors):
        page.route("**/api/query", answer_query)
        page.route("**/api/graph/subgraph", answer_subgraph)
        placeholder, notice = page.locator("#graph-empty"), page.get_by_role("status")
        detail_error = page.locator("#detail > .error")
        expect(placeholder).to_be_hidden()  # the overview is drawn at load
        actions = {"ask": _ask, "empty": _ask, "fail": _ask, "expand": _expand_hub,
                   "members": _draw_members}
        drawn = []
        for step, (kind, *args) in enumerate(DRAWS, 1):
            where = f"draw {step} {kind} {args}"
            if kind == "fail":
                fail_next_subgraph.append(True)
            res = _drawn_after(page, actions[kind],
                               *([EMPTY_QUESTION, *args] if kind == "empty" else args))
            nodes = _drawn_nodes(page)
            if kind == "fail":  # the error is said, the last graph stays
                assert res.status == 500, where
                expect(detail_error).to_contain_text("index unavailable")
                assert nodes == drawn[-1], where
                assert [e for e in errors if "status of 500" not in e] == [], where
                errors.clear()
            else:
                assert res.status == 200, where
                assert detail_error.all_inner_texts() == [], where
                assert nodes == sorted(n["id"] for n in res.json()["nodes"]), where
                drawn.append(nodes)
            assert placeholder.is_visible() == (not nodes), where
            if kind in ("ask", "empty", "fail"):
                info = answered[-1]["info"]
                if info.get("low_relevance"):
                    expect(notice).to_have_text(info["notice"] or DEFAULT_NOTICE)
                    expect(notice).to_be_visible()
                else:
                    expect(notice).to_be_hidden()
            assert errors == [], (where, errors)
        assert [] in drawn and sum(1 for n in drawn if n) >= 15
        assert len(answered) == 8 and any(a["info"].get("low_relevance") for a in answered)
        assert len(page.evaluate("window.kgloomDrawn")) == 1 + len(drawn)  # the overview
        page.screenshot(path=str(shots / "explorer-twenty-draws.png"), full_page=True)


@pytest.mark.skipif(not CHROMIUM.exists(),
                    reason=f"{CHROMIUM} is missing (apt-get install chromium)")
@pytest.mark.skipif(importlib.util.find_spec("playwright") is None,
                    reason="the playwright Python package is missing (pip install playwright)")
def test_explorer_answers_that_come_back_late_are_dropped(server, tmp_path_factory):
    """A question held back while a second one is asked, and a community's members held
    back while a neighbourhood is expanded, come back after those: the answer panel keeps
    the second question, the late question asks for no subgraph, and the graph is drawn
    only for what was asked for last."""
    from playwright.sync_api import expect

    shots = Path(os.environ.get("KGLOOM_TEST_ARTIFACTS") or tmp_path_factory.mktemp("shots"))
    shots.mkdir(parents=True, exist_ok=True)
    slow_question, held, hold_next_subgraph = "Who was Fezziwig?", {}, []

    def answer_query(route):
        if route.request.post_data_json["question"] == slow_question:
            held["query"] = route  # answered below, after the second question
        else:
            route.continue_()

    def answer_subgraph(route):
        if hold_next_subgraph:
            hold_next_subgraph.clear()
            held["members"] = route
        else:
            route.continue_()

    with _explorer(server.url, shots, "explorer-late-answers") as (page, errors):
        page.route("**/api/query", answer_query)
        page.route("**/api/graph/subgraph", answer_subgraph)
        subgraph_requests = []
        page.on("request", lambda r: subgraph_requests.append(r)
                if "/api/graph/subgraph" in r.url else None)
        _ask(page, slow_question, "vector")
        second = _drawn_after(page, _ask, QUESTION, "bridge")
        expect(page.locator("#answer")).to_contain_text("(bridge)")
        hold_next_subgraph.append(True)
        with page.expect_request("**/api/graph/subgraph"):
            _draw_members(page, 0)
        expanded = _drawn_after(page, _expand_hub)
        for name in ("query", "members"):  # now the held answers come back
            held[name].continue_()
            held[name].request.response().finished()
        last = _drawn_after(page, _draw_members, 1)

        assert [sorted(n) for n in page.evaluate("window.kgloomDrawn")[1:]] == [
            sorted(n["id"] for n in r.json()["nodes"]) for r in (second, expanded, last)]
        assert _drawn_nodes(page) == sorted(n["id"] for n in last.json()["nodes"])
        expect(page.locator("#answer")).to_contain_text("(bridge)")
        assert len(subgraph_requests) == 3  # the second question's, both members'
        assert errors == []


def test_the_explorer_files_ship_in_the_package():
    import fnmatch
    import tomllib

    root = Path(__file__).resolve().parents[2]
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["kgloom.serve"]
    static = root / "kgloom" / "serve" / "static"
    files = [p.relative_to(static.parent).as_posix() for p in static.rglob("*") if p.is_file()]
    assert "static/vendor/cytoscape/LICENSE" in files
    assert [f for f in files if not any(fnmatch.fnmatch(f, g) for g in globs)] == []


def test_the_serve_package_imports_no_dagster():
    import subprocess
    import sys

    code = ("import sys, kgloom.serve.app, kgloom.serve.live_index; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'dagster'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "[]"


# --- last: nothing was written into the index --------------------------------------------
def test_nothing_was_written_into_the_index(server, book_index, index_files):
    ok(server.url, "/api/query", {"question": QUESTION, "mode": "local"})
    assert _files(book_index) == index_files
