"""Reply length bounds in the model's tokens: the grammar bounds strings in UTF-8 bytes,
max_tokens is the longest reply the grammar allows, so no reply is cut (kgloom.llm.grammar,
kgloom.llm.reply_token_bound)."""

from __future__ import annotations

import dataclasses
import json
import math
import random

import jsonschema
import pytest

from kgloom.extraction.claims import CLAIMS_TEMPLATE, claims_schema
from kgloom.extraction.extract import extraction_schema, extraction_template
from kgloom.graph.summaries import SAME_ENTITY_TEMPLATE, SUMMARY_TEMPLATE
from kgloom.llm import (
    CachedLLM,
    LLMCache,
    reply_token_bound,
    server_reply_token_bound,
    structured_call,
)
from kgloom.llm.fake import FakeBackend, grammar_sample
from kgloom.llm.grammar import char_grammar, json_grammar, max_reply_bytes
from kgloom.report_writer import REPORT_TEMPLATE
from kgloom.settings.indexing import IndexSettings

NAMES = ["Alice Moreau", "Bruno Keller", "Zoë", "李白"]
SCHEMAS = {
    "summary": SUMMARY_TEMPLATE.schema,
    "report": REPORT_TEMPLATE.schema,
    "same_entity": SAME_ENTITY_TEMPLATE.schema,
    "claims": claims_schema(NAMES),
    "extraction": extraction_schema(NAMES, IndexSettings()),
    "extraction_llm_descriptions": extraction_schema(NAMES, IndexSettings(llm_descriptions=True)),
}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_every_reply_the_grammar_allows_fits_max_tokens_and_the_schema(name):
    schema = SCHEMAS[name]
    bound = reply_token_bound(schema)
    rng = random.Random(7)
    longest = 0
    for i in range(25):
        text = grammar_sample(json_grammar(schema), rng, long=i % 5 != 0)
        size = len(text.encode("utf-8"))  # >= tokens of any byte-level vocabulary
        assert size <= bound, name
        jsonschema.validate(json.loads(text, strict=False), schema)
        longest = max(longest, size)
    assert longest >= 0.9 * bound  # and nearly reached: not a loose bound


def test_llama_cpp_pythons_own_grammar_allows_replies_past_a_character_bound():
    # why the strings are rebounded: with one token per character assumed, the converter's
    # grammar lets a string of maxLength emoji or \\uXXXX escapes run 4-6x past max_tokens
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    raw = json_schema_to_gbnf(json.dumps(SUMMARY_TEMPLATE.schema))
    chars = SUMMARY_TEMPLATE.schema["properties"]["description"]["maxLength"]
    assert max_reply_bytes(raw) >= 6 * chars
    sample = grammar_sample(raw, random.Random(1))
    assert len(sample.encode("utf-8")) > 3 * reply_token_bound(SUMMARY_TEMPLATE.schema)


@pytest.mark.parametrize("template,schema,inputs", [
    (SUMMARY_TEMPLATE, None, {"name": "ALICE", "descriptions": "- 🎉 Alice 👩‍🔬"}),
    (REPORT_TEMPLATE, None, {"context": "Entities: Alice 🎉, Bruno 👩‍🔬"}),
    (CLAIMS_TEMPLATE, claims_schema(NAMES), {"names": ", ".join(NAMES), "text": "李白 🎉"}),
    (extraction_template(True), SCHEMAS["extraction_llm_descriptions"],
     {"types": "PERSON", "names": ", ".join(NAMES), "text": "Alice 👩‍🔬 met 李白"}),
])
def test_worst_case_replies_through_structured_call_are_never_cut(tmp_path, template, schema,
                                                                   inputs):
    fake = FakeBackend(worst_case=True)
    llm = CachedLLM(fake, LLMCache(tmp_path / "cache.sqlite"), "fake-llm")
    for seed in range(8):
        obj, failure = structured_call(llm, template, "stage", f"item{seed}", seed,
                                       schema=schema, **inputs)
        assert failure is None and obj is not None, failure
    assert fake.calls == 8  # every first attempt validated: no retry was needed


def test_max_reply_bytes_counts_utf8_repeats_and_unbounded_rules():
    assert max_reply_bytes('root ::= "é" [a-z]{2,5} ("x" | "yyy")? space\nspace ::= " "?') == 11
    assert max_reply_bytes(r'root ::= [\U0001F469] [^"] [\u0800-\u0801] "\u00e9"') == 4 + 4 + 3 + 2
    assert max_reply_bytes('root ::= "a"*') == math.inf
    assert max_reply_bytes('root ::= "(" root ")" | "x"') == math.inf
    assert reply_token_bound({"type": "array", "items": {"type": "string"}}) is None
    assert reply_token_bound({"type": "string"}) is None


def test_a_bounded_string_holds_at_most_its_maxlength_in_bytes():
    schema = {"type": "object", "properties": {"d": {"type": "string", "minLength": 1,
                                                     "maxLength": 12}}, "required": ["d"]}
    assert reply_token_bound(schema) == len('{ "d" : "" } ') + 12
    rng = random.Random(3)
    for i in range(20):
        text = grammar_sample(json_grammar(schema), rng, long=i % 2 == 0)
        assert len(text.encode("utf-8")) <= reply_token_bound(schema)
        assert 1 <= len(json.loads(text, strict=False)["d"]) <= 12


@pytest.mark.parametrize("name", ["summary", "claims", "extraction_llm_descriptions"])
def test_a_server_is_sent_room_for_every_reply_of_its_character_bounded_grammar(name):
    # a server builds the grammar from the schema itself, maxLength in characters: each
    # may be a 4-byte emoji or a 6-byte escape, so the in-process (byte) bound is too small
    from kgloom.llm.http import OpenAIChatBackend
    from kgloom.llm.testing import FakeChatServer

    schema = SCHEMAS[name]
    with FakeChatServer() as server:
        OpenAIChatBackend([server.url]).complete(
            [{"role": "user", "content": "Alice 👩‍🔬"}], schema, reply_token_bound(schema), 1)
    (sent,) = server.max_tokens
    rng = random.Random(5)
    longest = max(len(grammar_sample(char_grammar(schema), rng).encode("utf-8"))
                  for _ in range(10))
    assert reply_token_bound(schema) < longest <= sent  # the byte bound would cut it


def test_a_server_without_room_for_the_character_bound_is_asked_with_the_byte_bound():
    from kgloom.llm.http import OpenAIChatBackend
    from kgloom.llm.testing import FakeChatServer

    schema = SCHEMAS["summary"]
    with FakeChatServer() as server:
        server.context_tokens = 1000  # vLLM refuses max_tokens past its context
        reply = OpenAIChatBackend([server.url]).complete(
            [{"role": "user", "content": "Alice"}], schema, reply_token_bound(schema), 1)
    assert server.max_tokens == [server_reply_token_bound(schema), reply_token_bound(schema)]
    jsonschema.validate(json.loads(reply.text), schema)


@pytest.mark.slow
def test_real_model_writing_emoji_is_not_cut():
    from kgloom.llm import LlamaCppBackend, default_gguf_path

    template = dataclasses.replace(SUMMARY_TEMPLATE, schema={
        "type": "object", "required": ["description"],
        "properties": {"description": {"type": "string", "minLength": 1, "maxLength": 60}}})
    descriptions = "\n".join(["- 👩‍🔬👩‍🔬👩‍🔬 Alice Moreau 👩‍🔬👩‍🔬👩‍🔬👩‍🔬.",
                              "- 🎉🎉 Alice Moreau met Bruno Keller 👩‍🔬👩‍🔬👩‍🔬."])
    backend = LlamaCppBackend(default_gguf_path(), n_ctx=2048)
    bound = reply_token_bound(template.schema)
    reply = backend.complete(template.messages(name="ALICE MOREAU", descriptions=descriptions),
                             template.schema, bound, seed=1)
    assert reply.completion_tokens <= bound
    value = json.loads(reply.text, strict=False)["description"]  # complete JSON: not cut
    assert 1 <= len(value.encode("utf-8")) <= 60


@pytest.mark.parametrize("option", ['William" Bill" Cruickshanks( born 1943)',
                                    "C:\\temp\\n is a path", 'a \\" mix', "tab\there"])
def test_an_option_with_a_quote_or_backslash_gives_a_grammar_of_valid_json(option):
    """llama-cpp-python's converter escaped quotes but not backslashes in a literal, so
    an enum option holding a quote (a 2Wiki passage writes 'William" Bill" Cruickshanks')
    gave a grammar that fails to parse (community_reports failed on the slice). Every
    reply the grammar allows must be JSON naming exactly one of the options, as
    written, and llama.cpp's own parser must read the grammar."""
    from llama_cpp import LlamaGrammar

    from kgloom.llm.fake import grammar_sample

    options = [option, "plain"]
    schema = {"type": "object", "properties": {"choice": {"enum": options}},
              "required": ["choice"], "additionalProperties": False}
    for gbnf in (json_grammar(schema), char_grammar(schema)):
        LlamaGrammar.from_string(gbnf, verbose=False)
        seen = {json.loads(grammar_sample(gbnf, random.Random(seed)))["choice"]
                for seed in range(40)}
        assert seen == set(options)
