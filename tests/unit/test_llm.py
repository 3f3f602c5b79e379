"""The LLM layer without a model: cache keys, retries, failures, model-file checks, stats."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import jsonschema
import pytest

from kgloom.core import schemas
from kgloom.llm import (
    CachedLLM,
    Completion,
    LLMCache,
    ModelFileError,
    PromptTemplate,
    StageStats,
    structured_call,
    verify_model_file,
)
from kgloom.llm.fake import FakeBackend

TEMPLATE = PromptTemplate(
    name="describe",
    system="You describe a character of a novel. Answer with JSON only.",
    user="Character: {name}\nText: {text}",
    schema={"type": "object",
            "properties": {"description": {"type": "string", "minLength": 1, "maxLength": 60},
                           "role": {"type": "string", "enum": ["hero", "villain", "other"]},
                           "mentions": {"type": "array", "maxItems": 2,
                                        "items": {"type": "string", "maxLength": 20}}},
            "required": ["description", "role", "mentions"], "additionalProperties": False},
    max_tokens=80,
)
TEXT = "Old Marley was as dead as a door-nail."


def _llm(tmp_path, backend=None) -> tuple[CachedLLM, FakeBackend]:
    backend = backend or FakeBackend()
    return CachedLLM(backend, LLMCache(tmp_path / "llm_cache.sqlite"), backend.model_id), backend


def test_structured_call_returns_a_schema_valid_object(tmp_path):
    llm, backend = _llm(tmp_path)
    obj, failure = structured_call(llm, TEMPLATE, "test", "marley", seed=1, name="Marley",
                                   text=TEXT)
    assert failure is None
    jsonschema.validate(obj, TEMPLATE.schema)
    assert backend.calls == 1
    assert llm.stats["test"].calls == 1 and llm.stats["test"].cache_hits == 0


def test_identical_call_is_a_cache_hit(tmp_path):
    llm, backend = _llm(tmp_path)
    first, _ = structured_call(llm, TEMPLATE, "test", "marley", seed=1, name="Marley", text=TEXT)
    second, _ = structured_call(llm, TEMPLATE, "test", "marley", seed=1, name="Marley", text=TEXT)
    assert second == first
    assert backend.calls == 1
    assert llm.stats["test"].cache_hits == 1


@pytest.mark.parametrize("change", [
    {"system": "You describe a character. JSON only."},
    {"user": "Name: {name}\nPassage: {text}"},
    {"max_tokens": 81},
    {"examples": (("Character: Fred", '{"description": "nephew", "role": "hero", '
                                      '"mentions": []}'),)},
])
def test_changing_the_template_changes_the_key(tmp_path, change):
    llm, backend = _llm(tmp_path)
    structured_call(llm, TEMPLATE, "test", "marley", seed=1, name="Marley", text=TEXT)
    edited = dataclasses.replace(TEMPLATE, **change)
    assert edited.hash != TEMPLATE.hash
    structured_call(llm, edited, "test", "marley", seed=1, name="Marley", text=TEXT)
    assert backend.calls == 2


def test_changing_inputs_seed_or_schema_changes_the_key(tmp_path):
    llm, backend = _llm(tmp_path)
    structured_call(llm, TEMPLATE, "test", "a", seed=1, name="Marley", text=TEXT)
    structured_call(llm, TEMPLATE, "test", "a", seed=1, name="Scrooge", text=TEXT)
    structured_call(llm, TEMPLATE, "test", "a", seed=2, name="Marley", text=TEXT)
    narrower = {**TEMPLATE.schema, "properties": {**TEMPLATE.schema["properties"],
                                                  "role": {"type": "string", "enum": ["other"]}}}
    obj, _ = structured_call(llm, TEMPLATE, "test", "a", seed=1, schema=narrower, name="Marley",
                             text=TEXT)
    assert backend.calls == 4
    assert obj["role"] == "other"  # the per-call schema is the one the reply follows


def test_unparseable_reply_is_retried_once_then_a_failure_row(tmp_path):
    llm, backend = _llm(tmp_path, FakeBackend(broken_every=1))
    obj, failure = structured_call(llm, TEMPLATE, "test", "marley", seed=1, name="Marley",
                                   text=TEXT)
    assert obj is None
    assert backend.calls == 2  # the first try and one retry (with another seed)
    assert set(failure) == set(schemas.FAILURES_SCHEMA)
    assert failure["stage"] == "test" and failure["item_id"] == "marley"
    assert "not JSON" in failure["reason"]
    assert failure["detail"].startswith('{"entities": [{"name": ')  # the raw reply excerpt
    st = llm.stats["test"]
    assert (st.retries, st.failures) == (1, 1)


class _WrongShape:
    """Replies valid JSON that breaks the schema (a required field is missing)."""

    model_id = "wrong-shape"

    def __init__(self) -> None:
        self.calls = 0

    def complete(self, messages, schema, max_tokens, seed, stop_on_loop=False):
        self.calls += 1
        return Completion('{"description": "a ghost"}', 10, 5, 0.1)


class _Crashing:
    model_id = "crashing"

    def complete(self, messages, schema, max_tokens, seed, stop_on_loop=False):
        raise RuntimeError("llama_decode returned -1")


class _Looping:
    """Replies as a decoder stopped for a loop would: the JSON written so far (or, asked
    without ``stop_on_loop``, the same text: a model server cannot stop). Records the
    flag of each call."""

    model_id = "looping"

    def __init__(self, text: str = '{"description": "a ghost, a ghost, a ghost, a gh') -> None:
        self.text = text
        self.asked: list[bool] = []

    def complete(self, messages, schema, max_tokens, seed, stop_on_loop=False):
        self.asked.append(stop_on_loop)
        return Completion(self.text, 10, 12, 0.1)


def test_a_reply_stopped_for_a_loop_is_not_retried_and_says_so(tmp_path):
    from kgloom.llm.structured import LOOP_STOPPED, is_loop_failure

    llm, backend = _llm(tmp_path, _Looping())
    obj, failure = structured_call(llm, TEMPLATE, "test", "x", seed=1, stop_on_loop=True,
                                   name="Marley", text=TEXT)
    assert obj is None and backend.asked == [True]  # one call: a greedy retry loops again
    assert failure["reason"] == f'{LOOP_STOPPED}: "a ghost" 3 times (decoding stopped)'
    assert failure["detail"] == backend.text and is_loop_failure(failure)
    st = llm.stats["test"]
    assert (st.calls, st.retries, st.failures) == (1, 0, 0)  # the caller counts rejections
    # without the option the same text is an ordinary invalid reply, retried, and the
    # call's cache key differs (the option changes what a backend returns)
    obj, failure = structured_call(llm, TEMPLATE, "test", "x", seed=1, name="Marley",
                                   text=TEXT)
    assert obj is None and backend.asked == [True, False, False]
    assert "not JSON" in failure["reason"] and not is_loop_failure(failure)
    # an invalid reply without a loop is retried even with the option
    llm2, cut = _llm(tmp_path / "2", _Looping('{"description": "a ghost of'))
    obj, failure = structured_call(llm2, TEMPLATE, "test", "x", seed=1, stop_on_loop=True,
                                   name="Marley", text=TEXT)
    assert cut.asked == [True, True] and not is_loop_failure(failure)


def test_schema_violation_and_crash_become_failure_rows(tmp_path):
    llm, backend = _llm(tmp_path, _WrongShape())
    obj, failure = structured_call(llm, TEMPLATE, "test", "x", seed=1, name="Marley", text=TEXT)
    assert obj is None and backend.calls == 2
    assert "breaks the schema" in failure["reason"] and "role" in failure["reason"]
    assert failure["detail"] == '{"description": "a ghost"}'

    llm2 = CachedLLM(_Crashing(), LLMCache(tmp_path / "other.sqlite"), "crashing")
    obj, failure = structured_call(llm2, TEMPLATE, "test", "y", seed=1, name="Marley", text=TEXT)
    assert obj is None
    assert "RuntimeError" in failure["reason"]
    assert "llama_decode" in failure["detail"]


def test_cache_only_run_raises_lookup_error_on_a_miss(tmp_path):
    llm = CachedLLM(None, LLMCache(tmp_path / "c.sqlite"), "fake-llm")
    with pytest.raises(LookupError):
        structured_call(llm, TEMPLATE, "test", "x", seed=1, name="Marley", text=TEXT)


def test_cache_persists_across_reopen(tmp_path):
    path = tmp_path / "llm_cache.sqlite"
    llm, backend = _llm(tmp_path)
    first, _ = structured_call(llm, TEMPLATE, "test", "marley", seed=1, name="Marley", text=TEXT)
    llm.cache.close()

    reopened = LLMCache(path)
    assert reopened.summary()[0]["stage"] == "test"
    assert reopened.summary()[0]["rows"] == 1
    again = CachedLLM(FakeBackend(), reopened, backend.model_id)
    second, _ = structured_call(again, TEMPLATE, "test", "marley", seed=1, name="Marley",
                                text=TEXT)
    assert second == first
    assert again.backend.calls == 0
    # another model id is another key
    other = CachedLLM(FakeBackend(), reopened, "another-model")
    structured_call(other, TEMPLATE, "test", "marley", seed=1, name="Marley", text=TEXT)
    assert other.backend.calls == 1


def test_cache_rows_survive_the_writer_being_killed(tmp_path):
    """The caches sync their log lazily (synchronous=NORMAL, kgloom.core.cache_db): a row
    committed by a process that is then killed with SIGKILL, before it closes the file or
    checkpoints, is read back by the next one, and the file passes SQLite's check."""
    import sqlite3
    import subprocess
    import sys

    path = tmp_path / "c.sqlite"
    writer = (
        "import os, signal, sys\n"
        "from kgloom.llm.cache import LLMCache\n"
        "from kgloom.llm.backend import Completion\n"
        "cache = LLMCache(sys.argv[1])\n"
        "for i in range(50):\n"
        "    cache.put(f'k{i}', 'extraction', 'm', 't', f'i{i}', {'seed': i},\n"
        "              Completion('{\"n\": %d}' % i, 10, 2, 0.1))\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n")
    done = subprocess.run([sys.executable, "-c", writer, str(path)], capture_output=True)
    assert done.returncode == -9, done.stderr.decode()
    assert (tmp_path / "c.sqlite-wal").exists()  # never checkpointed into the main file
    cache = LLMCache(path)
    assert cache.rows_per_stage() == {"extraction": 50}
    assert cache.get("k49") == Completion('{"n": 49}', 10, 2, 0.1)
    cache.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)  # kept in the file


def test_cache_get_put_roundtrip(tmp_path):
    cache = LLMCache(tmp_path / "sub" / "c.sqlite")  # the folder is created
    key = LLMCache.key("m", "t", "i", {"seed": 1})
    assert cache.get(key) is None
    reply = Completion('{"a": 1}', 12, 3, 0.5)
    cache.put(key, "stage", "m", "t", "i", {"seed": 1}, reply)
    assert cache.get(key) == reply
    cache.close()
    assert LLMCache(tmp_path / "sub" / "c.sqlite").get(key) == reply
    # parameter order does not matter, values do
    assert LLMCache.key("m", "t", "i", {"a": 1, "b": 2}) == LLMCache.key("m", "t", "i",
                                                                         {"b": 2, "a": 1})
    assert LLMCache.key("m", "t", "i", {"seed": 1}) != LLMCache.key("m", "t", "i", {"seed": 2})


def test_verify_model_file(tmp_path):
    missing = tmp_path / "nowhere.gguf"
    with pytest.raises(ModelFileError, match=r"nowhere\.gguf"):
        verify_model_file(missing)

    not_gguf = tmp_path / "weights.bin"
    not_gguf.write_bytes(b"PK\x03\x04 a zip, not a model")
    with pytest.raises(ModelFileError, match=r"weights\.bin.*not a GGUF"):
        verify_model_file(not_gguf)

    fake = tmp_path / "tiny.gguf"
    content = b"GGUF" + bytes(range(60))
    fake.write_bytes(content)
    digest = hashlib.sha256(content).hexdigest()
    assert verify_model_file(fake) == digest
    assert verify_model_file(fake, expected_sha256=digest.upper()) == digest
    with pytest.raises(ModelFileError, match=r"tiny\.gguf.*expected") as exc:
        verify_model_file(fake, expected_sha256="0" * 64)
    assert digest in str(exc.value)
    # ModelFileError is a FileNotFoundError, so callers can catch either
    assert issubclass(ModelFileError, FileNotFoundError)


def test_stage_stats_rates():
    # 500 prompt tokens of which 400 came from the reused prefix: 100 evaluated in 0.5 s
    st = StageStats(calls=3, cache_hits=1, prompt_tokens=500, completion_tokens=60, seconds=4.0,
                    prompt_eval_tokens=100, prompt_seconds=0.5, generation_seconds=3.0)
    d = st.as_dict()
    assert d["prompt_tokens_per_s"] == 200.0
    assert d["generation_tokens_per_s"] == 20.0
    assert d["prefix_reuse_rate"] == 0.8
    assert d["cache_hit_rate"] == 0.25
    assert d["calls"] == 3 and d["failures"] == 0
    idle = StageStats().as_dict()
    assert (idle["prompt_tokens_per_s"], idle["generation_tokens_per_s"],
            idle["prefix_reuse_rate"], idle["cache_hit_rate"]) == (0.0, 0.0, 0.0, 0.0)


def test_stage_stats_count_replies_threads_and_time_outside_the_model():
    st = StageStats()
    st.add(Completion("{}", 100, 10, 2.0, prompt_eval_tokens=60, prompt_seconds=0.5,
                      generation_seconds=1.0, threads=1))
    st.add(Completion("{}", 50, 5, 1.0, prompt_eval_tokens=50, prompt_seconds=0.25,
                      generation_seconds=0.5, threads=2))
    st.add(Completion("{}", 50, 5, 1.0, prompt_eval_tokens=50, prompt_seconds=0.25,
                      generation_seconds=0.5, threads=1))
    d = st.as_dict()
    assert (d["calls"], d["prompt_tokens"], d["completion_tokens"]) == (3, 200, 20)
    assert d["threads"] == {"1": 2, "2": 1}
    # 4 s in calls, 1 s prompt + 2 s decode by llama.cpp's timers: 1 s elsewhere
    assert d["outside_seconds"] == 1.0
    # a backend without phase timings (the fake) has no outside share to report
    assert StageStats(calls=1, seconds=3.0).as_dict()["outside_seconds"] == 0.0
    both = StageStats.merged([st, None, StageStats(calls=2, seconds=1.5, threads={"1": 2})])
    assert (both.calls, both.seconds, both.threads) == (5, 5.5, {"1": 4, "2": 1})
    assert st.calls == 3 and st.threads == {"1": 2, "2": 1}  # the parts are unchanged


def test_cached_llm_counts_only_model_calls_and_knows_its_backend(tmp_path):
    llm = CachedLLM(FakeBackend(), LLMCache(tmp_path / "c.sqlite"), "fake-llm")
    for _ in range(2):
        structured_call(llm, TEMPLATE, "stage", "x", 1, name="Marley", text=TEXT)
    st = llm.stats["stage"]
    assert (st.calls, st.cache_hits) == (1, 1)
    assert llm.backend_settings() == {"model_id": "fake-llm"}


def test_threads_take_the_cores_others_leave(monkeypatch):
    from kgloom.llm import cpu

    monkeypatch.setattr(cpu, "usable_cores", lambda: 2)
    for others, want in [(0.0, 2), (0.3, 2), (0.5, 2), (0.8, 1), (1.4, 1), (12.0, 1),
                         (-1.0, 2)]:
        assert cpu.threads_for_others(others) == want, others
    monkeypatch.setattr(cpu, "usable_cores", lambda: 16)
    assert cpu.threads_for_others(6.2) == 10
    assert cpu.busy_seconds() > 0


class _Machine:
    """A fake clock with the machine's busy CPU seconds and this process's own."""

    def __init__(self, monkeypatch, cpu):
        self.t, self.busy, self.own, self.others_now = 1000.0, 0.0, 0.0, 0.0
        monkeypatch.setattr(cpu.time, "monotonic", lambda: self.t)
        monkeypatch.setattr(cpu.time, "process_time", lambda: self.own)
        monkeypatch.setattr(cpu, "busy_seconds", lambda: self.busy)
        monkeypatch.setattr(cpu.time, "sleep", self.idle)
        monkeypatch.setattr(cpu, "usable_cores", lambda: 2)
        monkeypatch.setattr(cpu, "_OTHERS", cpu.OthersUse())  # a fresh process's record
        self.looks = 0

    def run(self, seconds, own, others):
        """``seconds`` of this process using ``own`` cores and others ``others``."""
        self.t += seconds
        self.own += seconds * own
        self.busy += seconds * (own + others)

    def idle(self, seconds):  # a look: this process idle, others use what they want
        self.looks += 1
        self.run(seconds, 0.0, self.others_now)


def test_a_burst_does_not_count_its_own_cpu_against_the_next(monkeypatch):
    """The 2Wiki pool's resolution embedded 31,287 windows on one thread of an idle
    machine: the load average counted this process's own threads (busy, or waiting for
    a core) as someone else's and lagged a minute behind. Other processes' use is the
    machine's busy time less this process's own, over the last seconds."""
    from kgloom.llm import cpu

    m = _Machine(monkeypatch, cpu)
    bursts = cpu.BurstThreads()
    assert bursts.pick() == 2 and m.looks == 1  # no sample yet: a look
    for _ in range(5):
        m.run(3.0, own=2.0, others=0.05)  # our two threads (and a daemon) busy
        assert bursts.pick() == 2
    m.run(100.0, own=1.0, others=0.0)  # a long single-threaded stage, no picks
    assert bursts.pick() == 2 and m.looks == 2  # its samples are too old: a look
    assert cpu.BurstThreads(fixed=3).pick() == 3


def test_a_burst_yields_a_core_to_another_process_within_seconds(monkeypatch):
    """Another process that wants a core gets only part of one while our two threads
    run (0.5-0.77 of a core measured on the 2-core machine): from a use of a quarter
    core up, a look with the cores left to it measures what it wants; at most one look
    every ten seconds. When it stops, the next pick has both cores again."""
    from kgloom.llm import cpu

    m = _Machine(monkeypatch, cpu)
    bursts = cpu.BurstThreads()
    for _ in range(4):
        m.run(3.0, own=2.0, others=0.0)
        assert bursts.pick() == 2
    assert m.looks == 1
    m.others_now = 1.0  # a process starts that wants a whole core and gets 0.4 of one
    m.run(2.0, own=2.0, others=0.4)
    assert bursts.pick() == 1 and m.looks == 2  # seen at once: no minute of lag
    picks = []
    for _ in range(10):
        m.run(2.0, own=1.0, others=1.0)
        picks.append(bursts.pick())
    assert picks == [1] * 10
    assert m.looks == 2 + 2  # 20 s of it: one look every 10 s (0.25 s each)
    m.others_now = 0.0
    m.run(2.0, own=1.0, others=0.0)  # it stopped
    assert bursts.pick() == 2


def test_template_messages_put_examples_between_system_and_user():
    t = dataclasses.replace(TEMPLATE, examples=(("Character: Fred", "{}"),))
    msgs = t.messages(name="Marley", text=TEXT)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert msgs[-1]["content"] == f"Character: Marley\nText: {TEXT}"


def test_reply_token_bound_covers_every_reply_of_a_bounded_schema():
    from kgloom.llm import reply_token_bound
    from kgloom.llm.fake import schema_instance

    schema = {"type": "object", "properties": {
        "names": {"type": "object", "properties": {"Scrooge": {"type": "string",
                                                               "enum": ["PERSON", "OTHER"]}}},
        "pairs": {"type": "array", "maxItems": 4, "items": {
            "type": "object", "properties": {"text": {"type": "string", "maxLength": 30},
                                             "n": {"type": "integer"}}}}}}
    bound = reply_token_bound(schema)
    longest = {"names": {"Scrooge": "PERSON"},
               "pairs": [{"text": "x" * 30, "n": -123456789}] * 4}
    assert len(json.dumps(longest)) <= bound
    assert len(json.dumps(schema_instance(schema))) <= bound
    assert reply_token_bound({"type": "array", "items": {"type": "string"}}) is None
    assert reply_token_bound({"type": "string"}) is None


def test_reply_validation_reports_what_jsonschema_validate_reports():
    """Validation without the per-call meta-schema check (kgloom.llm.structured._validate)
    accepts and rejects as ``jsonschema.validate`` does, with the same best-match message."""
    from kgloom.extraction.extract import extraction_schema
    from kgloom.llm.structured import _validate
    from kgloom.settings.indexing import IndexSettings

    schema = extraction_schema(["Marley", "Scrooge"], IndexSettings())
    good = {"entities": {"Marley": "PERSON", "Scrooge": "PERSON"},
            "relationships": [["Marley", "Scrooge"]]}
    _validate(good, schema)
    jsonschema.validate(good, schema)
    bad_replies = [
        {"entities": {"Marley": "PERSON"}, "relationships": []},  # a name left out
        {**good, "relationships": [["Marley", "Fezziwig"]]},  # not a name
        {**good, "relationships": [["Marley", "Scrooge", "Marley"]]},  # not a pair
        {**good, "relationships": [{"source": "Marley", "target": "Scrooge"}]},  # an object
        {**good, "extra": 1},  # an additional property
        {"entities": {"Marley": "GHOST", "Scrooge": "PERSON"}, "relationships": []},  # type
    ]
    for bad in bad_replies:
        with pytest.raises(jsonschema.ValidationError) as ours:
            _validate(bad, schema)
        with pytest.raises(jsonschema.ValidationError) as theirs:
            jsonschema.validate(bad, schema)
        assert ours.value.message == theirs.value.message


def test_amx_machines_load_models_without_extra_buffer_types():
    # llama.cpp's AMX kernels crashed llama_decode on the bundled Q4_1 file
    from kgloom.llm.llamacpp import needs_plain_buffers

    amx = ("CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | AVX512_BF16 = 1 | AMX_INT8 = 1 | "
           "OPENMP = 1 | REPACK = 1 |")
    assert needs_plain_buffers(amx)
    assert not needs_plain_buffers(amx.replace("AMX_INT8 = 1", "AMX_INT8 = 0"))
    assert not needs_plain_buffers("CPU : SSE3 = 1 | AVX2 = 1 | REPACK = 1 |")
