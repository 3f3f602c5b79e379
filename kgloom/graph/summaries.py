"""Summarize the descriptions an entity or relationship collected across text units.

As in GraphRAG's ``summarize_descriptions``: an item with one description keeps it as
is; an item with many gets one summary of them. kgloom joins short lists without
summarizing (below ``summary_min_descriptions``). ``summary_method`` chooses how a long
list is summarized:

- ``extractive`` (default): the most central of the item's own descriptions by their
  TF-IDF centroid, no model call and no embedding (:func:`centroid_scores`,
  :func:`extractive_summary`). With evidence-sentence descriptions (the default,
  ``llm_descriptions`` off) they are sentences of the text, so the summary says nothing
  the text does not. The default because it costs no model call: with the default
  model the ``llm`` summaries took 63 calls and ~95 s of a book index, and the index's
  quality figures (gold entity and pair recall, ``bench/eval_gold.py``) are decided by
  extraction and resolution, which run before summaries (both defaults measured in one
  run by ``bench/bench_speed.py``; figures in the README).
- ``llm``: one LLM summary, within a token budget, decoded under a bounded JSON schema so
  it always parses; a failed summary keeps the joined descriptions and adds a failures
  row. For larger models, or LLM-written descriptions.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import polars as pl

from kgloom.core import layout
from kgloom.core.storage import failures_frame
from kgloom.embedding.tokenizer import Tokenizer
from kgloom.llm import CachedLLM, PromptTemplate, structured_call
from kgloom.settings.indexing import IndexSettings

STAGE = layout.SUMMARIES

SUMMARY_TEMPLATE = PromptTemplate(
    name="summarize_descriptions",
    system=("You merge short descriptions of one thing into a single description. "
            "Answer with JSON only."),
    user=("Name: {name}\nDescriptions:\n{descriptions}\n"
          "Write one description, two sentences at most, that keeps every fact above."),
    schema={"type": "object",
            "properties": {"description": {"type": "string", "minLength": 1, "maxLength": 300}},
            "required": ["description"]},
    max_tokens=160,
)


# a token of a description: one Han or kana character (those scripts do not space their
# words), or a run of other word characters; matched on the lower-cased text
TOKEN = r"[\p{Han}\p{Hiragana}\p{Katakana}]|[\w--[\p{Han}\p{Hiragana}\p{Katakana}]]+"


def centroid_scores(groups: list[list[str]]) -> list[np.ndarray]:
    """Each description's centrality in its item: the cosine of its TF-IDF vector to the
    centroid (mean) of its item's TF-IDF vectors.

    This is the centroid of Radev et al. 2004 ("Centroid-based summarization of multiple
    documents", the MEAD summarizer), which is built from TF-IDF word weights; a sentence
    is scored by cosine rather than MEAD's plain sum so a long sentence is not favoured
    for its length. Term frequency is a token's count in the description; inverse
    document frequency is scikit-learn's smoothed ``ln((1 + n) / (1 + df)) + 1``, with
    ``n`` the distinct descriptions over all ``groups`` and ``df`` those holding the
    token, so words every description shares ("the", "was") weigh little. As ``n`` and
    ``df`` span every item of the call, new documents can change the choice for an item
    whose own descriptions did not change (and so its vector and the context of its
    community's report). Tokens: :data:`TOKEN` on the lower-cased text. Model free and
    linear in the descriptions' tokens (no embedding: the embedded centroid cost 2.7 ms a
    description and was the summaries' whole time).

    Args:
        groups: per item, its descriptions (strings) in input order.

    Returns:
        per item, a float64 array (len(group),) of cosines in [0, 1]; 0 for a description
        with no token.
    """
    sizes = [len(g) for g in groups]
    flat = [x for g in groups for x in g]
    scores = np.zeros(len(flat))
    if flat:
        lines = pl.DataFrame({"item": np.repeat(np.arange(len(groups)), sizes),
                              "line": np.arange(len(flat)), "text": flat})
        lines = lines.with_columns(text_id=pl.col("text").rank("dense"))
        toks = (lines.select("item", "line", "text_id",
                             tok=pl.col("text").str.to_lowercase().str.extract_all(TOKEN))
                .explode("tok").drop_nulls("tok"))
        tf = toks.group_by("item", "line", "text_id", "tok").agg(tf=pl.len())
        n = lines["text_id"].n_unique()
        df = tf.unique(["text_id", "tok"]).group_by("tok").agg(df=pl.len())
        w = tf.join(df, on="tok").with_columns(
            w=pl.col("tf") * (((1 + n) / (1 + pl.col("df"))).log() + 1))
        w = w.with_columns(u=pl.col("w") / (pl.col("w") ** 2).sum().over("line").sqrt())
        centroid = w.group_by("item", "tok").agg(c=pl.col("u").sum())
        centroid = centroid.with_columns(
            c=pl.col("c") / (pl.col("c") ** 2).sum().over("item").sqrt())
        got = (w.join(centroid, on=["item", "tok"]).group_by("line")
               .agg(s=(pl.col("u") * pl.col("c")).sum()))
        scores[got["line"].to_numpy()] = got["s"].to_numpy()
    return np.split(scores, np.cumsum(sizes)[:-1]) if groups else []


def extractive_summary(lines: list[str], scores: np.ndarray | None, max_sentences: int,
                       max_chars: int) -> str:
    """The most central of one item's descriptions, in their original order.

    Descriptions are taken from the most central (highest ``scores``, see
    :func:`centroid_scores`) down while at most ``max_sentences`` are taken and their total
    length, joined by one space, stays within ``max_chars`` (a first one longer than that
    is cut at a word); ties go to the earlier description.

    Args:
        lines: the item's distinct descriptions (non-empty strings), in input order.
        scores: float array (len(lines),) of their centrality; None (or fewer than three
            lines, where no description is more central than another) keeps input order.
        max_sentences: at most this many descriptions (>= 1).
        max_chars: length bound of the result (characters).

    Returns:
        the chosen descriptions joined by one space ("" for no lines).
    """
    if not lines:
        return ""
    if scores is None or len(lines) < 3:
        order = list(range(len(lines)))
    else:
        order = sorted(range(len(lines)), key=lambda i: (-round(float(scores[i]), 6), i))
    chosen: list[int] = []
    used = 0
    for i in order:
        if len(chosen) >= max_sentences:
            break
        extra = len(lines[i]) + (1 if chosen else 0)
        if used + extra <= max_chars:
            chosen.append(i)
            used += extra
    if not chosen:  # the most central one alone is too long: cut it at a word
        head = lines[order[0]][:max_chars]
        return head.rsplit(" ", 1)[0] if " " in head[max_chars // 2:] else head
    return " ".join(lines[i] for i in sorted(chosen))


def spread(items: list[str], n: int) -> list[str]:
    """At most ``n`` of ``items``, evenly spaced over the list (first and last kept when
    ``n`` >= 2), in order; all of them when there are ``n`` or fewer."""
    if len(items) <= n:
        return items
    if n <= 1:
        return items[:n]
    step = (len(items) - 1) / (n - 1)
    return [items[round(k * step)] for k in range(n)]


def _count(counts: dict[str, int] | None, items: int, texts: int) -> None:
    if counts is not None:
        counts["items"] = counts.get("items", 0) + items
        counts["texts"] = counts.get("texts", 0) + texts


def summarize_descriptions(table: pl.DataFrame, name_col: str, llm: CachedLLM | None,
                           settings: IndexSettings, tokenizer: Tokenizer,
                           progress: Callable[[int, int], None] | None = None,
                           counts: dict[str, int] | None = None,
                           ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Replace long description lists in ``table`` by one summary each.

    Args:
        table: an entities or relationships frame; ``description`` holds distinct
            descriptions joined by newlines (see :mod:`kgloom.graph.resolution`).
        name_col: column naming the item in the prompt (``title``, or ``source`` for
            relationships, whose prompt name is ``"<source> -> <target>"``).
        llm: the cached LLM (stage ``summaries``; used only by the ``llm`` method, None
            allowed otherwise).
        settings: ``summary_method``, ``summary_min_descriptions``, and
            ``summary_max_input_tokens`` (llm) or ``summary_max_sentences`` and
            ``summary_max_chars`` (extractive).
        tokenizer: counts the LLM's input budget (tokens).
        progress: called as ``progress(done, total)`` over the items summarized. The
            LLM's calls go out ``llm.concurrency`` at a time.
        counts: when given, its ``items`` (the items summarized) and ``texts`` (the
            candidate descriptions the ``extractive`` method ranks for them, at most
            ``summary_max_candidates`` per item spread over its list, repeats included;
            0 with the ``llm`` method) are increased: the stage's work, which grows with
            the items named at least ``summary_min_descriptions`` times.

    Returns:
        (table with ``description`` replaced where summarized, failures frame; the
        extractive method never fails).

    Raises:
        ValueError: the ``llm`` method without an ``llm``.
    """
    descs = table["description"].to_list()
    names = (table[name_col] if name_col != "source" else
             table["source"] + " -> " + table["target"]).to_list()
    todo = [i for i, d in enumerate(descs)
            if d and len(d.split("\n")) >= settings.summary_min_descriptions]
    if settings.summary_method == "extractive":
        out, failures = _extractive_summaries(descs, todo, settings, progress, counts), []
    elif llm is None:
        raise ValueError("summary_method 'llm' asks the model, but no llm was given")
    else:
        out, failures = _llm_summaries(descs, names, todo, llm, settings, tokenizer,
                                       progress, counts)
    return table.with_columns(description=pl.Series(out, dtype=pl.String)), failures_frame(failures)


def _extractive_summaries(descs: list, todo: list[int], settings: IndexSettings,
                          progress: Callable[[int, int], None] | None,
                          counts: dict[str, int] | None) -> list:
    """``descs`` with each item of ``todo`` (indices) replaced by its
    :func:`extractive_summary` over at most ``summary_max_candidates`` of its
    descriptions spread over its list (:func:`spread`), ranked by
    :func:`centroid_scores`; ``progress(n, len(todo))`` after each."""
    out = list(descs)
    groups = [spread([x for x in descs[i].split("\n") if x.strip()],
                     settings.summary_max_candidates) for i in todo]
    _count(counts, len(todo), sum(len(g) for g in groups))
    for n, (i, group, scores) in enumerate(zip(todo, groups, centroid_scores(groups)), 1):
        out[i] = extractive_summary(group, scores, settings.summary_max_sentences,
                                    settings.summary_max_chars)
        if progress:
            progress(n, len(todo))
    return out


def _llm_summaries(descs: list, names: list[str], todo: list[int],
                   llm: CachedLLM, settings: IndexSettings, tokenizer: Tokenizer,
                   progress: Callable[[int, int], None] | None,
                   counts: dict[str, int] | None) -> tuple[list, list[dict]]:
    """(``descs`` with each item of ``todo`` replaced by the LLM's summary of its
    descriptions (bulleted, cut to ``summary_max_input_tokens``), failure rows of the
    items whose reply failed (their descriptions kept)); the calls go out
    ``llm.concurrency`` at a time."""
    out = list(descs)
    failures = []
    texts = {i: tokenizer.truncate("\n".join(f"- {d}" for d in descs[i].split("\n")),
                                   settings.summary_max_input_tokens) for i in todo}

    _count(counts, len(todo), 0)

    def summarize(i: int) -> tuple[dict | None, dict | None]:
        return structured_call(llm, SUMMARY_TEMPLATE, STAGE, names[i], settings.seed,
                               name=names[i], descriptions=texts[i])

    for i, (obj, failure) in zip(todo, llm.map(summarize, todo, progress)):
        if obj is None:
            failures.append(failure)
        else:
            out[i] = obj["description"].strip()
    return out, failures


SAME_ENTITY_TEMPLATE = PromptTemplate(
    name="verify_same_entity",
    system=("You decide whether two descriptions are about the same real-world entity. "
            "Answer with JSON only."),
    user="A: {a}\nB: {b}\nAre A and B the same entity?",
    schema={"type": "object", "properties": {"same": {"type": "string", "enum": ["yes", "no"]}},
            "required": ["same"], "additionalProperties": False},
    max_tokens=12,
)
VERIFY_STAGE = layout.RESOLUTION


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
