"""Each entity's community per level (:func:`community_levels`): the one place
graph-nodes, GraphML and Neo4j take these columns from.
"""

from __future__ import annotations

import polars as pl

COMMUNITY_LEVEL_PREFIX = "community_level_"


def _membership(communities: pl.DataFrame) -> pl.DataFrame:
    """(level, community, entity_id) rows, one per entity per level."""
    return (communities.select("level", "community", pl.col("entity_ids").alias("entity_id"))
            .explode("entity_id").drop_nulls("entity_id"))


def _levels(communities: pl.DataFrame) -> list[int]:
    return sorted(communities["level"].unique().to_list())


def community_levels(communities: pl.DataFrame) -> pl.DataFrame:
    """Each entity's community per level: ``entity_id`` (String) then one Int64 column
    ``community_level_<k>`` per level k of ``communities`` (COMMUNITIES_SCHEMA), null
    where the entity is in no community of that level; one row per entity that is in
    some community. The one place graph-nodes, GraphML and Neo4j take these from."""
    membership = _membership(communities)
    out = membership.select("entity_id").unique().sort("entity_id")
    for level in _levels(communities):
        col = f"{COMMUNITY_LEVEL_PREFIX}{level}"
        at_level = (membership.filter(pl.col("level") == level)
                    .select("entity_id", pl.col("community").cast(pl.Int64).alias(col))
                    .unique("entity_id", keep="first"))
        out = out.join(at_level, on="entity_id", how="left", maintain_order="left")
    return out
