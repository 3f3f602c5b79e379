"""Assets: documents and text_units (no LLM), one partition per input file."""

from typing import cast

import dagster as dg

from kgloom.assets.metadata import Timer, preview
from kgloom.core import schemas
from kgloom.core.layout import DOCUMENTS, TEXT_UNITS, Level
from kgloom.embedding.tokenizer import default_tokenizer
from kgloom.ingest.chunking import split_text_units
from kgloom.ingest.documents import read_partition_documents
from kgloom.pipelines.input_files import input_files_partitions
from kgloom.resources import IndexConfigResource


@dg.asset(group_name="ingest", partitions_def=input_files_partitions, kinds={"polars", "parquet"})
def documents(context: dg.AssetExecutionContext,
              index: IndexConfigResource) -> dg.MaterializeResult:
    """The documents of one input file (a JSONL/CSV file holds many); bad files and
    records become failures rows. Rewrites only this partition's folder."""
    clock = Timer.started()
    key = index.partition(context.partition_key)  # refuses a key leading outside the input
    store = index.store
    docs, failures, sha = read_partition_documents(index.input_dir, key,
                                                   index.settings().cut_boilerplate)
    store.write(docs, schemas.DOCUMENTS, Level.PARTITION, key)
    store.write_failures(failures, DOCUMENTS, key)
    for row in failures.iter_rows(named=True):
        context.log.warning(f"{row['item_id']}: {row['reason']}")
    cut = int(docs["boilerplate_cut"].is_not_null().sum())
    store.write_stats(DOCUMENTS, clock.elapsed, partition=key,
                      documents=docs.height, failures=failures.height, boilerplate_cut=cut)
    store.mark_stage(key, DOCUMENTS, sha256=sha)
    return dg.MaterializeResult(metadata={
        "rows": docs.height, "failures": failures.height, "input_file": key,
        "documents_with_boilerplate_cut": cut,
        "sha256": sha or "(missing)",
        "preview": preview(docs, ["human_readable_id", "title", "source", "creation_date"])})


@dg.asset(group_name="ingest", partitions_def=input_files_partitions, deps=[documents],
          kinds={"polars", "parquet"})
def text_units(context: dg.AssetExecutionContext,
               index: IndexConfigResource) -> dg.MaterializeResult:
    """One input file's documents split into text units of chunk_size tokens with
    chunk_overlap (the partition level: no graph columns, numbered later over the
    corpus)."""
    clock = Timer.started()
    s = index.settings()
    tok = default_tokenizer()
    key = index.partition(context.partition_key)
    store = index.store
    units = split_text_units(store.read(schemas.DOCUMENTS, Level.PARTITION, key), tok,
                             s.chunk_size, s.chunk_overlap)
    store.write(units, schemas.TEXT_UNITS, Level.PARTITION, key)
    store.write_stats(TEXT_UNITS, clock.elapsed, partition=key, text_units=units.height)
    store.mark_stage(key, TEXT_UNITS)
    return dg.MaterializeResult(metadata={
        "rows": units.height, "tokenizer": tok.name, "chunk_size_tokens": s.chunk_size,
        "chunk_overlap_tokens": s.chunk_overlap,
        # polars annotates mean() for every dtype; of an integer column it is float | None
        "mean_tokens": float(cast(float | None, units["n_tokens"].mean()) or 0.0)})
