"""``kgloom serve`` and ``kgloom query`` give the same answer to the same request under the
same settings file: both open the index with ``Retriever.from_settings`` and take every
option a request does not give from the file's ``retrieval`` section (per-query defaults,
``graph_backend``, scoring knobs). The server is built as ``kgloom serve`` builds it
(:func:`kgloom.cli.main._load`, ``_open_for_serving``, :func:`kgloom.serve.app.create_app`)
and run in uvicorn on a loopback port; the index is the small Carol index of the query
unit tests (no indexing run).
"""

from __future__ import annotations

import json
import urllib.request

import pytest
from typer.testing import CliRunner

pytestmark = pytest.mark.integration

QUESTION = "Who is Tiny Tim's father?"
# every retrieval knob given differs from its default (top_k 5, depth 1, duckdb, 0.25, 0.5)
SETTINGS = """\
paths:
  output_dir: "{out}"
llm:
  fake: true
retrieval:
  top_k: 3
  depth: 2
  damping: 0.7
  graph_backend: "memory"
  hop_decay: 0.4
  lexical_weight: 0.2
"""


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """(the settings file, the server) over a fresh small index."""
    from kgloom.cli.main import _load, _open_for_serving
    from kgloom.embedding.sentence_embedder import Embedder
    from kgloom.llm.testing import ASGIService
    from kgloom.serve.app import Limits, create_app
    from tests.unit.test_query import write_carol_index

    out = write_carol_index(tmp_path_factory.mktemp("agree_index"), Embedder())
    config = tmp_path_factory.mktemp("agree_config") / "kgloom.yaml"
    config.write_text(SETTINGS.format(out=out))
    settings = _load(str(config))
    llm, live = _open_for_serving(settings, str(tmp_path_factory.mktemp("agree_cache")))
    svc = ASGIService(create_app(live, llm.model_id, None, (), Limits())).start()
    yield config, svc
    svc.stop()


def _serve(url: str, body: dict) -> dict:
    req = urllib.request.Request(url + "/api/query", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        assert r.status == 200
        return json.loads(r.read().decode())


def _cli(config, *args: str) -> dict:
    from kgloom.cli import app

    res = CliRunner().invoke(app, ["query", QUESTION, "--config", str(config), "--json",
                                   *args], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


@pytest.mark.parametrize("mode", ["bridge", "vector", "one_hop", "multihop", "fused", "ppr",
                                  "hybrid", "two_step"])
def test_serve_and_the_cli_answer_alike_under_one_settings_file(setup, mode):
    config, svc = setup
    served = _serve(svc.url, {"question": QUESTION, "mode": mode})
    cli = _cli(config, "--mode", mode)
    ids = [u["id"] for u in cli["text_units"]]
    assert [u["id"] for u in served["text_units"]] == ids  # the same units, in order
    assert [u["score"] for u in served["text_units"]] == pytest.approx(
        [u["score"] for u in cli["text_units"]])
    assert [e["entity_id"] for e in served["entities"]] == \
        [e["entity_id"] for e in cli["entities"]]
    # the file's knobs, not the defaults: top_k 3, the memory backend
    assert 0 < len(ids) <= 3
    assert served["info"]["graph_backend"] == cli["info"]["graph_backend"] == "memory"


def test_a_request_and_a_flag_replace_the_files_values_alike(setup):
    config, svc = setup
    served = _serve(svc.url, {"question": QUESTION, "mode": "multihop", "top_k": 4,
                              "depth": 1})
    cli = _cli(config, "--mode", "multihop", "--top-k", "4", "--depth", "1")
    assert [u["id"] for u in served["text_units"]] == [u["id"] for u in cli["text_units"]]
    assert len(cli["text_units"]) == 4
    # and the file's depth 2 did reach the call that did not give one
    deep = _cli(config, "--mode", "multihop", "--top-k", "4")
    assert max(e["hop_depth"] for e in deep["entities"]) == 2
