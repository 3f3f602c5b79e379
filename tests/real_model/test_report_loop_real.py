"""A report reply that loops is stopped while it is decoded, on the real bundled model:
the stopped reply is the start of the reply decoded to its end, which the report check
rejects for the same loop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kgloom.llm import open_llm, reply_token_bound
from kgloom.names.grounding import find_reply_loop
from kgloom.report_writer import REPORT_TEMPLATE, check_report

CONTEXT = (Path(__file__).parents[1] / "data" / "report-loop" / "context.txt").read_text()


@pytest.mark.slow
def test_a_looping_report_reply_is_stopped_where_its_loop_shows(tmp_path):
    llm = open_llm(tmp_path / "cache.sqlite")
    backend = llm.backend
    messages = REPORT_TEMPLATE.messages(context=CONTEXT)
    schema = REPORT_TEMPLATE.schema
    bound = reply_token_bound(schema) or REPORT_TEMPLATE.max_tokens
    whole = backend.complete(messages, schema, bound, 1)  # type: ignore[union-attr]
    if find_reply_loop(whole.text)[0] is None:
        # greedy decoding follows the build's float path: a llama.cpp compiled for
        # another CPU may end this reply after three repeats, too few to be a loop
        pytest.skip("this llama.cpp build does not loop on this context (reply of "
                    f"{whole.completion_tokens} tokens, no loop found)")
    stopped = backend.complete(messages, schema, bound, 1,  # type: ignore[union-attr]
                               stop_on_loop=True)
    reply = json.loads(whole.text, strict=False)  # decoded to its end it is valid JSON ...
    why = check_report(reply, CONTEXT)
    assert why and why[-1].startswith("repeats itself")  # ... that the check rejects
    # greedy decoding: the stopped reply is the start of the whole one, much shorter
    assert whole.text.startswith(stopped.text)
    assert stopped.completion_tokens < whole.completion_tokens / 3
    rep, _ = find_reply_loop(stopped.text)
    assert rep is not None and rep.phrase in whole.text
