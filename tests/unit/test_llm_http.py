"""The LLM behind OpenAI-compatible servers, and concurrent LLM calls: an index built
through servers equals the in-process one; concurrency, failover, timeouts, bad replies,
model changes, the in-process lock and the cache under threads."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from kgloom.cli.runner import LLM_POOL, index_folder, set_llm_pool_limit
from kgloom.definitions import build_resources
from kgloom.llm import (
    CachedLLM,
    LlamaCppBackend,
    LLMCache,
    PromptTemplate,
    map_concurrent,
    structured_call,
)
from kgloom.llm.fake import FakeBackend
from kgloom.llm.http import LLMServerError, OpenAIChatBackend, parse_urls
from kgloom.llm.testing import FakeChatServer
from kgloom.resources import LLMResource

BOOK = Path(__file__).resolve().parents[2] / "data" / "input" / "a-christmas-carol.txt"
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 20}},
          "required": ["answer"], "additionalProperties": False}
TEMPLATE = PromptTemplate(name="t", system="Answer with JSON.", user="Q: {q}", schema=SCHEMA,
                          max_tokens=30)


def _dead_url() -> str:
    """A URL on 127.0.0.1 where nothing listens (a server started and stopped)."""
    server = FakeChatServer().start()
    url = server.url
    server.stop()
    return url


def _outputs(out: Path) -> dict[str, bytes]:
    """Every parquet table of an index (graph-wide and per partition), as bytes (not the
    build folders' links to the same files, named by a random build id)."""
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*.parquet"))
            if "lancedb" not in p.parts and "builds" not in p.parts}


# ---------------------------------------------------------------- whole index through servers

@pytest.mark.integration
def test_index_through_two_servers_is_byte_identical_to_in_process(tmp_path):
    text = BOOK.read_text(encoding="utf-8")
    start = text.index("Marley was dead")
    inp = tmp_path / "input"
    inp.mkdir()
    (inp / "a.txt").write_text(text[start:start + 2500], encoding="utf-8")
    (inp / "b.txt").write_text(text[start + 40000:start + 42000], encoding="utf-8")
    settings = {"chunk_size": 200, "chunk_overlap": 40}

    local = build_resources(str(inp), str(tmp_path / "local"), fake_llm=True, **settings)
    _, report = index_folder(local, dg.DagsterInstance.ephemeral(), force=True)
    assert report.success

    # slow enough (50 ms a reply) that calls overlap: concurrency 3 over two servers
    with FakeChatServer(fault="slow", delay_s=0.05) as a, \
            FakeChatServer(fault="slow", delay_s=0.05) as b:
        remote = build_resources(str(inp), str(tmp_path / "remote"), fake_llm=False,
                                 llm_urls=[a.url, b.url], llm_concurrency=3, **settings)
        _, report = index_folder(remote, dg.DagsterInstance.ephemeral(), force=True)
        assert report.success
        assert a.requests > 0 and b.requests > 0  # spread over both servers
        assert max(a.max_in_flight, b.max_in_flight) >= 2  # calls really overlapped
        assert a.max_in_flight <= 3 and b.max_in_flight <= 3  # never above the setting
        calls = a.requests + b.requests

    local_files, remote_files = _outputs(tmp_path / "local"), _outputs(tmp_path / "remote")
    assert set(local_files) == set(remote_files)
    assert {"entities.parquet", "community_reports.parquet",
            "stages/partitions/a.txt/entity_mentions.parquet"} <= set(local_files)
    differ = [k for k in local_files if local_files[k] != remote_files[k]]
    assert differ == []
    # one model call per cache row: the servers answered exactly the calls made
    rows = LLMCache(tmp_path / "remote" / "llm_cache.sqlite").rows_per_stage()
    assert sum(rows.values()) == calls
    reports = pl.read_parquet(tmp_path / "remote" / "community_reports.parquet")
    assert reports.height > 0


# ---------------------------------------------------------------- concurrency

def test_map_concurrent_keeps_order_bounds_threads_and_rejects_bad_concurrency():
    active, peak, lock = [0], [0], threading.Lock()

    def slow_square(x: int) -> int:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.01 * (5 - x % 5))  # later items finish first
        with lock:
            active[0] -= 1
        return x * x

    seen = []
    assert map_concurrent(slow_square, list(range(12)), 3, lambda d, t: seen.append((d, t))) \
        == [x * x for x in range(12)]
    assert 2 <= peak[0] <= 3
    assert seen[-1] == (12, 12) and [d for d, _ in seen] == list(range(1, 13))
    for bad in (0, -1):
        with pytest.raises(ValueError, match="concurrency"):
            map_concurrent(slow_square, [1], bad)
        with pytest.raises(ValueError, match="concurrency"):
            CachedLLM(FakeBackend(), LLMCache(":memory:"), "fake-llm", concurrency=bad)

    def boom(x: int) -> int:
        if x == 3:
            raise RuntimeError("item 3")
        return x

    with pytest.raises(RuntimeError, match="item 3"):
        map_concurrent(boom, list(range(8)), 4)


def test_llm_concurrency_zero_is_a_value_error_at_resource_start(tmp_path):
    with pytest.raises(ValueError, match="llm_concurrency"):
        LLMResource(fake=True, llm_concurrency=0).open(tmp_path)


@pytest.mark.parametrize("var, field, default, bad, refusal", [
    ("KGLOOM_LLM_CONCURRENCY", "llm_concurrency", 1, "-2", "llm_concurrency must be >= 1"),
    ("KGLOOM_N_THREADS", "n_threads", 0, "-1", "n_threads must be >= 0"),
])
def test_llm_number_variables_are_read_and_bad_values_refused(tmp_path, monkeypatch, var,
                                                              field, default, bad, refusal):
    def llm():
        return build_resources(str(tmp_path), str(tmp_path), fake_llm=True)["llm"]

    monkeypatch.delenv(var, raising=False)
    assert getattr(llm(), field) == default
    monkeypatch.setenv(var, "3")
    assert getattr(llm(), field) == 3
    monkeypatch.setenv(var, bad)
    with pytest.raises(ValueError, match=refusal):
        llm().verify()
    monkeypatch.setenv(var, "four")
    with pytest.raises(ValueError, match=f"{var} must be an integer"):
        llm()


class _SlowFake(FakeBackend):
    def complete(self, messages, schema, max_tokens, seed, stop_on_loop=False):
        time.sleep(0.02)
        return super().complete(messages, schema, max_tokens, seed)


def test_cache_under_concurrent_calls_makes_one_call_per_key(tmp_path):
    backend = _SlowFake()
    llm = CachedLLM(backend, LLMCache(tmp_path / "c.sqlite"), backend.model_id, concurrency=8)
    questions = [f"q{i % 10}" for i in range(40)]  # each key asked 4 times, at once
    results = llm.map(lambda q: structured_call(llm, TEMPLATE, "s", q, 1, q=q), questions)

    sequential = CachedLLM(FakeBackend(), LLMCache(tmp_path / "d.sqlite"), "fake-llm")
    assert results == [structured_call(sequential, TEMPLATE, "s", q, 1, q=q) for q in questions]
    assert backend.calls == 10
    st = llm.stats["s"]
    assert (st.calls, st.cache_hits) == (10, 30)
    assert llm.cache.rows_per_stage() == {"s": 10}


# ---------------------------------------------------------------- in-process: one model, a lock

class _NotReentrantLlama:
    """Stands in for llama_cpp.Llama: fails when two calls are inside it at once."""

    def __init__(self, *args, **kwargs) -> None:
        self.kwargs = kwargs
        self.inside = 0
        self.calls = 0
        self._ctx = type("Ctx", (), {"ctx": None})()

    def create_chat_completion(self, **kwargs) -> dict:
        self.inside += 1
        try:
            if self.inside > 1:
                raise RuntimeError("Llama entered by two threads at once")
            time.sleep(0.01)
            self.calls += 1
            return {"choices": [{"message": {"content": '{"answer": "ok"}'}}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 4}}
        finally:
            self.inside -= 1


@pytest.fixture
def stub_llama(tmp_path, monkeypatch):
    import llama_cpp

    perf = type("Perf", (), {"n_p_eval": 0, "t_p_eval_ms": 0.0, "t_eval_ms": 0.0})()
    monkeypatch.setattr(llama_cpp, "Llama", _NotReentrantLlama)
    monkeypatch.setattr(llama_cpp, "llama_perf_context_reset", lambda ctx: None)
    monkeypatch.setattr(llama_cpp, "llama_perf_context", lambda ctx: perf)
    monkeypatch.setattr(llama_cpp, "llama_set_n_threads", lambda ctx, n, n_batch: None)
    monkeypatch.setattr(llama_cpp.LlamaGrammar, "from_json_schema",
                        classmethod(lambda cls, schema, verbose=False: schema))
    gguf = tmp_path / "stub.gguf"
    gguf.write_bytes(b"GGUF" + bytes(64))
    return gguf


def test_stub_llama_fails_when_entered_twice(stub_llama):
    stub = _NotReentrantLlama()
    errors = []

    def call() -> None:
        try:
            stub.create_chat_completion()
        except RuntimeError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors  # the stub does catch concurrent entry


def test_in_process_backend_serializes_concurrent_calls_with_a_lock(tmp_path, stub_llama):
    backend = LlamaCppBackend(stub_llama)
    llm = CachedLLM(backend, LLMCache(tmp_path / "c.sqlite"), backend.model_id, concurrency=4)
    out = llm.map(lambda q: structured_call(llm, TEMPLATE, "s", q, 1, q=q),
                  [f"q{i}" for i in range(12)])
    assert all(obj == {"answer": "ok"} and failure is None for obj, failure in out)
    assert backend._llm.calls == 12


def test_llama_settings_of_the_resource_reach_the_model_and_the_metadata(
        tmp_path, stub_llama, monkeypatch):
    from kgloom.resources.model import LLMResource

    monkeypatch.setattr("kgloom.llm.model_files.verify_model_file", lambda path, expected: "stub")
    res = LLMResource(model_path=str(stub_llama), n_threads=1, n_batch=128, n_ubatch=64,
                      flash_attn=True, grammar_first=False)
    llm = res.open(tmp_path)
    got = llm.backend_settings()
    assert got["model_id"] == "stub"
    assert {k: got[k] for k in ("n_threads", "n_batch", "n_ubatch", "flash_attn",
                                "grammar_first")} == {
        "n_threads": 1, "n_batch": 128, "n_ubatch": 64, "flash_attn": True,
        "grammar_first": False}
    kw = llm.backend._llm.kwargs  # what llama_cpp.Llama was built with
    assert (kw["n_batch"], kw["n_ubatch"], kw["flash_attn"], kw["n_threads"]) == (
        128, 64, True, 1)


# ---------------------------------------------------------------- bad input

def test_unreachable_url_fails_at_resource_start_naming_it(tmp_path):
    dead = _dead_url()
    with pytest.raises(LLMServerError, match=dead):
        LLMResource(urls=[dead]).verify()
    # one dead among live ones
    with FakeChatServer() as ok, pytest.raises(LLMServerError, match=dead):
        LLMResource(urls=[ok.url, dead]).open(tmp_path)
    with pytest.raises(ValueError, match="not http"):
        parse_urls("localhost:8000")


def test_cli_reports_an_unreachable_server_before_any_work(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from kgloom.cli import app

    dead = _dead_url()
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("Scrooge met Marley.", encoding="utf-8")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    result = CliRunner().invoke(app, ["index", "--input-dir", str(tmp_path / "in"),
                                      "--output-dir", str(tmp_path / "out"), "--llm-url", dead])
    assert result.exit_code == 2
    assert dead in result.output and "unreachable" in result.output
    assert not (tmp_path / "out" / "llm_cache.sqlite").exists()


def test_servers_serving_different_models_are_refused(tmp_path):
    with (FakeChatServer(model_id="m1") as a, FakeChatServer(model_id="m2") as b,
          pytest.raises(LLMServerError, match="different models")):
        OpenAIChatBackend([a.url, b.url])


@pytest.mark.parametrize("fault,reason", [("not_json", "reply is not JSON"),
                                          ("breaks_schema", "reply breaks the schema")])
def test_bad_reply_is_retried_then_a_failures_row(tmp_path, fault, reason):
    with FakeChatServer(fault=fault) as server:
        llm = LLMResource(urls=[server.url]).open(tmp_path)
        obj, failure = structured_call(llm, TEMPLATE, "s", "item-1", 7, q="x")
        assert obj is None
        assert failure["stage"] == "s" and failure["item_id"] == "item-1"
        assert failure["reason"].startswith(reason) and failure["detail"]
        assert server.requests == 2  # the retry with seed + 1
        assert (llm.stats["s"].retries, llm.stats["s"].failures) == (1, 1)


@pytest.mark.integration
def test_http_errors_and_garbage_bodies_are_retried_on_the_other_server(tmp_path, caplog):
    with FakeChatServer(fault="http_500") as bad, FakeChatServer() as good, \
            FakeChatServer(fault="not_a_completion") as garbage:
        backend = OpenAIChatBackend([bad.url, good.url, garbage.url], cooldown_s=0)
        with caplog.at_level(logging.WARNING, logger="kgloom.llm.http"):
            replies = [backend.complete([{"role": "user", "content": f"q{i}"}], SCHEMA, 30, 1)
                       for i in range(6)]
        stats = backend.endpoint_stats()
        urls = {"bad": bad.url, "good": good.url, "garbage": garbage.url}
    assert all(r.text.startswith('{"answer"') for r in replies)
    assert stats[urls["good"]]["calls"] == 6
    assert stats[urls["bad"]]["errors"] >= 1 and stats[urls["garbage"]]["errors"] >= 1
    assert urls["bad"] in caplog.text and urls["garbage"] in caplog.text


@pytest.mark.integration
def test_dead_and_slow_servers_are_skipped_and_reported_never_hung(tmp_path):
    with FakeChatServer() as good, FakeChatServer(fault="slow", delay_s=20) as slow:
        dying = FakeChatServer().start()
        dying_url = dying.url
        backend = OpenAIChatBackend([dying_url, slow.url, good.url], timeout_s=0.5)
        dying.stop()  # goes away after the run started
        replies = [backend.complete([{"role": "user", "content": f"q{i}"}], SCHEMA, 30, 1)
                   for i in range(4)]
        stats = backend.endpoint_stats()
        good_url, slow_url = good.url, slow.url
    assert len(replies) == 4 and stats[good_url]["calls"] == 4
    assert stats[dying_url]["errors"] >= 1
    # a 20 s reply would have been taken had the 0.5 s timeout not fired
    assert stats[slow_url]["timeouts"] >= 1 and stats[slow_url]["calls"] == 0


@pytest.mark.integration
def test_all_servers_down_gives_failures_rows_not_a_hang(tmp_path):
    server = FakeChatServer().start()
    url = server.url
    llm = LLMResource(urls=[url], request_timeout_s=1).open(tmp_path)
    server.stop()
    obj, failure = structured_call(llm, TEMPLATE, "s", "u1", 1, q="x")
    assert obj is None and failure["reason"] == "LLM call failed: APIConnectionError"
    assert llm.backend.endpoint_stats()[url]["errors"] == 6  # 3 attempts x 2 seeds


def test_model_change_between_runs_is_a_cache_miss(tmp_path):
    with FakeChatServer(model_id="model-a") as server:
        first = LLMResource(urls=[server.url]).open(tmp_path)
        structured_call(first, TEMPLATE, "s", "u1", 1, q="x")
        server.model_id = "model-b"  # the server was restarted with other weights
        second = LLMResource(urls=[server.url]).open(tmp_path)
        assert second.model_id == "model-b"
        structured_call(second, TEMPLATE, "s", "u1", 1, q="x")
        assert (second.stats["s"].calls, second.stats["s"].cache_hits) == (1, 0)
        server.model_id = "model-a"
        third = LLMResource(urls=[server.url]).open(tmp_path)
        structured_call(third, TEMPLATE, "s", "u1", 1, q="x")
        assert (third.stats["s"].calls, third.stats["s"].cache_hits) == (0, 1)
        assert server.requests == 2


def test_llama_cpp_server_schema_form_is_negotiated(tmp_path):
    with FakeChatServer(json_object_only=True) as server:
        backend = OpenAIChatBackend([server.url])
        for i in range(3):
            backend.complete([{"role": "user", "content": f"q{i}"}], SCHEMA, 30, 1)
        url = server.url
    assert server.formats == ["json_schema", "json_object", "json_object", "json_object"]
    assert backend.endpoint_stats()[url]["schema_format"] == "json_object"


# ---------------------------------------------------------------- Dagster pool

def test_llm_pool_limit_follows_model_slots():
    assert LLMResource(fake=True).pool_limit() == 1
    urls = ["http://gpu1:8000", "http://gpu2:8000"]
    assert LLMResource(urls=urls).pool_limit() == 2  # one slot per llama.cpp server
    assert LLMResource(urls=urls, llm_slots=16, llm_concurrency=4).pool_limit() == 4
    assert LLMResource(urls=urls, llm_concurrency=8).pool_limit() == 1
    with pytest.raises(ValueError):
        LLMResource(urls=urls, llm_concurrency=0).pool_limit()
    instance = dg.DagsterInstance.ephemeral()
    set_llm_pool_limit(instance, 3)
    assert instance.event_log_storage.get_concurrency_info(LLM_POOL).slot_count == 3
    with pytest.raises(ValueError):
        set_llm_pool_limit(instance, 0)


def test_stream_text_streams_a_plain_reply_and_passes_over_a_failing_server():
    """``stream_text`` (the answers ``kgloom serve`` streams): a plain chat request with
    ``stream`` and no ``response_format``; a server answering HTTP 500 is passed over for
    the next one; one that fails with a client error raises at once."""
    with FakeChatServer() as bad, FakeChatServer() as good:
        good.plain_text = True
        backend = OpenAIChatBackend([bad.url, good.url], timeout_s=10)
        bad.fault = "http_500"
        messages = [{"role": "user", "content": "Who was Marley?"}]
        for _ in range(2):  # whichever the round-robin starts with
            text = "".join(backend.stream_text(messages, 64, 0))
            assert text.startswith("fake text")
        assert good.formats[-1] == ""  # no response_format: plain text
        good.context_tokens = 8  # vLLM's 400 for max_tokens over the window: not retried
        with pytest.raises(Exception, match="maximum context length"):
            list(backend.stream_text(messages, 64, 0))
        backend.close()
