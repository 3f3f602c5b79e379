"""bench/bench_scale.py --part leiden on tiny synthetic graphs: kgloom's rows carry every
level of the hierarchical call, a baseline gets its ratio, two sizes give the linear fit,
and a size that runs past the wall-clock limit becomes an error row, not a hang."""

from __future__ import annotations

import argparse

from bench import bench_scale as bs


def _run(edges: str, methods: str, timeout: float) -> dict:
    return bs.part_leiden(argparse.Namespace(edges=edges, methods=methods,
                                             leiden_timeout=timeout))


def test_leiden_part_rows_ratio_fit_and_timeout(tmp_path, monkeypatch):
    monkeypatch.setattr(bs, "RESULTS", tmp_path)
    res = _run("2000,4000", "kgloom,igraph-converged", 300)
    assert [r["edges"] for r in res["sizes"]] == [2000, 4000]  # exactly the edges asked
    for r in res["sizes"]:
        assert "error" not in r
        assert r["vertices"] == r["edges"] // 5 and 0.6 < r["inside_block_share"] < 0.9
        assert r["levels"] == len(r["communities_per_level"]) == len(r["modularity_per_level"])
        assert r["max_size_per_level"][-1] <= 10 and r["oversized_at_last_level"] == 0
        assert r["communities_per_level"][0] == r["communities"]  # level 0 = the _leiden call
        assert r["peak_rss_mib"] >= r["peak_rss_mib_level0"] > 0
    assert sorted(b["target_edges"] for b in res["baselines"]) == [2000, 4000]
    assert {v["baseline"] for v in res["kgloom_vs_baselines"]} == {"igraph-converged"}
    assert all(abs(v["modularity_kgloom_minus_baseline"]) < 0.01
               for v in res["kgloom_vs_baselines"])
    assert res["linear_fit"]["from"] == [2000, 4000]

    res = _run("4000", "kgloom", 0.05)  # cannot even start Python in 0.05 s
    again = {r["target_edges"]: r for r in res["sizes"]}
    assert "did not finish within 0.05 s wall" in again[4000]["error"]
    assert "error" not in again[2000]  # the other size's row is kept
    assert res["linear_fit"] == {}  # one finished size left: no fit
    assert [v["edges"] for v in res["kgloom_vs_baselines"]] == [2000]
    assert (tmp_path / "scale_leiden.json").exists()
