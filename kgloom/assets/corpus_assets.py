"""Asset: corpus, the live partitions combined into the corpus-level tables.

The three levels of the output folder (:mod:`kgloom.core.layout` maps them to folders):
**partition** (``stages/partitions/<key>/``, written by
``documents``, ``text_units`` and ``extracted_graph`` for one input file), **corpus**
(``stages/``: every live partition combined, written here, read by the graph-wide
stages) and **published** (the output folder itself: the GraphRAG tables, graph files,
LanceDB, written by the graph and emit assets).
"""

import dagster as dg
import polars as pl

from kgloom.assets.extraction_assets import extracted_graph
from kgloom.assets.metadata import Timer
from kgloom.core.layout import CORPUS, Level
from kgloom.pipelines.freshness import GRAPH_INPUTS
from kgloom.pipelines.input_files import INPUT_FILES, live_partition_keys
from kgloom.resources import EmbedderResource, IndexConfigResource, LLMResource


@dg.asset(group_name="corpus", deps=[extracted_graph], kinds={"polars", "parquet"})
def corpus(context: dg.AssetExecutionContext, index: IndexConfigResource, llm: LLMResource,
           embedder: EmbedderResource) -> dg.MaterializeResult:
    """Combine the tables of every live input-file partition into the corpus level
    (documents with their text_unit_ids, text units numbered over the corpus, entity,
    relationship and claim mentions, extraction status, the partition stages'
    failures); a deleted file's partition folder is removed here, so its contribution
    leaves every later table. Records the graph-inputs fingerprint every later graph
    asset inherits (``llm`` and ``embedder`` are asked only for their identity)."""
    clock = Timer.started()
    store = index.store
    keys = live_partition_keys(context.instance)
    if not keys and store.stored_partitions():
        raise dg.Failure(description=(
            f"this Dagster instance has no '{INPUT_FILES}' partitions, but "
            f"{store.output_dir} holds {len(store.stored_partitions())} built ones: register "
            "them first with `kgloom partitions` (or `kgloom index`, or the "
            "input_folder_sensor); nothing was changed"))
    inputs = store.graph_inputs(keys, index.settings(),
                                llm.index_model_id(index.settings().method),
                                embedder.model_path)
    tables, removed = store.refresh_corpus(keys, index.input_dir)
    if removed:
        context.log.info(f"removed the contribution of deleted partitions: {removed}")
    store.write_stats(CORPUS, clock.elapsed, partitions=len(keys),
                      documents=tables.documents.height, text_units=tables.text_units.height,
                      duplicate_documents=tables.duplicates)
    by_stage = (dict(tables.failures.group_by("stage").len().iter_rows())
                if tables.failures.height else {})
    return dg.MaterializeResult(metadata={
        GRAPH_INPUTS: inputs, "partitions": len(keys),
        "removed_partitions": dg.MetadataValue.json(removed),
        "documents": tables.documents.height, "text_units": tables.text_units.height,
        "entity_mentions": tables.entity_mentions.height,
        "relationship_mentions": tables.relationship_mentions.height,
        "claim_mentions": tables.claim_mentions.height,
        "duplicate_documents": tables.duplicates,
        "failures_by_stage": dg.MetadataValue.json(by_stage),
        "units_failed": tables.unit_status.filter(pl.col("status") == "failed").height,
        "path": dg.MetadataValue.path(str(store.folder(Level.CORPUS)))})
