"""End to end with the real bundled GGUF (SmolLM2-135M-Instruct) on a tiny input.

Slow by nature (about a minute on 2 cores): one extraction call plus one report call
per community, then the same run again from the cache.
"""

from __future__ import annotations

import json

import dagster as dg
import polars as pl
import pytest

from kgloom.cli.runner import index_folder
from kgloom.definitions import build_resources
from kgloom.llm import LLMCache
from kgloom.names.candidates import is_grounded

PASSAGE = """Oh! but he was a tight-fisted hand at the grindstone, Scrooge! a squeezing,
wrenching, grasping, scraping, clutching, covetous old sinner! External heat and cold had
little influence on Scrooge. Once upon a time--of all the good days in the year, on
Christmas Eve--old Scrooge sat busy in his counting-house. The door of Scrooge's
counting-house was open, that he might keep his eye upon his clerk, Bob Cratchit, who in a
dismal little cell beyond was copying letters. 'A merry Christmas, uncle! God save you!'
cried a cheerful voice. It was the voice of Scrooge's nephew, Fred, who came upon him so
quickly that this was the first intimation he had of his approach. Jacob Marley had been
dead these seven years, and Scrooge and Marley was still the name over the warehouse door
in London."""


@pytest.mark.slow
def test_real_model_indexes_a_tiny_input_and_second_run_is_free(tmp_path):
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    (inp / "carol.txt").write_text(PASSAGE, encoding="utf-8")
    resources = build_resources(str(inp), str(out), fake_llm=False)
    instance = dg.DagsterInstance.ephemeral()
    diff, report = index_folder(resources, instance)
    assert report.success and diff.added == ["carol.txt"]
    summary = json.loads((out / "index-summary.json").read_text())
    assert summary["llm"]["extraction"]["calls"] == 1
    assert summary["llm"]["extraction"]["failures"] == 0
    # the llama.cpp settings the index was built with are in its metadata, as configured
    llm = resources["llm"]
    backend = summary["llm_backend"]
    assert {k: backend[k] for k in ("n_batch", "n_ubatch", "flash_attn", "n_ctx")} == {
        "n_batch": llm.n_batch, "n_ubatch": llm.n_ubatch, "flash_attn": llm.flash_attn,
        "n_ctx": llm.n_ctx}
    assert backend["n_threads"] == (llm.n_threads or "auto (by load)")
    # with threads chosen per call, the threads each call ran on are counted per stage
    threads = summary["llm"]["extraction"]["threads"]
    assert sum(threads.values()) == 1 and all(int(t) >= 1 for t in threads)
    failures = pl.read_parquet(out / "failures.parquet")
    assert failures.filter(pl.col("reason").str.contains("not JSON|breaks the schema")).height == 0
    entities = pl.read_parquet(out / "entities.parquet")
    assert entities.height >= 2
    for title in pl.read_parquet(out / "stages" / "entity_mentions.parquet")["title"]:
        assert is_grounded(title, PASSAGE), title
    comms = pl.read_parquet(out / "communities.parquet")
    reports = pl.read_parquet(out / "community_reports.parquet")
    assert set(reports["community"]) == set(comms["community"])
    assert reports["full_content"].str.starts_with("# ").all()

    rows = LLMCache(out / "llm_cache.sqlite").summary()
    # everything again, the partition included: every call is a cache hit or a kept report
    assert index_folder(resources, instance, force=True)[1].success
    again = json.loads((out / "index-summary.json").read_text())
    assert again["llm_calls"] == 0
    assert LLMCache(out / "llm_cache.sqlite").summary() == rows


@pytest.mark.slow
def test_grammar_first_sampling_gives_the_replies_of_llama_cpp_pythons_sampler_chain():
    from kgloom.llm import LlamaCppBackend, default_gguf_path, reply_token_bound
    from kgloom.report_writer import REPORT_TEMPLATE

    schema = {"type": "object", "properties": {
        "names": {"type": "array", "maxItems": 4,
                  "items": {"type": "string", "enum": ["Scrooge", "Bob Cratchit", "Fred",
                                                       "Jacob Marley", "London"]}},
        "note": {"type": "string", "maxLength": 60}}, "required": ["names", "note"]}
    context = ("Entities:\n- Scrooge (PERSON): Scrooge sat busy in his counting-house.\n"
               "- Bob Cratchit (PERSON): his clerk, Bob Cratchit, was copying letters.\n"
               "- Fred (PERSON): It was the voice of Scrooge's nephew, Fred.\n"
               "Relationships:\n- Scrooge -> Bob Cratchit: his clerk, Bob Cratchit.\n"
               "- Fred -> Scrooge: Scrooge's nephew, Fred.")
    calls = [([{"role": "user", "content": "Which people are named here? " + PASSAGE}],
              schema),
             (REPORT_TEMPLATE.messages(context=context), REPORT_TEMPLATE.schema)]
    backends = {gf: LlamaCppBackend(default_gguf_path(), n_threads=1, grammar_first=gf)
                for gf in (False, True)}
    assert backends[True].settings["grammar_first"] and not backends[False].settings[
        "grammar_first"]
    for messages, sch in calls:
        replies = {gf: b.complete(messages, sch, reply_token_bound(sch), 1)
                   for gf, b in backends.items()}
        assert replies[True].text == replies[False].text
        json.loads(replies[True].text)  # a whole reply, not a cut one
        sampler = backends[True]._llm.last_sampler
        assert sampler is not None and sampler.steps >= replies[True].completion_tokens
