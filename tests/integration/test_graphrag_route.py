"""The GraphRAG route (docs/graphrag.md): `kgloom graphrag-settings` writes a complete
settings file whose budgets fit the chat model's window, `kgloom serve-embeddings` answers
like the index's embedder and passes chat through with DRIFT's json_schema rewritten for
llama-cpp-python, and Microsoft GraphRAG's own `graphrag query` runs all five methods on a
fake-LLM index against the stand-in chat server (kgloom.llm.testing.FakeChatServer).

graphrag lives in its own virtualenv (its dependencies clash with kgloom's): the tests
that need it find it through $KGLOOM_GRAPHRAG_PYTHON or the virtualenv that
bench/vs_graphrag/run.sh makes, and skip, saying so, when there is none.
"""

from __future__ import annotations

import base64
import json
import math
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml
from typer.testing import CliRunner

from bench import graphrag_route as route
from kgloom.apps import graphrag_settings as grs
from kgloom.apps.embeddings_server import create_app, llama_cpp_response_format
from kgloom.cli import app
from kgloom.core.layout import LANCEDB_DIR
from kgloom.embedding.store import read_embedder_manifest
from kgloom.llm.testing import ASGIService, FakeChatServer, post_json

sys.path.insert(0, str(Path(__file__).parent))
from test_pipeline import book_excerpt, run_index

pytestmark = pytest.mark.integration  # Microsoft GraphRAG's own CLI in its virtualenv

WINDOW, REPLY = 4096, 500  # a small window, so that GraphRAG's defaults overflow it
GRAPHRAG_PYTHON = route.graphrag_python()
needs_graphrag = pytest.mark.skipif(
    GRAPHRAG_PYTHON is None,
    reason="graphrag is not installed: make its virtualenv (python3 -m venv "
           "/tmp/kgloom-vs-graphrag/venv && /tmp/kgloom-vs-graphrag/venv/bin/pip install "
           "graphrag==3.3.0; about 2 minutes) or set KGLOOM_GRAPHRAG_PYTHON")


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Path:
    """A fake-LLM index of 12,000 characters of the book (real text units and embedder)."""
    inp = tmp_path_factory.mktemp("input")
    (inp / "carol.txt").write_text(book_excerpt(20000, 12000), encoding="utf-8")
    out = tmp_path_factory.mktemp("output")
    run_index(inp, out)
    return out




# --- budgets -------------------------------------------------------------------------------

@pytest.mark.parametrize("window,reply,ratio", [(8192, 1000, 1.35), (4096, 500, 1.35),
                                                 (32768, 2000, 1.1), (8192, 256, 2.0)])
def test_budgets_fit_the_window(window, reply, ratio):
    b = grs.fit_budgets(window, reply, ratio)
    overhead = grs.PROMPT_TEMPLATE_TOKENS + grs.QUESTION_TOKENS
    # the fullest prompt (template, question, context) in model tokens, plus the reply
    assert (b.context_tokens + overhead) * ratio + reply <= window
    assert (b.context_tokens + 1 + overhead) * ratio + reply > window  # the largest
    # DRIFT's reduce: its template plus one answer per action (primer + k), then a reply
    assert overhead * ratio + (b.drift_k_followups + 1) * reply + reply <= window
    assert 1 <= b.drift_k_followups <= grs.DRIFT_MAX_FOLLOWUPS


def test_budgets_refuse_a_window_that_holds_no_context():
    with pytest.raises(grs.GraphRAGSettingsError, match="2048-token window"):
        grs.fit_budgets(2048, 1000)
    with pytest.raises(grs.GraphRAGSettingsError, match="must be > 0"):
        grs.fit_budgets(8192, 0)


# --- the settings file ---------------------------------------------------------------------

def test_settings_file_maps_the_index(index, tmp_path):
    root = tmp_path / "graphrag"
    res = CliRunner().invoke(app, ["graphrag-settings", "--output-dir", str(index), "--root",
                                   str(root), "--context-window", "4096", "--reply-tokens",
                                   "500", "--chat-url", "http://127.0.0.1:9/v1"])
    assert res.exit_code == 0, res.output
    s = yaml.safe_load((root / "settings.yaml").read_text(encoding="utf-8"))
    b = grs.fit_budgets(4096, 500)
    dim = read_embedder_manifest(index / LANCEDB_DIR)["dim"]
    # paths are relative to the settings file's folder (GraphRAG changes into it)
    assert (root / s["output_storage"]["base_dir"]).resolve() == index.resolve()
    assert (root / s["vector_store"]["db_uri"]).resolve() == (index / LANCEDB_DIR).resolve()
    for name, table in grs.VECTOR_STORE_TABLES.items():
        sch = s["vector_store"]["index_schema"][name]
        assert sch["index_name"] == table and (index / LANCEDB_DIR / f"{table}.lance").exists()
        assert sch["vector_size"] == dim == s["vector_store"]["vector_size"]
    chat = s["completion_models"]["default_completion_model"]
    assert chat["api_base"] == "http://127.0.0.1:9/v1"
    assert chat["call_args"]["max_tokens"] == 500
    assert s["embedding_models"]["default_embedding_model"]["model"] == grs.EMBEDDING_MODEL
    budgets = [s["local_search"]["max_context_tokens"], s["basic_search"]["max_context_tokens"],
               s["global_search"]["max_context_tokens"], s["global_search"]["data_max_tokens"],
               s["drift_search"]["local_search_max_data_tokens"]]
    assert budgets == [b.context_tokens] * 5
    assert s["drift_search"]["primer_folds"] == s["drift_search"]["drift_k_followups"] == \
        b.drift_k_followups and s["drift_search"]["n_depth"] == 1


def test_settings_refuse_a_folder_that_is_no_index(tmp_path):
    (tmp_path / "entities.parquet").write_bytes(b"")
    res = CliRunner().invoke(app, ["graphrag-settings", "--output-dir", str(tmp_path)])
    assert res.exit_code == 2
    assert "communities.parquet" in res.output and "lancedb/text_units.lance" in res.output
    assert not (tmp_path / "graphrag" / "settings.yaml").exists()


@needs_graphrag
def test_settings_file_loads_in_graphrags_config_loader(index, tmp_path):
    b = grs.fit_budgets(WINDOW, REPLY)
    path = grs.write_settings(index, tmp_path / "gr", budgets=b)
    code = ("import json, sys; from graphrag.config.load_config import load_config; "
            "c = load_config(sys.argv[1]); print(json.dumps({"
            "'out': c.output_storage.base_dir, 'db': c.vector_store.db_uri, "
            "'schema': {k: v.index_name for k, v in c.vector_store.index_schema.items()}, "
            "'local': c.local_search.max_context_tokens, "
            "'basic': c.basic_search.max_context_tokens, "
            "'map': c.global_search.max_context_tokens, "
            "'reduce': c.global_search.data_max_tokens, "
            "'drift': c.drift_search.local_search_max_data_tokens, "
            "'max_tokens': c.get_completion_model_config("
            "c.local_search.completion_model_id).call_args['max_tokens']}))")
    p = subprocess.run([GRAPHRAG_PYTHON, "-c", code, str(path.parent)], capture_output=True,
                       text=True, timeout=300, env=route.graphrag_env())
    assert p.returncode == 0, p.stderr[-2000:]
    c = json.loads(p.stdout.strip().splitlines()[-1])
    assert Path(c["out"]) == index.resolve() and Path(c["db"]) == (index / LANCEDB_DIR).resolve()
    assert c["schema"] == grs.VECTOR_STORE_TABLES
    assert {c[k] for k in ("local", "basic", "map", "reduce", "drift")} == {b.context_tokens}
    assert c["max_tokens"] == REPLY


# --- the embeddings endpoint and the chat pass-through ------------------------------------

def test_embeddings_endpoint_answers_with_the_index_vectors(index, embedder):
    import lancedb

    row = (lancedb.connect(str(index / LANCEDB_DIR)).open_table("entities").to_arrow()
           .slice(0, 1).to_pylist()[0])
    ent = pl.read_parquet(index / "entities.parquet").filter(pl.col("id") == row["id"]).row(
        0, named=True)
    text = f"{ent['title']}: {ent['description']}"  # what the index embedded for the entity
    with ASGIService(create_app(embedder, "the-embedder")) as srv:
        status, got = post_json(srv.url + "/v1/embeddings", {"input": [text, "Scrooge"],
                                                         "model": "the-embedder"})
        assert status == 200 and [d["index"] for d in got["data"]] == [0, 1]
        vec = np.asarray(got["data"][0]["embedding"], dtype=np.float32)
        assert np.allclose(vec, np.asarray(row["vector"], dtype=np.float32), atol=1e-5)
        assert math.isclose(float(np.linalg.norm(got["data"][1]["embedding"])), 1.0,
                            rel_tol=1e-5)
        assert got["usage"]["prompt_tokens"] > 0
        # the openai client's default form: little-endian float32, base64
        status, b64 = post_json(srv.url + "/v1/embeddings", {"input": "Scrooge",
                                                         "encoding_format": "base64"})
        assert np.allclose(np.frombuffer(base64.b64decode(b64["data"][0]["embedding"]),
                                         dtype="<f4"), got["data"][1]["embedding"], atol=1e-6)
        for bad, why in [({"input": []}, "non-empty list"), ({"input": [[1, 2]]}, "token-id"),
                         ({"model": "x"}, "'input'"),
                         ({"input": "x", "encoding_format": "int8"}, "encoding_format")]:
            status, err = post_json(srv.url + "/v1/embeddings", bad)
            assert status == 400 and why in err["error"]["message"], (bad, err)
        with urllib.request.urlopen(srv.url + "/v1/models", timeout=30) as r:
            assert [m["id"] for m in json.loads(r.read())["data"]] == ["the-embedder"]
        status, err = post_json(srv.url + "/v1/chat/completions", {"messages": []})
        assert status == 404 and "--chat-upstream" in err["error"]["message"]


def test_chat_passthrough_rewrites_json_schema_for_llama_cpp_python(embedder):
    schema = {"type": "object", "properties": {"score": {"type": "integer"}}}
    body = {"messages": [{"role": "user", "content": "rate it"}], "max_tokens": 20,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "r", "schema": schema}}}
    assert llama_cpp_response_format(body)["response_format"] == {"type": "json_object",
                                                                  "schema": schema}
    plain = {"messages": [], "response_format": {"type": "json_object"}}
    assert llama_cpp_response_format(plain) is plain
    for other in ([1], "x", None):  # no object: passed on for the chat server to answer
        assert llama_cpp_response_format(other) == other
    loose = {"response_format": {"type": "json_schema", "json_schema": "not an object"}}
    assert llama_cpp_response_format(loose)["response_format"] == {
        "type": "json_object", "schema": {"type": "object"}}
    # bodies are read as kgloom serve reads them, before any upstream is called
    with ASGIService(create_app(embedder, "e", chat_upstream="http://127.0.0.1:9")) as srv:
        for path in ("/v1/embeddings", "/v1/chat/completions"):
            for raw, why in [(b"[" * 32000 + b"]" * 32000, "levels deep"),
                             (b'{"input": NaN}', "NaN"), (b'{"input": "\xff"}', "0xff")]:
                req = urllib.request.Request(srv.url + path, data=raw, method="POST")
                try:
                    urllib.request.urlopen(req, timeout=30)
                    raise AssertionError(f"{path} accepted {raw[:20]!r}")
                except urllib.error.HTTPError as exc:
                    assert exc.code == 400, (path, exc.code)
                    assert why in json.loads(exc.read())["error"]["message"], path
    with FakeChatServer(json_object_only=True) as chat:  # refuses json_schema, as llama-cpp
        assert post_json(chat.url + "/v1/chat/completions", body)[0] == 500
        with ASGIService(create_app(embedder, "e", chat_upstream=chat.url)) as srv:
            status, reply = post_json(srv.url + "/v1/chat/completions", body)
            assert status == 200, reply
            assert set(json.loads(reply["choices"][0]["message"]["content"])) == {"score"}
            assert chat.formats[-1] == "json_object"
            with urllib.request.urlopen(srv.url + "/v1/models", timeout=30) as r:
                ids = [m["id"] for m in json.loads(r.read())["data"]]
            assert ids == ["e", chat.model_id]
            chat.fault = "http_500"  # the server's own error is passed on
            assert post_json(srv.url + "/v1/chat/completions", body)[0] == 500
            log = srv.app.state.chat_calls
            assert [c["status"] for c in log] == [200, 500]
            assert log[0]["response_format"] == "json_object" and log[1]["error"]


# --- graphrag query end to end with the stand-in chat server ------------------------------

@pytest.fixture(scope="module")
def model_tokens():
    """The bundled chat model's tokenizer (its GGUF vocabulary only: no weights)."""
    from llama_cpp import Llama

    from kgloom.llm import default_gguf_path

    vocab = Llama(model_path=str(default_gguf_path()), vocab_only=True, verbose=False)
    return lambda text: len(vocab.tokenize(text.encode("utf-8"), add_bos=False, special=True))


@needs_graphrag
def test_graphrag_query_runs_every_method_within_the_window(index, tmp_path, model_tokens):
    with FakeChatServer(json_object_only=True) as chat:  # refuses json_schema, as llama-cpp
        chat.window, chat.count_tokens, chat.plain_text = WINDOW, model_tokens, True
        with route.serve_route(index, chat.url, tmp_path / "gr", context_window=WINDOW,
                               reply_tokens=REPLY) as (settings, srv_app):
            results = {name: route.run_query(GRAPHRAG_PYTHON, settings.parent, method,
                                             "Who is Scrooge?", extra, timeout_s=600)
                       for name, method, extra in route.METHODS}
            calls = list(srv_app.state.chat_calls)
        for name, r in results.items():
            assert r["rc"] == 0, (name, r["stderr_tail"])
            # the stand-in's answer, or GraphRAG's own "cannot answer" (global search: the
            # stand-in's map replies are no JSON key points)
            assert "fake text" in r["answer"] or r["answer"] == route.GRAPHRAG_NO_DATA, \
                (name, r["answer"][:500], r["stderr_tail"])
        for name in ("local", "drift", "basic"):
            assert "fake text" in results[name]["answer"], name
        assert chat.overflows == 0 and all(c["status"] == 200 for c in calls), calls
        assert max(chat.prompt_tokens) + REPLY <= WINDOW
        assert "json_object" in chat.formats and "json_schema" not in chat.formats  # DRIFT
        assert len(chat.prompt_tokens) >= 5


@needs_graphrag
def test_graphrag_defaults_overflow_the_window_and_local_prints_nothing(index, tmp_path,
                                                                        model_tokens):
    """The failure the fitted budgets prevent: with GraphRAG's own 12,000-token contexts
    the prompt overflows the window, llama-cpp-python's server streams nothing back (as the
    stand-in does) and `graphrag query` exits 0 with an empty answer."""
    with FakeChatServer() as chat:
        chat.window, chat.count_tokens = WINDOW, model_tokens
        with route.serve_route(index, chat.url, tmp_path / "gr", context_window=WINDOW,
                               reply_tokens=REPLY) as (settings, _):
            s = yaml.safe_load(settings.read_text(encoding="utf-8"))
            s.pop("local_search")  # back to GraphRAG's default budget
            settings.write_text(yaml.safe_dump(s), encoding="utf-8")
            r = route.run_query(GRAPHRAG_PYTHON, settings.parent, "local", "Who is Scrooge?",
                                timeout_s=600)
    assert r["rc"] == 0 and r["answer"] == "" and chat.overflows >= 1, r


def test_serve_embeddings_refuses_a_folder_that_is_no_index(tmp_path):
    res = CliRunner().invoke(app, ["serve-embeddings", "--output-dir", str(tmp_path)])
    assert res.exit_code == 2 and "text_units.lance is missing" in res.output


def test_the_bench_is_stamped_through_bench_stamp(tmp_path, monkeypatch):
    """bench/graphrag_route.py had its own stamp; it now takes bench/stamp.py's and keeps
    its fields: commit (+dirty when tracked files changed), date, load_before."""
    from bench import stamp as bench_stamp

    got = route._stamp()
    assert set(got) == {"commit", "date", "load_before"}
    assert isinstance(got["load_before"], float) and got["date"].endswith("+00:00")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "f.txt").write_text("a")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "f.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "f"], check=True)
    assert not bench_stamp.stamp(repo, dirty=True)["commit"].endswith("+dirty")
    (repo / "f.txt").write_text("b")
    assert bench_stamp.stamp(repo, dirty=True)["commit"].endswith("+dirty")
    assert not bench_stamp.stamp(repo)["commit"].endswith("+dirty")
    monkeypatch.setattr(route, "ROOT", repo)
    assert route._stamp()["commit"].endswith("+dirty")
