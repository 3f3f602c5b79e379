"""The pure parts of ``kgloom serve``'s chat: the retrieval query of a conversation
(kgloom/serve/answer_stream.py), the turns of a chat request (openai_chat.py) and
Ollama's shapes (ollama_api.py). The routes themselves: tests/integration/
test_serve_chat_stream.py."""

from __future__ import annotations

import time

import pytest

from kgloom.serve import ollama_api
from kgloom.serve.answer_stream import retrieval_query
from kgloom.serve.openai_chat import CHAT_MODELS, ChatRequestError, chat_turns, check_model


def test_the_retrieval_query_is_the_last_question_after_earlier_ones():
    turns = [("user", "Who was Marley?"), ("assistant", "His partner."),
             ("user", "When did he die?"), ("assistant", "Seven years ago."),
             ("user", "What did his ghost carry?")]
    assert retrieval_query(turns, 2000) == ("Who was Marley?\nWhen did he die?\n"
                                            "What did his ghost carry?")
    assert retrieval_query(turns, 2000, earlier=1) == ("When did he die?\n"
                                                       "What did his ghost carry?")
    assert retrieval_query(turns, 2000, earlier=0) == "What did his ghost carry?"


def test_the_retrieval_query_keeps_within_the_question_limit():
    last = "q" * 40
    turns = [("user", "a" * 30), ("user", "b" * 30), ("user", last)]
    assert retrieval_query(turns, 71) == "b" * 30 + "\n" + last  # 30 + 1 + 40
    assert retrieval_query(turns, 70) == last  # the newest earlier turn no longer fits
    assert len(retrieval_query(turns, 102)) == 102
    with pytest.raises(ValueError, match="user"):
        retrieval_query([("assistant", "hi")], 100)


def test_chat_turns_keep_user_and_assistant_text_up_to_the_question():
    messages = [{"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "first"}]},
                {"role": "assistant", "content": "answer"},
                {"role": "tool", "content": "x"},
                {"role": "user", "content": {"not": "text"}},  # earlier, no text: left out
                {"role": "user", "content": "second"},
                {"role": "assistant", "content": "after the question"}]
    assert chat_turns(messages, 10) == [("user", "first"), ("assistant", "answer"),
                                        ("user", "second")]


@pytest.mark.parametrize("messages,message", [
    ([], "non-empty"), ("x", "non-empty"), ([{"content": "q"}], "role"),
    ([{"role": "assistant", "content": "q"}], "user"),
    ([{"role": "user", "content": " "}], "content"),
    ([{"role": "user", "content": "q"}] * 3, "at most 2"),
])
def test_bad_messages_are_named(messages, message):
    with pytest.raises(ChatRequestError, match=message):
        chat_turns(messages, 2)


def test_models_may_carry_ollamas_latest_tag():
    assert check_model("kgloom:latest") == "kgloom"
    with pytest.raises(ChatRequestError) as err:
        check_model("llama3:8b")
    assert err.value.status == 404


def test_ollama_tags_list_every_chat_model():
    models = ollama_api.tags("fake-llm")["models"]
    assert [m["name"] for m in models] == list(CHAT_MODELS)
    assert all(m["details"]["family"] == "kgloom" and len(m["digest"]) == 64 for m in models)


def test_ollama_requests_stream_unless_told_not_to():
    body = {"model": "kgloom-local", "messages": [{"role": "user", "content": "q"}]}
    assert ollama_api.parse_chat(body, 5) == ("kgloom-local", [("user", "q")], True)
    assert ollama_api.parse_chat({**body, "stream": False, "options": {"temperature": 0},
                                  "keep_alive": "5m"}, 5)[2] is False
    assert ollama_api.parse_generate({"model": "kgloom", "prompt": "q", "stream": False}) == \
        ("kgloom", [("user", "q")], False)
    for bad, message in (({"model": "kgloom"}, "prompt"), ([], "JSON object"),
                         ({"model": "kgloom", "prompt": "q", "stream": 1}, "stream")):
        with pytest.raises(ChatRequestError, match=message):
            ollama_api.parse_generate(bad)


def test_ollama_lines():
    record = {"build_id": "b1", "usage": {"prompt_tokens": 7, "completion_tokens": 3}}
    piece = ollama_api.piece_line("chat", "kgloom", "Mar")
    assert piece["message"] == {"role": "assistant", "content": "Mar"} and not piece["done"]
    assert piece["created_at"].endswith("Z")
    done = ollama_api.done_line("generate", "kgloom", record, time.perf_counter() - 0.5)
    assert done["done"] and done["done_reason"] == "stop" and done["response"] == ""
    assert done["total_duration"] >= 5e8 and done["prompt_eval_count"] == 7
    assert done["eval_count"] == 3 and done["kgloom"] == record and done["context"] == []
    assert ollama_api.error_line("boom") == {"error": "boom"}
