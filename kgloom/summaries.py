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
    for n, i in enumerate(todo, 1):
        text = tokenizer.truncate("\n".join(f"- {d}" for d in descs[i].split("\n")),
                                  settings.summary_max_input_tokens)
        obj, failure = structured_call(llm, SUMMARY_TEMPLATE, STAGE, names[i], settings.seed,
                                       name=names[i], descriptions=text)
        if obj is None:
            failures.append(failure)
        else:
            out[i] = obj["description"].strip()
        if progress:
            progress(n, len(todo))
    return table.with_columns(description=pl.Series(out, dtype=pl.String)), failures_frame(failures)
