"""bench/vs_graphrag: the gold set cut to the slice, GraphRAG's tables scored by
eval_gold, GraphRAG's figures from a gateway log (calls by step, parse failures), the
gateway (pass-through, logging, embeddings) and the tiktoken files' checksum refusal.
No GraphRAG install and no model needed."""

from __future__ import annotations

import gzip

import polars as pl
import pytest

from bench.vs_graphrag import compare
from bench.vs_graphrag.gateway import Gateway, read_log
from kgloom.llm.testing import FakeChatServer, post_json

GOLD = {"entities": [{"name": "Scrooge", "aliases": ["Scrooge", "Ebenezer"]},
                     {"name": "Marley", "aliases": ["Jacob Marley", "Marley"]},
                     {"name": "Tim", "aliases": ["Tiny Tim"]},
                     {"name": "Bob", "aliases": ["Bob"]}],
        "pairs": [["Scrooge", "Marley"], ["Scrooge", "Tim"], ["Marley", "Bob"]]}


def test_slice_gold_keeps_entities_named_in_the_text_and_pairs_of_two_of_them():
    text = "Marley was dead. EBENEZER\nsigned it. Bobbin was there; tiny   tim was not."
    part = compare.slice_gold(GOLD, text)
    # "Bob" only inside "Bobbin" is not named; case and whitespace are folded
    assert [e["name"] for e in part["entities"]] == ["Scrooge", "Marley", "Tim"]
    assert part["pairs"] == [["Scrooge", "Marley"], ["Scrooge", "Tim"]]


def test_graphrag_tables_are_scored_by_eval_gold(tmp_path):
    out = tmp_path / "graphrag-output"
    out.mkdir()
    pl.DataFrame({"id": ["e1", "e2", "e3"], "title": ["EBENEZER", "JACOB MARLEY", "LONDON"],
                  "type": ["PERSON"] * 3}).write_parquet(out / "entities.parquet")
    # GraphRAG names relationship ends by title; one end is not an entity row
    pl.DataFrame({"source": ["JACOB MARLEY", "LONDON"], "target": ["EBENEZER", "NOBODY"]}
                 ).write_parquet(out / "relationships.parquet")
    adapted = compare.graphrag_as_gold_input(out, tmp_path / "adapted")
    got = compare.score(adapted, GOLD)
    assert got["entity_recall"] == 0.5  # Scrooge (as Ebenezer) and Marley of 4
    assert got["pair_recall"] == round(1 / 3, 4)  # Scrooge-Marley, other direction
    assert got["missed_entities"] == ["Tim", "Bob"]


def _chat(head: str, reply: str, seconds: float = 1.0, status: int = 200) -> dict:
    return {"kind": "chat", "prompt_head": head, "reply": reply, "seconds": seconds,
            "status": status, "prompt_tokens": 100, "completion_tokens": 10,
            "finish_reason": "stop"}


def test_graphrag_figures_count_calls_by_step_and_replies_without_a_record(tmp_path):
    good = ('("entity"<|>SCROOGE<|>PERSON<|>a miser)\n##\n'
            '("relationship"<|>SCROOGE<|>MARLEY<|>partners<|>8)\n<|COMPLETE|>')
    log = [_chat("This is an LLM connectivity test.", "Hello"),
           {"kind": "embeddings", "inputs": 3, "seconds": 0.1},
           _chat("\n-Goal-\nGiven a text document", good, 4.0),
           _chat("\n-Goal-\nGiven a text document", "This is a great example.", 5.0),
           _chat("\n-Goal-\nGiven a text document", '("entity"<|>ONLY A NAME)', 6.0),
           _chat("MANY entities and relationships were missed", "", 2.0, status=500)]
    (tmp_path / "output").mkdir()
    pl.DataFrame({"id": ["t1", "t2", "t3"]}).write_parquet(tmp_path / "output" /
                                                           "text_units.parquet")
    fig = compare.graphrag_figures(tmp_path, log, wall=30.0)
    assert fig["llm_calls_total"] == 5 and fig["llm_errors"] == 1
    assert fig["prompt_tokens"] == 500 and fig["completion_tokens"] == 50
    assert {k: v["calls"] for k, v in fig["llm_calls"].items()} == {
        "other": 1, "extract_graph": 3, "extract_graph_gleaning": 1}
    assert fig["extraction_replies"] == 3 and fig["parse_failures"] == 2
    assert fig["well_formed_entity_records"] == 1
    assert fig["well_formed_relationship_records"] == 1
    assert fig["embedded_texts"] == 3
    assert fig["text_units"] == 3 and fig["entities"] is None  # stopped before entities
    assert fig["wall_seconds_per_text_unit"] == 10.0
    res = compare.summarize({"kgloom": {"wall_seconds_per_text_unit": 2.0, "text_units": 3,
                                        "extraction_wall_seconds": 3.0},
                             "graphrag": {**fig, "returncode": "timeout"}})
    assert res["graphrag_over_kgloom_wall_per_text_unit"] == {"kgloom": 5.0}
    assert res["target_5x_met"] and res["graphrag_figure_is_lower_bound"]
    assert not res["graphrag_usable_graph"] and not res["graphrag_finished"]
    # extraction calls 4 + 5 + 6 + 2 s over 3 units against 3 s over 3 units
    assert res["graphrag_over_kgloom_extraction_per_text_unit"]["kgloom"] == pytest.approx(
        17 / 3, abs=0.01)
    # judged against the slower kgloom run
    res = compare.summarize({"kgloom": {"wall_seconds_per_text_unit": 2.0, "text_units": 3},
                             "kgloom_again": {"wall_seconds_per_text_unit": 2.5,
                                              "text_units": 3},
                             "graphrag": {**fig, "returncode": 0}})
    assert res["graphrag_over_kgloom_wall_per_text_unit"] == {"kgloom": 5.0,
                                                              "kgloom_again": 4.0}
    assert not res["target_5x_met"] and res["graphrag_finished"]




def test_gateway_passes_chat_through_logs_it_and_answers_embeddings(tmp_path):
    log = tmp_path / "gw.jsonl"
    with FakeChatServer() as up:
        gw = Gateway(up.url, log, embed=lambda texts: [[float(len(t)), 1.0] for t in texts])
        with gw:
            status, reply = post_json(gw.url + "/v1/chat/completions",
                                  {"messages": [{"role": "user", "content": "hello"}]})
            assert status == 200 and reply["choices"][0]["message"]["content"] == "{}"
            up.fault = "http_500"
            assert post_json(gw.url + "/v1/chat/completions",
                         {"messages": [{"role": "user", "content": "again"}]})[0] == 500
            status, emb = post_json(gw.url + "/v1/embeddings", {"input": ["abc", "d"]})
            assert status == 200
            assert [d["embedding"] for d in emb["data"]] == [[3.0, 1.0], [1.0, 1.0]]
            assert post_json(gw.url + "/v1/other", {})[0] == 404
    rows = read_log(log)
    assert [(r["kind"], r.get("status")) for r in rows] == [
        ("chat", 200), ("chat", 500), ("embeddings", None)]
    assert rows[0]["prompt_head"] == "hello" and rows[0]["prompt_tokens"] >= 1
    assert "error" in rows[1] and rows[2]["inputs"] == 2


def test_tiktoken_files_that_are_not_tiktokens_are_refused(tmp_path, monkeypatch):
    pkg = tmp_path / "site" / "bpe_openai"
    (pkg / "data").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for name in compare.TIKTOKEN:
        (pkg / "data" / f"{name}.tiktoken.gz").write_bytes(gzip.compress(b"IQ== 0\n"))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    import sys

    with pytest.raises(SystemExit, match="not the file tiktoken expects"):
        compare.write_tiktoken_cache(sys.executable, tmp_path / "cache")
    assert not list((tmp_path / "cache").iterdir())  # nothing written under its name
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "empty"))
    with pytest.raises(SystemExit, match="bpe-openai is not importable"):
        compare.write_tiktoken_cache(sys.executable, tmp_path / "cache")
