"""Description summaries: who gets summarized, by the LLM or extractively, what is kept
on failure."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from kgloom.embedding.tokenizer import default_tokenizer
from kgloom.graph.summaries import summarize_descriptions
from kgloom.llm import CachedLLM, Completion, LLMCache
from kgloom.llm.fake import FakeBackend
from kgloom.settings.indexing import IndexSettings

SCROOGE = ("Scrooge signed the register of Marley's burial.\n"
           "Scrooge was Marley's sole executor and sole mourner.\n"
           "Scrooge never painted out Old Marley's name.\n"
           "Scrooge was a squeezing, wrenching, grasping, scraping, clutching, covetous old "
           "sinner!")
FRED = "Fred is Scrooge's nephew.\nFred wished his uncle a merry Christmas."
BELLE = "Belle was a fair young girl in a mourning-dress."


def _entities() -> pl.DataFrame:
    return pl.DataFrame({"title": ["EBENEZER SCROOGE", "FRED", "BELLE", "NOBODY"],
                         "description": [SCROOGE, FRED, BELLE, ""]})


class _Summarizer:
    """A stand-in model: answers the same description for every call; records prompts."""

    model_id = "summarizer"

    def __init__(self, reply: str | None = None) -> None:
        self.reply = reply
        self.prompts: list[str] = []

    def complete(self, messages, schema, max_tokens, seed, stop_on_loop=False):
        self.prompts.append(messages[-1]["content"])
        text = self.reply if self.reply is not None else json.dumps(
            {"description": "  A covetous old sinner, Marley's executor.  "})
        return Completion(text, 1, 1, 0.0)


def _llm(tmp_path, backend) -> CachedLLM:
    return CachedLLM(backend, LLMCache(tmp_path / "cache.sqlite"), backend.model_id)


def test_only_long_description_lists_are_summarized(tmp_path):
    backend = _Summarizer()
    settings = IndexSettings(summary_method="llm", summary_min_descriptions=3)
    out, failures = summarize_descriptions(_entities(), "title", _llm(tmp_path, backend),
                                           settings, default_tokenizer())
    assert failures.height == 0
    assert len(backend.prompts) == 1  # only Scrooge has >= 3 descriptions
    assert "Name: EBENEZER SCROOGE" in backend.prompts[0]
    for line in SCROOGE.split("\n"):
        assert f"- {line}" in backend.prompts[0]
    desc = dict(zip(out["title"], out["description"]))
    assert desc["EBENEZER SCROOGE"] == "A covetous old sinner, Marley's executor."
    assert desc["FRED"] == FRED  # 2 descriptions: joined text kept, no call
    assert desc["BELLE"] == BELLE
    assert desc["NOBODY"] == ""
    assert out.columns == _entities().columns and out.height == 4


def test_threshold_is_a_setting(tmp_path):
    backend = _Summarizer()
    out, _ = summarize_descriptions(_entities(), "title", _llm(tmp_path, backend),
                                    IndexSettings(summary_method="llm", summary_min_descriptions=2),
                                    default_tokenizer())
    assert len(backend.prompts) == 2  # Scrooge and Fred
    assert dict(zip(out["title"], out["description"]))["BELLE"] == BELLE


def test_failed_summary_keeps_the_joined_text_and_adds_a_failure(tmp_path):
    backend = _Summarizer(reply="Scrooge is a miser")  # not JSON
    out, failures = summarize_descriptions(_entities(), "title", _llm(tmp_path, backend),
                                           IndexSettings(summary_method="llm"), default_tokenizer())
    assert dict(zip(out["title"], out["description"]))["EBENEZER SCROOGE"] == SCROOGE
    assert failures.height == 1
    row = failures.row(0, named=True)
    assert (row["stage"], row["item_id"]) == ("summaries", "EBENEZER SCROOGE")
    assert "not JSON" in row["reason"] and row["detail"] == "Scrooge is a miser"
    assert len(backend.prompts) == 2  # one retry


def test_relationship_names_and_input_budget(tmp_path):
    rels = pl.DataFrame({"source": ["BOB CRATCHIT"], "target": ["TINY TIM"],
                         "description": ["\n".join(
                             f"Bob Cratchit carried Tiny Tim upon his shoulder, day {i}."
                             for i in range(200))]})
    backend = _Summarizer()
    settings = IndexSettings(summary_method="llm", summary_max_input_tokens=50)
    out, _ = summarize_descriptions(rels, "source", _llm(tmp_path, backend), settings,
                                    default_tokenizer())
    prompt = backend.prompts[0]
    assert "Name: BOB CRATCHIT -> TINY TIM" in prompt
    descriptions = prompt.split("Descriptions:\n", 1)[1].rsplit("\nWrite one description", 1)[0]
    assert default_tokenizer().count(descriptions) <= 50
    assert out["description"][0] == "A covetous old sinner, Marley's executor."


def test_second_run_is_served_from_the_cache(tmp_path):
    first_backend = FakeBackend()
    a, _ = summarize_descriptions(_entities(), "title", _llm(tmp_path, first_backend),
                                  IndexSettings(summary_method="llm"), default_tokenizer())
    again = FakeBackend()
    b, _ = summarize_descriptions(_entities(), "title", _llm(tmp_path, again),
                                  IndexSettings(summary_method="llm"), default_tokenizer())
    assert first_backend.calls == 1 and again.calls == 0
    assert a.equals(b)


def test_extractive_summary_keeps_the_most_central_descriptions_in_text_order(tmp_path):
    lines = ["Marley was Scrooge's partner.",            # central: marley, scrooge
             "The fog came pouring in.",                 # an outlier: no word in common
             "Scrooge was Marley's sole executor.",      # central: marley, scrooge
             "Scrooge signed Marley's burial register."]  # central: marley, scrooge
    table = pl.DataFrame({"title": ["SCROOGE", "FRED"],
                          "description": ["\n".join(lines), FRED]})
    backend = _Summarizer()
    settings = IndexSettings(summary_max_sentences=2, summary_max_chars=300)
    assert settings.summary_method == "extractive"  # the default
    counts: dict[str, int] = {}
    out, failures = summarize_descriptions(table, "title", _llm(tmp_path, backend), settings,
                                           default_tokenizer(), counts=counts)
    assert backend.prompts == [] and failures.height == 0  # no model call
    assert counts == {"items": 1, "texts": 4}  # only the long list is ranked
    summary = out["description"][0]
    assert "fog" not in summary
    kept = [x for x in lines if x in summary]
    assert len(kept) == 2 and summary == " ".join(kept)  # two, in their text order
    assert out["description"][1] == FRED  # 2 descriptions: kept joined, not summarized


def _tfidf_cosines(group: list[str], corpus: list[str]) -> list[float]:
    """The definition, written out: smoothed IDF over the distinct texts of ``corpus``,
    L2-normalized TF-IDF vectors, cosine of each to the normalized mean."""
    import math
    import re

    def toks(t):
        return re.findall(r"\w+", t.lower())

    distinct = sorted(set(corpus))
    vocab = sorted({w for t in distinct for w in toks(t)})
    idf = {w: math.log((1 + len(distinct)) / (1 + sum(w in toks(t) for t in distinct))) + 1
           for w in vocab}
    vecs = []
    for t in group:
        v = np.array([toks(t).count(w) * idf[w] for w in vocab])
        vecs.append(v / (np.linalg.norm(v) or 1.0))
    c = np.mean(vecs, axis=0)
    c = c / np.linalg.norm(c)
    return [float(v @ c) for v in vecs]


def test_centroid_scores_are_tfidf_cosines_to_the_items_centroid():
    from kgloom.graph.summaries import centroid_scores

    a = ["Marley was Scrooge's partner.", "The fog came pouring in.",
         "Scrooge was Marley's sole executor.", "Scrooge was Marley's sole executor."]
    b = ["Fred is Scrooge's nephew.", "Fred wished his uncle a merry Christmas.", "Fred laughed."]
    c = ["!!!", "Belle was a fair young girl."]  # a description with no word scores 0
    got = centroid_scores([a, b, c, []])
    assert [len(x) for x in got] == [4, 3, 2, 0]
    corpus = a + b + c
    for group, scores in zip([a, b, c], got):
        assert np.allclose(scores, _tfidf_cosines(group, corpus), atol=1e-9)
    assert got[2][0] == 0.0 and got[0][2] == pytest.approx(got[0][3]) and got[0][2] > got[0][1]
    assert centroid_scores([]) == []
    # scripts without spaces are scored by character: two of three share 张三
    han = centroid_scores([["张三是李四的父亲", "张三生于北京", "天气很好"]])[0]
    assert min(han[0], han[1]) > han[2]


def test_extractive_summary_bounds_and_without_scores():
    from kgloom.graph.summaries import extractive_summary

    lines = ["a " * 100, "Short one.", "Another short one.", "Third."]
    # without scores: the first descriptions that fit
    assert extractive_summary(lines[1:], None, 2, 300) == "Short one. Another short one."
    # a description too long for the bound is skipped for shorter ones
    assert extractive_summary(lines, None, 2, 40) == "Short one. Another short one."
    # one that alone exceeds the bound is cut at a word
    cut = extractive_summary(["word " * 100], None, 2, 50)
    assert len(cut) <= 50 and cut.endswith("word")
    assert extractive_summary([], None, 2, 300) == ""
    # scores order the choice; ties go to the earlier line
    assert extractive_summary(["x1.", "x2.", "x3."], np.array([0.1, 0.5, 0.5]), 1, 300) == "x2."


def test_summary_method_is_validated():
    with pytest.raises(ValueError, match="summary_method"):
        IndexSettings(summary_method="abstractive")


def test_spread_keeps_at_most_n_evenly_spaced_in_order():
    from kgloom.graph.summaries import spread

    items = [f"d{i}" for i in range(1000)]
    got = spread(items, 64)
    assert len(got) == 64 and got[0] == "d0" and got[-1] == "d999"
    assert got == sorted(got, key=items.index) and len(set(got)) == 64
    assert spread(items[:10], 64) == items[:10]
    assert spread(items, 1) == ["d0"]


def test_a_hub_entitys_extractive_summary_ranks_a_bounded_number_of_descriptions(tmp_path):
    # a long document: one entity with 3,000 distinct descriptions, another with 3
    hub = "\n".join(f"Scrooge counted coin number {i} in the counting-house." for i in range(3000))
    table = pl.DataFrame({"title": ["SCROOGE", "FRED"], "description": [hub, FRED + "\nx"]})
    settings = IndexSettings(summary_max_candidates=50, summary_min_descriptions=2)
    counts: dict[str, int] = {}
    for _ in range(2):  # counts add up over calls (entities, then relationships)
        out, _ = summarize_descriptions(table, "title", _llm(tmp_path, _Summarizer()),
                                        settings, default_tokenizer(), counts=counts)
    assert counts == {"items": 4, "texts": 2 * (50 + 3)}  # not 3,003: bounded per item
    kept = [x for x in hub.split("\n") if x in out["description"][0]]
    assert kept  # the summary is made of the hub's own descriptions


def test_summary_counts_extractive_and_with_the_llm(tmp_path):
    counts: dict[str, int] = {}
    summarize_descriptions(_entities(), "title", _llm(tmp_path, _Summarizer()),
                           IndexSettings(summary_min_descriptions=2), default_tokenizer(),
                           counts=counts)
    assert counts == {"items": 2, "texts": 4 + 2}  # Scrooge and Fred, all their lines
    summarize_descriptions(_entities(), "title", _llm(tmp_path, _Summarizer()),
                           IndexSettings(summary_method="llm", summary_min_descriptions=3),
                           default_tokenizer(), counts=counts)
    assert counts == {"items": 3, "texts": 6}  # + Scrooge, by the model: no text ranked
