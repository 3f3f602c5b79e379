"""Claims (GraphRAG covariates): grammar-safe extraction, resolution to entity titles,
and their place in report contexts."""

from __future__ import annotations

import polars as pl

from kgloom.core import schemas
from kgloom.embedding.tokenizer import default_tokenizer
from kgloom.extraction.claims import NO_OBJECT, build_covariates, claims_schema, extract_claims
from kgloom.llm import CachedLLM, LLMCache
from kgloom.llm.fake import FakeBackend
from kgloom.report_writer import build_report_context, member_claims
from kgloom.settings.indexing import IndexSettings

TEXT = ("Scrooge refused to give anything to the charity collectors. Bob Cratchit was paid "
        "fifteen shillings a week by Scrooge.")


def _mentions() -> tuple[pl.DataFrame, pl.DataFrame]:
    units = pl.DataFrame({"id": ["u1", "u2"], "text": [TEXT, "It was a foggy day."]})
    em = pl.DataFrame({"text_unit_id": ["u1", "u1"], "title": ["Scrooge", "Bob Cratchit"],
                       "type": ["PERSON", "PERSON"], "description": ["", ""]},
                      schema=schemas.ENTITY_MENTIONS_SCHEMA)
    return units, em


def test_claims_are_extracted_only_for_units_with_entities_and_stay_in_the_enums(tmp_path):
    units, em = _mentions()
    backend = FakeBackend()
    llm = CachedLLM(backend, LLMCache(tmp_path / "c.sqlite"), backend.model_id)
    claims, failures = extract_claims(units, em, llm, IndexSettings())
    assert backend.calls == 1  # u2 has no entity: no call
    assert failures.height == 0 and claims.height >= 1
    assert set(claims["subject"]) <= {"Scrooge", "Bob Cratchit"}
    assert set(claims["object"]) <= {"Scrooge", "Bob Cratchit", NO_OBJECT}
    assert not claims.filter(pl.col("subject") == pl.col("object")).height
    schema = claims_schema(["Scrooge"])["properties"]["claims"]
    assert schema["maxItems"] == 3 and schema["items"]["properties"]["status"]["enum"] == [
        "TRUE", "FALSE", "SUSPECTED"]


def test_covariates_use_canonical_titles_and_drop_unresolved_subjects():
    mentions = pl.DataFrame({
        "text_unit_id": ["u1", "u1", "u1"], "subject": ["Scrooge", "Bob", "Nobody"],
        "object": ["NONE", "Scrooge", "NONE"], "type": ["refusal", "wages", "x"],
        "status": ["TRUE", "TRUE", "FALSE"],
        "description": ["Scrooge refused the collectors.", "Bob is paid by Scrooge.", "x"]},
        schema=schemas.CLAIM_MENTIONS_SCHEMA)
    ents = pl.DataFrame({"id": ["e1", "e2"], "title": ["Ebenezer Scrooge", "Bob Cratchit"]})
    aliases = pl.DataFrame({"alias": ["Scrooge", "Bob", "Bob Cratchit"],
                            "entity_id": ["e1", "e2", "e2"]})
    cov = build_covariates(mentions, aliases, ents)
    assert cov.columns == list(schemas.COVARIATES_SCHEMA)
    assert cov.select("subject_id", "object_id").rows() == [
        ("Ebenezer Scrooge", "NONE"), ("Bob Cratchit", "Ebenezer Scrooge")]
    assert cov["id"].n_unique() == 2 and set(cov["covariate_type"]) == {"claim"}


def test_report_context_lists_member_claims_and_is_unchanged_without_them():
    ents = pl.DataFrame({"id": ["e1"], "title": ["Ebenezer Scrooge"], "type": ["PERSON"],
                         "description": ["A miser."], "degree": [0]})
    rels = pl.DataFrame(schema={"id": pl.String, "source": pl.String, "target": pl.String,
                                "description": pl.String, "combined_degree": pl.Int64})
    community = {"entity_ids": ["e1"], "relationship_ids": []}
    cov = pl.DataFrame({"id": ["c1", "c2"], "subject_id": ["Ebenezer Scrooge", "Fred"],
                        "object_id": ["NONE", "NONE"], "type": ["refusal", "x"],
                        "status": ["TRUE", "TRUE"],
                        "description": ["Scrooge refused the collectors.", "no"]})
    own = member_claims(community, ents, cov)
    assert own["id"].to_list() == ["c1"]
    tok = default_tokenizer()
    plain, _ = build_report_context(community, ents, rels, [], 800, tok)
    with_claims, _ = build_report_context(community, ents, rels, [], 800, tok, own)
    assert "Claims:" not in plain
    assert with_claims.startswith(plain)
    assert "Claims:\n- Ebenezer Scrooge -> NONE [refusal, TRUE]: Scrooge refused" in with_claims
    assert member_claims(community, ents, None) is None
