"""Shared pytest fixtures."""

from __future__ import annotations

import polars as pl
import pytest

from kgloom.core import schemas
from kgloom.core.ids import content_id
from kgloom.names.normalize import normalize_title


@pytest.fixture(autouse=True)
def _no_defs_state_storage_from_another_test():
    """Each test starts with no current Dagster defs-state storage. A Dagster instance
    entered and not exited by an earlier test (e.g. inside a schedule or sensor context
    built without ``with``) leaves its storage in a context variable; once that instance
    is collected, the next ``materialize`` fails with "Attempted to resolve undefined
    DagsterInstance weakref" (seen once in a full run, depending on garbage collection)."""
    from dagster._core.storage.defs_state.base import set_defs_state_storage

    with set_defs_state_storage(None):
        yield

def index_fake_book(tmp_path_factory, reports: bool):
    """The bundled book indexed with the fake LLM into a fresh folder (its own input
    folder holds a copy of the book); ``reports``: write community reports. Returns the
    output folder. About a minute (reports add little with the fake LLM)."""
    import shutil
    from pathlib import Path

    import dagster as dg

    from kgloom.cli.runner import index_folder
    from kgloom.definitions import build_resources

    book = Path(__file__).resolve().parent.parent / "data" / "input" / "a-christmas-carol.txt"
    inp = tmp_path_factory.mktemp("book_input")
    shutil.copyfile(book, inp / book.name)
    out = tmp_path_factory.mktemp("book_output")
    _, report = index_folder(build_resources(str(inp), str(out), fake_llm=True),
                             dg.DagsterInstance.ephemeral(), reports=reports)
    assert report.success
    # The run's LLM cache connection is closed when it is collected, and closing it folds
    # llm_cache.sqlite-wal into llm_cache.sqlite: collect now, so a test that snapshots the
    # folder (test_serve's "nothing was written") does not see that happen later.
    import gc

    gc.collect()
    return out


# =====================================================================================
# BEGIN emit / vectors / multihop fixtures: a small knowledge graph of A Christmas Carol
# (tables as the upstream stages hand them to emit).
# =====================================================================================

CAROL_UNITS = {
    "u1": "Marley was dead: to begin with. Scrooge and he were partners for I don't know "
          "how many years.",
    "u2": "\"A merry Christmas, uncle!\" cried a cheerful voice. It was the voice of "
          "Scrooge's nephew, Fred. Bob Cratchit, the clerk, applauded in the Tank.",
    "u3": "Bob Cratchit carried Tiny Tim upon his shoulder. Scrooge watched the Cratchits "
          "keep their Christmas.",
    "u4": "The Ghost of Christmas Past showed Scrooge old Fezziwig's ball, the warehouse "
          "cleared for dancing.",
    "u5": "It was a bitter, biting day, and the fog came pouring in at every chink.",
    "u6": "Marley's face looked at Scrooge from the knocker; Tiny Tim would die, the "
          "Spirit said, if these shadows remained unaltered.",
}
# title -> (type, text units, pagerank)
CAROL_ENTITIES = {
    "EBENEZER SCROOGE": ("PERSON", ["u1", "u2", "u3", "u4"], 0.30),
    "JACOB MARLEY": ("PERSON", ["u1", "u6"], 0.10),
    "BOB CRATCHIT": ("PERSON", ["u2", "u3"], 0.15),
    "TINY TIM": ("PERSON", ["u3", "u6"], 0.08),
    "FRED": ("PERSON", ["u2"], 0.09),
    "GHOST OF CHRISTMAS PAST": ("PERSON", ["u4"], 0.12),
    "FEZZIWIG": ("PERSON", ["u4"], 0.07),
}
# (source, target, description, text units)
CAROL_RELATIONSHIPS = [
    ("EBENEZER SCROOGE", "JACOB MARLEY",
     "Marley was Scrooge's late business partner.\nThey traded as Scrooge and Marley.", ["u1"]),
    ("EBENEZER SCROOGE", "BOB CRATCHIT", "Bob Cratchit is Scrooge's underpaid \"clerk\"",
     ["u2"]),
    ("EBENEZER SCROOGE", "FRED", "Fred is Scrooge's nephew | he invites him to dinner", ["u2"]),
    ("BOB CRATCHIT", "TINY TIM", "Tiny Tim is Bob Cratchit's youngest son", ["u3"]),
    ("GHOST OF CHRISTMAS PAST", "EBENEZER SCROOGE",
     "The Ghost of Christmas Past shows Scrooge his past", ["u4"]),
    ("GHOST OF CHRISTMAS PAST", "FEZZIWIG", "The Ghost shows Fezziwig's Christmas ball", ["u4"]),
    ("EBENEZER SCROOGE", "FEZZIWIG", "Scrooge was apprenticed to Fezziwig", ["u4"]),
]
# (community, level, parent, members)
CAROL_COMMUNITIES = [
    (0, 0, -1, ["EBENEZER SCROOGE", "JACOB MARLEY", "FRED", "GHOST OF CHRISTMAS PAST",
                "FEZZIWIG"]),
    (1, 0, -1, ["BOB CRATCHIT", "TINY TIM"]),
    (2, 1, 0, ["EBENEZER SCROOGE", "JACOB MARLEY", "FRED"]),
    (3, 1, 0, ["GHOST OF CHRISTMAS PAST", "FEZZIWIG"]),
    (4, 1, 1, ["BOB CRATCHIT", "TINY TIM"]),
]


@pytest.fixture(scope="module")
def stand_in():
    """A scripted streaming chat server (:class:`kgloom.llm.testing.StandInChatServer`) on
    loopback; its ``url`` is set."""
    from kgloom.llm.testing import ASGIService, StandInChatServer

    server = StandInChatServer()
    svc = ASGIService(server.app()).start()
    server.url = svc.url
    yield server
    svc.stop()


def stand_in_llm(stand_in, folder, timeout_s: float):
    """kgloom's model as the stand-in server: a :class:`kgloom.llm.CachedLLM` over an
    OpenAI-compatible backend (``timeout_s`` per wait for a piece), its cache in
    ``folder``."""
    from kgloom.llm import CachedLLM, LLMCache
    from kgloom.llm.http import OpenAIChatBackend

    backend = OpenAIChatBackend([stand_in.url], timeout_s=timeout_s)
    return CachedLLM(backend, LLMCache(folder / "c.sqlite"), backend.model_id)


def carol_entity_id(title: str) -> str:
    """The id the entities stage gives the entity ``title``: ``content_id("entity", key)``
    of its normalization key (:func:`kgloom.graph.resolution.resolve_entities`; pinned by
    tests/unit/test_resolution.py::test_the_carol_fixture_ids_are_the_entities_stage_ids)."""
    return content_id("entity", normalize_title(title))


def carol_relationship_id(source: str, target: str) -> str:
    """The id the entities stage gives the relationship of two titles, either direction:
    ``content_id("relationship", *sorted entity ids)``."""
    return content_id("relationship", *sorted((carol_entity_id(source),
                                                carol_entity_id(target))))


def carol_unit_id(key: str) -> str:
    """The fixture's text-unit id of ``key`` ("u1" ... "u6")."""
    return content_id("carol", key)


def build_carol_tables() -> dict[str, pl.DataFrame]:
    """Return {"text_units", "entities", "relationships", "communities"} frames that
    conform to their schemas (text_units' KG columns empty, as emit receives them)."""
    eid, uid = carol_entity_id, carol_unit_id
    units = pl.DataFrame([
        {"id": uid(k), "human_readable_id": i, "text": t, "n_tokens": len(t.split()),
         "document_id": content_id("A Christmas Carol"), "entity_ids": [],
         "relationship_ids": [], "covariate_ids": [], "chunk_index": i, "start_char": 0,
         "end_char": len(t), "kg_node_ids": [], "neighbor_entity_ids": [],
         "neighbor_triples": [], "community_ids": [], "centrality": 0.0}
        for i, (k, t) in enumerate(CAROL_UNITS.items())], schema=schemas.TEXT_UNITS_SCHEMA)

    rel_rows = []
    for i, (s, t, d, us) in enumerate(CAROL_RELATIONSHIPS):
        rel_rows.append({"id": carol_relationship_id(s, t), "human_readable_id": i,
                         "source": s, "target": t, "description": d, "weight": float(i + 1),
                         "combined_degree": 0, "text_unit_ids": [uid(u) for u in us],
                         "source_id": eid(s), "target_id": eid(t), "kind": "extracted"})
    relationships = pl.DataFrame(rel_rows, schema=schemas.RELATIONSHIPS_SCHEMA)

    degree = {title: 0 for title in CAROL_ENTITIES}
    wdeg = {title: 0.0 for title in CAROL_ENTITIES}
    for i, (s, t, _, _) in enumerate(CAROL_RELATIONSHIPS):
        for title in (s, t):
            degree[title] += 1
            wdeg[title] += float(i + 1)
    entities = pl.DataFrame([
        {"id": eid(title), "human_readable_id": i, "title": title, "type": typ,
         "description": f"{title.title()}, a character of A Christmas Carol.",
         "text_unit_ids": [uid(u) for u in us], "frequency": len(us), "degree": degree[title],
         "weighted_degree": wdeg[title], "pagerank": pr, "aliases": []}
        for i, (title, (typ, us, pr)) in enumerate(CAROL_ENTITIES.items())],
        schema=schemas.ENTITIES_SCHEMA)
    deg_by_id = dict(zip(entities["id"], entities["degree"]))
    relationships = relationships.with_columns(
        (pl.col("source_id").replace_strict(deg_by_id) + pl.col("target_id").replace_strict(
            deg_by_id)).alias("combined_degree"))

    communities = pl.DataFrame([
        {"id": content_id("community", level, *sorted(eid(m) for m in members)),
         "human_readable_id": c,
         "community": c, "level": level, "parent": parent,
         "children": [cc for cc, _, p, _ in CAROL_COMMUNITIES if p == c],
         "title": f"Community {c}", "entity_ids": [eid(m) for m in members],
         "relationship_ids": [], "text_unit_ids": [], "period": "2024-12-24",
         "size": len(members)}
        for c, level, parent, members in CAROL_COMMUNITIES], schema=schemas.COMMUNITIES_SCHEMA)
    return {"text_units": units, "entities": entities, "relationships": relationships,
            "communities": communities}


@pytest.fixture(scope="session")
def embedder():
    """The bundled all-MiniLM-L6-v2 embedder, loaded once per test session."""
    from kgloom.embedding.sentence_embedder import Embedder

    return Embedder()


@pytest.fixture
def carol_tables() -> dict[str, pl.DataFrame]:
    """Fresh Christmas Carol input tables of the emit stage (see build_carol_tables)."""
    return build_carol_tables()

# =====================================================================================
# END emit / vectors / multihop fixtures
# =====================================================================================
