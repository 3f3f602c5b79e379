"""Choice decoding: a greedy reply under a JSON schema whose only freedom is choices
(enums, booleans, how many items an array holds), with every forced stretch of the reply
evaluated in one batch instead of token by token. No Dagster here.

Why: under a llama.cpp grammar every reply token costs one decoding step, also the
tokens the grammar forces. In an extraction reply (``{"entities": {"<name>": "<type>",
...}, "relationships": [{"source": "<name>", "target": "<name>"}, ...]}``) the names,
keys and punctuation are forced; only the types, the names of a relationship and the
number of relationships are the model's to choose. On the bundled SmolLM2-135M a batch of
prompt tokens evaluates about 3x faster per token than decoding one at a time, so this
decoder evaluates the forced text between two choices as one batch and reads the logits
only at the choices: the idea of SGLang's "jump-forward decoding" with a compressed
finite-state machine (Zheng et al. 2024, arXiv 2312.07104, section 4), written here for
the small schema subset kgloom's choice-only replies use (:func:`is_choice_schema`).

How a choice is made: each option is the text it would add (an enum value, its closing
quote and the forced text up to the next choice), tokenized together with the forced text
still pending before it, so the tokens at the boundary are the tokenizer's own; the token
sequences form a trie, the tokens all options in the running share are evaluated as one
batch, and at a branching the option's token with the highest logit wins (greedy). Only
that token of each option competes, not every shorter token that is a byte prefix of it
(a grammar allows those too): tried on 12 units of the book, letting them compete made
the 135M model name the most frequent entity in nearly every relationship slot, mostly as
self-loops. The reply is the same JSON a grammar would allow; it can differ from the
grammar path's where the model decoding under a grammar picks another split of the same
forced text (later choices see that context), where the grammar path would have written
other optional whitespace (this decoder writes ``", "`` and ``": "`` as ``json.dumps``
does), and by the two rules of :func:`decode_choices` on array items.

Speculation (``lookahead`` > 0): each evaluation costs about 12 ms on 2 cores however
short it is, and a reply needs one per branching, each waiting for the last. So the
decoder may run ahead on guesses and check them all with one evaluation that reads the
logits at each branching; see :func:`decode_choices`.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any, Protocol


class ChoiceModel(Protocol):
    """What :func:`decode_choices` needs of a model."""

    def tokenize(self, text: bytes) -> list[int]:
        """Model tokens of ``text`` (no BOS, no special tokens)."""
        ...

    def detokenize(self, tokens: list[int]) -> bytes:
        """The bytes of ``tokens``."""
        ...

    def logits_after(self, tokens: list[int]) -> Any:
        """Evaluate ``tokens`` after everything evaluated so far (one batch) and return
        the next-token logits, indexable by token id (a float sequence or a numpy array
        of vocabulary size). ``tokens`` is never empty."""
        ...


class SpeculativeModel(ChoiceModel, Protocol):
    """What :func:`decode_choices` needs of a model to speculate (``lookahead`` > 0)."""

    def logits_many(self, tokens: list[int], at: list[int]) -> list[Any]:
        """Evaluate ``tokens`` after everything evaluated so far, as one batch where it
        fits, and return the next-token logits after ``tokens[: i + 1]`` for each ``i``
        in ``at`` (ascending; the last is ``len(tokens) - 1``), each a copy."""
        ...

    def rewind(self, n: int) -> None:
        """Forget the last ``n`` evaluated tokens (their KV cache entries)."""
        ...


def is_choice_schema(schema: dict[str, Any]) -> bool:
    """True when every value ``schema`` allows is made of choices this decoder supports.

    Supported, recursively: an object whose properties are all required, listed in
    ``required`` in property order, with ``additionalProperties: false``; a string
    ``enum`` (at least one value); a ``boolean``; an ``array`` with ``items`` and a
    ``maxItems`` and no ``minItems`` above 0; a tuple: an ``array`` of exactly its
    ``prefixItems`` (``minItems`` = ``maxItems`` = their number, ``items: false``).
    Anything else (free strings, numbers, optional properties) is decoded by the grammar
    path.
    """
    kind = schema.get("type")
    if "enum" in schema:
        vals = schema["enum"]
        return kind in (None, "string") and bool(vals) and all(isinstance(v, str) for v in vals) \
            and len(set(vals)) == len(vals)
    if kind == "boolean":
        return True
    if kind == "object":
        props = schema.get("properties", {})
        return (schema.get("additionalProperties") is False
                and list(schema.get("required", [])) == list(props)
                and all(is_choice_schema(v) for v in props.values()))
    if kind == "array" and "prefixItems" in schema:
        subs = schema["prefixItems"]
        return (isinstance(subs, list) and len(subs) > 0 and schema.get("items") is False
                and schema.get("minItems") == schema.get("maxItems") == len(subs)
                and all(isinstance(v, dict) and is_choice_schema(v) for v in subs))
    if kind == "array":
        return (isinstance(schema.get("maxItems"), int) and schema.get("minItems", 0) == 0
                and isinstance(schema.get("items"), dict) and is_choice_schema(schema["items"]))
    return False


def _key(name: str) -> str:
    return json.dumps(name, ensure_ascii=False) + ": "


def _members(schema: dict[str, Any]) -> list[tuple[str | int, dict[str, Any]]]:
    """The fixed members of an object (property name, schema) or a tuple (position,
    schema), in the order they are written."""
    if schema.get("type") == "object":
        return list(schema.get("properties", {}).items())
    return list(enumerate(schema["prefixItems"]))


def _lead(label: str | int) -> str:
    """What is written before a member's value: its key in an object, nothing in a tuple."""
    return _key(label) if isinstance(label, str) else ""


def opening(schema: dict[str, Any]) -> str:
    """The text a value of ``schema`` starts with before its first choice: ``"`` for a
    string enum, ``[`` for an array, ``[`` and the first item's opening for a tuple,
    ``{`` and the first key and value's opening for an object, ``{}`` for an object
    without properties, nothing for a boolean."""
    if "enum" in schema:
        return '"'
    if schema.get("type") == "array" and "prefixItems" in schema:
        first = schema["prefixItems"][0]
        return "[" + opening(first)
    if schema.get("type") == "array":
        return "["
    if schema.get("type") == "object":
        props = list(schema.get("properties", {}).items())
        if not props:
            return "{}"
        return "{" + _key(props[0][0]) + opening(props[0][1])
    return ""


@dataclass
class ChoiceReply:
    """What :func:`decode_choices` returns."""

    text: str  # the reply, valid JSON under the schema
    tokens: int  # model tokens of the reply (evaluated or not)
    evaluated_tokens: int = 0  # reply tokens evaluated (the text after the last choice is not)
    choices: int = 0  # choices that needed the model's logits
    batches: int = 0  # evaluations the reply needed, one after another
    evaluations: int = 0  # model evaluations made (with speculation fewer than batches)
    speculated_tokens: int = 0  # tokens evaluated past a wrong guess, then dropped


def pick_head(logits: Any, heads: set[int] | frozenset[int]) -> int:
    """The greedy pick among the tokens ``heads`` at a branching: the highest logit,
    the lowest token id on a tie."""
    return max(heads, key=lambda t: (logits[t], -t))


class _DraftFull(Exception):
    """A speculative pass has assumed as many choices as it may."""


@dataclass
class _Draft:
    """Stands for logits not computed yet: each branching decided on it takes the guessed
    head, and the (heads, head) pairs are checked against the real logits later."""

    tokens: list[int]
    picks: list[tuple[frozenset[int], int]] = field(default_factory=list)

    def assume(self, heads: set[int], head: int) -> int:
        self.picks.append((frozenset(heads), head))
        return head


class _Replay:
    """The model as one speculative pass of :func:`decode_choices` sees it: the first
    evaluations return the logits already checked (``known``, without evaluating
    again); past them every evaluation is a :class:`_Draft`, until ``lookahead`` choices
    or ``budget`` tokens are assumed."""

    def __init__(self, model: Any, known: list[tuple[list[int], Any]], lookahead: int,
                 budget: int, memo: dict[bytes, list[int]]) -> None:
        self.model, self.known, self.lookahead, self.budget = model, known, lookahead, budget
        self.memo = memo
        self.used = 0
        self.drafts: list[_Draft] = []

    def tokenize(self, text: bytes) -> list[int]:
        if text not in self.memo:
            self.memo[text] = self.model.tokenize(text)
        return self.memo[text]

    def detokenize(self, tokens: list[int]) -> bytes:
        return self.model.detokenize(tokens)

    def logits_after(self, tokens: list[int]) -> Any:
        if self.used < len(self.known):
            seen, logits = self.known[self.used]
            if seen != tokens:
                raise RuntimeError("speculative decoding replayed other tokens than it "
                                   "evaluated (a bug in kgloom.llm.choices)")
            self.used += 1
            return logits
        assumed = sum(len(d.picks) for d in self.drafts)
        drafted = sum(len(d.tokens) for d in self.drafts[1:])
        if self.drafts and (assumed >= self.lookahead or drafted + len(tokens) > self.budget):
            raise _DraftFull
        self.drafts.append(_Draft(list(tokens)))
        return self.drafts[-1]


@dataclass
class _Decoder:
    model: ChoiceModel
    queue: list[int] = field(default_factory=list)  # tokens to evaluate before ``pending``
    pending: bytes = b""  # reply text written, not yet evaluated (not even tokenized)
    parts: list[bytes] = field(default_factory=list)
    reply: ChoiceReply = field(default_factory=lambda: ChoiceReply("", 0))
    last: Any = ()  # the logits of the last evaluation
    taken: dict[Any, str] = field(default_factory=dict)  # guesses: last value per enum

    def force(self, text: str) -> None:
        raw = text.encode("utf-8")
        self.parts.append(raw)
        self.pending += raw

    def _logits(self, tokens: list[int]) -> Any:
        """Evaluate the queue and ``tokens`` (reply tokens) in one batch; with nothing to
        evaluate (a choice right where the last one's evaluated text ended, e.g. pending
        text that merges into different first tokens), the last logits still hold."""
        batch, self.queue = self.queue + tokens, []
        if batch:
            self.reply.evaluated_tokens += len(tokens)
            self.reply.batches += 1
            self.last = self.model.logits_after(batch)
        return self.last

    def choose(self, options: list[str], guess: int = 0) -> int:
        """Pick one of ``options`` (byte-prefix-free texts) greedily and write it.

        The pending text and each option are tokenized together, so the tokens at the
        boundary are the tokenizer's own; the token sequences form a trie, tokens all
        options share are evaluated in one batch, and at a branching the highest logit
        decides. What stays unevaluated goes back to pending text. ``guess``: the option
        a speculative pass assumes (:class:`_Draft`), checked later against the logits."""
        raw = [o.encode("utf-8") for o in options]
        if len(raw) == 1:
            self.parts.append(raw[0])
            self.pending += raw[0]
            return 0
        self.reply.choices += 1
        seqs = [self.model.tokenize(self.pending + r) for r in raw]
        alive = list(range(len(raw)))
        depth, done_bytes, commit = 0, 0, []  # commit: chosen tokens, not yet evaluated
        while len(alive) > 1:
            heads = {seqs[i][depth] for i in alive}
            if len(heads) > 1:
                logits = self._logits(commit)
                done_bytes += len(self.model.detokenize(commit))
                commit = []
                if isinstance(logits, _Draft):
                    want = seqs[guess][depth] if guess in alive else min(heads)
                    best = logits.assume(heads, want)
                else:
                    best = pick_head(logits, heads)
            else:
                best = heads.pop()
            commit.append(best)
            alive = [i for i in alive if seqs[i][depth] == best]
            depth += 1
        pick = alive[0]
        self.pending = (self.pending + raw[pick])[done_bytes:]
        self.parts.append(raw[pick])
        return pick

    def value(self, schema: dict[str, Any], follow: str, forbid: frozenset = frozenset(),
              earlier: tuple | None = None, prop: str | None = None) -> Any:
        """Write the rest of a value of ``schema`` (its :func:`opening` is written), then
        ``follow``: the forced text after it, up to the next choice; return the value.

        ``forbid``: enum values not to choose (unless no other is left); ``earlier``: the
        items an array holds so far when this value is its next item, else None (see
        :func:`decode_choices` for the two rules, which hold for array items only);
        ``prop``: the property of an array item this value is (guesses remember an enum's
        last value per such property, else per enum)."""
        if "enum" in schema:
            values = [v for v in schema["enum"] if v not in forbid] or list(schema["enum"])
            memo = (tuple(schema["enum"]), prop)
            last = self.taken.get(memo)
            pick = self.choose([json.dumps(v, ensure_ascii=False)[1:] + follow for v in values],
                               values.index(last) if last in values else 0)
            self.taken[memo] = values[pick]
            return values[pick]
        if schema.get("type") == "boolean":
            return self.choose(["true" + follow, "false" + follow]) == 0
        is_tuple = schema.get("type") == "array" and "prefixItems" in schema
        if schema.get("type") == "object" or is_tuple:
            members = _members(schema)
            if not members:
                self.force(follow)
            got: dict[str | int, Any] = {}
            for j, (label, sub) in enumerate(members):
                nxt = (", " + _lead(members[j + 1][0]) + opening(members[j + 1][1])
                       if j + 1 < len(members) else ("]" if is_tuple else "}") + follow)
                no = set()
                if "enum" in sub and earlier is not None:
                    # not a value an earlier member of the same enum took
                    no = {got[k] for k, s in members[:j] if s.get("enum") == sub["enum"]}
                    if j + 1 == len(members):  # nor one that repeats an earlier item
                        no |= {e[label] for e in earlier
                               if all(e[k] == got[k] for k, _ in members[:j])}
                got[label] = self.value(sub, nxt, frozenset(no),
                                        prop=str(label) if earlier is not None else None)
            return [got[k] for k, _ in members] if is_tuple else got
        item, most = schema["items"], schema["maxItems"]  # array: "[" is written
        items: list[Any] = []
        for i in range(most):
            more = ("" if i == 0 else ", ") + opening(item)
            if self.choose(["]" + follow, more], guess=1) == 0:
                return items
            items.append(self.value(item, "" if i + 1 < most else "]" + follow,
                                    earlier=tuple(items)))
        if most == 0:
            self.force("]" + follow)
        return items


def decode_choices(model: ChoiceModel, prompt: list[int], schema: dict[str, Any],
                   lookahead: int = 0, budget: int = 64) -> ChoiceReply:
    """Decode a reply to ``prompt`` under ``schema`` (:func:`is_choice_schema`).

    Args:
        model: the model (:class:`ChoiceModel`; :class:`SpeculativeModel` when
            ``lookahead`` > 0); its state is whatever was evaluated before this call,
            and ``prompt`` is evaluated after it, with the reply's opening, as the first
            batch.
        prompt: the prompt's tokens still to evaluate (at least one).
        schema: the reply's JSON schema.
        lookahead: 0 evaluates one batch per branching, each after the last. Above 0,
            speculative: the decoder runs ahead assuming a guess at up to ``lookahead``
            branchings (an enum takes the value it took last in this reply, for an array
            item's property the value that property took last; an array goes on while
            it may), and the tokens of those batches, at most ``budget`` past the first,
            are evaluated as one batch with the logits read at each branching. The
            guesses the logits confirm are kept; at the first they refute, the tokens
            after it are dropped (:meth:`SpeculativeModel.rewind`) and decoding goes on
            from there with the model's pick. The reply is the one ``lookahead=0`` gives
            (speculative decoding: Leviathan et al. 2023, arXiv 2211.17192, here with a
            rule in place of a draft model), except where llama.cpp's logits for a
            token differ with the batch it is evaluated in.
        budget: see ``lookahead``.

    Two rules beyond the schema for the object and tuple items of an array, because a
    repeat states nothing: a string enum member (property or tuple position) whose enum is
    that of an earlier member of the same item does not take the earlier one's value (a
    relationship's target is not its source), and an item does not repeat an earlier
    item. A choice the rules would leave
    empty keeps all its options. (A 135M model given three relationship slots filled the
    second and third with repeats of the first or with self-loops in most units, which
    the extraction stage then dropped; so it names another pair instead.)

    Returns:
        a :class:`ChoiceReply`: the reply text (``json.loads`` gives a value the schema
        accepts) and its token counts.

    Raises:
        ValueError: when ``schema`` is not a choice schema or ``prompt`` is empty.
    """
    if not is_choice_schema(schema):
        raise ValueError("not a choice-only schema: decode it under a grammar")
    if not prompt:
        raise ValueError("decode_choices needs at least one prompt token to evaluate")
    if lookahead <= 0:
        dec = _Decoder(model, queue=list(prompt))
        dec.force(opening(schema))
        dec.value(schema, "")
        dec.reply.evaluations = dec.reply.batches
        return _finish(dec, model)
    return _decode_speculative(model, prompt, schema, lookahead, budget)


def _decode_speculative(model: ChoiceModel, prompt: list[int], schema: dict[str, Any],
                        lookahead: int, budget: int) -> ChoiceReply:
    """:func:`decode_choices` with ``lookahead`` > 0: decode on drafted guesses
    (:class:`_Replay`), evaluate each pass's drafts as one batch
    (``model.logits_many``), keep the drafts up to the first guess the logits refute,
    rewind the model past the rest (counted in ``speculated_tokens``), and decode again
    until a pass drafts nothing or all its guesses held; ``evaluations`` counts the
    batches."""
    known: list[tuple[list[int], Any]] = []
    memo: dict[bytes, list[int]] = {}
    evaluations = wasted = 0
    while True:
        seen = _Replay(model, known, lookahead, budget, memo)
        dec = _Decoder(seen, queue=list(prompt))
        try:
            dec.force(opening(schema))
            dec.value(schema, "")
            finished = True
        except _DraftFull:
            finished = False
        if not seen.drafts:  # every branching decided on checked logits
            dec.reply.evaluations, dec.reply.speculated_tokens = evaluations, wasted
            return _finish(dec, model)
        tokens = [t for d in seen.drafts for t in d.tokens]
        ends = list(itertools.accumulate(len(d.tokens) for d in seen.drafts))
        real = model.logits_many(tokens, [e - 1 for e in ends])  # type: ignore[attr-defined]
        evaluations += 1
        kept = len(seen.drafts)
        for j, (draft, logits) in enumerate(zip(seen.drafts, real)):
            known.append((draft.tokens, logits))
            if any(pick_head(logits, heads) != head for heads, head in draft.picks):
                kept = j + 1
                break
        else:
            if finished:  # the whole reply's guesses held: this pass wrote it
                dec.reply.evaluations, dec.reply.speculated_tokens = evaluations, wasted
                return _finish(dec, model)
        drop = len(tokens) - ends[kept - 1]
        if drop:
            model.rewind(drop)  # type: ignore[attr-defined]
            wasted += drop


def _finish(dec: _Decoder, model: ChoiceModel) -> ChoiceReply:
    dec.reply.text = b"".join(dec.parts).decode("utf-8")
    dec.reply.tokens = dec.reply.evaluated_tokens + len(model.tokenize(dec.pending))
    return dec.reply
