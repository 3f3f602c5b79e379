"""Per-stage cost accounting: stage stats files, partition sums, the cost table."""

from __future__ import annotations

import json

from kgloom.core.stats import (
    COST_FIELDS,
    cost_markdown,
    cost_table,
    read_stage_stats,
    stage_cost,
    write_stage_stats,
)
from kgloom.llm import Completion, StageStats


def _llm(seconds: float, prompt: float, decode: float, calls: int = 2) -> dict:
    st = StageStats()
    for _ in range(calls):
        st.add(Completion("{}", 100, 10, seconds / calls, prompt_eval_tokens=80,
                          prompt_seconds=prompt / calls, generation_seconds=decode / calls,
                          threads=1))
    return st.as_dict()


def test_stage_cost_splits_wall_time_into_model_and_the_rest():
    stats = {"seconds": 10.0, "llm": _llm(8.0, 3.0, 4.0), "embedder_seconds": 1.0}
    c = stage_cost(stats)
    assert set(c) == set(COST_FIELDS)
    assert c["model_seconds"] == 9.0 and c["model_share"] == 0.9
    assert (c["llm_prompt_seconds"], c["llm_decode_seconds"], c["llm_outside_seconds"]) == (
        3.0, 4.0, 1.0)
    assert (c["calls"], c["prompt_tokens"], c["completion_tokens"]) == (2, 200, 20)
    assert stage_cost({"seconds": 0.0})["model_share"] == 0.0


def test_partitions_are_summed_and_parts_are_not_counted_twice(tmp_path):
    out = tmp_path
    for key, (wall, llm_s) in {"a.txt": (10.0, 9.0), "b.txt": (20.0, 18.0)}.items():
        write_stage_stats(out, "extraction", wall, _llm(llm_s, 2.0, 6.0), partition=key,
                          llm_backend={"n_ctx": 4096}, units=3)
    write_stage_stats(out, "entities", 5.0, _llm(2.0, 0.5, 1.0), embedder_seconds=2.0)
    write_stage_stats(out, "summaries", 1.5, _llm(1.0, 0.2, 0.6), part_of="entities")
    stats = read_stage_stats(out)
    ext = stats["extraction"]
    assert ext["seconds"] == 30.0 and ext["units"] == 6 and ext["partitions"] == 2
    assert ext["llm_backend"] == {"n_ctx": 4096}  # settings are not summed
    assert ext["cost"]["model_seconds"] == 27.0 and ext["cost"]["model_share"] == 0.9
    assert ext["finished_at"] == max(
        json.loads(p.read_text())["finished_at"]
        for p in (out / "stages" / "partitions").glob("*/extraction.stats.json"))
    cost = cost_table(stats)
    assert cost["stages"]["summaries"]["part_of"] == "entities"
    total = cost["total"]
    # summaries are inside the entities stage: counted once
    assert total["wall_seconds"] == 35.0
    assert total["model_seconds"] == 27.0 + 2.0 + 2.0
    assert total["model_share"] == round(31.0 / 35.0, 4)
    assert total["calls"] == 6
    table = cost_markdown(cost)
    assert "| summaries (in entities) |" in table and table.splitlines()[-1].startswith(
        "| total | 35.0 | 31.0 | 89% |")


def test_model_time_above_wall_time_shows_as_a_share_above_one():
    # a stage that timed less than its model work is visible, not hidden
    assert stage_cost({"seconds": 1.0, "llm": {"seconds": 2.0}})["model_share"] == 2.0


def test_a_stage_records_its_embedding_passes_by_the_threads_they_ran_on():
    """The shared embedder's passes are told apart per stage: only those since the
    stage's mark count, grouped by the threads each pass picked."""
    from kgloom.assets.metadata import embedder_time
    from kgloom.embedding.windows import WindowedEmbedder

    emb = WindowedEmbedder()
    emb.load_seconds = 3.0
    emb._count_pass(100, 2, 1.5)  # an earlier stage's pass
    mark = emb.passes()
    emb._count_pass(40, 2, 0.5)
    emb._count_pass(60, 1, 2.0)
    emb._count_pass(10, 1, 0.25)
    got = embedder_time(emb, mark)
    assert got["embedder_threads"] == {"1": {"passes": 2, "windows": 70, "seconds": 2.25},
                                       "2": {"passes": 1, "windows": 40, "seconds": 0.5}}
    assert got["embedder_seconds"] == 2.75 + 3.0  # the first stage to ask counts the load
    assert emb.passes() == {1: (2, 70, 2.25), 2: (2, 140, 2.0)}
    later = embedder_time(emb, emb.passes())
    assert later["embedder_threads"] == {} and later["embedder_seconds"] == 0.0
