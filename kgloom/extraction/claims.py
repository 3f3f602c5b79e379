"""Claims (GraphRAG "covariates"): dated, sourced statements about an entity, extracted
per text unit by the local LLM. Optional, as in GraphRAG (``extract_claims``, off by
default): one more LLM call per text unit that has entities.

Like entity extraction, the reply is grammar-safe: the claim's subject must be one of the
entities extracted from the same unit (an enum), its object one of them or ``NONE``, its
status one of GraphRAG's TRUE / FALSE / SUSPECTED, and every string is length-bounded.
Source: GraphRAG ``index/operations/extract_covariates`` (claim fields and statuses).
"""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

from kgloom.core import layout, schemas
from kgloom.core.ids import content_id
from kgloom.core.storage import failures_frame
from kgloom.llm import CachedLLM, PromptTemplate, structured_call
from kgloom.settings.indexing import IndexSettings

STAGE = layout.CLAIMS
MAX_CLAIMS_PER_UNIT = 3
NO_OBJECT = "NONE"
STATUSES = ("TRUE", "FALSE", "SUSPECTED")

CLAIMS_TEMPLATE = PromptTemplate(
    name="extract_claims",
    system=("You extract claims from a text: statements of fact about its entities, such as "
            "what someone did, owns, believes or suffers. Answer with JSON only."),
    user=("Entities: {names}\n"
          "Text:\n\"\"\"\n{text}\n\"\"\"\n"
          "List up to three claims the text makes about these entities: the subject entity, "
          "the object entity or NONE, a short claim type, whether the text presents it as "
          "TRUE, FALSE or SUSPECTED, and a one-sentence description."),
    schema={},  # per unit: see claims_schema
    max_tokens=400,
)


def claims_schema(names: list[str]) -> dict:
    """The reply schema for a unit whose entities are ``names`` (subject/object enums)."""
    return {
        "type": "object",
        "properties": {"claims": {
            "type": "array", "maxItems": MAX_CLAIMS_PER_UNIT,
            "items": {"type": "object", "properties": {
                "subject": {"type": "string", "enum": list(names)},
                "object": {"type": "string", "enum": list(names) + [NO_OBJECT]},
                "type": {"type": "string", "minLength": 1, "maxLength": 30},
                "status": {"type": "string", "enum": list(STATUSES)},
                "description": {"type": "string", "minLength": 1, "maxLength": 200}},
                "required": ["subject", "object", "type", "status", "description"]}}},
        "required": ["claims"],
    }


def extract_claims(text_units: pl.DataFrame, entity_mentions: pl.DataFrame, llm: CachedLLM,
                   settings: IndexSettings,
                   progress: Callable[[int, int], None] | None = None,
                   ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Extract claims from every text unit that has entity mentions.

    Args:
        text_units: ``TEXT_UNITS_SCHEMA`` frame (id, text).
        entity_mentions: ``ENTITY_MENTIONS_SCHEMA`` frame of the same units.
        llm: the cached LLM (stage ``claims``); one call per unit with entities,
            ``llm.concurrency`` at a time.
        settings: ``seed``.
        progress: ``progress(done, total)`` over the units with entities.

    Returns:
        (claim mentions conforming to ``CLAIM_MENTIONS_SCHEMA``, failures rows).
    """
    names = {u: sorted(set(t)) for u, t in entity_mentions.group_by("text_unit_id").agg(
        pl.col("title")).iter_rows()}
    units = text_units.filter(pl.col("id").is_in(list(names))).select("id", "text")
    rows, fails = [], []
    todo = list(units.iter_rows())

    def ask(unit: tuple[str, str]) -> tuple[dict | None, dict | None]:
        uid, text = unit
        return structured_call(llm, CLAIMS_TEMPLATE, STAGE, f"{uid}#claims", settings.seed,
                               schema=claims_schema(names[uid]), names=", ".join(names[uid]),
                               text=text)

    for (uid, _), (obj, failure) in zip(todo, llm.map(ask, todo, progress)):
        if obj is None:
            fails.append(failure)
        else:
            seen = set()
            for c in obj["claims"]:
                # a claim of an entity about itself has no object
                other = NO_OBJECT if c["object"] == c["subject"] else c["object"]
                key = (c["subject"], other, c["type"].strip(), c["description"].strip())
                if key not in seen:
                    seen.add(key)
                    rows.append({"text_unit_id": uid, "subject": c["subject"],
                                 "object": other, "type": key[2], "status": c["status"],
                                 "description": key[3]})
    claims = (pl.DataFrame(rows, schema=schemas.CLAIM_MENTIONS_SCHEMA) if rows
              else schemas.empty(schemas.CLAIM_MENTIONS_SCHEMA))
    return claims, failures_frame(fails)


def build_covariates(claim_mentions: pl.DataFrame, aliases: pl.DataFrame,
                     entities: pl.DataFrame) -> pl.DataFrame:
    """Turn claim mentions into GraphRAG's ``covariates`` table.

    Subjects and objects are resolved through ``entity_aliases`` to the canonical entity
    title (GraphRAG's ``subject_id``/``object_id`` hold entity titles); a claim whose
    subject did not survive resolution is dropped. ``id`` is content-derived.

    Returns:
        a ``COVARIATES_SCHEMA`` frame, ``covariate_type`` = "claim", dates null.
    """
    title_of = dict(zip(entities["id"].to_list(), entities["title"].to_list()))
    canon = {a: title_of.get(e) for a, e in zip(aliases["alias"].to_list(),
                                                aliases["entity_id"].to_list())}
    rows = []
    for c in claim_mentions.iter_rows(named=True):
        subject = canon.get(c["subject"])
        if subject is None:
            continue
        obj = canon.get(c["object"]) or NO_OBJECT
        rows.append({"id": content_id("claim", c["text_unit_id"], subject, obj, c["type"],
                                      c["description"]),
                     "covariate_type": "claim", "type": c["type"],
                     "description": c["description"], "subject_id": subject,
                     "object_id": obj, "status": c["status"], "start_date": None,
                     "end_date": None, "source_text": None, "text_unit_id": c["text_unit_id"]})
    schema = {k: v for k, v in schemas.COVARIATES_SCHEMA.items() if k != "human_readable_id"}
    frame = (pl.DataFrame(rows, schema=schema).unique("id", keep="first", maintain_order=True)
             .with_row_index("human_readable_id")
             .with_columns(pl.col("human_readable_id").cast(pl.Int64)))
    return schemas.conform(frame, schemas.COVARIATES_SCHEMA).select(list(schemas.COVARIATES_SCHEMA))
