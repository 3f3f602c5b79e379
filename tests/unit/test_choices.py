"""Choice decoding (kgloom.llm.choices) against an oracle model that knows the reply it
wants: the decoder must write exactly that reply, valid under the schema, evaluating
only tokens of it, with a tokenizer whose merges cross the decoder's choice points."""

from __future__ import annotations

import json

import jsonschema
import pytest

from kgloom.extraction.extract import extraction_schema, gleaning_schema
from kgloom.llm.choices import decode_choices, is_choice_schema, opening
from kgloom.settings.indexing import IndexSettings

# a longest-match tokenizer: single bytes plus pieces that merge across choice points
PIECES = ['"},', '"}', ']}', ', {"', '": "', '", "', "PER", "SON", "LOC", "ATION", '{"',
          "source", "target", "entities", "relationships", "Hol", "mes", " Cr", '["', '"]',
          '"], ["', '"]]']
VOCAB = [bytes([b]) for b in range(256)] + [p.encode() for p in PIECES]


def tokenize(raw: bytes) -> list[int]:
    out, i = [], 0
    while i < len(raw):
        best = max((t for t, piece in enumerate(VOCAB) if raw.startswith(piece, i)),
                   key=lambda t: len(VOCAB[t]))
        out.append(best)
        i += len(VOCAB[best])
    return out


class Oracle:
    """Logits that favour the tokens continuing ``target`` (longer pieces first)."""

    def __init__(self, prompt: list[int], target: str) -> None:
        self.prompt, self.target = len(prompt), target.encode()
        self.seen: list[int] = []
        self.calls = 0
        self.strict = True  # fail when the decoder leaves the target

    def tokenize(self, text: bytes) -> list[int]:
        return tokenize(text)

    def detokenize(self, tokens: list[int]) -> bytes:
        return b"".join(VOCAB[t] for t in tokens)

    def logits_after(self, tokens: list[int]) -> list[float]:
        assert tokens, "an empty batch was evaluated"
        self.calls += 1
        self.seen += tokens
        done = self.detokenize(self.seen[self.prompt:])
        assert self.target.startswith(done) or not self.strict, (done, self.target)
        return [float(len(p)) if self.target.startswith(done + p) else -1.0 for p in VOCAB]


def extraction(names: list[str]) -> dict:
    return extraction_schema(names, IndexSettings())


def reply(types: dict[str, str], rels: list[tuple[str, str]], objects: bool = False) -> str:
    """The extraction reply: relationships as ``[source, target]`` pairs (kgloom's), or
    as ``{"source", "target"}`` objects with ``objects``."""
    return json.dumps({"entities": types,
                       "relationships": [{"source": a, "target": b} if objects else [a, b]
                                         for a, b in rels]},
                      ensure_ascii=False)


def with_objects(schema: dict) -> dict:
    """``schema`` (an extraction schema) with each relationship an object, not a pair."""
    rels = schema["properties"]["relationships"]
    source, target = rels["items"]["prefixItems"]
    rels["items"] = {"type": "object", "properties": {"source": source, "target": target},
                     "required": ["source", "target"], "additionalProperties": False}
    return schema


NAMES = ["Holmes", "Watson", "Mrs. Hudson", "Baker Street", "Zürich"]
CASES = [
    ({"Holmes": "PERSON", "Watson": "OTHER", "Mrs. Hudson": "PERSON",
      "Baker Street": "LOCATION", "Zürich": "LOCATION"}, []),
    ({n: "PERSON" for n in NAMES}, [("Holmes", "Watson")]),
    ({n: "EVENT" for n in NAMES}, [("Watson", "Holmes"), ("Zürich", "Holmes"),
                                   ("Baker Street", "Mrs. Hudson")]),
]


@pytest.mark.parametrize(("types", "rels"), CASES)
def test_the_decoder_writes_the_reply_the_model_prefers(types, rels):
    schema = extraction(NAMES)
    target = reply(types, rels)
    prompt = tokenize(b"<prompt>")
    model = Oracle(prompt, target)
    out = decode_choices(model, prompt, schema)
    assert out.text == target
    jsonschema.validate(json.loads(out.text), schema)
    assert out.tokens == len(tokenize(target.encode()))
    # one evaluation per choice point that needed logits, never per forced token
    assert model.calls == out.batches <= out.choices + 1
    assert out.evaluated_tokens < out.tokens


def test_a_full_array_is_closed_without_asking():
    settings = IndexSettings()
    most = settings.max_relationships_per_unit
    rels = [(NAMES[i % len(NAMES)], NAMES[(i + 1) % len(NAMES)]) for i in range(most)]
    target = reply({n: "PERSON" for n in NAMES}, rels)
    prompt = tokenize(b"p")
    assert decode_choices(Oracle(prompt, target), prompt, extraction(NAMES)).text == target


def test_names_sharing_their_first_tokens_are_told_apart():
    names = ["Holmes", "Holmes Cr", "Hol"]
    target = reply({n: "PERSON" for n in names}, [("Holmes Cr", "Hol"), ("Hol", "Holmes")])
    prompt = tokenize(b"p")
    assert decode_choices(Oracle(prompt, target), prompt, extraction(names)).text == target


def test_gleaning_and_booleans_are_choice_schemas():
    schema = {"type": "object", "properties": {"same": {"type": "boolean"}},
              "required": ["same"], "additionalProperties": False}
    for value in (True, False):
        target = json.dumps({"same": value})
        prompt = tokenize(b"p")
        assert decode_choices(Oracle(prompt, target), prompt, schema).text == target
    assert is_choice_schema(gleaning_schema(NAMES, IndexSettings()))


def test_only_choice_schemas_are_decoded():
    assert is_choice_schema(extraction(NAMES))
    described = extraction_schema(NAMES, IndexSettings(llm_descriptions=True))
    assert not is_choice_schema(described)  # free-text descriptions need the grammar
    optional = {"type": "object", "properties": {"a": {"enum": ["x"]}}, "required": [],
                "additionalProperties": False}
    for schema in (optional, {"type": "string"}, {"type": "integer"},
                   {"type": "array", "items": {"enum": ["x"]}},  # no maxItems
                   {"type": "array", "items": {"enum": ["x"]}, "maxItems": 2, "minItems": 1},
                   {"enum": ["x", "x"]}):
        assert not is_choice_schema(schema)
        with pytest.raises(ValueError, match="choice-only"):
            decode_choices(Oracle([1], ""), [1], schema)
    with pytest.raises(ValueError, match="prompt token"):
        decode_choices(Oracle([], ""), [], extraction(NAMES))


def test_opening_is_the_text_before_the_first_choice():
    assert opening(extraction(NAMES)) == '{"entities": {"Holmes": "'
    empty = extraction_schema(NAMES, IndexSettings(), typed=[])
    assert opening(empty) == '{"entities": {}'
    target = reply({}, [("Watson", "Holmes")])
    prompt = tokenize(b"p")
    assert decode_choices(Oracle(prompt, target), prompt, empty).text == target


@pytest.mark.parametrize("objects", [False, True], ids=["pairs", "objects"])
def test_a_relationship_neither_loops_nor_repeats_an_earlier_one(objects):
    # a model that wants a self-loop, then the first pair again, gets its next choices
    wanted = reply({n: "PERSON" for n in NAMES},
                   [("Holmes", "Holmes"), ("Watson", "Holmes"), ("Watson", "Holmes")],
                   objects)
    prompt = tokenize(b"p")
    model = Oracle(prompt, wanted)
    model.strict = False
    schema = with_objects(extraction(NAMES)) if objects else extraction(NAMES)
    got = json.loads(decode_choices(model, prompt, schema).text)
    jsonschema.validate(got, schema)
    pairs = [(r["source"], r["target"]) if objects else tuple(r)
             for r in got["relationships"]]
    assert got["entities"] == {n: "PERSON" for n in NAMES}
    assert pairs[0][0] == "Holmes" and pairs[0][1] != "Holmes"
    assert all(a != b for a, b in pairs) and len(set(pairs)) == len(pairs)
    # with one name only, the loop is the only choice left, so it is kept
    one = with_objects(extraction(["Holmes"])) if objects else extraction(["Holmes"])
    lone = reply({"Holmes": "PERSON"}, [("Holmes", "Holmes")], objects)
    assert decode_choices(Oracle(prompt, lone), prompt, one).text == lone


def test_a_relationship_pair_is_a_choice_tuple_and_malformed_tuples_are_not():
    pair = extraction(NAMES)["properties"]["relationships"]["items"]
    assert is_choice_schema(pair) and opening(pair) == '["'
    name = pair["prefixItems"][0]
    for bad in ({**pair, "items": {"enum": ["x"]}},  # more items may follow
                {**pair, "minItems": 1},  # the target may be left out
                {**pair, "prefixItems": []},
                {**pair, "prefixItems": [name, {"type": "string"}]}):  # a free string
        assert not is_choice_schema(bad)


class Speculating(Oracle):
    """The oracle with the two calls speculation needs: a batch with logits read at
    several positions, and forgetting the last tokens evaluated."""

    def __init__(self, prompt: list[int], target: str) -> None:
        super().__init__(prompt, target)
        self.strict = False  # a guess may run past the target; it is dropped after
        self.evaluated = 0

    def _logits(self) -> list[float]:
        done = self.detokenize(self.seen[self.prompt:])
        return [float(len(p)) if self.target.startswith(done + p) else -1.0 for p in VOCAB]

    def logits_many(self, tokens: list[int], at: list[int]) -> list[list[float]]:
        assert tokens and at and at[-1] == len(tokens) - 1
        self.calls += 1
        out = []
        for i, t in enumerate(tokens):
            self.seen.append(t)
            self.evaluated += 1
            if i in at:
                out.append(self._logits())
        return out

    def rewind(self, n: int) -> None:
        assert 0 < n <= len(self.seen) - self.prompt
        del self.seen[-n:]


@pytest.mark.parametrize(("types", "rels"), CASES)
@pytest.mark.parametrize("lookahead", [1, 3, 8])
def test_speculation_writes_the_same_reply_in_fewer_evaluations(types, rels, lookahead):
    schema = extraction(NAMES)
    target = reply(types, rels)
    prompt = tokenize(b"<prompt>")
    plain = decode_choices(Oracle(prompt, target), prompt, schema)
    model = Speculating(prompt, target)
    out = decode_choices(model, prompt, schema, lookahead=lookahead)
    assert out.text == plain.text == target
    assert out.tokens == plain.tokens
    # what stays in the model is the prompt and exactly the reply's evaluated tokens
    assert model.detokenize(model.seen[len(prompt):]) == \
        target.encode()[:len(model.detokenize(model.seen[len(prompt):]))]
    assert out.evaluations == model.calls <= plain.batches
    assert model.evaluated - out.speculated_tokens == len(model.seen)


def test_right_guesses_save_evaluations_and_wrong_ones_cost_only_tokens():
    schema = extraction(NAMES)
    prompt = tokenize(b"<prompt>")
    same = reply({n: "PERSON" for n in NAMES}, [])  # every type as the one before
    mixed = reply({"Holmes": "PERSON", "Watson": "LOCATION", "Mrs. Hudson": "EVENT",
                   "Baker Street": "OTHER", "Zürich": "PERSON"}, [])
    for target, most in ((same, 2), (mixed, None)):
        plain = decode_choices(Oracle(prompt, target), prompt, schema)
        model = Speculating(prompt, target)
        out = decode_choices(model, prompt, schema, lookahead=8)
        assert out.text == target
        if most is not None:
            assert out.evaluations <= most < plain.batches
            # the one wrong guess is that the empty relationship array goes on: what it
            # drafted past the guess is at most the opening of a pair
            pair = schema["properties"]["relationships"]["items"]
            assert out.speculated_tokens <= len(tokenize(opening(pair).encode()))
        else:  # each type differs from the one before: those guesses are refuted
            assert out.evaluations <= plain.batches and out.speculated_tokens > 0
