"""The explorer page (kgloom/serve/static/) in headless Chromium, on the graph: the overview
drawn at load, entity search drawing a neighbourhood, the level, community and type
filters, labels that never overlap, and the documents panel. Every check compares the page
with what the API answers (the bundled book indexed with the fake LLM), never with a
hard-coded count. Screenshots go to ``$KGLOOM_TEST_ARTIFACTS`` (else a temporary folder).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from urllib.parse import quote

import pytest

from kgloom.llm import open_llm
from kgloom.llm.testing import ASGIService
from kgloom.serve.app import open_app
from tests.conftest import index_fake_book
from tests.integration.test_serve import CHROMIUM, _drawn_nodes, _explorer, ok

pytestmark = [
    pytest.mark.integration,  # a server over the whole book indexed (~40 s), a browser
    pytest.mark.skipif(not CHROMIUM.exists(),
                       reason=f"{CHROMIUM} is missing (apt-get install chromium)"),
    pytest.mark.skipif(importlib.util.find_spec("playwright") is None,
                       reason="the playwright Python package is missing (pip install playwright)"),
]

OVERVIEW_NODES = 60  # explorer.js's OVERVIEW_NODES
# the shown labels' boxes (model coordinates) that intersect, as [[label, label], ...],
# and how many labels are shown: a visible node whose label is not faded out
LABELS = """(() => {
  const cy = window.kgloomGraph;
  const shown = cy.nodes().filter(n => n.visible() && n.data('label')
                                       && Number(n.style('text-opacity')) > 0);
  const boxes = shown.map(n => [n.data('label'), n.boundingBox(
    { includeNodes: false, includeEdges: false, includeLabels: true })]);
  const hit = (a, b) => a.x1 < b.x2 && b.x1 < a.x2 && a.y1 < b.y2 && b.y1 < a.y2;
  const overlaps = [];
  boxes.forEach(([la, a], i) => boxes.slice(i + 1).forEach(([lb, b]) => {
    if (hit(a, b)) overlaps.push([la, lb]);
  }));
  return { shown: shown.length, overlaps };
})()"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    book_index = index_fake_book(tmp_path_factory, reports=True)
    llm = open_llm(tmp_path_factory.mktemp("explorer_cache") / "answers.sqlite", fake=True)
    svc = ASGIService(open_app(book_index, llm)).start()
    yield svc
    svc.stop()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    folder = Path(os.environ.get("KGLOOM_TEST_ARTIFACTS") or tmp_path_factory.mktemp("shots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _drawn_after(page, action):
    """Do ``action(page)``; return the response of the graph request it made (overview or
    neighbourhood) once the page drew a new graph."""
    before = page.evaluate_handle("window.kgloomGraph || null")
    with page.expect_response(lambda r: "/api/graph/overview" in r.url
                              or "/neighbourhood" in r.url) as got:
        action(page)
    page.wait_for_function("before => window.kgloomGraph !== before", arg=before)
    return got.value


def _ids(sub: dict) -> list[str]:
    return sorted(n["id"] for n in sub["nodes"])


def _assert_labels_apart(page, where: str) -> None:
    labels = page.evaluate(LABELS)
    assert labels["overlaps"] == [], (where, labels["overlaps"])
    assert labels["shown"] > 0, where


def _visible_nodes(page) -> list[str]:
    return sorted(page.evaluate("window.kgloomGraph.nodes(':visible').map(n => n.id())"))


def test_the_overview_is_drawn_at_load(server, shots):
    """The page opens on the API's overview (its default level): the same nodes, the
    levels to choose from, the communities it shows, a caption, labels apart."""
    overview, _ = ok(server.url, f"/api/graph/overview?max_nodes={OVERVIEW_NODES}")
    assert overview["nodes"] and overview["communities"]
    with _explorer(server.url, shots, "explorer-overview") as (page, errors):
        assert _drawn_nodes(page) == _ids(overview)
        assert page.locator("#graph-empty").is_hidden()
        assert page.locator("#level-filter option").all_inner_texts() == [
            str(level) for level in overview["levels"]]
        assert page.locator("#level-filter").input_value() == str(overview["level"])
        assert page.locator("#community-filter option").evaluate_all(
            "os => os.map(o => o.value)")[1:] == [
                str(c["community"]) for c in overview["communities"]]
        assert f"level {overview['level']}" in page.get_by_test_id("graph-caption").inner_text()
        edges = page.evaluate("window.kgloomGraph.edges().length")
        assert edges == len(overview["edges"]) > 0
        _assert_labels_apart(page, "overview")
        page.screenshot(path=str(shots / "explorer-overview.png"))
        assert errors == []


def test_searching_an_entity_draws_its_neighbourhood(server, shots):
    """Typing lists the API's matches; choosing one draws its neighbourhood (the API's
    nodes, the entity marked as the centre, its details shown), labels apart."""
    found, _ = ok(server.url, "/api/graph/entities?q=scro&limit=12")
    with _explorer(server.url, shots, "explorer-search") as (page, errors):
        page.locator("#entity-search").press_sequentially("scro")
        matches = page.locator("#entity-matches button.match")
        matches.first.wait_for()
        assert matches.evaluate_all("bs => bs.map(b => b.dataset.id)") == [
            e["id"] for e in found["entities"]]
        chosen = next(e for e in found["entities"] if e["title"] == "Ebenezer Scrooge")
        res = _drawn_after(page, lambda p: p.locator(
            f"#entity-matches button[data-id='{chosen['id']}']").click())
        sub, _ = ok(server.url, f"/api/graph/entities/{quote(chosen['id'])}/neighbourhood"
                    "?depth=1")
        assert res.status == 200 and _drawn_nodes(page) == _ids(sub) == _ids(res.json())
        assert page.locator("#entity-matches").is_hidden()
        assert page.evaluate("window.kgloomGraph.nodes('.centre').map(n => n.id())") == [
            chosen["id"]]
        page.get_by_test_id("node-title").filter(has_text="Ebenezer Scrooge").wait_for()
        assert "Neighbourhood of Ebenezer Scrooge" in page.get_by_test_id(
            "graph-caption").inner_text()
        _assert_labels_apart(page, "neighbourhood")
        centre_label = page.evaluate(
            f"Number(window.kgloomGraph.getElementById('{chosen['id']}').style('text-opacity'))")
        assert centre_label == 1  # the centre's label is never the one hidden
        page.screenshot(path=str(shots / "explorer-search.png"))
        assert errors == []


def test_level_community_and_type_filters_change_what_is_drawn(server, shots):
    """Another level draws the API's overview of that level; a community draws that
    community's; unticking a type hides exactly the drawn nodes of that type (and ticking
    it shows them again); labels stay apart after each."""
    with _explorer(server.url, shots, "explorer-filters") as (page, errors):
        levels = page.locator("#level-filter option").all_inner_texts()
        assert len(levels) > 1, levels
        level = levels[1]
        res = _drawn_after(page, lambda p: p.select_option("#level-filter", level))
        at_level, _ = ok(server.url, f"/api/graph/overview?level={level}"
                         f"&max_nodes={OVERVIEW_NODES}")
        assert _drawn_nodes(page) == _ids(at_level) == _ids(res.json())
        assert {n["community"] for n in at_level["nodes"]} <= {
            c["community"] for c in at_level["communities"]}
        _assert_labels_apart(page, f"level {level}")

        community = at_level["communities"][0]["community"]
        _drawn_after(page, lambda p: p.select_option("#community-filter", str(community)))
        one, _ = ok(server.url, f"/api/graph/overview?community={community}"
                    f"&max_nodes={OVERVIEW_NODES}")
        assert _drawn_nodes(page) == _ids(one)
        assert {n["community"] for n in one["nodes"]} == {community}
        assert page.locator("#community-filter").input_value() == str(community)
        _assert_labels_apart(page, f"community {community}")

        _drawn_after(page, lambda p: p.click("#overview"))
        drawn, _ = ok(server.url, f"/api/graph/overview?level={level}"
                      f"&max_nodes={OVERVIEW_NODES}")
        types = {n["type"] for n in drawn["nodes"]}
        assert len(types) > 1, types
        hidden = max(types, key=lambda t: sum(n["type"] == t for n in drawn["nodes"]))
        box = page.locator(f"#types input[data-type='{hidden}']")
        box.uncheck()
        assert _visible_nodes(page) == sorted(n["id"] for n in drawn["nodes"]
                                              if n["type"] != hidden)
        _assert_labels_apart(page, f"without {hidden}")
        box.check()
        assert _visible_nodes(page) == _ids(drawn)
        _assert_labels_apart(page, f"with {hidden} again")
        assert errors == []


def test_the_documents_panel_lists_the_documents_of_the_build(server, shots):
    """The panel lists the API's documents (title, text units, source, creation date) and
    the build (the X-Kgloom-Build header's id, published_at); a click shows the document's
    first text unit."""
    docs, headers = ok(server.url, "/api/documents")
    assert docs["documents"]
    with _explorer(server.url, shots, "explorer-documents") as (page, errors):
        items = page.locator("#documents .document")
        items.first.wait_for()
        assert items.evaluate_all("ds => ds.map(d => d.dataset.id)") == [
            d["id"] for d in docs["documents"]]
        for item, d in zip(items.all(), docs["documents"]):
            text = item.inner_text()
            assert d["title"] in text and f"{d['text_units']} text units" in text
            assert d["source"] in text and d["creation_date"][:10] in text
        info = page.locator("#build-info").inner_text()
        assert headers["X-Kgloom-Build"] in info and docs["published_at"][:10] in info
        first = docs["documents"][0]
        unit, _ = ok(server.url, f"/api/text_units/{first['first_text_unit_id']}")
        items.first.click()
        page.get_by_test_id("unit-text").wait_for()
        assert page.get_by_test_id("unit-text").inner_text().strip() == unit["text"].strip()
        assert "open" in (items.first.get_attribute("class") or "").split()
        page.screenshot(path=str(shots / "explorer-documents.png"))
        assert errors == []
