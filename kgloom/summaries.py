"""Summarize the descriptions an entity or relationship collected across text units.

As in GraphRAG's ``summarize_descriptions``: an item with one description keeps it as
is; an item with many gets one LLM summary of them, within a token budget. kgloom joins
short lists without a call (below ``summary_min_descriptions``) and decodes the summary
under a bounded JSON schema, so it always parses. A failed summary keeps the joined
descriptions and adds a failures row.
"""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

from kgloom.config import IndexSettings
from kgloom.llm import CachedLLM, PromptTemplate, structured_call
from kgloom.storage import failures_frame
from kgloom.tokenizer import Tokenizer

STAGE = "summaries"

SUMMARY_TEMPLATE = PromptTemplate(
    name="summarize_descriptions",
    system="You merge short descriptions of one thing into a single description. Answer with JSON only.",
    user=("Name: {name}\nDescriptions:\n{descriptions}\n"
          "Write one description, two sentences at most, that keeps every fact above."),
    schema={"type": "object",
            "properties": {"description": {"type": "string", "minLength": 1, "maxLength": 300}},
            "required": ["description"]},
    max_tokens=160,
)


def summarize_descriptions(table: pl.DataFrame, name_col: str, llm: CachedLLM,
                           settings: IndexSettings, tokenizer: Tokenizer,
                           progress: Callable[[int, int], None] | None = None,
                           ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Replace long description lists in ``table`` by one LLM summary each.

    Args:
        table: an entities or relationships frame; ``description`` holds distinct
            descriptions joined by newlines (see :mod:`kgloom.resolution`).
        name_col: column naming the item in the prompt (``title``, or ``source`` for
            relationships, whose prompt name is ``"<source> -> <target>"``).
        llm: the cached LLM (stage ``summaries``).
        settings: ``summary_min_descriptions`` and ``summary_max_input_tokens``.
        tokenizer: counts the input budget (tokens).
        progress: called as ``progress(done, total)`` over the items that need a call.
            The calls go out ``llm.concurrency`` at a time.

    Returns:
        (table with ``description`` replaced where summarized, failures frame).
    """
    descs = table["description"].to_list()
    names = (table[name_col] if name_col != "source" else
             table["source"] + " -> " + table["target"]).to_list()
    todo = [i for i, d in enumerate(descs)
            if d and len(d.split("\n")) >= settings.summary_min_descriptions]
    failures = []
    out = list(descs)
    texts = {i: tokenizer.truncate("\n".join(f"- {d}" for d in descs[i].split("\n")),
                                   settings.summary_max_input_tokens) for i in todo}

    def summarize(i: int) -> tuple[dict | None, dict | None]:
        return structured_call(llm, SUMMARY_TEMPLATE, STAGE, names[i], settings.seed,
                               name=names[i], descriptions=texts[i])

    for i, (obj, failure) in zip(todo, llm.map(summarize, todo, progress)):
        if obj is None:
            failures.append(failure)
        else:
            out[i] = obj["description"].strip()
    return table.with_columns(description=pl.Series(out, dtype=pl.String)), failures_frame(failures)


SAME_ENTITY_TEMPLATE = PromptTemplate(
    name="verify_same_entity",
    system="You decide whether two descriptions are about the same real-world entity. Answer with JSON only.",
    user="A: {a}\nB: {b}\nAre A and B the same entity?",
    schema={"type": "object", "properties": {"same": {"type": "string", "enum": ["yes", "no"]}},
            "required": ["same"], "additionalProperties": False},
    max_tokens=12,
)
VERIFY_STAGE = "resolution"


def llm_verifier(llm: CachedLLM, settings: IndexSettings, tokenizer: Tokenizer,
                 max_tokens_each: int = 150) -> Callable[[str, str], bool]:
    """Return ``verify(a, b) -> bool`` asking the LLM whether two "title: description"
    texts name the same entity (stage ``resolution``, cached, constrained to yes/no).

    A reply that fails twice counts as "no": a merge needs a positive answer.
    """

    def verify(a: str, b: str) -> bool:
        obj, _ = structured_call(llm, SAME_ENTITY_TEMPLATE, VERIFY_STAGE, f"{a[:40]} | {b[:40]}",
                                 settings.seed, a=tokenizer.truncate(a, max_tokens_each),
                                 b=tokenizer.truncate(b, max_tokens_each))
        return bool(obj) and obj["same"] == "yes"

    return verify
